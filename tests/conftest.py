"""Shared fixtures: hermetic settings, the scripted Kimi-VL stream server on a real socket,
chat sessions with their borrowed resources, the store on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import uvicorn

from backend.chat import ChatSession
from backend.client import ChatClient
from backend.resources import Server
from backend.settings import Settings
from backend.uploads import MediaWorkers
from bench.harness import hermetic_environ
from tests.fakes.kimi_server import KimiServer

if TYPE_CHECKING:
    from backend.store.core import Store
    from tests.pg import PgServer
    from ui.datalayer import KimiDataLayer

DATA = Path(__file__).parent / "data"

# Hermetic settings: no developer .env, no KIMI_* from the shell; the app's request
# log goes to a temporary file, never into the checkout. Done at import, before any
# test module imports app.py (whose Settings() is read at import) or Chainlit (which
# loads CHAINLIT_ENV_FILE, by default the working directory's .env, into os.environ).
# Processes the tests start inherit this environment: their settings file (the app's
# KIMI_ENV_FILE, Chainlit's CHAINLIT_ENV_FILE) is one that does not exist. The same
# environment as a benchmark's app gets (bench/harness.py, hermetic_environ).
Settings.model_config["env_file"] = None
TEST_LOGS = Path(tempfile.mkdtemp(prefix="kimi-test-logs-"))
_HERMETIC = hermetic_environ(KIMI_APP_LOG=str(TEST_LOGS / "app.log"))
os.environ.clear()
os.environ.update(_HERMETIC)


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def stored(url: str, sql: str) -> list[Any]:
    """Rows of ``sql`` on the database at ``url`` (SQLite or PostgreSQL), read with a
    connection of the test's own, not the app's."""
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url)
    try:
        async with engine.connect() as db:
            return list((await db.execute(text(sql))).all())
    finally:
        await engine.dispose()


def _keep_waiting() -> None:
    """The default ``check`` of :func:`wait_for_200`: never gives up early."""


def wait_for_200(
    url: str,
    timeout_s: float,
    *,
    interval_s: float = 0.1,
    check: Callable[[], None] = _keep_waiting,
) -> bool:
    """Poll ``url`` until it answers HTTP 200 (True) or ``timeout_s`` seconds pass (False).

    ``check`` runs before each attempt and raises to give up early, e.g. when the
    process that should answer has exited. Each attempt waits at most 2 s.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        check()
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(interval_s)
    return False


@dataclass
class RunningFake:
    """A scripted server running in a thread."""

    server: KimiServer
    base_url: str

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Request bodies received so far."""
        return self.server.requests

    def reset(self) -> None:
        """Forget recorded requests."""
        self.server.requests.clear()
        self.server.headers.clear()
        self.server.aborted.clear()
        self.server.tokenize_mode = "json-length"
        self.server.reasoning_parser = False
        self.server.probes = 0


@contextmanager
def in_thread(app: Any, port: int | None = None) -> Iterator[str]:
    """Serve the ASGI ``app`` with uvicorn in a thread on 127.0.0.1:``port`` (default a
    free one) until the block ends; yields its root URL once the server has started.

    Fails the test if it has not started within 10 s.
    """
    port = port or free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail(f"uvicorn did not start on port {port} within 10 s")
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=5)


@contextmanager
def serving(fake: KimiServer, port: int | None = None) -> Iterator[RunningFake]:
    """Run ``fake`` on ``port`` (default a free one) in a thread until the block ends."""
    with in_thread(fake.app(), port) as root:
        if not wait_for_200(f"{root}/health", 10, interval_s=0.05):
            pytest.fail("the scripted server did not answer /health within 10 s")
        yield RunningFake(fake, f"{root}/v1")


@pytest.fixture(scope="session")
def kimi_server() -> Iterator[RunningFake]:
    """The scripted server (serving ``kimi-vl-thinking-2506``), started once."""
    with serving(KimiServer(max_model_len=8192)) as running:
        yield running


@pytest.fixture(scope="session")
def instruct_server() -> Iterator[RunningFake]:
    """A second scripted server, serving only Instruct (``kimi-vl``)."""
    with serving(KimiServer(model="kimi-vl", max_model_len=8192)) as running:
        yield running


@pytest.fixture(scope="session")
def two_models() -> Iterator[RunningFake]:
    """A scripted server serving Thinking-2506 first, then Instruct (``kimi-vl``)."""
    with serving(KimiServer(max_model_len=8192, extra_models=("kimi-vl",))) as running:
        yield running


@pytest.fixture
def fake(kimi_server: RunningFake) -> RunningFake:
    """The scripted server with no recorded requests."""
    kimi_server.reset()
    return kimi_server


SessionFactory = Callable[[Settings], ChatSession]


@pytest.fixture
async def make_session() -> AsyncIterator[SessionFactory]:
    """Build chat sessions as the app does; their client and workers are closed after."""
    owned: list[tuple[ChatClient, MediaWorkers]] = []

    def make(settings: Settings) -> ChatSession:
        client, workers = ChatClient.from_settings(settings), MediaWorkers()
        owned.append((client, workers))
        return ChatSession.create(settings, Server.of(client, settings), workers)

    yield make
    for client, workers in owned:
        await client.aclose()
        workers.close()


@pytest.fixture(autouse=True)
def chainlit_files_folder() -> None:
    """Chainlit makes ``./.files`` once, at import, and a ``chainlit run`` that stops
    deletes it (the launch.sh tests run the UI in the repository): make it again for
    the in-process handler tests that store uploads there."""
    config = sys.modules.get("chainlit.config")
    if config is not None:
        config.FILES_DIRECTORY.mkdir(exist_ok=True)


# --- the store, on SQLite and on a throwaway PostgreSQL (tests/pg.py) -------------------


@pytest.fixture(scope="session")
def postgres() -> Iterator[PgServer]:
    """A throwaway PostgreSQL cluster for the session (started on first use)."""
    from tests.pg import start_postgres

    server = start_postgres()
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def settings(request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    """Settings whose store is a SQLite file in ``tmp_path`` or a new PostgreSQL database."""
    url = ""
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres").create_database()
    return Settings(data_dir=str(tmp_path / "data"), database_url=url)


@pytest.fixture
async def store(settings: Settings) -> AsyncIterator[Store]:
    """The store of ``settings``, checked and migrated; closed after the test."""
    from backend.store.core import Store

    opened = Store(settings)
    await opened.check()
    yield opened
    await opened.close()


@pytest.fixture
async def layer(store: Store) -> KimiDataLayer:
    """Chainlit's data layer on ``store``, files in its file store."""
    from ui.datalayer import KimiDataLayer
    from ui.files import FilesStorageClient

    return KimiDataLayer(store, FilesStorageClient(store.files))


async def rows(store: Store, sql: str, **params: Any) -> list[dict[str, Any]]:
    """The rows ``sql`` returns, as dicts (read with plain SQL, not through Chainlit)."""
    from sqlalchemy import text

    async with store.engine.connect() as db:
        return [dict(r) for r in (await db.execute(text(sql), params)).mappings().all()]
