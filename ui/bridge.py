"""The app's side of public/bridge.js: Chainlit's public window-message channel.

Chainlit's ``emitter.send_window_message(data)`` reaches the page as a window
``message`` event (Chainlit posts it to ``window.parent``, the page itself outside a
frame), and whatever the page posts to its own window comes back to
``@cl.on_window_message`` (Chainlit's page forwards every window message, ours
echoed included). Over it the app

* turns composer buttons into actions (:func:`offer_actions`): Server and Export run
  at a click, never as a message, so they never enter the transcript, the stored
  thread or its title;
* gives the page its own words (:func:`send_strings`): the drop zone's, and the sentence
  for a file over Chainlit's ``max_size_mb``, which the page refuses before it is sent;
* puts a kept message's text back in the message box (:func:`put_back`);
* hands the page a file to save (:func:`offer_download`);
* streams the open block of a long text (:func:`show_live`, :func:`end_live`,
  ``public/live.js``).

What comes back from the page is checked against :data:`ACTIONS` (:func:`action_of`):
anything else, our own echoed messages included, is ignored.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import chainlit as cl
from chainlit.config import config
from chainlit.types import CommandDict

from backend.i18n import Translator, msg
from backend.upload_kinds import drop_hint
from ui import chainlit_patches

Action = Literal["server_panel", "export"]
ACTIONS: Final[frozenset[str]] = frozenset({"server_panel", "export"})
"""What a click on an action button may ask of the app."""

TOO_BIG: Final = msg(
    "{name} was not attached: it is larger than the {limit:g} MB the app accepts.", name="", limit=0
)
"""A file over Chainlit's ``max_size_mb`` (.chainlit/config.toml): Chainlit's page never
sends it, so public/bridge.js takes it out of the attach and says this instead."""


def upload_limit_mb() -> float | None:
    """Chainlit's ``[features.spontaneous_file_upload] max_size_mb`` (MB of 10^6 bytes, as
    Chainlit's page counts them), or None when uploads are off or unlimited."""
    spec = config.features.spontaneous_file_upload
    return float(spec.max_size_mb) if spec and spec.enabled and spec.max_size_mb else None


async def _send(kind: str, **fields: Any) -> None:
    await cl.context.emitter.send_window_message({"kimi": {"kind": kind, **fields}})


async def offer_actions(buttons: dict[Action, CommandDict]) -> None:
    """Show ``buttons`` in the composer (Chainlit's command buttons: icon, text,
    description) and have each run its action at a click instead of being sent."""
    await cl.context.emitter.set_commands(list(buttons.values()))
    await _send("actions", ids={button["id"]: action for action, button in buttons.items()})


async def send_strings(tr: Translator) -> None:
    """Give the page its own words in the chat's language: the drop zone's, and the
    sentence for a file over :func:`upload_limit_mb` (``{name}`` left for the page to
    fill) with that limit in MB (``max_mb``, None: no limit)."""
    limit = upload_limit_mb()
    too_big = tr(TOO_BIG, name="{name}", limit=limit or 0)
    await _send("strings", drop=drop_hint(tr), too_big=too_big, max_mb=limit)


async def put_back(text: str) -> None:
    """Put ``text`` back in the message box (a message that could not be sent as it was)."""
    await _send("composer", text=text)


async def show_live(block_id: str, text: str) -> None:
    """Append ``text`` to what the page shows of the open block ``block_id`` (a step or
    message of :mod:`ui.blocks`), as plain text: ``public/live.js`` adds it without a
    render of Chainlit's page; the block's markdown is drawn once, when it closes.
    The block may reach the page after its first text: the page keeps that text until then."""
    await _send("live", id=block_id, text=text)


async def end_live(block_id: str) -> None:
    """Say that block ``block_id`` has been sent its whole text: the page ends its live text
    once the block's markdown is drawn, or about a second later if that draws nothing."""
    await _send("live_end", id=block_id)


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
