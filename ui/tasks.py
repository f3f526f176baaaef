"""One answer at a time per chat, and Stop reaching every answer however it started.

Chainlit runs ``on_message`` as the session's task (``session.current_task``,
which its Stop cancels, with ``task_start``/``task_end`` frames that turn the
composer's Send button into Stop). Action callbacks (Retry, Regenerate, "Send
without them") run inside an HTTP request instead: no Stop button, and a message
typed meanwhile would stream alongside. :func:`start_answer_task` runs such work
the way Chainlit runs a message; :func:`one_at_a_time` makes every answer of a
chat wait for the one before; :func:`stop_answers` (from ``@cl.on_stop``) cancels
all of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import chainlit as cl

_LOCK = "answer_lock"
_TASKS = "answer_tasks"


def _tasks() -> set[asyncio.Task[object]]:
    tasks: set[asyncio.Task[object]] | None = cl.user_session.get(_TASKS)
    if tasks is None:
        tasks = set()
        cl.user_session.set(_TASKS, tasks)
    return tasks


@asynccontextmanager
async def one_at_a_time() -> AsyncIterator[None]:
    """Hold this chat's answer lock; the current task is cancelled by :func:`stop_answers`."""
    lock: asyncio.Lock | None = cl.user_session.get(_LOCK)
    if lock is None:
        lock = asyncio.Lock()
        cl.user_session.set(_LOCK, lock)
    task = asyncio.current_task()
    tasks = _tasks()
    if task is not None:
        tasks.add(task)
    try:
        async with lock:
            yield
    finally:
        if task is not None:
            tasks.discard(task)


def start_answer_task(work: Callable[[], Awaitable[None]]) -> None:
    """Run ``work`` as the chat session's task, as Chainlit runs ``on_message``.

    The browser gets ``task_start`` (Stop button, composer locked) and
    ``task_end``; Chainlit's Stop cancels it. Returns at once (an action
    callback should not hold its HTTP request open for a whole answer).
    """
    session = cl.context.session
    emitter = cl.context.emitter

    async def run() -> None:
        await emitter.task_start()
        try:
            async with one_at_a_time():
                await work()
        except asyncio.CancelledError:
            pass
        finally:
            await emitter.task_end()

    session.current_task = asyncio.create_task(run())


def stop_answers() -> None:
    """Cancel every answer of this chat, running or waiting (the Stop button)."""
    for task in list(_tasks()):
        task.cancel()
