"""What ui/chainlit_patches.py relies on in Chainlit: each test fails when the pinned
Chainlit changes, or when an object a patch changes is no longer shaped as the patch
assumes. A failure here means: read that patch's comment, check it against the new
Chainlit, and change or delete it."""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import version
from pathlib import Path

from fastapi import FastAPI
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
    """Patch 2 wraps ``WebsocketSession.persist_file`` and reads ``user_sessions``."""
    from chainlit import server
    from chainlit.session import WebsocketSession
    from chainlit.user_session import user_sessions

    assert isinstance(user_sessions, dict)
    parameters = list(inspect.signature(inspect.unwrap(WebsocketSession.persist_file)).parameters)
    assert parameters == ["self", "name", "mime", "path", "content"]
    assert "self.files[file_id] = {" in source(WebsocketSession.persist_file)
    assert "await session.persist_file(" in source(server.upload_file)


def test_every_request_still_checks_its_user_through_authenticate_user_by_name() -> None:
    """Patch 3 wraps ``chainlit.auth.authenticate_user``, reached by its module-level name."""
    import chainlit.auth as chainlit_auth
    from chainlit import socket

    assert "return await authenticate_user(token)" in source(chainlit_auth.get_current_user)
    assert "await get_current_user(token=token)" in source(socket._authenticate_connection)
    checked = source(chainlit_auth.authenticate_user)
    assert "except Exception" in checked and "return user" in checked  # a failing get_user
    assert list(inspect.signature(inspect.unwrap(chainlit_auth.authenticate_user)).parameters) == [
        "token"
    ]


def test_chainlits_page_route_is_still_its_last_and_answers_every_path() -> None:
    """Patch 4 moves the app's routes in front of it."""
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


def test_the_sql_data_layer_still_makes_its_own_engine_and_session_maker() -> None:
    """Patch 5 rebinds ``engine`` and ``async_session`` after the constructor."""
    from chainlit.data.sql_alchemy import SQLAlchemyDataLayer

    constructor = source(SQLAlchemyDataLayer.__init__)
    assert "self.engine: AsyncEngine = create_async_engine(" in constructor
    assert "self.async_session = sessionmaker(" in constructor
    assert "async with self.async_session() as session" in source(SQLAlchemyDataLayer.execute_sql)
    assert list(inspect.signature(SQLAlchemyDataLayer.__init__).parameters)[:5] == [
        "self",
        "conninfo",
        "connect_args",
        "ssl_require",
        "storage_provider",
    ]
