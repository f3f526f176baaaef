"""The client against the scripted server: events, timings and error mapping."""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import types
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from backend.client import ChatClient, ChatRequest
from backend.errors import (
    ClientClosed,
    ContextTooLong,
    RequestRejected,
    RequestTimeout,
    ServerFailed,
    ServerLoading,
    ServerUnreachable,
    StreamBroken,
    TooManyImages,
    can_retry,
)
from backend.events import AnswerDelta, Done, ReasoningDelta, ReasoningOpened, StreamEvent
from backend.vllm_errors import ErrorEvent, HttpStatusError, map_error
from tests.conftest import RunningFake, free_port
from tests.fakes.kimi_server import ANSWER, REASONING

ROOT = Path(__file__).resolve().parent.parent


async def collect(client: ChatClient, text: str, **kw: object) -> list[StreamEvent]:
    request = ChatRequest(
        model="kimi-vl-thinking-2506",
        messages=[{"role": "user", "content": text}],
        max_tokens=100,
        temperature=0.8,
        **kw,  # type: ignore[arg-type]
    )
    return [event async for event in client.stream(request)]


def texts(events: list[StreamEvent]) -> tuple[str, str]:
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    answer = "".join(e.text for e in events if isinstance(e, AnswerDelta))
    return reasoning, answer


@pytest.fixture
async def client(fake: RunningFake) -> AsyncIterator[ChatClient]:
    client = ChatClient(fake.base_url, "test-key", timeout_s=5)
    yield client
    await client.aclose()


@pytest.mark.parametrize("scenario", ["thinking", "close-only", "reasoning-field"])
async def test_reasoning_and_answer_are_split(client: ChatClient, scenario: str) -> None:
    events = await collect(client, f"hi #scenario={scenario}", thinking=True)
    reasoning, answer = texts(events)
    assert reasoning == REASONING
    assert answer == ANSWER.lstrip()
    done = events[-1]
    assert isinstance(done, Done)
    assert done.finish_reason == "stop"
    assert done.usage is not None and done.usage.completion_tokens > 10
    assert done.ttft_s is not None and 0 < done.ttft_s < done.elapsed_s
    assert done.reasoning_s is not None and done.reasoning_s > 0
    assert not done.reasoning_unclosed
    assert sum(isinstance(e, Done) for e in events) == 1


async def test_plain_answer_has_no_reasoning(client: ChatClient) -> None:
    events = await collect(client, "#scenario=plain")
    reasoning, answer = texts(events)
    assert reasoning == ""
    assert answer == ANSWER
    done = events[-1]
    assert isinstance(done, Done) and done.reasoning_s is None


async def test_cut_off_inside_reasoning(client: ChatClient) -> None:
    events = await collect(client, "#scenario=cutoff", thinking=True)
    reasoning, answer = texts(events)
    assert reasoning == REASONING and answer == ""
    done = events[-1]
    assert isinstance(done, Done)
    assert done.finish_reason == "length" and done.reasoning_unclosed


async def test_request_id_and_options_are_sent(client: ChatClient, fake: RunningFake) -> None:
    await collect(
        client,
        "#scenario=plain",
        request_id="abc-123",
        top_p=0.95,
        extra_body={"structured_outputs": {"choice": ["yes", "no"]}},
    )
    assert fake.server.headers[-1]["x-request-id"] == "abc-123"
    assert fake.server.headers[-1]["content-type"] == "application/json"
    assert fake.server.headers[-1]["authorization"] == "Bearer test-key"
    body = fake.requests[-1]
    assert body["model"] == "kimi-vl-thinking-2506"
    assert body["messages"] == [{"role": "user", "content": "#scenario=plain"}]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 100 and body["temperature"] == 0.8 and body["top_p"] == 0.95
    assert body["structured_outputs"] == {"choice": ["yes", "no"]}


async def test_without_a_key_no_authorization_header_is_sent(fake: RunningFake) -> None:
    client = ChatClient(fake.base_url, "")
    try:
        assert texts(await collect(client, "#scenario=plain")) == ("", ANSWER)
    finally:
        await client.aclose()
    assert "authorization" not in fake.server.headers[-1]


STREAM_ALONE = """
import asyncio, sys
from backend.client import ChatClient, ChatRequest

async def main() -> None:
    client = ChatClient(sys.argv[1], "k")
    request = ChatRequest("m", [{"role": "user", "content": "#scenario=plain"}], 50, 0.0)
    try:
        print(len([event async for event in client.stream(request)]))
    finally:
        await client.aclose()
    print("openai" in sys.modules)

asyncio.run(main())
"""


def test_a_chat_completion_streams_without_the_openai_sdk(fake: RunningFake) -> None:
    """The chat completion goes on aiohttp, not through the SDK, whose request took about
    2 ms of CPU more (backend/client.py): a question neither waits for the SDK's import
    nor runs its code."""
    done = subprocess.run(
        [sys.executable, "-c", STREAM_ALONE, fake.base_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    events, sdk_loaded = done.stdout.split()
    assert int(events) > 2 and sdk_loaded == "False"


@pytest.mark.parametrize(
    ("scenario", "error", "ours", "theirs"),
    [
        ("error-context", ContextTooLong, "too long for the model", "maximum context length"),
        ("error-images", TooManyImages, "Too many images", "At most 4 image(s)"),
        ("error-500", ServerFailed, "failed while answering", "EngineCore"),
        ("error-503", ServerLoading, "still loading", "not ready"),
        ("midstream-error", ServerFailed, "reported an error", "engine died"),
        ("error-images-reworded", TooManyImages, "Too many images", "Too many pictures"),
        ("error-budget-reworded", ContextTooLong, "too long for the model", "model takes"),
        ("error-images-untyped", TooManyImages, "Too many images", "At most 4 image(s)"),
        ("error-other-400", RequestRejected, "refused this request", "temperature"),
    ],
)
async def test_server_errors_become_our_errors(
    client: ChatClient, scenario: str, error: type[Exception], ours: str, theirs: str
) -> None:
    """In our words only (issue 47): the server's go to app.log (test_turn_runner.py)."""
    with pytest.raises(error) as caught:
        await collect(client, f"#scenario={scenario}")
    assert type(caught.value) is error  # not a parent class: vLLM's param told which
    assert ours in str(caught.value) and theirs not in str(caught.value)
    assert "Traceback" not in str(caught.value) and "\n" not in str(caught.value)


async def test_unreachable_server() -> None:
    client = ChatClient(f"http://127.0.0.1:{free_port()}/v1", "k", connect_timeout_s=1)
    try:
        with pytest.raises(ServerUnreachable, match="The model server cannot be reached"):
            await collect(client, "hello")
        with pytest.raises(ServerUnreachable):
            await client.list_models()
    finally:
        await client.aclose()


async def test_timeout(fake: RunningFake) -> None:
    client = ChatClient(fake.base_url, "k", timeout_s=0.02)
    try:
        with pytest.raises(RequestTimeout, match="did not answer in time"):
            await collect(client, "#scenario=slow")
    finally:
        await client.aclose()


def chained(*links: BaseException) -> BaseException:
    """``links[0]`` raised from ``links[1]``, raised from ``links[2]``...: how the SDK's
    aiohttp transport and the SDK chain what they raise (docs/facts.md)."""
    for outer, inner in itertools.pairwise(links):
        outer.__cause__ = inner
    return links[0]


@pytest.mark.parametrize(
    ("aiohttp_error", "slow"),
    [
        (lambda aiohttp: aiohttp.SocketTimeoutError("read"), True),
        (lambda aiohttp: aiohttp.ConnectionTimeoutError("connect"), True),
        (lambda aiohttp: aiohttp.ClientConnectionResetError("reset"), False),
        (lambda aiohttp: aiohttp.ServerDisconnectedError(), False),
    ],
)
def test_what_the_transport_calls_a_connect_timeout_is_read_by_its_cause(
    aiohttp_error: object, slow: bool
) -> None:
    """The transport raises ``httpx2.ConnectTimeout`` for every aiohttp connection error;
    a reset or a disconnect is a failure to reach the server, not a slow server."""
    import aiohttp
    import httpx2
    import openai

    request = httpx2.Request("POST", "http://h/v1/chat/completions")
    error = chained(
        openai.APITimeoutError(request=request),
        httpx2.ConnectTimeout("mapped"),
        aiohttp_error(aiohttp),  # type: ignore[operator]
    )
    mapped = map_error(error, base_url="http://h/v1", model="m")  # type: ignore[arg-type]
    assert isinstance(mapped, RequestTimeout if slow else ServerUnreachable)


async def test_models(client: ChatClient) -> None:
    models = await client.list_models()
    assert [(m.id, m.max_model_len) for m in models] == [("kimi-vl-thinking-2506", 8192)]


async def test_closing_the_stream_early_closes_the_response(
    client: ChatClient, fake: RunningFake
) -> None:
    request = ChatRequest(
        model="m",
        messages=[{"role": "user", "content": "#scenario=slow"}],
        max_tokens=10,
        temperature=0.0,
        thinking=True,
    )
    stream = client.stream(request)
    first = await anext(stream)
    assert isinstance(first, ReasoningDelta)
    await stream.aclose()  # what cancellation by Stop does
    for _ in range(100):  # the scripted server saw the client go before the end
        if fake.server.aborted:
            break
        await asyncio.sleep(0.01)
    assert len(fake.server.aborted) == 1
    # A new request still works on the same client after the early close.
    assert texts(await collect(client, "#scenario=plain")) == ("", ANSWER)


async def test_an_error_event_with_a_client_status_is_a_rejection() -> None:
    """vLLM 0.32 sends an error inside a started stream with the status it would have
    answered as ``code``: a 400 there is the request's fault, a 500 the server's."""

    def event(code: int, param: str | None = None) -> Exception:
        body = {"message": "bad", "type": "BadRequestError", "param": param, "code": code}
        return ErrorEvent(body)

    assert type(map_error(event(400, "image"), base_url="u", model="m")) is TooManyImages
    assert type(map_error(event(400), base_url="u", model="m")) is RequestRejected
    assert type(map_error(event(500), base_url="u", model="m")) is ServerFailed


def test_map_error_passes_unknown_exceptions_as_server_failed() -> None:
    mapped = map_error(ValueError("boom"), base_url="u", model="m")
    assert isinstance(mapped, ServerFailed) and "Unexpected failure" in str(mapped)
    assert "ValueError" not in str(mapped) and "boom" not in str(mapped)  # app.log has them


async def test_thinking_model_answer_without_markers_is_flagged(client: ChatClient) -> None:
    events = await collect(client, "#scenario=plain", thinking=True)
    done = events[-1]
    assert isinstance(done, Done)
    assert done.answer_in_reasoning and not done.reasoning_unclosed
    assert done.reasoning_s is None  # it did not think: no "thought for" in the stats
    assert texts(events) == (ANSWER.lstrip(), "")  # streamed live as reasoning, flagged at the end


async def test_a_written_opening_marker_is_read_as_the_replys_own(client: ChatClient) -> None:
    """The request wrote ``◁think▷`` (backend/families.py, ``ModelFamily.reply_start``):
    a reply that stops without closing it is unclosed reasoning, as when the model wrote the marker,
    not an answer written without markers."""
    events = await collect(client, "#scenario=unclosed", thinking=True, prefill="◁think▷")
    done = events[-1]
    assert isinstance(done, Done) and done.finish_reason == "stop"
    assert done.reasoning_unclosed and not done.answer_in_reasoning
    assert texts(events) == (REASONING, "")


async def test_a_thinking_reply_that_closes_the_written_marker_at_once_is_all_answer(
    client: ChatClient,
) -> None:
    """A Thinking model that answers without thought closes the written marker first
    (the scripted server's ``plain`` answer, continued): no reasoning, all answer."""
    events = await collect(client, "#scenario=plain", thinking=True, prefill="◁think▷")
    done = events[-1]
    assert isinstance(done, Done) and not done.answer_in_reasoning
    assert not done.reasoning_unclosed and done.reasoning_s is None
    assert texts(events) == ("", ANSWER.lstrip())


def test_only_errors_that_may_pass_get_a_retry() -> None:
    assert can_retry(ServerUnreachable("x")) and can_retry(ServerLoading("x"))
    assert can_retry(ServerFailed("x")) and can_retry(RequestTimeout("x"))
    assert not can_retry(ContextTooLong("x")) and not can_retry(TooManyImages("x"))


async def test_a_closed_client_raises_our_error(fake: RunningFake) -> None:
    """Defect: a closed client raised httpx's RuntimeError ("Unexpected failure")."""
    client = ChatClient(fake.base_url, "k")
    await client.aclose()
    with pytest.raises(ClientClosed, match="shutting down"):
        await client.list_models()
    with pytest.raises(ClientClosed, match="shutting down"):
        await collect(client, "hello")
    assert await client.count_text_tokens("m", "hello") is None


async def test_a_client_closing_refuses_a_new_stream_at_once(fake: RunningFake) -> None:
    """Defect (review): a stream begun while ``aclose`` closed the streams' session got
    aiohttp's "Session is closed", said as an unexpected failure."""
    client = ChatClient(fake.base_url, "k")
    await collect(client, "#scenario=plain")  # the streams' session exists
    closing = asyncio.create_task(client.aclose())
    await asyncio.sleep(0)  # aclose has begun, its pools are closing
    with pytest.raises(ClientClosed, match="shutting down"):
        await collect(client, "hello")
    await closing


def test_an_sdk_still_loading_is_not_read_for_its_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect (review): while the SDK is imported in its thread, ``sys.modules`` holds it
    before its exception classes exist; reading them raised AttributeError."""
    monkeypatch.setitem(sys.modules, "openai", types.ModuleType("openai"))
    body = {"error": {"message": "EngineCore died.", "type": "InternalServerError"}}
    mapped = map_error(HttpStatusError(500, body), base_url="u", model="m")
    assert type(mapped) is ServerFailed and "failed while answering" in str(mapped)
    assert "EngineCore" not in str(mapped)
    assert type(map_error(ValueError("x"), base_url="u", model="m")) is ServerFailed


@pytest.mark.parametrize("mode", ["not-json", "missing"])
async def test_tokenize_that_cannot_count_gives_none(
    client: ChatClient, fake: RunningFake, mode: str
) -> None:
    """Defect: a 200 whose body is not JSON raised JSONDecodeError from /tokenize."""
    fake.server.tokenize_mode = mode
    assert await client.count_text_tokens("m", "hello") is None
    assert await client.count_prompt_tokens("m", [{"role": "user", "content": "hi"}]) is None


@pytest.mark.parametrize(
    ("scenario", "words"),
    [("garbled", "reply was garbled"), ("dropped", "reply was cut off")],
)
async def test_a_stream_that_breaks_says_how_and_keeps_what_came(
    client: ChatClient, scenario: str, words: str
) -> None:
    """Defect: a malformed chunk or a dropped connection mid-stream read as
    "Unexpected failure ... (JSONDecodeError)" or "Cannot reach the model server"."""
    received: list[StreamEvent] = []
    request = ChatRequest(
        model="kimi-vl-thinking-2506",
        messages=[{"role": "user", "content": f"#scenario={scenario}"}],
        max_tokens=100,
        temperature=0.8,
        thinking=True,
    )
    with pytest.raises(StreamBroken, match=words) as caught:
        async for event in client.stream(request):
            received.append(event)
    reasoning, answer = texts(received)
    assert reasoning == "Let me see" and ANSWER.startswith(answer) and answer
    assert "\n" not in str(caught.value) and can_retry(caught.value)


@pytest.mark.serial
async def test_the_opening_marker_alone_starts_the_reasoning_at_once(client: ChatClient) -> None:
    """vLLM's first chunk may be ``◁think▷`` alone, the rest a UI update later: the
    reasoning step must show when the marker comes, not with the next chunk."""
    request = ChatRequest(
        model="kimi-vl-thinking-2506",
        messages=[{"role": "user", "content": "#scenario=marker-first"}],
        max_tokens=100,
        temperature=0.8,
        thinking=True,
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    stream = client.stream(request)
    first = await anext(stream)
    assert first == ReasoningDelta("") and loop.time() - started < 0.8  # before the 1 s pause
    rest = [first, *[event async for event in stream]]
    assert texts(rest) == (REASONING, ANSWER.lstrip())
    done = rest[-1]
    assert isinstance(done, Done) and done.ttft_s is not None and done.ttft_s < 0.8


async def test_a_thinking_request_that_writes_its_marker_opens_the_reasoning_when_taken(
    client: ChatClient,
) -> None:
    """The request begins the reply with ``◁think▷``: the reasoning is open as soon as the
    server takes the request, before its first token (here 4 s of silence), and that is
    no token: the time to the first token counts from the words."""
    messages = [{"role": "user", "content": "#scenario=silent"}]
    request = ChatRequest(
        model="kimi-vl-thinking-2506",
        messages=messages,
        max_tokens=100,
        temperature=0.8,
        thinking=True,
        prefill="◁think▷",
    )
    loop = asyncio.get_running_loop()
    started = loop.time()
    stream = client.stream(request)
    assert await anext(stream) == ReasoningOpened() and loop.time() - started < 3
    rest = [event async for event in stream]
    assert ReasoningOpened() not in rest
    done = rest[-1]
    assert isinstance(done, Done) and done.ttft_s is not None and done.ttft_s > 3.5
    instruct = replace(request, model="kimi-vl", thinking=False, prefill="")
    assert ReasoningOpened() not in [event async for event in client.stream(instruct)]


MODEL_ENTRY = {"id": "m", "object": "model", "created": 0, "owned_by": "t"}


class LateClosingServer:
    """An HTTP/1.1 server that keeps connections alive but drops, unanswered, a request
    that arrives on a connection idle for ``stale_s`` or more: what uvicorn (vLLM's HTTP
    server) does when its keep-alive timer fires on a loaded event loop just as the
    client writes its next request onto that connection."""

    def __init__(self, stale_s: float) -> None:
        self.stale_s = stale_s
        self.connections = 0
        self.dropped = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        last_answer: float | None = None
        loop = asyncio.get_running_loop()
        while head := await reader.readuntil(b"\r\n\r\n"):
            if last_answer is not None and loop.time() - last_answer >= self.stale_s:
                self.dropped += 1
                writer.transport.abort()
                return
            path = head.split(b" ", 2)[1]
            body = json.dumps({"object": "list", "data": [MODEL_ENTRY]}).encode()
            status = b"200 OK" if path in (b"/v1/models", b"/health") else b"404 Not Found"
            writer.write(
                b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n"
                b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
            )
            await writer.drain()
            last_answer = loop.time()


async def test_an_idle_connection_is_not_reused_as_the_server_closes_it() -> None:
    # Soak run of 2026-12-01: 6 of 1,280 answers failed "Cannot reach the model server"
    # with the server up; the pooled connection had idled as long as the server keeps it.
    fake = LateClosingServer(stale_s=3.0)
    server = await asyncio.start_server(fake.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = ChatClient(f"http://127.0.0.1:{port}/v1", "k")
    try:
        assert [m.id for m in await client.list_models()] == ["m"]
        health = f"{client.server_root}/health"
        assert (await client.http.get(health)).status_code == 200
        await asyncio.sleep(3.2)
        assert [m.id for m in await client.list_models()] == ["m"]  # the chat path (SDK)
        assert (await client.http.get(health)).status_code == 200  # vLLM's own (httpx)
    finally:
        await client.aclose()
        server.close()
    assert fake.dropped == 0
    assert fake.connections == 4  # two clients' pools, each opened afresh after the pause
