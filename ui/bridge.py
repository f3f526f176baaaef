"""The app's side of public/bridge.js: Chainlit's public window-message channel.

Chainlit's ``emitter.send_window_message(data)`` reaches the page as a window
``message`` event (Chainlit posts it to ``window.parent``, the page itself outside a
frame), and whatever the page posts to its own window comes back to
``@cl.on_window_message`` (Chainlit's page forwards every window message, ours
echoed included). Over it the app

* turns composer buttons into actions (:func:`offer_actions`): Server and Export run
  at a click, never as a message, so they never enter the transcript, the stored
  thread or its title;
* gives the page the words of the drop zone (:func:`send_strings`);
* puts a kept message's text back in the message box (:func:`put_back`);
* hands the page a file to save (:func:`offer_download`).

What comes back from the page is checked against :data:`ACTIONS` (:func:`action_of`):
anything else, our own echoed messages included, is ignored.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import chainlit as cl
from chainlit.config import config
from chainlit.types import CommandDict

from backend.i18n import Translator, msg
from ui import chainlit_patches

Action = Literal["server_panel", "export"]
ACTIONS: Final[frozenset[str]] = frozenset({"server_panel", "export"})
"""What a click on an action button may ask of the app."""

DROP_HINT: Final = msg("Drop images, PDFs or videos here to attach them")
"""The drop zone's words while a file is dragged over the chat."""


async def _send(kind: str, **fields: Any) -> None:
    await cl.context.emitter.send_window_message({"kimi": {"kind": kind, **fields}})


async def offer_actions(buttons: dict[Action, CommandDict]) -> None:
    """Show ``buttons`` in the composer (Chainlit's command buttons: icon, text,
    description) and have each run its action at a click instead of being sent."""
    await cl.context.emitter.set_commands(list(buttons.values()))
    await _send("actions", ids={button["id"]: action for action, button in buttons.items()})


async def send_strings(tr: Translator) -> None:
    """Give the page its own words in the chat's language (the drop zone's)."""
    await _send("strings", drop=tr(DROP_HINT))


async def put_back(text: str) -> None:
    """Put ``text`` back in the message box (a message that could not be sent as it was)."""
    await _send("composer", text=text)


def action_of(data: object) -> Action | None:
    """The action a window message from the page asks for, or None (not one of ours)."""
    action = data.get("kimi_action") if isinstance(data, dict) else None
    return action if isinstance(action, str) and action in ACTIONS else None  # type: ignore[return-value]


async def offer_download(name: str, content: bytes, mime: str) -> None:
    """Have the page save ``content`` as ``name``: stored with the session's files
    (served only to the session's own user, ui/security.py), not as a message."""
    session = cl.context.session
    reference = await chainlit_patches.store_file(session, name=name, content=content, mime=mime)
    root = config.run.root_path.rstrip("/")
    url = f"{root}/project/file/{reference['id']}?session_id={session.id}"
    await _send("download", url=url, name=name)
