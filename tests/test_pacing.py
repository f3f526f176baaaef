"""One server's pace: the chunk size asked of vLLM follows the speed learnt from answers."""

from __future__ import annotations

import asyncio

import pytest

from backend.batching import Pacing
from backend.client import ChatClient, ChatRequest
from backend.events import AnswerDelta, Done, ReasoningDelta, ReasoningOpened, StreamEvent
from backend.pacing import QUEUE_FRESH_S, ServerPace
from tests.conftest import RunningFake
from tests.fakes.kimi_server import ANSWER, REASONING


def asked(text: str, thinking: bool = True, prefill: str = "") -> ChatRequest:
    return ChatRequest(
        model="kimi-vl-thinking-2506",
        messages=[{"role": "user", "content": text}],
        max_tokens=100,
        temperature=0.8,
        thinking=thinking,
        prefill=prefill,
    )


async def chunks(
    pace: ServerPace, text: str, thinking: bool = False, prefill: str = ""
) -> list[StreamEvent]:
    """The stream's events as ``pace`` asks for it, one per chunk (not paced for the UI);
    ``pace`` learns from its end."""
    request = pace.request(asked(text, thinking, prefill))
    events = [e async for e in pace.client.stream(request)]
    assert isinstance(events[-1], Done)
    pace.learn(events[-1])
    return events


def texts(events: list[StreamEvent]) -> tuple[str, str]:
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    answer = "".join(e.text for e in events if isinstance(e, AnswerDelta))
    return reasoning, answer


async def test_chunks_follow_the_learnt_speed_with_the_same_text(fake: RunningFake) -> None:
    """As many tokens per chunk as the UI shows per update (50 ms)."""
    client = ChatClient(fake.base_url, "k")
    every_token, learnt = ServerPace(client, stream_interval=1), ServerPace(client)
    first = await chunks(learnt, "#scenario=thinking")
    assert fake.requests[-1]["stream_interval"] == 2  # nothing learnt yet: 40 tokens/s assumed
    learnt.speed.tokens_per_s = 100.0  # whatever it learnt from the first: now 100 tokens/s
    grouped = await chunks(learnt, "#scenario=thinking")
    assert fake.requests[-1]["stream_interval"] == 5  # 100 tokens/s x 50 ms
    plain = await chunks(every_token, "#scenario=thinking")
    assert "stream_interval" not in fake.requests[-1]
    assert texts(grouped) == texts(plain) == texts(first) == (REASONING, ANSWER.lstrip())
    assert len(grouped) < len(plain) / 3  # fewer chunks, fewer events
    await client.aclose()


async def test_a_thinking_request_that_writes_its_marker_gets_words_first_then_chunks(
    fake: RunningFake,
) -> None:
    """The request writes ``◁think▷`` itself: the first token is a reasoning word, sent
    alone at once, and the rest comes at the learnt pace, the same text in fewer chunks."""
    client = ChatClient(fake.base_url, "k")
    learnt = ServerPace(client)
    learnt.speed.tokens_per_s = 100.0
    every_token = await chunks(ServerPace(client, 1), "#scenario=thinking", thinking=True)
    events = await chunks(learnt, "#scenario=thinking", thinking=True, prefill="◁think▷")
    sent = fake.requests[-1]
    assert sent["stream_interval"] == 5
    assert sent["messages"][-1] == {"role": "assistant", "content": "◁think▷"}
    assert sent["continue_final_message"] is True and sent["add_generation_prompt"] is False
    assert texts(events) == texts(every_token) == (REASONING, ANSWER.lstrip())
    assert events[0] == ReasoningOpened()  # the step opens as the server takes the request
    first = events[1]  # the first token alone: words, not the marker
    assert isinstance(first, ReasoningDelta) and first.text and REASONING.startswith(first.text)
    assert every_token[0] == ReasoningDelta("")  # the marker alone, then the words
    assert len(events) < len(every_token) / 3
    await client.aclose()


async def test_a_thinking_request_asks_every_token_so_its_first_words_come_at_once(
    fake: RunningFake,
) -> None:
    """Its first token is the opening marker alone: with a learnt stream_interval of 5 the
    first reasoning words would come 5 tokens (one UI update) after it."""
    client = ChatClient(fake.base_url, "k")
    learnt = ServerPace(client)
    learnt.speed.tokens_per_s = 100.0
    events = await chunks(learnt, "#scenario=thinking", thinking=True)
    assert "stream_interval" not in fake.requests[-1]
    assert texts(events) == (REASONING, ANSWER.lstrip())
    await chunks(ServerPace(client, stream_interval=4), "#scenario=thinking", thinking=True)
    assert fake.requests[-1]["stream_interval"] == 4  # an operator's choice stands
    await client.aclose()


async def test_a_fixed_stream_interval_is_sent_from_the_first_request(fake: RunningFake) -> None:
    client = ChatClient(fake.base_url, "k")
    await chunks(ServerPace(client, stream_interval=3), "#scenario=plain")
    assert fake.requests[-1]["stream_interval"] == 3
    await client.aclose()


@pytest.mark.serial
async def test_the_speed_is_learnt_from_a_paced_answer(fake: RunningFake) -> None:
    """The scripted ``paced`` stream sends 200 tokens 10 ms apart: 100 tokens/s."""
    client = ChatClient(fake.base_url, "k")
    pace = ServerPace(client)
    events = [e async for e in pace.paced(asked("#scenario=paced"), Pacing())]
    assert isinstance(events[-1], Done) and events[-1].finish_reason == "stop"
    assert pace.speed.tokens_per_s is not None
    assert 60 < pace.speed.tokens_per_s < 105  # lower only when this machine is busy
    await client.aclose()


async def test_the_queue_is_read_from_the_servers_metrics(fake: RunningFake) -> None:
    client = ChatClient(fake.base_url, "k")
    pace = ServerPace(client)
    assert await pace.queued(fake.server.model) == 0  # a real scrape, tests/data/vllm_metrics.txt
    assert await pace.queued("not-served") is None
    await client.aclose()
    assert await pace.queued() is None  # closed: unknown


async def test_waiting_chats_share_one_read_of_the_queue(fake: RunningFake) -> None:
    """Defect: every chat waiting for its first token read and parsed /metrics itself
    (about 100 ms of CPU each here): a burst of waiting chats paid for each one."""
    client = ChatClient(fake.base_url, "k")
    pace = ServerPace(client)
    before = fake.server.metrics_reads
    model = fake.server.model
    asked_at_once = await asyncio.gather(*(pace.queued(model) for _ in range(8)))
    assert asked_at_once == [0] * 8
    assert await pace.queued(model) == 0  # a moment later: the same read
    assert fake.server.metrics_reads - before == 1
    await client.aclose()


async def test_the_queue_is_read_again_once_its_read_is_old(fake: RunningFake) -> None:
    client = ChatClient(fake.base_url, "k")
    pace = ServerPace(client)
    before = fake.server.metrics_reads
    await pace.queued()
    await asyncio.sleep(QUEUE_FRESH_S + 0.1)
    await pace.queued()
    assert fake.server.metrics_reads - before == 2
    await client.aclose()
