"""``GET /kimi/status``: what ``./launch.sh status`` reports about the UI.

Answers ``{"open_chats": N}``, the number of browser sessions with a connected
websocket right now: Chainlit's registry of sessions by socket id, less the sessions
whose socket has gone (Chainlit keeps those for ``session_timeout``, 60 s in
``.chainlit/config.toml``, in case the tab reconnects). The count is for
loopback callers only, since it says how busy the demo box is: another caller (HAProxy
checking a worker on another host, deploy/haproxy.cfg) gets ``{}``, an answer that says
only that the worker is up.
"""

from __future__ import annotations

from chainlit.server import app, sio
from chainlit.session import ws_sessions_sid
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ui.chainlit_patches import ahead_of_the_page

PATH = "/kimi/status"
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


async def status(request: Request) -> Response:
    """The UI's status for the operator (see the module docstring)."""
    if request.client is None or request.client.host not in LOOPBACK:
        return JSONResponse({})
    connected = [sid for sid in ws_sessions_sid if sio.manager.is_connected(sid, "/")]
    return JSONResponse({"open_chats": len(connected)})


def install() -> None:
    """Add the route to Chainlit's app, before its catch-all page route (idempotent)."""
    if any(getattr(route, "path", None) == PATH for route in app.router.routes):
        return
    ahead_of_the_page(app, lambda: app.add_api_route(PATH, status, methods=["GET"]))
