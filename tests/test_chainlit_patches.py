"""The Chainlit internals that ui/chainlit_patches.py touches are still there, in the shape
the patches expect; this fails first when Chainlit is upgraded, before anything subtler."""

from __future__ import annotations

import inspect
from importlib.metadata import version

import httpx
from chainlit.server import router, sio
from fastapi import APIRouter, FastAPI
from starlette.routing import Route

from ui import chainlit_patches


def test_the_pinned_chainlit_is_the_one_installed() -> None:
    assert version("chainlit") == chainlit_patches.CHAINLIT_VERSION


def test_the_socket_connect_handler_is_a_coroutine_of_sid_environ_auth() -> None:
    handler = sio.handlers["/"]["connect"]
    while getattr(handler, "__wrapped__", None) is not None:  # our wrap, if installed
        handler = handler.__wrapped__
    assert inspect.iscoroutinefunction(handler)
    assert list(inspect.signature(handler).parameters) == ["sid", "environ", "auth"]
    assert handler.__module__ in {"chainlit.socket", "ui.security"}


def test_the_socket_frame_limit_is_engineios_max_http_buffer_size() -> None:
    assert isinstance(sio.eio.max_http_buffer_size, int)
    assert "max_http_buffer_size" in inspect.signature(type(sio.eio).__init__).parameters


async def test_chainlits_catch_all_route_shadows_later_routes_unless_ours_go_first() -> None:
    last = router.routes[-1]
    assert isinstance(last, Route) and last.path == "/{full_path:path}"
    assert last.methods == {"GET"}
    for first in (False, True):
        copy = FastAPI()
        copy.include_router(router)  # as chainlit/server.py builds its app
        ours = APIRouter()
        ours.add_api_route("/kimi/example", lambda: {"ours": True})
        ours.add_api_route("/kimi/other", lambda: {"other": True})
        if first:
            chainlit_patches.include_first(copy, ours)
        else:
            copy.include_router(ours)
        transport = httpx.ASGITransport(app=copy)
        async with httpx.AsyncClient(transport=transport, base_url="http://ui") as client:
            answers = [await client.get(path) for path in ("/kimi/example", "/kimi/other")]
        if first:
            assert [a.json() for a in answers] == [{"ours": True}, {"other": True}]
        else:  # Chainlit's page: the reason for the patch
            assert all(a.headers["content-type"].startswith("text/html") for a in answers)
