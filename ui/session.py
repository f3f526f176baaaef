"""This browser session's chat: made when a tab starts or resumes a chat, found by every
handler of the session afterwards (Chainlit's user session holds its turn runner)."""

from __future__ import annotations

import asyncio

import chainlit as cl

from backend.chat import ChatSession
from backend.presenter import SAVED_AGAIN_NOTE
from backend.turn_runner import TurnRunner
from ui import history, process
from ui.answer import say
from ui.language import session_translator

RUNNER_KEY = "runner"
"""User-session key of the session's :class:`TurnRunner`."""

SAVING_KEY = "saved_again_watch"
"""User-session key of the task that says when an unsaved chat is saved again."""


async def new_chat(wanted_model: str = "") -> TurnRunner:
    """This session's chat (for ``wanted_model``, "" = the setting's), on its model's
    server (looked for again at every connect), and its turn runner; a stored chat's
    turns are recorded."""
    shared = process.resources()
    server = await shared.server_for(wanted_model or process.SETTINGS.model)
    session = ChatSession.create(
        process.SETTINGS,
        server,
        shared.workers,
        wanted_model,
        tr=session_translator(),
        locate=shared.server_for,
        chat_id=cl.context.session.thread_id,
    )
    turns = TurnRunner(session, history.sink(), when_unsaved=_say_when_saved)
    cl.user_session.set(RUNNER_KEY, turns)
    return turns


def runner() -> TurnRunner:
    """This browser session's turn runner (it holds the chat's state)."""
    turns: TurnRunner = cl.user_session.get(RUNNER_KEY)
    return turns


def _say_when_saved(turns: TurnRunner) -> None:
    """Once every held write of the chat is written, say so in it, even if nobody asks
    anything meanwhile (else the next turn says it, backend/turn_runner.py). The task is
    the session's: :func:`stop_saving_watch` ends it with the session."""
    # Here, not at the top: an app that runs open loads no database code
    # (tests/test_startup_imports.py); only a stored chat's turns get here.
    from backend.store.turns import ThreadTurns

    sink = turns.sink
    if not isinstance(sink, ThreadTurns):
        return

    async def watch() -> None:
        await sink.pending.written(sink.thread_id)
        if turns.unsaved_said:
            turns.unsaved_said = False
            await say(turns.chat.tr(SAVED_AGAIN_NOTE), kind="info")

    running: asyncio.Task[None] | None = cl.user_session.get(SAVING_KEY)
    if running is None or running.done():
        cl.user_session.set(SAVING_KEY, asyncio.create_task(watch()))


def stop_saving_watch() -> None:
    """End this session's wait for its chat to be saved again (the tab went away)."""
    running: asyncio.Task[None] | None = cl.user_session.get(SAVING_KEY)
    if running is not None:
        running.cancel()
