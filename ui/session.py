"""This browser session's chat: made when a tab starts or resumes a chat, found by every
handler of the session afterwards (Chainlit's user session holds its turn runner)."""

from __future__ import annotations

import chainlit as cl

from backend.chat import ChatSession
from backend.turn_runner import TurnRunner
from ui import history, process
from ui.language import session_translator

RUNNER_KEY = "runner"
"""User-session key of the session's :class:`TurnRunner`."""


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
    )
    turns = TurnRunner(session, history.sink())
    cl.user_session.set(RUNNER_KEY, turns)
    return turns


def runner() -> TurnRunner:
    """This browser session's turn runner (it holds the chat's state)."""
    turns: TurnRunner = cl.user_session.get(RUNNER_KEY)
    return turns
