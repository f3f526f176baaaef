"""Kimi-VL Chat backend: the runtime the UI and the CLI share; never imports Chainlit.

One concern a module:

- ``settings``: what the app reads (``KIMI_*``); ``families``: model families as data.
- ``events``, ``errors``: value types of a stream; exceptions whose messages people read.
- ``reasoning``: the incremental reasoning splitter (also inside the vLLM plugin).
- ``images``, ``media``, ``uploads``, ``documents``, ``video``: what an upload is, how
  Kimi-VL sees it, and preparing a message's uploads (starting on upload).
- ``conversation``: turns, request messages, budgets, planning.
- ``client``: one owner of the HTTP connections to a model server.
- ``models``: the served models, cached for page loads.
- ``resources``: what the app process owns from start to stop.
- ``batching``: pacing a stream for the UI (batches, waiting, timeouts).
- ``chat``: one person's chat (thin glue).
- ``panel``, ``starters``, ``presenter``: the settings panel, starters, and the words
  around an answer.
- ``safety``: remote images in model output made plain links.
- ``grounding``: points and boxes read out of answers, drawn on images.
- ``metrics``: vLLM's ``/metrics`` for the server panel and queue length.
- ``i18n``: the message catalogue (English, zh-CN).
- ``auth``, ``store``: users and password hashes; persistence (schema, migrations,
  files, resume, export).
- ``logs``: the app's request log. ``cli``: the terminal front end (ask, user ...).
"""
