"""The live server panel: what vLLM reports on ``/metrics``, in Chainlit's side bar.

The ``Server`` command (a button in the message box) opens the side bar with the
markdown table of :func:`backend.metrics.panel_markdown`; the same command closes
it. While open, a task of the chat reads the table every :data:`REFRESH_S` seconds
and sends it again when it changed, for at most :data:`LIFETIME_S` seconds.

Why not a custom JSX element that polls only while on screen: the app's
Content-Security-Policy (ui/security.py) allows no ``eval``, which Chainlit needs
to run such elements. Chainlit tells the server nothing when the side bar's own
close arrow is used, and sending the table again reopens it: so the command is
the way to close, as the panel's note says.

All panels of the process share one :class:`backend.metrics.MetricsWatcher` and
one HTTP client, which this module owns: :func:`start` at app start, :func:`stop`
at app stop (app.py's hooks).
"""

from __future__ import annotations

import asyncio
import time

import chainlit as cl
import httpx
from chainlit.types import CommandDict

from backend.metrics import FETCH_TIMEOUT_S, MetricsWatcher
from backend.settings import Settings

COMMAND = "Server"
"""The command's id, as ``cl.Message.command`` carries it."""

REFRESH_S = 3.0
LIFETIME_S = 15 * 60.0
LIVE_NOTE = (
    f"Live: read every {REFRESH_S:.0f} s. Token rates are since the last read, cache hit "
    "rates since the server started. Click **Server** again to close."
)
STOPPED_NOTE = (
    f"Stopped refreshing after {LIFETIME_S / 60:.0f} minutes. Click **Server** twice for "
    "fresh numbers."
)
_TASK = "server_panel_task"  # this chat's refresh task, in the user session

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
    """``Server`` in the chat's message box (opens the panel, and closes it again)."""
    return {
        "id": COMMAND,
        "icon": "activity",
        "description": "Live server load (click again to close)",
        "button": True,
        "persistent": False,
        "selected": False,
    }


async def _show(table: str, note: str) -> None:
    element = cl.Text(name="Server", content=f"{table}\n\n{note}", display="side")
    await cl.ElementSidebar.set_elements([element], key=element.id)


async def _keep_fresh(shown: str) -> None:
    """Send the table again whenever it changed, until cancelled or :data:`LIFETIME_S`."""
    deadline = time.monotonic() + LIFETIME_S
    while time.monotonic() < deadline:
        await asyncio.sleep(REFRESH_S)
        table = await _table()
        if table != shown:
            await _show(table, LIVE_NOTE)
            shown = table
    await _show(shown, STOPPED_NOTE)


def close_panel() -> bool:
    """Stop this chat's refreshing (on chat end, or before closing); True if it was on."""
    task: asyncio.Task[None] | None = cl.user_session.get(_TASK)
    cl.user_session.set(_TASK, None)
    if task is None or task.done():
        return False
    task.cancel()
    return True


async def toggle_panel() -> None:
    """The ``Server`` command: open the side bar with the panel, or close it."""
    if close_panel():
        await cl.ElementSidebar.set_elements([])  # an empty list closes the side bar
        return
    table = await _table()
    await cl.ElementSidebar.set_title("Server")
    await _show(table, LIVE_NOTE)
    cl.user_session.set(_TASK, asyncio.create_task(_keep_fresh(table)))
