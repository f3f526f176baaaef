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

A message typed in the composer is admitted as it arrives, before Chainlit stores it
(:func:`admitting`, around Chainlit's socket handlers): one over ``KIMI_MAX_MESSAGE_CHARS``
or beyond the queue's bounds is refused with a sentence in the chat, and nothing of it is
stored, priced or sent to the model; an admitted one takes its place in the queue there,
and :func:`one_at_a_time` finds it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import chainlit as cl

from backend.errors import ChatError
from backend.fair_use import (
    AnswerQueues,
    Busy,
    Confirming,
    Leaving,
    UploadRoom,
    check_message_length,
)
from backend.logs import LOGGER_NAME
from backend.presenter import in_markdown
from ui.answer import UNCONFIRMED, say
from ui.chainlit_patches import MessageHandler, wrap_socket_messages
from ui.language import session_translator
from ui.notes import AUTHOR, note_id
from ui.security import person_of

if TYPE_CHECKING:  # the store's code loads only where chats are stored
    from backend.store.bounds import StoredChats
    from backend.store.core import Store

log = logging.getLogger(LOGGER_NAME)

_LOCK = "answer_lock"
_TASKS = "answer_tasks"
_WATCH = "gone_watch"


def _tasks() -> set[asyncio.Task[object]]:
    tasks: set[asyncio.Task[object]] | None = cl.user_session.get(_TASKS)
    if tasks is None:
        tasks = set()
        cl.user_session.set(_TASKS, tasks)
    return tasks


_ADMITTED: dict[str, Leaving] = {}
"""Places taken by :func:`admitting` for messages on their way to ``on_message``, by
message id; each is taken up by :func:`one_at_a_time` or given back when its task ends."""


@asynccontextmanager
async def one_at_a_time(answers: AnswerQueues, message_id: str = "") -> AsyncIterator[None]:
    """Take a place in ``answers`` (or raise :class:`backend.fair_use.Busy`), or the one
    taken as message ``message_id`` arrived, then hold this chat's answer lock; the current
    task is cancelled by :func:`stop_answers`. A place whose lease in the shared store is
    still being taken is confirmed before the answer waits behind another (so a refusal
    is said at once), or else before the answer's first event is drawn (``ui/answer.py``
    :data:`~ui.answer.UNCONFIRMED`: a refusal there raises :class:`backend.fair_use.Busy`
    out of the drawing, the model request closed, and the request is not held up)."""
    session = cl.context.session
    place = _ADMITTED.pop(message_id, None) or await answers.take(session.id, person_of(session))
    lock: asyncio.Lock | None = cl.user_session.get(_LOCK)
    if lock is None:
        lock = asyncio.Lock()
        cl.user_session.set(_LOCK, lock)
    task = asyncio.current_task()
    tasks = _tasks()
    if task is not None:
        tasks.add(task)
    try:
        if isinstance(place, Confirming):
            if lock.locked():  # it waits anyway
                await place.confirmed()
            else:
                UNCONFIRMED.set(place)
        async with lock:
            yield
    finally:
        UNCONFIRMED.set(None)
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


def admitting(
    answers: Callable[[], AnswerQueues],
    max_chars: Callable[[], int],
    stored_chats: Callable[[], StoredChats | None] = lambda: None,
) -> Callable[[str, MessageHandler], MessageHandler]:
    """Wrap Chainlit's ``client_message`` or ``edit_message`` handler (``event``) for
    :func:`ui.chainlit_patches.wrap_socket_messages`: a message is refused before Chainlit
    stores it when it is too long, when its signed-in person's stored chats would hold
    more than ``stored_chats`` allows with it (None: nothing is stored), or (a new message)
    when its chat or its person has as many answers as allowed; the refusal is said in the
    chat and not stored.
    """
    from chainlit.context import init_ws_context
    from chainlit.session import WebsocketSession

    def wrap(event: str, original: MessageHandler) -> MessageHandler:
        async def handle(sid: str, payload: Any) -> None:
            session = WebsocketSession.get(sid)
            step = payload.get("message") if isinstance(payload, dict) else None
            if session is None or not isinstance(step, dict):
                await original(sid, payload)  # Chainlit refuses it as before
                return
            message_id, text = str(step.get("id") or ""), step.get("output")
            context = init_ws_context(session)
            try:
                check_message_length(text if isinstance(text, str) else "", max_chars())
                await _check_stored(stored_chats(), session, payload)
                place: Leaving | None = None
                if event == "client_message" and not step.get("command"):
                    place = await answers().take(session.id, person_of(session))
            except ChatError as refused:
                log.warning("%s refused: %s", event, refused)
                note = cl.Message(
                    in_markdown(refused.message, session_translator()),
                    author=AUTHOR,
                    id=note_id("warning"),
                )
                await context.emitter.send_step(note.to_dict())  # said, not stored
                return
            if place is not None:
                _ADMITTED[message_id] = place
            await original(sid, payload)
            task = session.current_task
            if place is not None and task is not None:
                task.add_done_callback(lambda _: _unclaimed(message_id))

        handle.__wrapped__ = original  # type: ignore[attr-defined]
        return handle

    return wrap


async def _check_stored(stored: StoredChats | None, session: Any, payload: dict[str, Any]) -> None:
    """Refuse the message of ``payload`` if its signed-in person's stored chats would hold
    more than ``stored`` allows with its text and files.

    Raises:
        backend.fair_use.StoreFull: they would.
    """
    user = getattr(session, "user", None)
    if stored is None or user is None:
        return
    text = payload["message"].get("output")
    size = len(text.encode()) if isinstance(text, str) else 0
    for reference in payload.get("fileReferences") or []:
        file = session.files.get(reference.get("id")) if isinstance(reference, dict) else None
        size += int(file.get("size") or 0) if isinstance(file, dict) else 0
    await stored.check(user.identifier, size)


def _unclaimed(message_id: str) -> None:
    """Give back the place of a message whose task ended without taking it up."""
    place = _ADMITTED.pop(message_id, None)
    if place is not None:
        place.leave()


def refuse_beyond_bounds(store: Store | None) -> None:
    """Refuse a socket message before Chainlit stores it (:func:`admitting`) by the process's
    answer queues and message limit and, with a ``store`` (sign-in on), by the person's
    stored chats."""
    from ui import process  # its settings are read where the app is: not on import here

    wrap_socket_messages(
        admitting(
            lambda: process.resources().answers,
            lambda: process.SETTINGS.max_message_chars,
            lambda: store.stored_chats if store is not None else None,
        )
    )


def count_in_store(store: Store | None, uploads: UploadRoom) -> None:
    """At the app's start, with a ``store``: count the answer queues and a person's
    ``uploads`` in it too (its leases, which it starts renewing), so every worker and host
    sharing it holds the same bounds; without one, they stay in this process."""
    from ui import process

    if store is not None:
        process.resources().answers.shared = store.leases
        uploads.shared = store.leases
        store.leases.start()
