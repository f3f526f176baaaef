"""The person's language in Chainlit: which :class:`backend.i18n.Translator` a chat uses.

Chainlit 2.12 keeps the first tag of the websocket's ``Accept-Language`` header as
``session.language`` (chainlit/session.py, ``WebsocketSession.__init__``) and passes
the same choice to ``set_starters`` as ``language``, after
``[UI] language`` in ``.chainlit/config.toml``, which forces one language for everyone
(chainlit/server.py, ``project_settings``). The app follows the same order, so its own
words and Chainlit's (``.chainlit/translations/zh-CN.json``) agree.
"""

from __future__ import annotations

import re

import chainlit as cl
from chainlit.config import config

from backend.i18n import Translator, translator_for

_FIRST_TAG = re.compile(r"^\s*([a-zA-Z0-9-]+)")


def translator_for_language(language: str | None) -> Translator:
    """The translator for a language Chainlit passed to a callback (``[UI] language`` first)."""
    return translator_for(config.ui.language or language)


def header_translator(accept_language: str | None) -> Translator:
    """The translator for an HTTP request's ``Accept-Language`` (its first tag, as
    Chainlit's session reads it), ``[UI] language`` first: for answers given before
    any Chainlit session exists (the security guard's refusals)."""
    match = _FIRST_TAG.match(accept_language or "")
    return translator_for_language(match.group(1) if match else None)


def session_translator() -> Translator:
    """The translator for this websocket session's browser (``[UI] language`` first)."""
    return translator_for_language(getattr(cl.context.session, "language", None))
