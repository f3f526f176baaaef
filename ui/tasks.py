"""One answer at a time per chat, a few waiting at most, and Stop reaching every answer
however it started.

Chainlit runs ``on_message`` as the session's task (``session.current_task``,
which its Stop cancels, with ``task_start``/``task_end`` frames that turn the
composer's Send button into Stop). Action callbacks (Retry, Regenerate, "Send
without them") run inside an HTTP request instead: no Stop button, and a message
typed meanwhile would stream alongside. :func:`start_answer_task` runs such work
the way Chainlit runs a message; :func:`one_at_a_time` makes every answer of a
chat wait for the one before, after taking a place in the process's
:class:`backend.fair_use.AnswerQueues` (an answer beyond the chat's or the person's bound is
refused: :class:`backend.fair_use.Busy`); :func:`stop_answers` (from ``@cl.on_stop``)
cancels all of them, and :func:`stop_answers_when_gone` (from ``@cl.on_chat_end``) does
when the tab is gone for good.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import chainlit as cl

from backend.fair_use import AnswerQueues, Busy
from backend.presenter import in_markdown
from ui.answer import say
from ui.language import session_translator
from ui.security import person_of

_LOCK = "answer_lock"
_TASKS = "answer_tasks"
_WATCH = "gone_watch"


def _tasks() -> set[asyncio.Task[object]]:
    tasks: set[asyncio.Task[object]] | None = cl.user_session.get(_TASKS)
    if tasks is None:
        tasks = set()
        cl.user_session.set(_TASKS, tasks)
    return tasks


@asynccontextmanager
async def one_at_a_time(answers: AnswerQueues) -> AsyncIterator[None]:
    """Take a place in ``answers`` (or raise :class:`backend.fair_use.Busy`), then hold
    this chat's answer lock; the current task is cancelled by :func:`stop_answers`."""
    session = cl.context.session
    place = answers.enter(session.id, person_of(session))
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
        place.leave()
        if task is not None:
            tasks.discard(task)


def start_answer_task(work: Callable[[], Awaitable[None]], answers: AnswerQueues) -> None:
    """Run ``work`` as the chat session's task, as Chainlit runs ``on_message``.

    The browser gets ``task_start`` (Stop button, composer locked) and
    ``task_end``; Chainlit's Stop cancels it. Returns at once (an action
    callback should not hold its HTTP request open for a whole answer). An answer
    beyond the bounds of ``answers`` is refused with its sentence.
    """
    session = cl.context.session
    emitter = cl.context.emitter

    async def run() -> None:
        await emitter.task_start()
        try:
            async with one_at_a_time(answers):
                await work()
        except Busy as refused:
            await say(in_markdown(refused.message, session_translator()), kind="warning")
        except asyncio.CancelledError:
            pass
        finally:
            await emitter.task_end()

    session.current_task = asyncio.create_task(run())


def stop_answers() -> None:
    """Cancel every answer of this chat, running or waiting (the Stop button)."""
    for task in list(_tasks()):
        task.cancel()


def stop_answers_when_gone(grace_s: float) -> None:
    """The tab's socket went away: cancel this chat's answers if no reconnect takes the
    session up again within ``grace_s`` seconds (so the model server stops generating
    what nobody can see).

    Chainlit calls ``on_chat_end`` at every disconnect, keeps the session for its
    ``session_timeout`` in case the tab comes back (a reconnect gives the session a new
    socket id, ``WebsocketSession.restore``), then deletes it; a session the browser
    cleared (``to_clear``, a new chat) is deleted at once, and so its answers stop at once.
    """
    session = cl.context.session
    tasks = _tasks()
    gone_at = getattr(session, "socket_id", None)

    async def watch() -> None:
        if not getattr(session, "to_clear", False):
            await asyncio.sleep(grace_s)
        if getattr(session, "socket_id", None) == gone_at:  # it never came back
            for task in list(tasks):
                task.cancel()

    cl.user_session.set(_WATCH, asyncio.create_task(watch()))
