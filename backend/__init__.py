"""Kimi-VL Chat backend: pure, typed logic that runs without Chainlit or a server.

Modules, one concern each: ``settings`` (configuration), ``events`` (stream value
types), ``reasoning`` (incremental ◁think▷ splitter), ``images`` (Kimi-VL image
pipeline), ``conversation`` (history and request messages), ``errors`` (messages
people read), ``client`` (vLLM OpenAI API), ``cli`` (terminal front end).
"""
