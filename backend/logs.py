"""The app's own log: one line per request (its X-Request-Id, size, limits, outcome).

Operators match these lines with ``llm.log``: vLLM takes the ``X-Request-Id``
header as its request id (``_base_request_id`` in vLLM's
``entrypoints/serve/engine/serving.py``) and, with ``--enable-log-requests``,
logs it as ``chatcmpl-<id>``.
"""

from __future__ import annotations

import logging
from pathlib import Path

LOGGER_NAME = "kimi_vl_chat"
FORMAT = "%(asctime)s %(levelname)s %(message)s"


def configure(path: str) -> logging.Logger:
    """Send the app's INFO lines to stderr and, if ``path`` is not empty, append them there.

    Idempotent: calling it again (Chainlit reloads the app module) adds no handler twice.
    """
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    if not logger.handlers:
        handlers: list[logging.Handler] = [logging.StreamHandler()]
        if path:
            handlers.append(logging.FileHandler(Path(path), encoding="utf-8"))
        for handler in handlers:
            handler.setFormatter(logging.Formatter(FORMAT))
            logger.addHandler(handler)
    return logger
