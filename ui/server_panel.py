"""The live server panel: what vLLM reports on ``/metrics``, in Chainlit's side bar.

Opened with the ``Server`` command (the composer's command menu). The side bar
holds one custom element (``public/elements/ServerPanel.jsx``) that shows the
markdown table of :func:`backend.metrics.panel_markdown` and asks for a fresh
one every :data:`REFRESH_S` seconds through the :data:`REFRESH_ACTION` action,
only while it is on screen. All panels of the process share one
:class:`backend.metrics.MetricsWatcher` and one HTTP client, which this module
owns: :func:`start` at app start, :func:`stop` at app stop (app.py's hooks).
"""

from __future__ import annotations

import chainlit as cl
import httpx
from chainlit.types import CommandDict

from backend.i18n import Translator, msg
from backend.metrics import FETCH_TIMEOUT_S, MetricsWatcher
from backend.settings import Settings
from ui.language import session_translator

COMMAND = msg("Server")
"""The command's id (Chainlit shows it as the button's text: in the chat's language), as
``cl.Message.command`` carries it back; compare with :func:`backend.i18n.in_any_language`."""

REFRESH_ACTION = "server_panel_refresh"
REFRESH_S = 3.0
NOTE = msg(
    "Refreshed every {seconds:.0f} s while open. Token rates: since the last refresh; "
    "cache hit rates: since the server started.",
    seconds=REFRESH_S,
)
TITLE = COMMAND
DESCRIPTION = msg("Live server load")

_state: tuple[httpx.AsyncClient, MetricsWatcher] | None = None


def start(settings: Settings) -> None:
    """Create the panel's HTTP client and watcher (at app start; again is a no-op)."""
    global _state
    if _state is None:
        root = settings.base_url.rstrip("/").removesuffix("/v1")
        _state = (httpx.AsyncClient(timeout=FETCH_TIMEOUT_S), MetricsWatcher(root))


async def stop() -> None:
    """Close the panel's HTTP client (at app stop)."""
    global _state
    if _state is not None:
        http, _ = _state
        _state = None
        await http.aclose()


def _translator() -> Translator:
    """The language of this chat (set at chat start), else of this browser session."""
    chat = cl.user_session.get("chat")
    tr = getattr(chat, "tr", None)
    return tr if isinstance(tr, Translator) else session_translator()


async def _table(tr: Translator) -> str:
    if _state is None:
        start(Settings())
    assert _state is not None
    http, watcher = _state
    return await watcher.table(http, tr)


def command() -> CommandDict:
    """``Server`` in the chat's command menu (opens the panel)."""
    return {
        "id": _translator()(COMMAND),
        "icon": "activity",
        "description": _translator()(DESCRIPTION),
        "button": True,
        "persistent": False,
        "selected": False,
    }


async def open_panel() -> None:
    """Open the side bar with the panel (the ``Server`` command)."""
    tr = _translator()
    element = cl.CustomElement(
        name="ServerPanel",
        props={
            "markdown": await _table(tr),
            "action": REFRESH_ACTION,
            "refresh_ms": int(REFRESH_S * 1000),
            "note": tr(NOTE),
        },
    )
    await cl.ElementSidebar.set_title(tr(TITLE))
    await cl.ElementSidebar.set_elements([element], key=element.id)


@cl.action_callback(REFRESH_ACTION)
async def _refresh(action: cl.Action) -> str:
    """The open panel's timer asks: the current table."""
    return await _table(_translator())
