"""Write a process's output into a size-capped, timestamped log (``llm.log``).

The supervisor (:mod:`serving.supervisor`) pipes vLLM's stdout and stderr (and
HAProxy's) through :func:`pipe`, in a thread of its own. Each line gets the
local time (``2026-12-01 09:50:00 ``) and goes to ``path`` through the
standard library's :class:`~logging.handlers.RotatingFileHandler`: when the file
reaches ``max_bytes`` it becomes ``.1`` (``.1`` becomes ``.2`` ...,
``keep`` of them kept), while vLLM runs. The header lines (the exact
``vllm serve`` command, key masked) open every file, the rotated ones included,
so each log says what produced it. ``fresh`` starts a new file (the old one
becomes ``.1``); without it the lines are appended (a supervised restart).
It runs until its input closes, so the last lines vLLM writes while it shuts
down still reach the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from logging.handlers import RotatingFileHandler
from pathlib import Path

DATE_FORMAT = "%Y-%m-%d %H:%M:%S"


class HeadedRotatingFileHandler(RotatingFileHandler):
    """A :class:`RotatingFileHandler` that writes header records at the top of each file."""

    def __init__(self, path: Path, *, max_bytes: int, keep: int, header: list[str]) -> None:
        super().__init__(path, maxBytes=max_bytes, backupCount=keep, encoding="utf-8")
        self.setFormatter(logging.Formatter("%(asctime)s %(message)s", DATE_FORMAT))
        self.header = header

    def write_header(self) -> None:
        """Emit the header lines into the current file (without rotating)."""
        for line in self.header:
            logging.FileHandler.emit(self, _record(line))

    def doRollover(self) -> None:
        """Rotate, then open the new file with the header."""
        super().doRollover()
        self.write_header()


def _record(line: str) -> logging.LogRecord:
    return logging.LogRecord("logpipe", logging.INFO, "", 0, line, None, None)


def pipe(
    lines: Iterable[bytes],
    path: Path,
    *,
    max_bytes: int,
    keep: int,
    header: list[str],
    fresh: bool,
) -> None:
    """Write ``lines`` (raw bytes, as read) into ``path``, timestamped and rotated.

    Args:
        lines: the input, one line each (a trailing newline is dropped; bytes
            that are not UTF-8 are replaced).
        path: the log file.
        max_bytes: rotate when the file would grow past this size.
        keep: rotated files kept (``path.1`` newest).
        header: lines written at the top of each file.
        fresh: rotate an existing non-empty file first.
    """
    handler = HeadedRotatingFileHandler(path, max_bytes=max_bytes, keep=keep, header=header)
    try:
        if fresh and path.exists() and path.stat().st_size > 0:
            handler.doRollover()  # writes the header into the new file
        else:
            handler.write_header()
        for raw in lines:
            handler.emit(_record(raw.rstrip(b"\r\n").decode("utf-8", errors="replace")))
    finally:
        handler.close()
