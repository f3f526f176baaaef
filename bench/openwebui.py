"""The peer, Open WebUI 0.12.4: installed, run offline, and driven as its browser drives it.

Benchmarks measure the app side by side with Open WebUI, in the same run, against
the same scripted server (``tests/fakes/kimi_server.py``). This module is the
shared harness; nothing in the tests or CI uses it (CI never installs Open WebUI).

Install (once; 11.5 minutes and 2.9 GB here on 2026-12-01, pip's output in
``artifacts/openwebui-install.log``)::

    .venv/bin/python -m bench.openwebui install

Run it in a bench script::

    from bench.harness import PACED_END, question, scripted_server
    from bench.openwebui import OpenWebUITab, running_openwebui

    with scripted_server() as base_url, running_openwebui(base_url) as peer:
        peer.url, peer.pid, peer.model, peer.token, peer.ready_s
        async with httpx.AsyncClient() as http:
            tab = OpenWebUITab(peer, http)
            await tab.open()
            timing = await tab.ask(question("paced"), PACED_END)  # bench.harness.Timing
            await tab.close()

A real browser tab, signed in and ready to type (Playwright)::

    context = browser.new_context(storage_state=peer.storage_state())
    page = context.new_page(); page.goto(peer.url)
    page.locator("#chat-input").click(); page.keyboard.type(text); page.keyboard.press("Enter")

(the message box is ``#chat-input``; Enter sends. The page asks for nothing off
this machine: a real tab requested no other host.)

Try it by hand: ``.venv/bin/python -m bench.openwebui smoke`` starts the scripted
server and Open WebUI, asks twice in one chat through the browser's path and prints
the timings.

How Open WebUI's browser sends a message (read in its 0.12.4 wheel: the built
frontend ``open_webui/frontend/_app/immutable/...`` and the backend
``open_webui/main.py``, ``socket/main.py``, ``utils/middleware.py``), which
:class:`OpenWebUITab` does too:

1. The page opens a socket.io connection (path ``/ws/socket.io``, transport
   ``websocket``, ``auth={"token": <JWT>}``) and emits ``user-join`` with the
   same token; the server puts the socket in the room ``user:<id>``.
2. Enter POSTs ``/api/chat/completions`` (``Authorization: Bearer <JWT>``) with
   the new ``user_message``, the assistant message's ``id`` (and ``message_ids``),
   ``parent_id`` (``null`` for a new chat, so the server creates it; then the
   last answer's id), ``chat_id`` (from the second turn on), ``session_id`` (the
   socket's id), ``model_item`` (the model as ``/api/models`` lists it) and
   ``background_tasks``, but no ``messages``: the server reads the conversation
   from the stored chat. With ``session_id`` and a chat it answers at once with
   JSON (``{"status": true, "task_ids": [...], "chat_id": ...}``) and streams
   the answer in a background task. The page then joins the chat's room
   (``events:chat`` ``join``), reports the model in use (``usage``) and reloads
   its sidebar on each ``chat:list`` event.
3. The answer arrives over the socket as ``events`` messages to the user's room,
   ``{"chat_id", "message_id", "data": {"type", "data"}}``: ``response:completion``
   with ``response.output_text.delta`` / ``response.reasoning_text.delta`` deltas
   (one per server chunk), ``chat:completion`` with an ``output`` snapshot when a
   reasoning tag (Kimi-VL's opening marker is among its defaults) opens or closes, and last
   ``chat:completion`` with ``done: true`` and the final ``output``.

So a person sees the first words at the first event of the message that carries
text (a delta, or a snapshot with text or a reasoning item: the "Thinking"
block), and the last ones at the last such event. The SSE stream of
``/api/chat/completions`` is the path only for callers without a socket (API
clients), not for the browser. All of this was checked against a real tab
(Debian's chromium through Playwright, ``storage_state`` below): its request
body and socket frames, and Open WebUI's log of the page's requests.

Pitfalls: every socket of one user gets every chat's events (the room is the
user's), so N concurrent chats as one user cost N² deliveries; load benchmarks
give each chat its own user (:meth:`Peer.add_user`), as N people would be.
Title, tag and follow-up generation are off unless ``tasks=True``: each would be
one more completion on the scripted server after every answer (with the
scenario tag in its prompt, so a whole scripted answer each). A reused
``data_dir`` keeps the settings of its first start (Open WebUI stores them in its
database): the connection is pointed at ``base_url`` again on every start, but
``tasks`` only counts in a new folder. Under load it starts slowly (more than
5 minutes at a load average of 15 on 2 cores); ``ready_timeout_s`` is 10 minutes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import socketio

from bench.harness import ROOT, Timing, free_port, started, tree_cpu_s, wait_ready

VERSION = "0.12.4"
"""The Open WebUI release the project measures itself against (the brief's peer)."""
VENV = ROOT / ".venv-openwebui"
"""Open WebUI's own virtual environment (git-ignored), apart from the app's ``.venv``."""
TORCH = "torch==2.13.0"
"""Installed before Open WebUI so its ``sentence-transformers`` finds a torch already there:
this machine's pip takes 2.13.0 from its CPU wheel on disk, where an open range would pull a
CUDA build of several GB from the registry (the machine's notes on PyTorch)."""
INSTALL_LOG = ROOT / "artifacts" / "openwebui-install.log"
ADMIN_EMAIL = "admin@bench.local"


# --------------------------------------------------------------------------- install


@dataclass(frozen=True)
class Installed:
    """An Open WebUI environment: where it is and what it cost.

    Attributes:
        venv: the virtual environment's folder.
        seconds: wall time of the install (NaN if it was there already).
        size_mb: the folder's size on disk in MB (MiB).
    """

    venv: Path
    seconds: float
    size_mb: float


def folder_mb(path: Path) -> float:
    """Bytes on disk under ``path`` (``du``: allocated blocks), in MB (MiB)."""
    out = subprocess.run(["du", "-sk", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0]) / 1024


def _pip(venv: Path, log: Path, *args: str) -> None:
    with log.open("a") as out:
        out.write(f"$ pip install {' '.join(args)}\n")
        out.flush()
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "pip", "install", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    if done.returncode:
        raise RuntimeError(f"pip install {' '.join(args)} failed: see {log}")


def install(venv: Path = VENV, log: Path = INSTALL_LOG, force: bool = False) -> Installed:
    """Create ``venv`` with ``open-webui==VERSION`` from the registry (pip's output in ``log``).

    Torch goes first (:data:`TORCH`). Nothing is done if ``venv`` already has the
    ``open-webui`` command, unless ``force`` (then the folder is made anew).

    Raises:
        RuntimeError: a pip step failed (its output is in ``log``).
    """
    if (venv / "bin" / "open-webui").exists() and not force:
        return Installed(venv, float("nan"), folder_mb(venv))
    shutil.rmtree(venv, ignore_errors=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    _pip(venv, log, TORCH)
    _pip(venv, log, f"open-webui=={VERSION}")
    return Installed(venv, time.monotonic() - started, folder_mb(venv))


# --------------------------------------------------------------------------- run


@dataclass
class Peer:
    """A running Open WebUI, signed in as its admin.

    Attributes:
        url: where it listens (``http://127.0.0.1:<port>``).
        token: the admin's session JWT: ``Authorization: Bearer`` for HTTP
            clients, the ``token`` cookie and ``localStorage.token`` for a browser.
        model: the id of the first model it lists from the server (the scripted
            server's ``kimi-vl-thinking-2506``).
        model_item: that model as ``/api/models`` lists it (the browser sends it along).
        process: the ``open-webui serve`` process (uvicorn in it, one worker).
        ready_s: seconds from starting the process to the first HTTP 200 of ``/``.
        ready_cpu_s: CPU seconds the process (and any children) had used by then.
        log: the process's stdout and stderr.
    """

    url: str
    token: str
    model: str
    model_item: dict[str, Any]
    process: subprocess.Popen[bytes]
    ready_s: float
    ready_cpu_s: float
    log: Path

    @property
    def pid(self) -> int:
        """The process id (CPU and RSS with psutil: everything runs in this process)."""
        return self.process.pid

    def storage_state(self) -> dict[str, Any]:
        """A Playwright ``storage_state``: a context made with it opens the app signed in.

        The frontend reads ``localStorage.token``; the server also accepts the
        ``token`` cookie (set by sign-in, httpOnly) for page loads and files.
        """
        host = httpx.URL(self.url).host
        cookie: dict[str, Any] = {"name": "token", "value": self.token, "domain": host}
        cookie |= {"path": "/", "expires": -1, "httpOnly": True, "secure": False, "sameSite": "Lax"}
        local = [{"name": "token", "value": self.token}]
        return {"cookies": [cookie], "origins": [{"origin": self.url, "localStorage": local}]}

    async def add_user(self, http: httpx.AsyncClient, name: str) -> str:
        """A new user (``POST /api/v1/auths/add``, as the admin panel does); their token.

        Raises:
            httpx.HTTPStatusError: Open WebUI refused.
        """
        form = {"name": name, "email": f"{name}@bench.local", "password": secrets.token_hex(8)}
        response = await http.post(
            f"{self.url}/api/v1/auths/add",
            json={**form, "role": "user"},
            headers={"Authorization": f"Bearer {self.token}"},
        )
        response.raise_for_status()
        token: str = response.json()["token"]
        return token


def openwebui_env(
    base_url: str, api_key: str, data_dir: Path, password: str, tasks: bool
) -> dict[str, str]:
    """Open WebUI's environment: offline, one OpenAI connection, an admin, nothing else.

    Names from Open WebUI 0.12.4's ``env.py`` and ``config.py``. The embedding
    model is off (``RAG_EMBEDDING_MODEL=""``): its default, all-MiniLM-L6-v2, comes
    from a model hub, which this machine cannot reach, and chats do not use it.
    Telemetry and update checks are off (the closed network would refuse them).
    """
    inherited = {
        k: v for k, v in os.environ.items() if not k.startswith(("KIMI_", "OPENAI_", "OLLAMA_"))
    }
    switch = str(tasks)
    return {
        **inherited,
        "DATA_DIR": str(data_dir),
        "OFFLINE_MODE": "true",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "ENABLE_VERSION_UPDATE_CHECK": "false",
        "ANONYMIZED_TELEMETRY": "false",
        "SCARF_NO_ANALYTICS": "true",
        "DO_NOT_TRACK": "true",
        "RAG_EMBEDDING_MODEL": "",
        "ENABLE_OLLAMA_API": "false",
        "OPENAI_API_BASE_URL": base_url,
        "OPENAI_API_KEY": api_key,
        "WEBUI_AUTH": "true",
        "WEBUI_SECRET_KEY": secrets.token_urlsafe(32),
        "WEBUI_ADMIN_EMAIL": ADMIN_EMAIL,
        "WEBUI_ADMIN_PASSWORD": password,
        "BYPASS_MODEL_ACCESS_CONTROL": "true",  # users added by add_user see the model
        "ENABLE_TITLE_GENERATION": switch,
        "ENABLE_TAGS_GENERATION": switch,
        "ENABLE_FOLLOW_UP_GENERATION": switch,
        "USER_AGENT": "kimi-vl-chat-bench",
    }


def sign_in(url: str, password: str) -> str:
    """The admin's session token (``POST /api/v1/auths/signin``, the sign-in form's call)."""
    response = httpx.post(
        f"{url}/api/v1/auths/signin", json={"email": ADMIN_EMAIL, "password": password}
    )
    response.raise_for_status()
    token: str = response.json()["token"]
    return token


def connect(url: str, token: str, base_url: str, api_key: str) -> None:
    """Point Open WebUI's one OpenAI connection at ``base_url`` (the admin panel's call,
    ``POST /openai/config/update``).

    Needed when ``DATA_DIR`` is reused: the connection saved in its database at the
    first start wins over ``OPENAI_API_BASE_URL`` (``ENABLE_PERSISTENT_CONFIG``, on
    by default and left on: with it off, every setting is read from memory instead
    of the database, which is not how Open WebUI runs).
    """
    form = {"ENABLE_OPENAI_API": True, "OPENAI_API_CONFIGS": {}}
    form |= {"OPENAI_API_BASE_URLS": [base_url], "OPENAI_API_KEYS": [api_key]}
    response = httpx.post(
        f"{url}/openai/config/update", json=form, headers={"Authorization": f"Bearer {token}"}
    )
    response.raise_for_status()


def seen_release_notes(url: str, token: str) -> None:
    """Mark this version's "What's New" dialog as read for the token's user, as its
    "Okay, Let's Go!" button does (``POST /api/v1/users/user/settings/update`` with
    ``{"ui": {"version": ...}}``): it opens over the chat for an admin otherwise."""
    response = httpx.post(
        f"{url}/api/v1/users/user/settings/update",
        json={"ui": {"version": VERSION}},
        headers={"Authorization": f"Bearer {token}"},
    )
    response.raise_for_status()


def listed_model(url: str, token: str, timeout_s: float = 30) -> dict[str, Any]:
    """The first model ``/api/models`` lists (Open WebUI asks the server's ``/models``).

    Raises:
        RuntimeError: none listed within ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = httpx.get(
            f"{url}/api/models", headers={"Authorization": f"Bearer {token}"}, timeout=10
        )
        response.raise_for_status()
        if models := response.json()["data"]:
            first: dict[str, Any] = models[0]
            return first
        time.sleep(0.5)
    raise RuntimeError(f"{url} lists no model after {timeout_s} s")


def admin_password(data_dir: Path) -> str:
    """The admin's password of the Open WebUI whose data is ``data_dir``: made on its
    first start and kept there (``bench-admin-password``, mode 600), as the admin is
    created only when no user exists yet."""
    path = data_dir / "bench-admin-password"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(12))
    return path.read_text()


@contextmanager
def running_openwebui(
    base_url: str,
    api_key: str = "",
    port: int | None = None,
    tasks: bool = False,
    data_dir: Path | None = None,
    venv: Path = VENV,
    ready_timeout_s: float = 600,
) -> Iterator[Peer]:
    """Open WebUI running offline in front of the OpenAI-compatible ``base_url``.

    Yields once ``/`` answers 200, the admin is signed in and a model is
    listed; stops the process on exit.

    Args:
        base_url: the server's OpenAI base URL (``http://127.0.0.1:N/v1``).
        api_key: its key ("" for the scripted server); passed in the environment.
        port: where Open WebUI listens (default: a free port).
        tasks: leave title, tag and follow-up generation on (Open WebUI's default).
        data_dir: its ``DATA_DIR`` (SQLite database, uploads, its log
            ``openwebui.log``), kept for a later start; default a temporary folder,
            removed afterwards (every start is then a first start: it creates and
            migrates its database).
        venv: where :func:`install` put it.
        ready_timeout_s: how long to wait for ``/``.

    Raises:
        FileNotFoundError: not installed.
        RuntimeError: not ready in time, or it exited (the end of its log in the message).
    """
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    with ExitStack() as exits:
        if data_dir is None:
            data_dir = Path(exits.enter_context(tempfile.TemporaryDirectory(prefix="openwebui-")))
        data_dir.mkdir(parents=True, exist_ok=True)
        password, log = admin_password(data_dir), data_dir / "openwebui.log"
        env = openwebui_env(base_url, api_key, data_dir, password, tasks)
        command = venv / "bin" / "open-webui"
        if not command.exists():
            raise FileNotFoundError(f"{command}: run `python -m bench.openwebui install` first")
        begun = time.monotonic()
        serve = [str(command), "serve", "--host", "127.0.0.1", "--port", str(port)]
        process = exits.enter_context(started(serve, env, log, cwd=data_dir))
        wait_ready(f"{url}/", process, ready_timeout_s, log)
        ready_s, ready_cpu_s = time.monotonic() - begun, tree_cpu_s(process.pid)
        token = sign_in(url, password)
        seen_release_notes(url, token)
        connect(url, token, base_url, api_key)
        item = listed_model(url, token)
        yield Peer(url, token, str(item["id"]), item, process, ready_s, ready_cpu_s, log)


# --------------------------------------------------------------------------- chat driver


def shows_text(data: dict[str, Any]) -> bool:
    """Whether an ``events`` payload of a message shows text to a person.

    A delta with text, or an ``output`` snapshot with a reasoning item (the
    "Thinking" block opens) or any text.
    """
    if isinstance(data.get("delta"), str):
        return bool(data["delta"])
    return any(
        item.get("type") == "reasoning" or item_text(item) for item in data.get("output") or []
    )


def item_text(item: dict[str, Any]) -> str:
    """The text of one ``output`` item (a message's or a reasoning's content parts)."""
    parts = item.get("content") or []
    return "".join(p.get("text", "") for p in parts if isinstance(p, dict))


@dataclass
class OpenWebUITab:
    """One browser tab of Open WebUI: its socket and its chat, as its frontend drives them.

    Use :meth:`open`, then :meth:`ask` as often as wanted (one chat, turn after
    turn), then :meth:`close`. ``token`` is whose tab it is (default the admin's;
    give each concurrent chat a user of its own: :meth:`Peer.add_user`).

    ``refreshes``: the page's own requests during a turn, made as it makes them:
    on each ``chat:list`` event the sidebar reloads (``GET /api/v1/chats/?page=1``
    and ``/api/v1/chats/pinned``), and a new chat is loaded once
    (``GET /api/v1/chats/<id>``). A real tab made 10 such requests in its first
    turn (Open WebUI's log); off, only the chat itself is measured.
    """

    peer: Peer
    http: httpx.AsyncClient
    token: str = ""
    refreshes: bool = True
    sio: socketio.AsyncClient = field(default_factory=socketio.AsyncClient)
    user: dict[str, Any] = field(default_factory=dict)
    """``{"id", "name"}`` of whose tab it is (``GET /api/v1/auths/``, as the page loads)."""
    chat_id: str | None = None
    parent_id: str | None = None
    """The last assistant message's id (the next user message's parent)."""
    _message_id: str = ""
    _seen: list[float] = field(default_factory=list)
    _final: dict[str, Any] = field(default_factory=dict)
    _done: asyncio.Event = field(default_factory=asyncio.Event)
    _background: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    async def open(self, timeout_s: float = 30) -> None:
        """Load whose tab it is, connect the socket with the token and join (``user-join``).

        The join is awaited (its acknowledgement), where the page fires it and
        goes on: so the socket is in the user's room before the first message.
        """
        self.token = self.token or self.peer.token
        me = await self.http.get(f"{self.peer.url}/api/v1/auths/", headers=self._auth)
        me.raise_for_status()
        self.user = {"id": me.json()["id"], "name": me.json()["name"]}
        self.sio.on("events", self._on_event)
        await self.sio.connect(
            self.peer.url,
            socketio_path="/ws/socket.io",
            transports=["websocket"],
            auth={"token": self.token},
            wait_timeout=timeout_s,
        )
        await self.sio.call("user-join", {"auth": {"token": self.token}}, timeout=timeout_s)

    async def _on_event(self, event: dict[str, Any]) -> None:
        kind, data = event["data"].get("type"), event["data"].get("data") or {}
        if kind == "chat:list" and self.refreshes:
            self._refresh("/api/v1/chats/?page=1", "/api/v1/chats/pinned")
        if event.get("message_id") != self._message_id or not self._message_id:
            return
        if kind not in ("chat:completion", "response:completion"):
            return
        if shows_text(data):
            self._seen.append(time.perf_counter())
        if data.get("done") or data.get("error"):
            self._final = data
            self._done.set()

    def _refresh(self, *paths: str) -> None:
        """GET ``paths`` in the background, as the page's stores reload."""

        async def get() -> None:
            for path in paths:
                await self.http.get(f"{self.peer.url}{path}", headers=self._auth)

        task = asyncio.create_task(get())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def _body(self, text: str, user_id: str, assistant_id: str) -> dict[str, Any]:
        """The ``/api/chat/completions`` body a real tab sent (captured from Debian's
        chromium on Open WebUI 0.12.4), less what only fills prompt templates.

        No ``messages``: the page sends only a system prompt there (none is set)
        and the server reads the conversation from the stored chat.
        """
        model = self.peer.model
        user_message = {
            "id": user_id,
            "parentId": self.parent_id,
            "childrenIds": [assistant_id],
            "role": "user",
            "user": self.user,
            "user_id": self.user["id"],
            "content": text,
            "timestamp": int(time.time()),
            "models": [model],
        }
        features = {"voice": False, "image_generation": False, "code_interpreter": False}
        body: dict[str, Any] = {
            "stream": True,
            "model": model,
            "params": {"model_controls": {}},
            "tool_ids": [],
            "tool_servers": [],
            "features": {**features, "web_search": False, "memory": True},
            "variables": {"{{USER_NAME}}": self.user["name"], "{{USER_LANGUAGE}}": "en-US"},
            "model_item": self.peer.model_item,
            "session_id": self.sio.get_sid(),
            "id": assistant_id,
            "message_ids": [{"model_id": model, "message_id": assistant_id, "modelIdx": 0}],
            "parent_id": self.parent_id,
            "user_message": user_message,
            "background_tasks": {"follow_up_generation": True},
        }
        if self.chat_id:
            body["chat_id"] = self.chat_id
        else:
            body["chat_variables"] = {}
            body["background_tasks"] |= {"title_generation": True, "tags_generation": True}
        return body

    async def ask(self, text: str, end: str = "", timeout_s: float = 600) -> Timing:
        """Send one message (Enter) and wait for the end of the answer (``done``).

        ``end``: the words a complete answer ends with ("" = any answer without
        an error). Times are seconds from just before the POST; ``text`` of the
        result is the answer without its reasoning.
        """
        user_id, assistant_id = str(uuid.uuid4()), str(uuid.uuid4())
        self._message_id, self._final = assistant_id, {}
        self._seen.clear()
        self._done.clear()
        start = time.perf_counter()
        response = await self.http.post(
            f"{self.peer.url}/api/chat/completions",
            json=self._body(text, user_id, assistant_id),
            headers=self._auth,
            timeout=timeout_s,
        )
        error = "" if response.status_code == 200 else f"HTTP {response.status_code}"
        if not error:
            await self._started(response.json().get("chat_id"))
            try:
                await asyncio.wait_for(self._done.wait(), timeout_s)
            except TimeoutError:
                error = f"no done within {timeout_s:.0f} s"
        end_at = time.perf_counter()
        error = error or str(self._final.get("error") or "")
        output = self._final.get("output") or []
        answer = "".join(item_text(i) for i in output if i.get("type") == "message")
        self.parent_id = assistant_id
        complete = not error and bool(answer) and answer.rstrip().endswith(end)
        return Timing.observed(start, self._seen, end_at, answer, complete, error)

    async def _started(self, chat_id: str | None) -> None:
        """After the POST, as the page: a new chat is joined (``events:chat``) and loaded;
        the model is reported in use (``usage``)."""
        if chat_id and chat_id != self.chat_id:
            self.chat_id = chat_id
            await self.sio.emit("events:chat", {"chat_id": chat_id, "data": {"type": "join"}})
            if self.refreshes:
                self._refresh(f"/api/v1/chats/{chat_id}")
        usage = {"action": "chat", "model": self.peer.model, "chat_id": ""}
        await self.sio.emit("usage", usage)

    async def close(self) -> None:
        """Close the socket, as closing the browser tab does (page requests still
        under way are awaited first)."""
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.sio.disconnect()


# --------------------------------------------------------------------------- CLI


async def _smoke(peer: Peer, question: str, end: str) -> list[Timing]:
    async with httpx.AsyncClient() as http:
        tab = OpenWebUITab(peer, http, token=await peer.add_user(http, "smoke"))
        await tab.open()
        try:
            return [await tab.ask(question, end), await tab.ask(question, end)]
        finally:
            await tab.close()


def smoke() -> None:
    """Start the scripted server and Open WebUI, ask twice in one chat, print the timings."""
    from bench.harness import PACED_END, question, scripted_server

    with scripted_server() as base_url, running_openwebui(base_url) as peer:
        print(f"Open WebUI {peer.url} pid {peer.pid} ready in {peer.ready_s:.1f} s, {peer.model}")
        for turn, timing in enumerate(asyncio.run(_smoke(peer, question("paced"), PACED_END))):
            print(
                f"turn {turn + 1}: first visible {timing.first_s * 1000:.0f} ms, "
                f"last {timing.last_s * 1000:.0f} ms, done {timing.end_s * 1000:.0f} ms, "
                f"complete={timing.complete} {timing.error} ...{timing.text[-30:]!r}"
            )


def main(argv: list[str] | None = None) -> None:
    """``python -m bench.openwebui install [--force]`` or ``... smoke``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("install", help=f"create {VENV.name} with open-webui=={VERSION}")
    p.add_argument("--force", action="store_true", help="make the environment anew")
    sub.add_parser("smoke", help="start it against the scripted server and ask twice")
    args = parser.parse_args(argv)
    if args.command == "install":
        done = install(force=args.force)
        print(f"{done.venv}: {done.size_mb:.0f} MB, installed in {done.seconds:.0f} s")
    else:
        smoke()


if __name__ == "__main__":
    main()
