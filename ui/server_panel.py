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

from backend.i18n import Translator, msg
from backend.metrics import FETCH_TIMEOUT_S, MetricsWatcher
from backend.settings import Settings
from ui.language import session_translator

COMMAND = msg("Server")
"""The command's id (Chainlit shows it as the button's text: in the chat's language), as
``cl.Message.command`` carries it back; compare with :func:`backend.i18n.in_any_language`."""

REFRESH_S = 3.0
LIFETIME_S = 15 * 60.0
LIVE_NOTE = msg(
    "Live: read every {seconds:.0f} s. Token rates are since the last read, cache hit "
    "rates since the server started. Click **{command}** again to close.",
    seconds=REFRESH_S,
    command=COMMAND,
)
STOPPED_NOTE = msg(
    "Stopped refreshing after {minutes:.0f} minutes. Click **{command}** twice for fresh numbers.",
    minutes=LIFETIME_S / 60,
    command=COMMAND,
)
DESCRIPTION = msg("Live server load (click again to close)")
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
    """``Server`` in the chat's message box (opens the panel, and closes it again)."""
    return {
        "id": _translator()(COMMAND),
        "icon": "activity",
        "description": _translator()(DESCRIPTION),
        "button": True,
        "persistent": False,
        "selected": False,
    }


async def _show(table: str, note: str) -> None:
    name = _translator()(COMMAND)
    element = cl.Text(name=name, content=f"{table}\n\n{note}", display="side")
    await cl.ElementSidebar.set_elements([element], key=element.id)


async def _keep_fresh(shown: str, tr: Translator) -> None:
    """Send the table again whenever it changed, until cancelled or :data:`LIFETIME_S`."""
    deadline = time.monotonic() + LIFETIME_S
    while time.monotonic() < deadline:
        await asyncio.sleep(REFRESH_S)
        table = await _table(tr)
        if table != shown:
            await _show(table, tr(LIVE_NOTE))
            shown = table
    await _show(shown, tr(STOPPED_NOTE))


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
    tr = _translator()
    table = await _table(tr)
    await cl.ElementSidebar.set_title(tr(COMMAND))
    await _show(table, tr(LIVE_NOTE))
    cl.user_session.set(_TASK, asyncio.create_task(_keep_fresh(table, tr)))
