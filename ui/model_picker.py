"""The model picker: Chainlit's composer modes, one entry per served model.

Chainlit's chat profiles switch models only by starting a new chat ("This will clear
your current chat history": its header picker clears the session), so the model is
picked in the composer instead, with Chainlit's public modes (``emitter.set_modes``,
``cl.Mode``): the page sends the picked entry with every message
(``cl.Message.modes``), and the chat goes on with the other model, history and all
(the history the model sees has no reasoning, which suits either model). The server
pushes the picker whenever it learns what is served, so a page opened while the
model server was down gets it once the server is up, without a reload.
"""

from __future__ import annotations

from typing import Final

import chainlit as cl

from backend.chat import ChatSession
from backend.client import ServedModel
from backend.i18n import msg
from backend.panel import model_choices

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
