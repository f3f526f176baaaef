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

from backend.metrics import FETCH_TIMEOUT_S, MetricsWatcher
from backend.settings import Settings

COMMAND = "Server"
"""The command's id, as ``cl.Message.command`` carries it."""

REFRESH_ACTION = "server_panel_refresh"
REFRESH_S = 3.0
NOTE = (
    f"Refreshed every {REFRESH_S:.0f} s while open. Token rates: since the last refresh; "
    "cache hit rates: since the server started."
)

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


async def _table() -> str:
    if _state is None:
        start(Settings())
    assert _state is not None
    http, watcher = _state
    return await watcher.table(http)


def command() -> CommandDict:
    """``Server`` in the chat's command menu (opens the panel)."""
    return {
        "id": COMMAND,
        "icon": "activity",
        "description": "Live server load",
        "button": True,
        "persistent": False,
        "selected": False,
    }


async def open_panel() -> None:
    """Open the side bar with the panel (the ``Server`` command)."""
    element = cl.CustomElement(
        name="ServerPanel",
        props={
            "markdown": await _table(),
            "action": REFRESH_ACTION,
            "refresh_ms": int(REFRESH_S * 1000),
            "note": NOTE,
        },
    )
    await cl.ElementSidebar.set_title("Server")
    await cl.ElementSidebar.set_elements([element], key=element.id)


@cl.action_callback(REFRESH_ACTION)
async def _refresh(action: cl.Action) -> str:
    """The open panel's timer asks: the current table."""
    return await _table()
