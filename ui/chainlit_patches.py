"""Every place the app reaches into Chainlit's internals, each with why and what removes it.

Chainlit 2.12 offers no public hook for these; each function below names the
internal object it touches. tests/test_chainlit_patches.py fails when the pinned
Chainlit version changes or one of these objects changes shape, so an upgrade
is a conscious step: re-read each patch against the new source, then move the pin.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

from fastapi import APIRouter, FastAPI

CHAINLIT_VERSION: Final = "2.12.0"
"""The Chainlit these patches were written against (requirements.txt pins it)."""

ConnectHandler = Callable[[str, MutableMapping[str, Any], Any], Awaitable[Any]]
"""python-socketio's ``connect`` handler: ``(sid, environ, auth) -> accepted``."""


def wrap_socket_connect(wrap: Callable[[ConnectHandler], ConnectHandler]) -> None:
    """Replace Chainlit's socket.io ``connect`` handler by ``wrap(original)``.

    Why: whose chat a new socket may join is decided from its ``auth`` payload
    (``sessionId``), which travels inside socket.io's CONNECT packet, not in any
    HTTP header an ASGI middleware could read; Chainlit has no connect hook.
    Touches ``chainlit.server.sio.handlers["/"]["connect"]`` (registered by
    chainlit/socket.py with ``@sio.on("connect")``). Removed by a Chainlit hook
    that runs on socket connect with the ``auth`` payload and may refuse it.
    """
    from chainlit.server import sio

    sio.handlers["/"]["connect"] = wrap(sio.handlers["/"]["connect"])


def raise_socket_message_limit(limit_bytes: int) -> None:
    """Let socket.io frames up to ``limit_bytes`` through.

    Why: python-engineio drops a frame over ``max_http_buffer_size`` (1 MB by
    default) without a word, so a long pasted message would vanish; Chainlit
    builds its ``AsyncServer`` without exposing the option. Touches
    ``chainlit.server.sio.eio.max_http_buffer_size``. Removed by a Chainlit
    setting for the socket's message size.
    """
    from chainlit.server import sio

    sio.eio.max_http_buffer_size = limit_bytes


def include_first(app: FastAPI, router: APIRouter) -> None:
    """Add ``router``'s routes to Chainlit's ``app`` ahead of all of Chainlit's own.

    Why: Chainlit's last route, ``GET /{full_path:path}`` (chainlit/server.py
    ``serve``), answers every path with the page, so a router included after it
    is never reached. Touches ``app.router.routes`` (the list FastAPI matches in
    order). Removed when Chainlit registers its catch-all after the app's routes
    (or offers a hook to add routes before it).
    """
    before = len(app.router.routes)
    app.include_router(router)  # one entry per route, or one for the router (FastAPI 0.165)
    ours = app.router.routes[before:]
    del app.router.routes[before:]
    app.router.routes[0:0] = ours
