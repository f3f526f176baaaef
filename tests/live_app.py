"""The real app as a subprocess, with sign-in and its own data, restartable; for tests that
stop its database, kill it, or drive it over raw socket.io (bench/harness.py's ``Tab``).

:class:`LiveApp` copies the app's files into a folder of its own (Chainlit deletes its
``./.files`` when it stops), adds users with the store's own code, and runs ``chainlit run
app.py`` there against a scripted server (:func:`scripted_server`, which records the
requests it gets). :func:`signed_in` signs in over HTTP as the sign-in page does (``POST
/login``) and returns the cookies a tab sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.harness import Tab
from serving.ui_main import ui_command
from tests.conftest import free_port, wait_for_200

ROOT = Path(__file__).resolve().parent.parent
APP_FILES = (
    "app.py", "backend", "ui", "public", ".chainlit", "chainlit.md", "chainlit_zh-CN.md",
    "serving",  # the UI's entry point, serving/ui_main.py
)  # fmt: skip
"""What ``chainlit run`` needs from the repository, copied into a UI's own directory."""
LOGS = ROOT / "artifacts" / "logs"


def copy_app(workdir: Path) -> None:
    """Copy :data:`APP_FILES` into ``workdir`` (the folder a ``chainlit run`` runs in).

    Copies, not links: Chainlit refuses files that resolve outside its root.
    """
    for name in APP_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, workdir / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, workdir / name)


def add_users(workdir: Path, env: dict[str, str], users: dict[str, str]) -> None:
    """Add each name with its password to the store the app in ``workdir`` opens with
    ``env`` (the store's own code, as the CLI adds them)."""
    script = (
        "import asyncio, json, sys\n"
        "from backend.settings import Settings\n"
        "from backend.store.core import open_store\n"
        "store, _ = open_store(Settings())\n"
        "async def add():\n"
        "    for name, password in json.load(sys.stdin).items():\n"
        "        await store.users.add(name, password)\n"
        "    await store.close()\n"
        "asyncio.run(add())\n"
    )
    subprocess.run(
        [sys.executable, "-c", script], input=json.dumps(users), text=True, check=True,
        cwd=workdir, env=env, timeout=60,
    )  # fmt: skip


@dataclass
class Process:
    """A subprocess with its log file; stopped by :meth:`stop`."""

    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self) -> None:
        """Terminate the process (kill it after 10 s)."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()


def spawn(
    name: str, args: list[str], env: dict[str, str] | None = None, cwd: Path = ROOT
) -> Process:
    """Start ``args`` in ``cwd``, output to ``artifacts/logs/<name>.log``."""
    LOGS.mkdir(parents=True, exist_ok=True)
    log = LOGS / f"{name}.log"
    with log.open("wb") as out:
        popen = subprocess.Popen(
            args, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
    return Process(popen, log)


def wait_http(url: str, process: Process, timeout_s: float = 60) -> None:
    """Wait until ``url`` answers 200; fail with the process log if it dies or times out."""

    def alive() -> None:
        if process.popen.poll() is not None:
            pytest.fail(f"{process.log.name} exited:\n{process.log.read_text()[-3000:]}")

    if not wait_for_200(url, timeout_s, check=alive):
        pytest.fail(f"{url} not ready after {timeout_s} s:\n{process.log.read_text()[-3000:]}")


@contextmanager
def scripted_server(*models: str) -> Iterator[str]:
    """The scripted Kimi-VL server (tests/fakes/kimi_server.py), recording its requests;
    yields its root URL (``http://127.0.0.1:<port>``; the API is under ``/v1``)."""
    port = free_port()
    args = [sys.executable, "-m", "tests.fakes.kimi_server", "--port", str(port)]
    for model in models:
        args += ["--model", model]
    server = spawn(f"scripted-{port}", args)
    try:
        wait_http(f"http://127.0.0.1:{port}/health", server)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


def requests_seen(server_url: str) -> list[dict[str, Any]]:
    """Chat completion request bodies the scripted server at ``server_url`` received."""
    found: list[dict[str, Any]] = httpx.get(f"{server_url}/debug/requests").json()["requests"]
    return found


class LiveApp:
    """``chainlit run app.py`` in ``workdir`` with its own data, restartable.

    Args:
        workdir: an empty folder; the app's files are copied into it.
        server_url: the scripted server's root URL.
        database_url: ``KIMI_DATABASE_URL`` ("" = SQLite in ``data_dir``).
        data_dir: ``KIMI_DATA_DIR`` (default ``workdir/data``).
        users: name -> password of the users to add (at least one: sign-in on).
        env: more environment for the app (``KIMI_*`` settings).
    """

    def __init__(
        self,
        workdir: Path,
        server_url: str,
        *,
        database_url: str = "",
        data_dir: Path | None = None,
        users: dict[str, str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        copy_app(workdir)
        self.workdir = workdir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.data_dir = data_dir or workdir / "data"
        self.database_url = database_url or f"sqlite+aiosqlite:///{self.data_dir / 'chat.db'}"
        """Where the app stores its chats (a SQLAlchemy async URL)."""
        self.env = {
            "KIMI_BASE_URL": f"{server_url}/v1",
            "KIMI_DATA_DIR": str(self.data_dir),
            "KIMI_DATABASE_URL": database_url,
            "KIMI_APP_LOG": str(workdir / "app.log"),
            "CHAINLIT_AUTH_SECRET": secrets.token_urlsafe(48),
            "PYTHONPATH": str(workdir),
            **(env or {}),
        }
        self.process: Process | None = None
        self.starts = 0
        if users:
            self.add_users(users)

    @property
    def app_log(self) -> Path:
        """The app's own log (``KIMI_APP_LOG``)."""
        return self.workdir / "app.log"

    @property
    def output(self) -> str:
        """What the running (or last) process wrote to stdout and stderr."""
        return self.process.log.read_text(errors="replace") if self.process else ""

    def add_users(self, users: dict[str, str]) -> None:
        """Add each name with its password (:func:`add_users`)."""
        add_users(self.workdir, {**os.environ, **self.env}, users)

    def start(self) -> None:
        """Start the app and wait until its page answers."""
        self.starts += 1
        name = f"live-{self.port}-{self.starts}"
        command = ui_command("127.0.0.1", self.port)
        self.process = spawn(name, command, self.env, self.workdir)
        wait_http(f"{self.url}/", self.process, timeout_s=90)

    def kill(self) -> None:
        """``kill -9``: no clean-up of any kind."""
        assert self.process is not None
        self.process.popen.kill()
        self.process.popen.wait()

    def stop(self) -> None:
        """Stop the app (SIGTERM)."""
        if self.process is not None:
            self.process.stop()


def signed_in(app_url: str, name: str, password: str) -> dict[str, str]:
    """The cookies of a browser in which ``name`` signed in (``POST /login``, as the page
    does): Chainlit's ``access_token`` and the app's browser cookie.

    Raises:
        httpx.HTTPStatusError: the sign-in was refused.
    """
    with httpx.Client(base_url=app_url, timeout=30) as http:
        page = http.get("/")
        answer = http.post("/login", data={"username": name, "password": password})
        answer.raise_for_status()
        return {**dict(page.cookies.items()), **dict(answer.cookies.items())}


REFUSED_BUSY = "answers running or waiting"
"""Words of the sentence with which the app refuses an answer past a bound
(backend/fair_use.py, ``Busy``)."""


@asynccontextmanager
async def asked_at_once(tabs: list[Tab], question: str, each: int = 3) -> AsyncIterator[None]:
    """Ask ``each`` questions at once in each of ``tabs`` (opened), then wait 3 s, by which
    every message is taken (running or waiting) or refused (milliseconds each); on exit,
    stop every answer and close every tab."""
    async with contextlib.AsyncExitStack() as leaving:  # each tab closed, whatever fails
        for tab in tabs:
            leaving.push_async_callback(tab.close)
            leaving.push_async_callback(tab.sio.emit, "stop")
        for n in range(each):
            for tab in tabs:
                await tab.send(f"{n}: {question}")
        await asyncio.sleep(3)
        yield


def refused(tabs: list[Tab]) -> int:
    """How many of ``tabs``' messages were refused with the sentence of a bound
    (:data:`REFUSED_BUSY`)."""
    said = [str(m.get("output")) for tab in tabs for m in tab._messages.values()]
    return sum(REFUSED_BUSY in s for s in said)
