"""What ui/chainlit_patches.py relies on in Chainlit: each test fails when the pinned
Chainlit changes, or when an object a patch changes is no longer shaped as the patch
assumes. A failure here means: read that patch's comment, check it against the new
Chainlit, and change or delete it."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import types
from functools import partial
from importlib.metadata import version
from pathlib import Path

import httpx
import pytest
from chainlit.server import router, sio
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute

from ui import chainlit_patches
from ui.chainlit_patches import CHAINLIT_VERSION

ROOT = Path(__file__).resolve().parent.parent


def source(obj: object) -> str:
    """The source of ``obj`` (a patched function is read through ``__wrapped__``)."""
    return inspect.getsource(inspect.unwrap(obj))  # type: ignore[arg-type]


def test_the_installed_chainlit_is_the_one_the_patches_were_written_for() -> None:
    assert version("chainlit") == CHAINLIT_VERSION
    pins = (ROOT / "requirements.txt").read_text().split()
    assert f"chainlit=={CHAINLIT_VERSION}" in pins


def test_steps_and_messages_still_pause_and_date_themselves_through_their_modules() -> None:
    """Patch 1 replaces the ``time`` and ``utc_now`` the constructors read from their modules."""
    step = importlib.import_module("chainlit.step")
    message = importlib.import_module("chainlit.message")
    emitter = importlib.import_module("chainlit.emitter")
    for constructor in (step.Step.__init__, message.Message.__init__):
        assert "time.sleep(0.001)" in source(constructor)
    assert "self.created_at = utc_now()" in source(step.Step.__init__)
    assert "message.created_at = utc_now()" in source(emitter.ChainlitEmitter.process_message)
    assert all(hasattr(module, "utc_now") for module in (step, message, emitter))
    assert all(hasattr(module, "time") for module in (step, message))


def test_uploads_are_still_stored_by_persist_file_in_the_session_files() -> None:
    """Patch 2 wraps ``WebsocketSession.persist_file`` and ``chainlit.server.validate_file_upload``
    (called by the upload route only, before it stores the file) and reads ``user_sessions``."""
    from chainlit import server
    from chainlit.session import WebsocketSession
    from chainlit.user_session import user_sessions

    assert isinstance(user_sessions, dict)
    parameters = list(inspect.signature(inspect.unwrap(WebsocketSession.persist_file)).parameters)
    assert parameters == ["self", "name", "mime", "path", "content"]
    assert "self.files[file_id] = {" in source(WebsocketSession.persist_file)
    route = source(server.upload_file)
    # The wrapped check marks the request as an upload before the file is stored.
    assert route.index("validate_file_upload(file") < route.index("await session.persist_file(")
    assert "validate_file_upload(" not in source(WebsocketSession.persist_file)
    assert callable(server.validate_file_upload)
    # An empty file is still refused (so the wrapper stores it from os.devnull) and a path
    # is still copied.
    assert "if not path and not content:" in source(WebsocketSession.persist_file)
    assert 'aiofiles.open(path, "rb")' in source(WebsocketSession.persist_file)


def test_a_kept_upload_is_still_shown_from_its_session_file_entry() -> None:
    """Patch 2's ``KeptUpload.show_as`` names another file in the upload's entry of the
    session's files: the message's element is still built from that entry's path and type,
    and the file route still serves that path with that type."""
    from chainlit import server

    emitter = importlib.import_module("chainlit.emitter")
    built = source(emitter.ChainlitEmitter.process_message)
    assert 'self.session.files[file["id"]]' in built
    assert '"path": str(file["path"])' in built and '"mime": file["type"]' in built
    assert '"type": Element.infer_type_from_mime(file["type"])' in built
    assert 'FileResponse(file["path"], media_type=file["type"])' in source(server.get_file)


def test_chainlits_page_route_is_still_its_last_and_answers_every_path() -> None:
    """Patch 3 moves the app's routes in front of it."""
    from chainlit import server

    last = server.router.routes[-1]
    assert isinstance(last, APIRoute) and last.path == "/{full_path:path}"
    assert last.endpoint is server.serve and last.methods == {"GET"}


def test_routes_added_ahead_of_the_page_come_first() -> None:
    app = FastAPI()

    @app.get("/{full_path:path}")
    async def page() -> str:
        return "page"

    chainlit_patches.ahead_of_the_page(app, lambda: app.add_api_route("/a", page))
    assert getattr(app.router.routes[0], "path", "") == "/a"
    assert getattr(app.router.routes[-1], "path", "") == "/{full_path:path}"


def test_the_socket_connect_handler_is_a_coroutine_of_sid_environ_auth() -> None:
    """Patch 4 wraps it; the check reads ``auth`` as its third argument."""
    handler = sio.handlers["/"]["connect"]
    while getattr(handler, "__wrapped__", None) is not None:  # our wrap, if installed
        handler = handler.__wrapped__
    assert inspect.iscoroutinefunction(handler)
    assert list(inspect.signature(handler).parameters) == ["sid", "environ", "auth"]
    assert handler.__module__ in {"chainlit.socket", "ui.security"}


def test_chainlits_stop_handler_still_says_it_stopped_then_cancels_and_calls_on_stop() -> None:
    """Patch 5 replaces it by the same steps without the message."""
    handler = sio.handlers["/"]["stop"]
    original = getattr(handler, "__wrapped__", handler)  # Chainlit's, if ours is installed
    assert list(inspect.signature(original).parameters) == ["sid"]
    text = source(original)
    steps = ('Message(content="Task manually stopped.")', "session.current_task.cancel()")
    assert all(step in text for step in steps)
    assert "await config.code.on_stop()" in text
    assert text.count("await") == 2  # the message and on_stop: nothing else to keep


def test_the_socket_frame_limit_is_engineios_max_http_buffer_size() -> None:
    """Patch 4 raises it."""
    assert isinstance(sio.eio.max_http_buffer_size, int)
    assert "max_http_buffer_size" in inspect.signature(type(sio.eio).__init__).parameters


async def test_chainlits_catch_all_route_shadows_later_routes_unless_ours_go_first() -> None:
    """Patch 3 with a whole router (FastAPI adds one entry for it, not one per route)."""
    for first in (False, True):
        copy = FastAPI()
        copy.include_router(router)  # as chainlit/server.py builds its app
        ours = APIRouter()
        ours.add_api_route("/kimi/example", lambda: {"ours": True})
        ours.add_api_route("/kimi/other", lambda: {"other": True})
        if first:
            chainlit_patches.ahead_of_the_page(copy, partial(copy.include_router, ours))
        else:
            copy.include_router(ours)
        transport = httpx.ASGITransport(app=copy)
        async with httpx.AsyncClient(transport=transport, base_url="http://ui") as client:
            answers = [await client.get(path) for path in ("/kimi/example", "/kimi/other")]
        if first:
            assert [a.json() for a in answers] == [{"ours": True}, {"other": True}]
        else:  # Chainlit's page: the reason for the patch
            assert all(a.headers["content-type"].startswith("text/html") for a in answers)


def test_questions_still_wait_a_millisecond_before_on_message_and_only_there() -> None:
    """Patch 6 replaces the ``asyncio`` chainlit/socket.py reads ``sleep`` from; its only
    other sleep is a session's timeout."""
    socket = importlib.import_module("chainlit.socket")
    assert "await asyncio.sleep(0.001)" in source(socket.process_message)
    assert "config.code.on_message(message)" in source(socket.process_message)
    sleeps = Path(inspect.getfile(socket)).read_text().count("asyncio.sleep(")
    assert sleeps == 2
    assert "asyncio.sleep(config.project.session_timeout)" in inspect.getsource(socket)


async def test_the_short_pause_becomes_one_yield_and_long_sleeps_stay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float, result: object = None) -> object:
        asked.append(seconds)
        return await real_sleep(0, result)

    chainlit_patches.hand_questions_on_at_once()
    chainlit_patches.hand_questions_on_at_once()  # idempotent
    socket = importlib.import_module("chainlit.socket")
    # Only the patch's own asyncio: the test servers' threads sleep through the real one.
    monkeypatch.setattr(chainlit_patches, "asyncio", types.SimpleNamespace(sleep=sleep))
    assert await socket.asyncio.sleep(0.001, "r") == "r"
    await socket.asyncio.sleep(3600)
    assert asked == [0, 3600]
    assert socket.asyncio.create_task is asyncio.create_task
    assert socket.asyncio.CancelledError is asyncio.CancelledError


def test_chainlit_stores_a_message_before_on_message_in_the_handlers_patch_5_wraps() -> None:
    """Patch 4 refuses a message before these handlers run: they store it first."""
    from chainlit.emitter import ChainlitEmitter

    originals = {}
    for event in ("client_message", "edit_message"):
        handler = sio.handlers["/"][event]
        originals[event] = getattr(handler, "__wrapped__", handler)  # Chainlit's
        assert list(inspect.signature(originals[event]).parameters) == ["sid", "payload"]
        assert originals[event].__module__ == "chainlit.socket"
    assert "process_message(session, payload)" in source(originals["client_message"])
    assert "message._create()" in source(ChainlitEmitter.process_message)
    assert "await message.update()" in source(originals["edit_message"])


async def _spooled(size: int) -> bool:
    """Whether Starlette's form parser put a ``size``-byte upload in a temporary file on
    disk (``SpooledTemporaryFile._rolled``: the standard library has no public name for it)."""
    from starlette.requests import Request

    head = b'--b\r\nContent-Disposition: form-data; name="file"; filename="p.jpg"\r\n\r\n'
    body = head + b"\xff" * size + b"\r\n--b--\r\n"
    chunks = [body[i : i + 65536] for i in range(0, len(body), 65536)]

    async def receive() -> dict[str, object]:
        return {"type": "http.request", "body": chunks.pop(0), "more_body": bool(chunks)}

    headers = [(b"content-type", b"multipart/form-data; boundary=b")]
    request = Request({"type": "http", "method": "POST", "headers": headers}, receive)
    upload = (await request.form())["file"]
    assert not isinstance(upload, str)
    try:
        assert len(await upload.read()) == size
        return bool(upload.file._rolled)  # type: ignore[attr-defined]
    finally:
        await upload.close()


async def test_an_upload_within_the_limit_is_parsed_in_memory_and_a_larger_one_on_disk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Patch 7: a 1.5 MB photo no longer rolls over Starlette's 1 MB spool to disk."""
    from starlette.formparsers import MultiPartParser

    # Starlette's default (``spool_max_size = 1024 * 1024`` in starlette/formparsers.py):
    # an app imported by an earlier test in this process may have applied patch 7 already.
    monkeypatch.setattr(MultiPartParser, "spool_max_size", 1024 * 1024)
    photo = 1_500_000
    assert await _spooled(photo)  # Starlette's own spool: to disk past 1 MB
    chainlit_patches.parse_uploads_in_memory(2 * photo)
    assert not await _spooled(photo)
    assert await _spooled(2 * photo + 1)
    with pytest.raises(ValueError):
        chainlit_patches.parse_uploads_in_memory(0)
