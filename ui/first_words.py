"""A chat's page writes wait until its answer's first words are out, and keep their order.

When a question arrives, Chainlit starts the writes that store it (Chainlit 2.12's
``ChainlitEmitter.process_message``: the user's message as a step, the thread's name and
owner) as
tasks of their own, next to the handler that asks the model. On one event loop their
work (statements built, sent to the database and answered) runs between the steps of
the handler, before the request leaves and before the first words are relayed: about
14 ms of a signed-in chat's first words on this project's 2-core machine
(docs/benchmarks.md, "A chat's page writes after its first words"). Nothing needs them
that soon.

So a write of the data layer (``ui/datalayer.py``: a step made, updated or deleted, an
element, the thread) made for a chat whose running task (Chainlit's
``session.current_task``: the one answering its message) has not yet sent its first
words waits for them, at most :data:`WAIT_S` seconds; the writes that waited then run one
after the other in the order they were made (a message's step is written before the
deletion of that message). The answering task's own writes, and writes made inside a
write the gate runs, are never held; a task that ends lets them go too. Chainlit tells
the page that the chat is stored (``first_interaction``, on which the page moves to
``/thread/<id>``) once the thread's write is done, so that move comes after the first
words.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, Final, TypeVar

from backend.record import FIRST_WORDS_WAIT_S

WAIT_S: Final = FIRST_WORDS_WAIT_S
"""The longest a chat's page write waits for its answer's first words, in seconds (the
turn's own record as it starts waits as long: ``backend.record``)."""

T = TypeVar("T")

_INSIDE: Final[ContextVar[bool]] = ContextVar("kimi_inside_held_write", default=False)
"""True inside a write that waited: the writes it makes run at once."""


class FirstWordsGate:
    """Which running tasks have sent their first words, and the writes that wait for them.

    Args:
        wait_s: the longest a write waits, in seconds.
    """

    def __init__(self, wait_s: float = WAIT_S) -> None:
        self.wait_s = wait_s
        self._out: weakref.WeakKeyDictionary[asyncio.Task[Any], asyncio.Event] = (
            weakref.WeakKeyDictionary()
        )
        self._last: weakref.WeakKeyDictionary[asyncio.Task[Any], asyncio.Future[None]] = (
            weakref.WeakKeyDictionary()
        )

    def _event(self, task: asyncio.Task[Any]) -> asyncio.Event:
        event = self._out.get(task)
        if event is None:
            event = self._out[task] = asyncio.Event()
            task.add_done_callback(lambda _done: event.set())
        return event

    def open(self, task: asyncio.Task[Any] | None = None) -> None:
        """``task`` (default: the running one) has sent its first words, or has none to
        send (a chat start, a resume): writes wait for it no longer."""
        task = task or asyncio.current_task()
        if task is not None:
            self._event(task).set()

    async def run(self, task: asyncio.Task[Any] | None, write: Callable[[], Awaitable[T]]) -> T:
        """``write()`` now, or once ``task`` has sent its first words (or ended, or
        :attr:`wait_s` passed), after the writes that waited before it.

        At once when ``task`` is None, done or the caller itself, inside a write that
        waited, or when ``task``'s words are out and no write waits. Raises what
        ``write`` raises.
        """
        if _INSIDE.get():
            return await write()
        inside = _INSIDE.set(True)  # what this write writes in turn is never held
        try:
            if task is None or task.done() or task is asyncio.current_task():
                return await write()
            return await self._in_turn(task, write)
        finally:
            _INSIDE.reset(inside)

    async def _in_turn(self, task: asyncio.Task[Any], write: Callable[[], Awaitable[T]]) -> T:
        event, before = self._event(task), self._last.get(task)
        if event.is_set() and before is None:
            return await write()
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._last[task] = mine
        started = False
        try:
            await self._words_out(event)
            if before is not None:
                await asyncio.wait([before])
            started = True
            return await write()
        finally:
            if started or before is None or before.done():
                mine.set_result(None)
            else:  # cancelled while waiting: the next write still waits for the one before
                before.add_done_callback(lambda _before: mine.set_result(None))
            if self._last.get(task) is mine:
                del self._last[task]

    async def _words_out(self, event: asyncio.Event) -> None:
        if not event.is_set():
            try:
                await asyncio.wait_for(event.wait(), self.wait_s)
            except TimeoutError:
                event.set()  # once is enough: the chat's later writes go at once


FIRST_WORDS: Final = FirstWordsGate()
"""The app's one gate: the data layer's writes go through it, the turn's view opens it."""
