"""The model picker: Chainlit's composer modes, one entry per served model.

Chainlit's chat profiles switch models only by starting a new chat ("This will clear
your current chat history": its header picker clears the session), so the model is
picked in the composer instead, with Chainlit's public modes (``emitter.set_modes``,
``cl.Mode``): the page sends the picked entry with every message
(``cl.Message.modes``), and the chat goes on with the other model, history and all
(the history the model sees has no reasoning, which suits either model). The server
pushes the picker whenever it learns what is served, so a page opened while the
model server was down gets it once the server is up, without a reload. What is
served also gives Compare its other models (:func:`show_served`).
"""

from __future__ import annotations

import logging
from typing import Final

import chainlit as cl

from backend.chat import ChatSession
from backend.client import ServedModel
from backend.errors import ChatError
from backend.i18n import msg
from backend.logs import LOGGER_NAME
from backend.panel import model_choices
from backend.presenter import model_switched_note, switch_refused_note
from ui import bridge, process
from ui.answer import say

log = logging.getLogger(LOGGER_NAME)

MODE_ID: Final = "model"
"""The picker's id in ``cl.Message.modes``."""
MODEL_LABEL: Final = msg("Model")


_OFFERED: Final = "model_picker_offered"
"""User-session key: the choices last sent to the page (sent again only when they change)."""


async def offer(session: ChatSession, served: list[ServedModel]) -> None:
    """Show the picker for ``served`` (nothing when fewer than two), the chat's model
    picked; nothing is sent when the page already shows just that."""
    current = session.model.id if session.model else session.wanted_model or None
    choices = model_choices(served, current, session.tr)
    if cl.user_session.get(_OFFERED) == choices:
        return
    cl.user_session.set(_OFFERED, choices)
    options = [
        cl.ModeOption(id=c.name, name=c.label, description=c.description, default=c.default)
        for c in choices
    ]
    modes = [cl.Mode(id=MODE_ID, name=session.tr(MODEL_LABEL), options=options)] if options else []
    await cl.context.emitter.set_modes(modes)


def picked(message: cl.Message) -> str | None:
    """The served model the person picked for ``message``, if the picker was shown."""
    name = (message.modes or {}).get(MODE_ID)
    return name if isinstance(name, str) and name else None


async def switch_model(session: ChatSession, message: cl.Message) -> bool:
    """Go on with the served model picked for ``message``, keeping the chat; in a chat
    with turns already, a note says who answers from here on (as the export does,
    ``backend/store/export.py``). The settings panel is not sent here: the caller sends
    the new model's after the answer's first words. False when it cannot answer: said,
    the message off the transcript and its text back in the message box, and
    the picker sent again, on the chat's model (:func:`served_now`)."""
    wanted = picked(message)
    if wanted is None or session.model is None or wanted == session.model.id:
        return True
    mid_chat = bool(session.conversation.turns)
    try:
        await session.switch_model(wanted)
    except ChatError as exc:
        log.warning("switching to %s: %s", wanted, exc)
        await message.remove()
        await bridge.put_back(message.content)
        await say(switch_refused_note(exc.message, session.tr), kind="warning")
        await served_now(session)
        return False
    if mid_chat:
        await say(model_switched_note(session.tr.text(session.profile.label), session.tr))
    return True


async def served_now(session: ChatSession) -> None:
    """The chat knows what is served (at chat start, once the server is up): Compare's
    other models and the model picker (sent when it changed)."""
    await show_served(session, await process.served_models())


async def show_served(session: ChatSession, served: list[ServedModel]) -> None:
    """Compare's other models and the model picker (sent when it changed) for ``served``."""
    session.served_besides(served)
    await offer(session, served)
