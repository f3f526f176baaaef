"""The one harness of the benchmarks: start what is measured, drive it as a browser does,
pair it with direct calls to the same server, print a table.

- Processes: the scripted server (``tests/fakes/kimi_server.py``, run as a process of
  its own: nothing here imports ``tests/``), the app (:func:`running_stack`, or one
  started elsewhere: :class:`Target`, :func:`measured_app`), any command until its URL
  answers (:func:`started`, :func:`wait_ready`).
- Driving: :class:`Tab` speaks Chainlit's socket.io protocol as the browser does
  (facts.md "Chainlit's wire protocol", checked against Chainlit 2.12's ``socket.py``,
  ``emitter.py`` and the ``/project/file`` route of ``server.py``): a fresh session id,
  ``connect`` with the ``auth`` object, ``connection_successful`` (which runs
  ``on_chat_start``), files POSTed to ``/project/file?session_id=...`` before the
  message, then ``client_message`` with their ids as ``fileReferences``. In front of
  several app processes (``launch.sh --ui-workers N``), a tab first loads the page, as a
  browser does, and keeps the cookies of that answer (HAProxy's stickiness cookie among
  them) for its socket and uploads, so each tab stays on one process. Chromium (Playwright)
  pages carry ``bench/tab_probe.js`` (:func:`new_page`).
- Pairing: :class:`DirectClient` asks the server straight, as the app's own client does;
  :func:`rotated` orders the sides of each round.
- The table: :func:`table` and :class:`Report` (date, machine, commit; the run's data
  written to git-ignored ``artifacts/bench/``).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import math
import os
import platform
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import httpx2
import orjson
import psutil
import socketio

from backend.batching import StreamPace
from backend.client import continuing
from backend.families import family_for
from backend.presenter import cut_off_note
from backend.reasoning import ReasoningSplitter
from backend.sse import data_values
from serving import runstate
from serving.ui_main import own_app_root, ui_command
from ui.notes import NOTE_MARKS

if TYPE_CHECKING:  # Playwright is imported where a benchmark drives chromium
    from playwright.sync_api import Browser, Page

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "artifacts" / "bench"  # raw results: git-ignored, never committed
"""Where the benchmarks write their tables (``<name>.md``) and data (``<name>.json``)."""
THINKING, INSTRUCT = "kimi-vl-thinking-2506", "kimi-vl"
"""The scripted server's models: Kimi-VL Thinking (its default) and Instruct (served beside
it with ``--model``)."""
PICKER_ID = "model"
"""The model picker's id in a message's ``modes`` (``ui.model_picker.MODE_ID``; not
imported from there, which would load Chainlit into the benchmark's own process)."""
PACED_END = "(end of answer)"
"""The last words of the scripted ``paced`` and ``quick`` answers (tests/fakes/kimi_server.py)."""
PACED_TOKENS = 200
"""Pieces in the scripted ``paced`` stream: 200 deltas, 10 ms apart (100 tokens/s)."""


@dataclass(frozen=True)
class Workload:
    """What each chat asks and how its answer is recognised, on both sides.

    Attributes:
        text: the question.
        tokens: output tokens of each answer (the numerator of tokens/s per chat).
        answer_s: about how long one answer streams (seconds; staggers the chats).
        end: text a complete answer ends with; "" = any answer that ended without
            an error (a real server's random-weights answer has no known end).
        max_tokens: the answer budget sent (direct: ``max_tokens``; the app: its
            settings panel's value), or None for the server's and app's own.
        model: the served model name the direct side asks for.
        uses_budget: every answer runs until ``max_tokens`` (random weights): the
            app's "cut off" note is then the normal end of a turn, not an error.
    """

    text: str
    tokens: int
    answer_s: float
    end: str
    max_tokens: int | None = None
    model: str = THINKING
    uses_budget: bool = False


def scripted(scenario: str, tokens: int = PACED_TOKENS) -> Workload:
    """The scripted server's answer of ``scenario``: ``paced`` or ``quick`` (200 pieces),
    ``paced-512`` (``tokens=512``); ``answer_s`` as 10 ms a piece."""
    return Workload(question(scenario), tokens, tokens * 0.01, PACED_END)


Cores = tuple[set[int], set[int]]
"""(the client side's CPUs, the servers') of :func:`split_cores`."""


def split_cores() -> Cores:
    """This process's CPUs as (the first, for the client side: the benchmark's driver, its
    browser; the rest, for the servers), as a deployment has the browsers on other machines
    and vLLM on cores of its own (bench_burst's and bench_tab's ``--pin``).

    Raises:
        SystemExit: this process may use only one CPU.
    """
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("--pin needs at least two CPUs")
    return {cpus[0]}, set(cpus[1:])


def pin_threads(pid: int, cpus: set[int]) -> None:
    """Keep every thread of the running process ``pid`` to ``cpus`` (threads it starts
    later inherit it from theirs); nothing for a process that has ended."""
    with suppress(FileNotFoundError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with suppress(ProcessLookupError):  # the thread ended meanwhile
                os.sched_setaffinity(int(task.name), cpus)


def pin_tree(pid: int, cpus: set[int]) -> None:
    """:func:`pin_threads` for the process ``pid`` and every process under it."""
    with suppress(psutil.NoSuchProcess):
        for process in [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]:
            pin_threads(process.pid, cpus)


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for_200(url: str, timeout_s: float, interval_s: float = 0.02) -> None:
    """Return once ``url`` answers HTTP 200.

    Raises:
        RuntimeError: not ready after ``timeout_s`` seconds.
    """
    deadline = time.monotonic() + timeout_s
    # One client for all polls: a new one per poll builds an SSL context each time
    # (about 70 ms of CPU here), which slows the process being waited for and
    # makes the poll interval ten times longer than asked.
    with httpx.Client(timeout=2) as client:
        while time.monotonic() < deadline:
            try:
                if client.get(url).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(interval_s)
    raise RuntimeError(f"{url} not ready after {timeout_s} s")


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MB (MiB, from /proc via psutil)."""
    return float(psutil.Process(pid).memory_info().rss) / 2**20


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) a process has used so far."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def tree_cpu_s(pid: int) -> float:
    """CPU seconds used so far by ``pid``, its live descendants and the children they
    have waited for (``psutil`` ``cpu_times``: user, system and both ``children_*``)."""
    root = psutil.Process(pid)
    total = 0.0
    for process in [root, *root.children(recursive=True)]:
        t = process.cpu_times()
        total += t.user + t.system + t.children_user + t.children_system
    return total


def tree_rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and all its descendants, in MB (MiB)."""
    root = psutil.Process(pid)
    processes = [root, *root.children(recursive=True)]
    return float(sum(p.memory_info().rss for p in processes)) / 2**20


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linear between ranks (numpy's default)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def machine() -> str:
    """One line about this machine: CPU model, cores, memory, load average."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    memory = psutil.virtual_memory().total / 2**30
    return (
        f"{model}, {os.cpu_count()} cores, {memory:.0f} GiB, Python {platform.python_version()}, "
        f"load average {load} at start"
    )


def now_utc() -> str:
    """The current time, ISO 8601 to the minute, UTC."""
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


@dataclass
class Timing:
    """One answer as a client saw it, in seconds from the moment the question was sent.

    Attributes:
        first_s: the first token of text (direct: the first delta with text once the
            reasoning markers are split out; through the app: the first frame with text;
            the reasoning step opening, as the server takes a Thinking request, is none).
        last_s: last visible text.
        end_s: end of the turn (direct: ``[DONE]``; app: ``task_end``).
        text: the visible text received (direct: reasoning and answer; app: the
            final answer message).
        complete: the answer ends as its :class:`Workload` says.
        error: what went wrong, or "" (an error message in the chat, a timeout).
        words_s: the first visible words: text that is not blank and not a marker
            (direct: split out as the app splits it; app: the first frame whose text is
            not blank, so not the reasoning step opening on its own); None if none came.
        tokens, prompt_tokens: the server's count of the answer's and the request's tokens
            (its usage chunk; direct only, 0 without one).
    """

    first_s: float
    last_s: float
    end_s: float
    text: str = ""
    complete: bool = False
    error: str = ""
    words_s: float | None = None
    tokens: int = 0
    prompt_tokens: int = 0

    @property
    def decode_tps(self) -> float | None:
        """Output tokens per second after the first (``(tokens - 1) / (end - first)``, the
        decode speed one person sees); None when not measurable."""
        span = self.end_s - self.first_s
        return (self.tokens - 1) / span if self.tokens > 1 and span > 0 else None

    @classmethod
    def failed(cls, exc: BaseException) -> Timing:
        """An ask that raised ``exc``, counted as an error (the run goes on)."""
        return cls(math.nan, math.nan, math.nan, error=f"{type(exc).__name__}: {exc}")

    @classmethod
    def observed(
        cls,
        start: float,
        seen: Sequence[float],
        end: float,
        text: str,
        complete: bool,
        error: str,
        words: float | None = None,
    ) -> Timing:
        """From ``time.perf_counter()`` readings: the question sent (``start``), each
        update with visible text (``seen``; none: all count as at ``end``), the end, the
        first visible words (``words``)."""
        first, last = (seen[0], seen[-1]) if seen else (end, end)
        at = None if words is None else words - start
        return cls(first - start, last - start, end - start, text, complete, error, at)


def question(scenario: str) -> str:
    """The question that makes the scripted server play ``scenario``."""
    return f"What is in this picture? #scenario={scenario}"


PACED = scripted("paced")
"""The scripted ``paced`` answer: 200 pieces 10 ms apart (2 s of streaming)."""
PACED_512 = scripted("paced-512", 512)
"""The scripted ``paced-512`` answer: 512 pieces 10 ms apart (5.1 s), the answer of issue
53's photo-against-text chat."""


RATE = 200
"""Tokens per second of the scripted ``long-*`` streams the tab benchmarks ask for."""
SHORT_THINK = f"Quick one. #scenario=long-think #reasoning=40 #answer=20 #rate={RATE}"
SHORT_ANSWER = f"Quick one. #scenario=long-answer #answer=20 #rate={RATE}"
"""The streams of the first-words rounds: a short reasoning and answer (their first words
``r0`` and ``a0``); an answer alone."""
END = re.escape(PACED_END)
"""A regex of the last words of every scripted ``long-*`` answer."""


def direct_first_words(http: httpx.Client, base_url: str, text: str, model: str) -> float:
    """Seconds from asking ``model`` ``text`` straight to the server to its first visible
    words (a blocking client, beside a chromium tab driven by Playwright's sync API); the
    request written as the app writes it (a Thinking reply's opening marker in the request:
    ``backend.families.ModelFamily.reply_start``).

    Raises:
        AssertionError: the answer had no visible words.
    """
    family = family_for(model)
    messages = [{"role": "user", "content": text}]
    body = {"model": model, "stream": True, "messages": messages}
    body |= continuing(messages, family.reply_start)
    splitter = ReasoningSplitter(markers=family.markers, starts_in_reasoning=True)
    begun = time.perf_counter()
    first = None
    with http.stream("POST", f"{base_url}/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if first is None and line.startswith("data: {"):
                choices = orjson.loads(line[6:])["choices"]
                delta = choices[0]["delta"] if choices else {}
                token = (delta.get("reasoning") or "") + (delta.get("content") or "")
                if any(part.text.strip() for part in splitter.feed(token)):
                    first = time.perf_counter()
    assert first is not None, "no visible words"
    return first - begun


class DirectClient:
    """Straight to the server, as the app's own client asks it: the same HTTP library
    (httpx2, under the OpenAI SDK), the body's bytes parsed as the app parses them
    (:func:`backend.sse.data_values`, orjson), so that the benchmark's own CPU per chunk
    weighs on the direct side no more than on the app's.

    Not httpx: its connection pool (httpcore 1.0) made a burst of 64 requests on warm
    keep-alive connections take 1.1-1.4 s to the last first token, 110 ms on new ones
    (docs/benchmarks.md, "The direct burst's own p95"); every direct burst that followed
    another within the server's keep-alive time met it.

    A Thinking model's request writes the reply's opening marker itself, as the app's
    does (``ModelFamily.reply_start`` in backend/families.py), so both sides get the
    same first token, and asks for as many tokens a chunk as the app asks (:attr:`pace`),
    so both sides get the same chunks: with every token, the driver's own reading of 64
    direct streams filled the core it shares with the scripted server, whose streams then
    ran late and caught up (2026-12-04, docs/benchmarks.md).
    The first token (``first_s``) is the first delta with text once the reasoning
    markers are split out (a lone opening marker is none, as in the app). The last visible
    text (``last_s``) is split out by the same
    :class:`backend.reasoning.ReasoningSplitter` the app uses.
    """

    def __init__(self, base_url: str, api_key: str = "") -> None:
        self.base_url = base_url
        self.pace = StreamPace()
        """The server's speed per chat, learnt from this client's answers as the app's
        :class:`backend.pacing.ServerPace` learns it: each request asks the chunk size
        the app's would (vLLM's ``stream_interval``)."""
        limits = httpx2.Limits(max_connections=256, max_keepalive_connections=256)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx2.AsyncClient(timeout=600, limits=limits, headers=headers)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    def body(
        self,
        work: Workload,
        photo: bytes | None = None,
        messages: list[dict[str, Any]] | None = None,
        extra: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The request of :meth:`ask`: ``messages``, or ``work``'s question with ``photo``
        (JPEG bytes, a base64 data URL), as the app's client writes it."""
        if messages is None:
            content: str | list[dict[str, Any]] = work.text
            if photo is not None:
                url = "data:image/jpeg;base64," + base64.b64encode(photo).decode("ascii")
                content = [
                    {"type": "image_url", "image_url": {"url": url}},
                    {"type": "text", "text": work.text},
                ]
            messages = [{"role": "user", "content": content}]
        body: dict[str, Any] = {
            "model": work.model,
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": messages,
            **continuing(messages, family_for(work.model).reply_start),
        }
        if work.max_tokens:
            body["max_tokens"] = work.max_tokens
        body.update(extra or {})
        if (interval := self.pace.tokens_per_chunk()) > 1:
            body["stream_interval"] = interval
        return body

    async def ask(
        self,
        work: Workload,
        photo: bytes | None = None,
        session_id: str = "",
        extra: dict[str, Any] | None = None,
        messages: list[dict[str, Any]] | None = None,
    ) -> Timing:
        """Stream one answer (:meth:`body`); ``session_id`` goes as ``X-Session-Id``, as the
        app sends its chat's id (vLLM's router keeps a chat on one replica by it,
        serving/replicas.py); ``extra``: more body fields (``ignore_eos``, ``temperature``).
        A refusal is a :class:`Timing` with its status and the start of its body as error.

        Raises:
            httpx2.HTTPError: the request or the stream broke.
        """
        body = self.body(work, photo, messages, extra)
        family = family_for(work.model)
        splitter = ReasoningSplitter(markers=family.markers, starts_in_reasoning=True)
        received: list[str] = []
        first = last = words = None
        chunks: list[float] = []  # when each chunk with text came
        usage: dict[str, int] = {}
        start = time.perf_counter()
        url, headers = f"{self.base_url}/chat/completions", {"Content-Type": "application/json"}
        if session_id:
            headers["X-Session-Id"] = session_id
        async with self._http.stream("POST", url, content=orjson.dumps(body), headers=headers) as r:
            if r.status_code != 200:
                said = (await r.aread()).decode(errors="replace")[:200]
                end = time.perf_counter() - start
                return Timing(end, end, end, error=f"HTTP {r.status_code}: {said}")
            async for value in data_values(r.aiter_bytes()):
                choices = value["choices"]
                usage = value.get("usage") or usage
                if not choices:
                    continue
                delta = choices[0]["delta"]
                # A server with a reasoning parser sends the reasoning in its own field
                # (`reasoning`; `reasoning_content` before 2026): visible too, as in the app.
                reasoning = delta.get("reasoning") or delta.get("reasoning_content") or ""
                token = reasoning + (delta.get("content") or "")
                if token:
                    chunks.append(time.perf_counter())
                parts = splitter.feed(token)
                if parts and first is None:  # a lone opening marker is no text, as in the app
                    first = chunks[-1]
                if parts:
                    last = time.perf_counter()
                    received.extend(p.text for p in parts)
                    if words is None and any(p.text.strip() for p in parts):
                        words = last
        end = time.perf_counter()
        tokens = usage.get("completion_tokens", 0)
        if chunks:
            self.pace.observe(tokens - 1, chunks[-1] - chunks[0])  # as ServerPace.learn
        text = "".join(received)
        return Timing(
            (first or end) - start,
            (last or end) - start,
            end - start,
            text,
            complete=text.rstrip().endswith(work.end),
            words_s=None if words is None else words - start,
            tokens=tokens,
            prompt_tokens=usage.get("prompt_tokens", 0),
        )


def _iso_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Tab:
    """One browser tab of the app: a Chainlit session over socket.io.

    Use :meth:`open`, then :meth:`upload` and :meth:`ask` as often as wanted,
    then :meth:`close` (a tab closed: the socket goes away without
    ``clear_session``, as when a person closes the browser tab).

    With ``load_page`` the tab first GETs the page and keeps the cookies that
    answer sets (``cookies``: a load balancer's stickiness cookie, the app's
    browser cookie), sending them with its socket and uploads. Each tab keeps
    its own: ``http``'s shared cookie jar is never consulted, since every
    request names its ``Cookie`` header. With ``thread_id`` (and a signed-in user's
    cookies) the tab resumes that stored chat, as opening it from the sidebar does.
    """

    ui_url: str
    http: httpx.AsyncClient
    load_page: bool = False
    cookies: dict[str, str] = field(default_factory=dict)
    session_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    thread_id: str = ""
    sio: socketio.AsyncClient = field(default_factory=socketio.AsyncClient)
    _seen: list[float] = field(default_factory=list)
    _words: list[float] = field(default_factory=list)
    _messages: dict[str, dict[str, Any]] = field(default_factory=dict)
    _done: asyncio.Event = field(default_factory=asyncio.Event)
    _ready: asyncio.Event = field(default_factory=asyncio.Event)

    async def open(self, ready_timeout_s: float = 30) -> None:
        """Connect and run ``on_chat_start``; return once it has ended.

        Both must have come: the settings panel (``chat_settings``) and the ``task_end``
        Chainlit sends after ``on_chat_start``, in either order.

        Raises:
            TimeoutError: ``on_chat_start`` did not end within ``ready_timeout_s``.
        """

        async def on_text(data: object = None) -> None:
            now = time.perf_counter()
            self._seen.append(now)
            if frame_text(data).strip():
                self._words.append(now)

        async def on_message(step: dict[str, Any]) -> None:
            # The reasoning step opening ("Thinking…") is no token: a Thinking request
            # writes the opening marker, and the step opens as the server takes it.
            self._messages[step["id"]] = step

        async def on_task_start(_: object = None) -> None:
            self._done.clear()  # Chainlit's task_end on connecting came before it

        async def on_task_end(_: object = None) -> None:
            self._done.set()

        async def on_settings(_: object = None) -> None:
            # Before on_chat_start's task_end, or after it: when the app has not heard
            # from the server yet, the chat's connecting task sends the panel later.
            self._ready.set()

        self.sio.on("stream_start", on_text)
        self.sio.on("stream_token", on_text)
        self.sio.on("window_message", on_text)
        self.sio.on("new_message", on_message)
        self.sio.on("update_message", on_message)
        self.sio.on("task_start", on_task_start)
        self.sio.on("task_end", on_task_end)
        self.sio.on("chat_settings", on_settings)
        if self.load_page:
            page = await self.http.get(f"{self.ui_url}/", headers={"Cookie": self.cookie_header()})
            page.raise_for_status()
            self.cookies.update(page.cookies.items())
        await self.sio.connect(
            self.ui_url,
            wait_timeout=ready_timeout_s,  # a loaded app answers the handshake late
            socketio_path="/ws/socket.io",
            transports=["websocket"],
            headers={"Cookie": self.cookie_header()},
            auth={
                "clientType": "webapp",
                "sessionId": self.session_id,
                "threadId": self.thread_id,
                "userEnv": "{}",
                "chatProfile": "",
            },
        )
        await self.sio.emit("connection_successful")
        async with asyncio.timeout(ready_timeout_s):
            await self._ready.wait()
            await self._done.wait()

    def cookie_header(self) -> str:
        """The ``Cookie`` header of this tab: Chainlit's session cookie and :attr:`cookies`."""
        pairs = {"X-Chainlit-Session-id": self.session_id, **self.cookies}
        return "; ".join(f"{k}={v}" for k, v in pairs.items())

    async def post_file(
        self, data: bytes, name: str = "photo.jpg", mime: str = "image/jpeg"
    ) -> httpx.Response:
        """POST a file as the browser does when it is attached; the app's answer, as it is
        (a refusal included)."""
        return await self.http.post(
            f"{self.ui_url}/project/file",
            params={"session_id": self.session_id},
            files={"file": (name, data, mime)},
            headers={"Cookie": self.cookie_header()},
        )

    async def upload(self, data: bytes, name: str = "photo.jpg", mime: str = "image/jpeg") -> str:
        """:meth:`post_file`, accepted; its id for ``fileReferences``.

        Raises:
            httpx.HTTPStatusError: the app refused the file.
        """
        response = await self.post_file(data, name, mime)
        response.raise_for_status()
        file_id: str = response.json()["id"]
        return file_id

    def texts(self) -> list[str]:
        """The text of every message and step shown since the last :meth:`ask` (latest state)."""
        return [str(step.get("output") or "") for step in self._messages.values()]

    async def apply_settings(self, values: dict[str, Any]) -> None:
        """Change the settings panel (``chat_settings_change``), as moving a slider does."""
        await self.sio.emit("chat_settings_change", values)
        await asyncio.sleep(0.2)  # handled in its own task: let it land before a message

    async def send(self, text: str, file_ids: Sequence[str] = (), model: str = "") -> None:
        """Send one message (Enter) with the uploads ``file_ids``, ``model`` picked in the
        composer's model picker ("": none picked); return at once."""
        message: dict[str, Any] = {
            "threadId": "",
            "id": str(uuid.uuid4()),
            "name": "User",
            "type": "user_message",
            "output": text,
            "createdAt": _iso_now(),
            "metadata": {},
        }
        if model:
            message["modes"] = {PICKER_ID: model}
        references = [{"id": i} for i in file_ids]
        await self.sio.emit("client_message", {"message": message, "fileReferences": references})

    async def ask(
        self,
        text: str,
        file_ids: Sequence[str] = (),
        timeout_s: float = 600,
        marker: str = PACED_END,
        cut_off_at: int | None = None,
        model: str = "",
    ) -> Timing:
        """Send one message (Enter) and wait for the end of the turn (``task_end``).

        The answer is the assistant message containing ``marker`` ("" = the longest one);
        ``model``: picked in the model picker for it (:meth:`send`).
        ``cut_off_at``: the answer is expected to use all these tokens, so the app's
        note that it was cut off there ends a complete turn (random weights).
        """
        self._done.clear()  # on_chat_start's task_end, or the previous turn's
        self._seen.clear()
        self._words.clear()
        self._messages.clear()
        start = time.perf_counter()
        await self.send(text, file_ids, model)
        error = ""
        try:
            await asyncio.wait_for(self._done.wait(), timeout_s)
        except TimeoutError:
            error = f"no task_end within {timeout_s:.0f} s"
        end = time.perf_counter()
        said = [m for m in self._messages.values() if m.get("type") == "assistant_message"]
        outputs = [str(m.get("output") or "") for m in said]
        notes = [str(m.get("output") or "") for m in said if str(m.get("id")).endswith(ALARMS)]
        expected = cut_off_notes(cut_off_at)
        answers = [o for o in outputs if marker in o and o not in notes]
        answer = max(answers, key=len, default="")
        if notes and not error:
            error = notes[0][:200]
        under = (str(m.get("output") or "") for m in self._messages.values())  # notes too
        cut_off = not error and any(o.startswith(expected) for o in under)
        words = self._words[0] if self._words else None
        complete = bool(answer) or cut_off
        return Timing.observed(start, self._seen, end, answer, complete, error, words)

    async def close(self) -> None:
        """Close the socket, as closing the browser tab does."""
        await self.sio.disconnect()


def frame_text(data: object) -> str:
    """The text a ``stream_start`` (a step or message, its ``output``) or ``stream_token``
    (its ``token``) frame of Chainlit's socket protocol carries, or a ``window_message``
    with an open block's live text (``ui.bridge.show_live``); "" for anything else."""
    if not isinstance(data, dict):
        return ""
    live = data.get("kimi")
    if isinstance(live, dict):
        data = live if live.get("kind") == "live" else {}
    text = data.get("token", data.get("output", data.get("text")))
    return text if isinstance(text, str) else ""


ALARMS = (NOTE_MARKS["warning"], NOTE_MARKS["error"])
"""How the ids of the app's warning and error notes end (``ui/notes.py``): a turn with one
failed."""


def cut_off_notes(max_tokens: int | None) -> tuple[str, ...]:
    """How the app's line under an answer starts when the answer used its whole budget
    (``backend.render.finished``: the cut-off note in italics, up to the number, which
    the app may have lowered to fit the context); () for None."""
    if max_tokens is None:
        return ()
    notes = (cut_off_note(max_tokens, in_reasoning=r) for r in (True, False))
    return tuple(f"*{note[: note.index(str(max_tokens))]}" for note in notes)


# --------------------------------------------------------------------------- processes


def log_tail(log: Path | None, lines: int = 20) -> str:
    """ ":" and the last ``lines`` lines of ``log``, for an error message ("" for none)."""
    if log is None or not log.exists():
        return ""
    return ":\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


def stop(process: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    """Terminate a process (SIGTERM) and wait for it (killed after ``timeout_s``)."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@contextmanager
def started(
    command: Sequence[str],
    env: dict[str, str] | None = None,
    log: Path | None = None,
    cwd: Path = ROOT,
    cpus: set[int] | None = None,
    stop_s: float = 30,
) -> Iterator[subprocess.Popen[bytes]]:
    """``command`` running (its output appended to ``log``, or dropped), stopped on leaving
    (:func:`stop`, killed after ``stop_s``); ``cpus``: the CPUs it may run on, set before
    it starts its threads (they inherit them)."""
    with ExitStack() as exits:
        out = exits.enter_context(log.open("ab")) if log else subprocess.DEVNULL
        process = subprocess.Popen(
            list(command), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT
        )
        if cpus is not None:
            os.sched_setaffinity(process.pid, cpus)
        exits.callback(stop, process, stop_s)
        yield process


def wait_ready(
    url: str, process: subprocess.Popen[bytes], timeout_s: float = 60, log: Path | None = None
) -> None:
    """Return at the first HTTP 200 of ``url`` (polled every 20 ms) while ``process`` runs.

    Raises:
        RuntimeError: ``process`` exited first, or no 200 within ``timeout_s``
            (with the end of ``log`` in the message).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            why = f"{process.args!r} exited ({process.returncode})"
            raise RuntimeError(why + log_tail(log))
        try:
            wait_for_200(url, min(5.0, deadline - time.monotonic()))
            return
        except RuntimeError:
            continue
    raise RuntimeError(f"{url} not ready after {timeout_s} s" + log_tail(log))


SCRIPTED_SERVER = "tests.fakes.kimi_server"
"""The scripted OpenAI-compatible server's module, run as a process of its own (never
imported: it is the tests' double of vLLM, Kimi-VL's streams with their markers)."""


@contextmanager
def scripted_server(models: Sequence[str] = ()) -> Iterator[str]:
    """The scripted server (``python -m tests.fakes.kimi_server --no-record``), running,
    serving ``models`` (default: its own, :data:`THINKING`); yields its OpenAI base URL
    (``http://127.0.0.1:<port>/v1``)."""
    port = free_port()
    command = [sys.executable, "-m", SCRIPTED_SERVER, "--port", str(port), "--no-record"]
    command += [arg for model in models for arg in ("--model", model)]
    with started(command) as server:
        wait_ready(f"http://127.0.0.1:{port}/health", server)
        yield f"http://127.0.0.1:{port}/v1"


NO_ENV_FILE = ROOT / "bench" / "no.env"
"""A settings file that does not exist: what the apps a benchmark starts read instead of
the checkout's ``.env`` (:func:`hermetic_environ`)."""


def hermetic_environ(keep: Sequence[str] = (), **settings: str) -> dict[str, str]:
    """The environment of an app a benchmark starts: the caller's without any ``KIMI_*``
    (but the names in ``keep``), the settings files of the app (``KIMI_ENV_FILE``) and of
    Chainlit (``CHAINLIT_ENV_FILE``, which Chainlit loads into the environment) pointed at
    :data:`NO_ENV_FILE`, then ``settings``. So a benchmark measures the app's defaults, not
    what an operator set in ``.env`` or exported (a ``KIMI_MODEL`` of their own made every
    tab of ``bench_burst`` wait for a model the scripted server does not serve)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KIMI_") or k in keep}
    no_file = str(NO_ENV_FILE)
    return {**env, "KIMI_ENV_FILE": no_file, "CHAINLIT_ENV_FILE": no_file, **settings}


@dataclass
class Stack:
    """The app (one or more processes) in front of a server."""

    base_url: str
    ui_urls: list[str]
    """One per app process, in start order."""
    apps: list[subprocess.Popen[bytes]]
    ready_s: float

    @property
    def ui_url(self) -> str:
        """The first app process's URL (the only one unless several were started)."""
        return self.ui_urls[0]

    @property
    def app_pid(self) -> int:
        """The first app process's id (``chainlit run``: the app runs in this process)."""
        return self.apps[0].pid


@contextmanager
def running_stack(
    app_env: dict[str, str] | None = None,
    server_url: str | None = None,
    workers: int = 1,
    app_cpus: set[int] | None = None,
) -> Iterator[Stack]:
    """The app (``python -m chainlit run app.py --headless``, ``workers`` processes on
    ports of their own) in front of a server.

    The server is the scripted one, started here, or the OpenAI-compatible
    ``server_url`` (a real vLLM; its key in ``KIMI_API_KEY``), left running. The app
    has its defaults (:func:`hermetic_environ`) but for what ``app_env`` sets.
    The app's log goes to nowhere (``KIMI_APP_LOG=""``) unless ``app_env``
    names a file as ``KIMI_APP_LOG``; then the app's output goes to that name
    plus ``.stderr``. ``ready_s`` is the time from starting the app to the first
    ``GET /`` answer of its last process. ``app_cpus``: the CPUs the app's processes
    may run on (None: any), e.g. one core of its own while the benchmark and the
    scripted server keep to the others (``bench_burst --pin``).
    """
    with ExitStack() as exits:
        base_url = server_url or exits.enter_context(scripted_server())
        key = () if server_url is None else ("KIMI_API_KEY",)  # a real vLLM's
        settings = {"KIMI_BASE_URL": base_url, "KIMI_APP_LOG": "", **(app_env or {})}
        env = hermetic_environ(key, **settings)
        log = Path(f"{env['KIMI_APP_LOG']}.stderr") if env["KIMI_APP_LOG"] else None
        begun = time.monotonic()
        urls, apps = [], []
        roots = Path(exits.enter_context(tempfile.TemporaryDirectory(prefix="kimi-bench-")))
        for number in range(1, workers + 1):
            port = free_port()
            own = {**env, **own_app_root(roots / f"ui-{number}")}
            command = ui_command("127.0.0.1", port)
            apps.append(exits.enter_context(started(command, own, log, cpus=app_cpus)))
            urls.append(f"http://127.0.0.1:{port}")
        for url, app in zip(urls, apps, strict=True):
            wait_ready(f"{url}/", app, 60, log)
        yield Stack(base_url, urls, apps, time.monotonic() - begun)


# --------------------------------------------------------------------------- the app measured


@dataclass
class Target:
    """What is measured: the app (one process, several, or workers behind a proxy) and
    its server.

    Attributes:
        base_url: the server's OpenAI base URL (the direct side asks it).
        ui_urls: where tabs open the app; new tabs go to each in turn (several app
            processes this run started, each on its own port: no proxy between).
        pids: the processes whose CPU and RSS are the app's, summed (one ``chainlit
            run``, or every worker and HAProxy).
        ready_s: seconds from starting the app to its first answer (NaN: started elsewhere).
    Every tab loads the page first and keeps its cookies, as a fresh browser does: the
    app's browser cookie (each tab is one person to the app's fair-use bounds, see
    ui/security.py ``person_of``) and a proxy's stickiness cookie.
    """

    base_url: str
    ui_urls: list[str]
    pids: list[int]
    ready_s: float
    _opened: int = 0

    @classmethod
    def started(cls, stack: Stack) -> Target:
        """The app this benchmark started itself (its processes, no proxy)."""
        return cls(stack.base_url, stack.ui_urls, [a.pid for a in stack.apps], stack.ready_s)

    def tab(self, http: httpx.AsyncClient) -> Tab:
        """A new browser tab of the app (of its next process)."""
        url = self.ui_urls[self._opened % len(self.ui_urls)]
        self._opened += 1
        return Tab(url, http, load_page=True)

    def about(self, args: argparse.Namespace) -> str:
        """A sentence on the app measured, for the report (:func:`add_target_options`)."""
        if args.app_url:
            where = f"ran elsewhere at {args.app_url}"
        elif len(self.pids) > 1:
            where = f"ran as {len(self.pids)} processes on ports of their own (no proxy)"
        else:
            where = "ran as one process"
        settings = ", ".join(f"`{item}`" for item in args.app_env)
        return (
            f"The app {where}{f' with {settings}' if settings else ''}; its CPU and RSS are "
            f"those of processes {self.pids}, summed."
        )

    def rss_mb(self) -> float:
        """The app's processes' summed resident memory (MB)."""
        return sum(rss_mb(pid) for pid in self.pids)

    def cpu_s(self) -> float:
        """The CPU seconds the app's processes have used so far, summed."""
        return sum(cpu_s(pid) for pid in self.pids)


def launched_pids(run_dir: Path) -> list[int]:
    """The chat UI processes ``launch.sh`` recorded in ``run_dir``: its workers and
    HAProxy (``--ui-workers N``), or its single UI; empty if none is recorded."""
    state = runstate.read(run_dir)
    found = [*state.workers, state.ui, state.proxy] if state else []
    return [p.pid for p in found if p is not None and p.pid > 0]


def add_target_options(parser: argparse.ArgumentParser) -> None:
    """The options that say which app a benchmark measures (:func:`measured_app`)."""
    parser.add_argument("--app-log", default="", help="the app's log file (default: none)")
    parser.add_argument(
        "--app-workers", type=int, default=1,
        help="start the app as N processes on ports of their own, new tabs to each in turn "
        "(what --ui-workers does, without the proxy)",
    )  # fmt: skip
    parser.add_argument(
        "--app-env", action="append", default=[], metavar="NAME=VALUE",
        help="an environment variable for the app (repeatable), e.g. an allocator setting",
    )  # fmt: skip
    parser.add_argument(
        "--app-url", default="",
        help="measure an app started elsewhere, e.g. ./launch.sh --ui-only --ui-workers 4 "
        "(tabs keep the proxy's stickiness cookie); needs --base-url",
    )  # fmt: skip
    parser.add_argument(
        "--base-url", default="",
        help=f"with --app-url: the server the app talks to (python -m {SCRIPTED_SERVER} "
        "--port N --no-record; the direct side asks it)",
    )  # fmt: skip
    parser.add_argument(
        "--app-pid", type=int, action="append", default=[],
        help="with --app-url: a process whose CPU and RSS count as the app's (repeatable; "
        "default: the UI workers and HAProxy recorded in --run-dir)",
    )  # fmt: skip
    parser.add_argument("--run-dir", default=".run", help="with --app-url: launch.sh's run dir")


@contextmanager
def measured_app(
    args: argparse.Namespace, server_url: str | None = None, app_cpus: set[int] | None = None
) -> Iterator[Target]:
    """The app :func:`add_target_options` named: at ``--app-url`` (its processes
    ``--app-pid``, else those launch.sh recorded), or started here (``--app-workers``
    processes, ``--app-env``, ``--app-log``) in front of ``server_url`` or the scripted
    server.

    Raises:
        SystemExit: ``--app-url`` without a server, or with no process to measure.
    """
    if args.app_url:
        base_url = server_url or args.base_url
        pids = args.app_pid or launched_pids(Path(args.run_dir))
        if not base_url or not pids:
            raise SystemExit("--app-url needs --base-url and an app process (--app-pid)")
        yield Target(base_url.rstrip("/"), [args.app_url.rstrip("/")], pids, math.nan)
        return
    env = {"KIMI_APP_LOG": args.app_log, **dict(item.split("=", 1) for item in args.app_env)}
    with running_stack(env, server_url, args.app_workers, app_cpus) as stack:
        yield Target.started(stack)


class Sampler:
    """Samples the app's summed RSS (MB) every ``interval_s`` seconds in the background."""

    def __init__(self, target: Target, interval_s: float = 0.5) -> None:
        self.target = target
        self.interval_s = interval_s
        self.samples: list[tuple[float, float]] = []
        """(seconds since start, RSS MB) pairs."""
        self._task: asyncio.Task[None] | None = None
        self._t0 = time.monotonic()

    async def _run(self) -> None:
        while True:
            self.samples.append((time.monotonic() - self._t0, self.target.rss_mb()))
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        """Begin sampling (in the running event loop)."""
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stop sampling."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def peak_since(self, t: float) -> float:
        """The highest RSS sampled at or after ``t`` seconds."""
        return max((mb for at, mb in self.samples if at >= t), default=math.nan)

    def now(self) -> float:
        """Seconds since the sampler was made."""
        return time.monotonic() - self._t0


def rotated(sides: Sequence[T], round_: int) -> list[T]:
    """``sides`` in the order of round ``round_``: each round starts with the next side, so
    that a drift in the machine's load falls on every side alike."""
    turn = round_ % len(sides)
    return [*sides[turn:], *sides[:turn]]


def tok_s(timings: Sequence[Timing], tokens: int = PACED_TOKENS) -> float:
    """Median tokens per second per chat: ``tokens`` per answer over first -> last text."""
    rates = [
        tokens / (t.last_s - t.first_s) for t in timings if not t.error and t.last_s > t.first_s
    ]
    return statistics.median(rates) if rates else math.nan


# --------------------------------------------------------------------------- chromium

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"]
PROBE = Path(__file__).with_name("tab_probe.js")
"""The probe installed before a page's own scripts (frames, Long Tasks, marks)."""


def new_page(browser: Browser, storage_state: dict[str, Any] | None = None) -> Page:
    """A fresh context (``bypass_csp``: the probe evaluates JavaScript) with the probe, that
    reaches nothing beyond this machine."""
    context = browser.new_context(
        viewport={"width": 1100, "height": 800},
        bypass_csp=True,
        locale="en-US",
        storage_state=storage_state,  # type: ignore[arg-type]
    )
    context.set_default_timeout(60_000)
    context.add_init_script(PROBE.read_text())
    context.route(lambda url: not url.startswith("http://127.0.0.1"), lambda r: r.abort())
    return context.new_page()


def type_question(page: Page, text: str, marks: dict[str, str]) -> None:
    """Have the probe watch for ``marks`` (name: regex), then type ``text`` and press Enter."""
    page.evaluate("(p) => window.__probe.watch(p)", marks)
    page.locator("#chat-input").fill(text)
    page.locator("#chat-input").press("Enter")


def wait_mark(page: Page, name: str, timeout_ms: float = 300_000) -> None:
    """Wait until the probe has seen its pattern ``name`` on screen."""
    page.wait_for_function(
        "(name) => typeof window.__probe.marks[name] === 'number'",
        arg=name,
        timeout=timeout_ms,
        polling=250,
    )


def settle(page: Page) -> None:
    """Let a freshly loaded page finish its own loading before a measurement starts (at
    most 5 s without network traffic: Open WebUI's page never stops polling), then 0.5 s."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    with suppress(PlaywrightTimeout):
        page.wait_for_load_state("networkidle", timeout=5_000)
    time.sleep(0.5)


# --------------------------------------------------------------------------- the table


def commit() -> str:
    """The checkout's commit (short), with ``+changes`` when files differ from it."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def table(head: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table: the first column left-aligned, the others right-aligned."""
    lines = ["| " + " | ".join(head) + " |", "| --- |" + " ---: |" * (len(head) - 1)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


@dataclass
class Report:
    """What a benchmark prints: a title, when, where and what was measured (date, machine,
    commit), then its paragraphs and tables; also written, with the run's data, to
    ``artifacts/bench/<name>.md`` and ``.json`` (git-ignored: docs/benchmarks.md keeps a
    summary)."""

    title: str
    name: str
    date: str = field(default_factory=now_utc)
    where: str = field(default_factory=machine)
    parts: list[str] = field(default_factory=list)

    def add(self, *parts: str) -> None:
        """Paragraphs or tables, in order."""
        self.parts.extend(parts)

    def text(self) -> str:
        """The whole report as Markdown."""
        head = f"# {self.title}\n\n{self.date}; {self.where}; commit {commit()}."
        return "\n\n".join([head, *self.parts]) + "\n"

    def finish(self, data: dict[str, Any]) -> Path:
        """Print the report and write it with ``data``; the Markdown file's path."""
        text = self.text()
        print(text)
        RESULTS.mkdir(parents=True, exist_ok=True)
        md, js = RESULTS / f"{self.name}.md", RESULTS / f"{self.name}.json"
        md.write_text(text)
        meta = {"date": self.date, "machine": self.where, "commit": commit()}
        js.write_text(json.dumps({**meta, **data}, indent=2, default=str) + "\n")
        print(f"wrote {md.relative_to(ROOT)} and {js.name}")
        return md
