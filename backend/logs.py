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


def configure(path: str, max_mb: int = 50, keep: int = 5) -> logging.Logger:
    """Send the app's INFO lines to stderr and, if ``path`` is not empty, append them there.

    Args:
        path: the log file (``KIMI_APP_LOG``); empty: stderr only.
        max_mb: rotate when the file reaches this many megabytes (``KIMI_LOG_MAX_MB``).
        keep: rotated files kept, ``path.1`` newest (``KIMI_LOG_KEEP``).

    Idempotent: calling it again with the same settings (Chainlit reloads the
    app module) changes nothing; with other settings, the old handlers are
    closed and replaced.
    """
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
