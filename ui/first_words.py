"""A chat's page writes wait until its answer's first words are out.

When a question arrives, Chainlit starts the writes that store it (chainlit/emitter.py,
``process_message``: the user's message as a step, the thread's name and owner) as
tasks of their own, next to the handler that asks the model. On one event loop their
work (statements built, sent to the database and answered) runs between the steps of
the handler, before the request leaves and before the first words are relayed: about
14 ms of a signed-in chat's first words on this project's 2-core machine
(docs/benchmarks.md, "A chat's page writes after its first words"). Nothing needs them
that soon. So the data layer (``ui/datalayer.py``) holds a statement made for a chat while
that chat's running task (Chainlit's ``session.current_task``: the one answering its
message) has not yet sent its first words, at most :data:`WAIT_S` seconds; the task
itself is never held, and a task that ends opens the way too. Chainlit tells the page
that the chat is stored (``first_interaction``, on which the page moves to
``/thread/<id>``) once those writes are done, so that move comes after the first words.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Final

WAIT_S: Final = 1.0
"""The longest a chat's page write waits for its answer's first words, in seconds."""


class FirstWordsGate:
    """Which running tasks have sent their first words, and waiting for them.

    Args:
        wait_s: the longest :meth:`wait` waits, in seconds.
    """

    def __init__(self, wait_s: float = WAIT_S) -> None:
        self.wait_s = wait_s
        self._out: weakref.WeakKeyDictionary[asyncio.Task[Any], asyncio.Event] = (
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

    async def wait(self, task: asyncio.Task[Any] | None) -> None:
        """Wait until ``task`` has sent its first words, ended, or :attr:`wait_s` passed;
        at once when ``task`` is None, done, or the caller itself."""
        if task is None or task.done() or task is asyncio.current_task():
            return
        event = self._event(task)
        if not event.is_set():
            try:
                await asyncio.wait_for(event.wait(), self.wait_s)
            except TimeoutError:
                event.set()  # once is enough: the chat's later writes go at once


FIRST_WORDS: Final = FirstWordsGate()
"""The app's one gate: the data layer waits on it, the turn's view opens it."""
