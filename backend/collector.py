"""Full garbage collections on the app's schedule, not when allocations set one off.

CPython runs a full (generation 2) collection once enough objects have survived the
younger collections, that is, while the process allocates the most: in the first tenth
of a second of a burst of questions, when 64 chats' steps, messages and requests are made
at once. A full pass walks every object that is not frozen (app.py freezes what the start
loaded) holding the GIL, so the event loop and every thread wait for it. Measured inside
64-chat bursts on a 2-core machine: passes of 15-55 ms, longer as the closed tabs'
sessions that Chainlit keeps for a minute pile up, each landing in the burst's first
words (docs/benchmarks.md, "Full collections during a burst").

:class:`FullCollections` turns the automatic full passes off and runs one every
``every_s`` seconds once no question has been asked for ``quiet_s``. The younger
generations are still collected automatically (passes of at most about 5 ms, measured
the same way).
"""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

NEVER: Final = 1 << 30
"""A generation-2 threshold no process reaches (it counts generation-1 passes)."""

EVERY_S: Final = 10.0
"""Seconds between two full collections, before waiting for a quiet moment."""

QUIET_S: Final = 1.0
"""A full collection waits until no question has been asked for this long (at most
:data:`EVERY_S` more): a burst's first words come within a few hundred milliseconds."""


_takeovers: list[tuple[int, int, int]] = []
"""The thresholds each :meth:`FullCollections.take_over` found, in order: the first is
what the process had, restored when the last one hands back."""


@dataclass
class FullCollections:
    """The process's full garbage collections, run by :meth:`run` at quiet moments.

    Args:
        last_question: the ``time.monotonic()`` of the last question asked
            (``backend.fair_use.AnswerQueues.last_entered``).
        every_s: seconds between two full collections, before waiting for quiet.
        quiet_s: seconds without a question that count as quiet.
    """

    last_question: Callable[[], float]
    every_s: float = EVERY_S
    quiet_s: float = QUIET_S
    _holding: bool = field(default=False, init=False, repr=False)

    def take_over(self) -> None:
        """Turn the automatic full collections off (idempotent); :meth:`run` does them.
        A no-op from Python 3.14 on, whose incremental collector works in small steps
        and reads the thresholds otherwise."""
        if self._holding or sys.version_info >= (3, 14):
            return
        _takeovers.append(gc.get_threshold())
        young, middle, _ = _takeovers[0]
        gc.set_threshold(young, middle, NEVER)
        self._holding = True

    def hand_back(self) -> None:
        """Let go (idempotent); the last holder in the process restores the thresholds
        the first one found."""
        if not self._holding:
            return
        self._holding = False
        found = _takeovers.pop()
        if not _takeovers:
            gc.set_threshold(*found)  # the first one's: what the process had

    async def run(self) -> None:
        """Forever: wait ``every_s``, then for a quiet moment (at most ``every_s``
        more), then collect every generation, unless collection is off just then
        (``backend.safety.collector_paused``, while a long answer is read: it is the
        next round's; a pause that begins in the instant between the check and the
        pass does not stop that pass)."""
        while True:
            await asyncio.sleep(self.every_s)
            await self._quiet(time.monotonic() + self.every_s)
            if gc.isenabled():
                gc.collect()

    async def _quiet(self, deadline: float) -> None:
        while True:
            now = time.monotonic()
            wait = min(self.last_question() + self.quiet_s, deadline) - now
            if wait <= 0:
                return
            await asyncio.sleep(wait)
