"""The app's own log: one line per request (its X-Request-Id, size, limits, outcome).

Operators match these lines with ``llm.log``: vLLM takes the ``X-Request-Id``
header as its request id (``_base_request_id`` in vLLM's
``entrypoints/serve/engine/serving.py``) and, with ``--enable-log-requests``,
logs it as ``chatcmpl-<id>``. The file rotates by size (the standard library's
``RotatingFileHandler``): ``app.log`` is renamed ``app.log.1`` (and so on) when
it reaches ``max_mb`` megabytes, and ``keep`` old files are kept.
"""

from __future__ import annotations

import logging
from logging.handlers import RotatingFileHandler
from pathlib import Path

LOGGER_NAME = "kimi_vl_chat"
FORMAT = "%(asctime)s %(levelname)s %(message)s"

PER_REQUEST_LOGGERS = ("httpx", "httpx2")
"""HTTP libraries that log every request they send at INFO ("HTTP Request: POST ... 200
OK"). Chainlit's CLI sets the root logger to INFO on stdout, which the launcher writes into
the UI's log, so every chat completion, every ``/metrics`` read while chats wait and every
``/tokenize`` became a line there, and each line a write on the way to the model server.
:func:`configure` keeps them to warnings: the app's own line per request says more (its
X-Request-Id, sizes, outcome)."""


def configure(path: str, max_mb: int = 50, keep: int = 5) -> logging.Logger:
    """Send the app's INFO lines to stderr and, if ``path`` is not empty, append them there;
    keep the HTTP libraries' line per request out (:data:`PER_REQUEST_LOGGERS`).

    Args:
        path: the log file (``KIMI_APP_LOG``); empty: stderr only.
        max_mb: rotate when the file reaches this many megabytes (``KIMI_LOG_MAX_MB``).
        keep: rotated files kept, ``path.1`` newest (``KIMI_LOG_KEEP``).

    Idempotent: calling it again with the same settings (Chainlit reloads the
    app module) changes nothing; with other settings, the old handlers are
    closed and replaced.
    """
    for name in PER_REQUEST_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    logger = logging.getLogger(LOGGER_NAME)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    wanted = (str(Path(path).resolve()) if path else "", max_mb, keep)
    if getattr(logger, "_kimi_config", None) == wanted and logger.handlers:
        return logger
    for old in list(logger.handlers):
        logger.removeHandler(old)
        old.close()
    handlers: list[logging.Handler] = [logging.StreamHandler()]
    if path:
        handlers.append(
            RotatingFileHandler(
                Path(path), maxBytes=max_mb * 2**20, backupCount=keep, encoding="utf-8"
            )
        )
    for handler in handlers:
        handler.setFormatter(logging.Formatter(FORMAT))
        logger.addHandler(handler)
    logger._kimi_config = wanted  # type: ignore[attr-defined]
    return logger
