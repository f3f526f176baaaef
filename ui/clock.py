"""Chainlit's steps and messages, created without stopping the event loop.

Chainlit 2.12's ``Step.__init__`` (``chainlit/step.py``) and ``Message.__init__``
(``chainlit/message.py``) call ``time.sleep(0.001)`` so that two created back to
back get different ``created_at`` times (ISO strings, which the browser reads at
millisecond resolution and the data layer orders threads by). ``time.sleep``
blocks the whole event loop: measured here, 1.2 ms per step or message, three of
them (the person's message, the ``on_message`` run, the reasoning step) before a
person sees the answer begin, and the same for every other chat of the process
meanwhile. Chainlit's own attempt to remove it (Chainlit/chainlit pull request
1374) was closed unmerged.

:func:`install` keeps the guarantee without the pause: those two modules get a
``time`` whose ``sleep`` returns at once, and they and ``chainlit.emitter`` (which
dates the person's messages) share a ``utc_now`` that never gives the same
millisecond twice (:class:`DistinctClock`).
"""

from __future__ import annotations

import importlib
import time
import types
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

# By name: the package's ``chainlit.step`` attribute is the ``@step`` decorator, not the module.
_STEP = importlib.import_module("chainlit.step")
_MESSAGE = importlib.import_module("chainlit.message")
_EMITTER = importlib.import_module("chainlit.emitter")


class DistinctClock:
    """UTC timestamps in Chainlit's format, each at least one millisecond after the
    previous one (ahead of the wall clock by at most the burst that needed it).

    Args:
        now: the wall clock (UTC, naive); for tests.
    """

    def __init__(self, now: Callable[[], datetime] | None = None) -> None:
        self._now = now or (lambda: datetime.now(UTC).replace(tzinfo=None))
        self._last: datetime | None = None

    def __call__(self) -> str:
        """``2026-12-01T16:40:00.123456Z``: ISO 8601 with microseconds, always (Chainlit's
        format, which drops a zero fraction; with it the strings sort as the times do)."""
        now = self._now()
        if self._last is not None:
            now = max(now, self._last + timedelta(milliseconds=1))
        self._last = now
        return now.isoformat(timespec="microseconds") + "Z"


def _no_pause(_seconds: float) -> None:
    """``time.sleep`` for Chainlit's constructors: their ordering comes from the clock."""


def install() -> None:
    """Give Chainlit's step, message and emitter modules the clock, and the first two
    the sleep that does not pause (idempotent)."""
    if isinstance(getattr(_STEP.utc_now, "__self__", None), DistinctClock):
        return
    clock = DistinctClock()
    unpaused = types.SimpleNamespace(**{**vars(time), "sleep": _no_pause})
    for module in (_STEP, _MESSAGE, _EMITTER):
        module.utc_now = clock.__call__  # type: ignore[attr-defined]
    for module in (_STEP, _MESSAGE):
        module.time = unpaused  # type: ignore[attr-defined]
