"""Batching and pacing of streamed text for the UI: the pure :class:`Pacer` on a fake clock,
chunk by chunk, and :func:`coalesce` on the event loop's real clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterable

import pytest

from backend.batching import Pacer, Pacing, StreamPace, coalesce
from backend.errors import FirstTokenTimeout, StreamStalled
from backend.events import (
    AnswerDelta,
    Done,
    ReasoningDelta,
    ReasoningOpened,
    StreamEvent,
    Waiting,
)

DONE = Done(finish_reason="stop", usage=None, ttft_s=0.1, reasoning_s=None, elapsed_s=1.0)


class Source:
    """Replays events with a pause before each one; records whether it was closed."""

    def __init__(self, events: Iterable[tuple[float, StreamEvent]]) -> None:
        self.events = list(events)
        self.closed = False

    async def stream(self) -> AsyncGenerator[StreamEvent, None]:
        try:
            for pause, event in self.events:
                if pause:
                    await asyncio.sleep(pause)
                yield event
        finally:
            self.closed = True


async def run(events: list[StreamEvent], step: float) -> list[StreamEvent | Waiting]:
    source = Source((step, e) for e in events)
    return [e async for e in coalesce(source.stream(), Pacing(interval_s=0.05))]


async def test_tokens_are_merged_within_the_interval() -> None:
    events: list[StreamEvent] = [ReasoningDelta(f"r{i} ") for i in range(100)]
    events += [AnswerDelta(f"a{i} ") for i in range(100)] + [DONE]
    out = await run(events, step=0.0)  # all at once: one batch per interval
    reasoning = [e for e in out if isinstance(e, ReasoningDelta)]
    answer = [e for e in out if isinstance(e, AnswerDelta)]
    assert "".join(e.text for e in reasoning) == "".join(f"r{i} " for i in range(100))
    assert "".join(e.text for e in answer) == "".join(f"a{i} " for i in range(100))
    assert reasoning[0].text == "r0 " and answer[0].text == "a0 "  # first tokens not delayed
    assert len(reasoning) <= 4 and len(answer) <= 4
    assert out[-1] == DONE
    kinds = [type(e) for e in out]
    assert kinds.index(AnswerDelta) > max(i for i, k in enumerate(kinds) if k is ReasoningDelta)


async def test_slow_streams_pass_through_unchanged() -> None:
    events: list[StreamEvent] = [AnswerDelta(str(i)) for i in range(10)]
    events.append(DONE)
    assert await run(events, step=0.08) == events


async def test_held_text_is_released_before_done() -> None:
    out = await run([AnswerDelta("a"), AnswerDelta("b"), AnswerDelta("c"), DONE], step=0.0)
    assert out == [AnswerDelta("a"), AnswerDelta("bc"), DONE]


async def test_held_text_reaches_the_screen_while_the_server_stalls() -> None:
    """Text before a stall is shown at once, not held until the next chunk."""
    source = Source([(0, AnswerDelta("a")), (0, AnswerDelta("b")), (1.0, AnswerDelta("c"))])
    loop = asyncio.get_running_loop()
    start = loop.time()
    seen: list[tuple[str, float]] = []
    async for part in coalesce(source.stream(), Pacing(interval_s=0.05)):
        assert isinstance(part, AnswerDelta)
        seen.append((part.text, loop.time() - start))
    assert [text for text, _ in seen] == ["a", "b", "c"]
    assert seen[1][1] < 0.5  # "b" was on screen long before the stall ended (1 s)


async def test_waiting_is_said_before_the_first_token_with_the_queue() -> None:
    source = Source([(0.45, AnswerDelta("late")), (0, DONE)])
    asked: list[int] = []

    async def queued() -> int:
        asked.append(1)
        return 3

    pacing = Pacing(waiting_after_s=0.1, waiting_every_s=0.15)
    out = [e async for e in coalesce(source.stream(), pacing, queued)]
    waits = [e for e in out if isinstance(e, Waiting)]
    assert 2 <= len(waits) <= 3 and all(w.queued == 3 for w in waits)
    assert waits[0].seconds >= 0.1 and out[-2:] == [AnswerDelta("late"), DONE]


async def test_no_first_token_in_time_gives_up_and_closes_the_stream() -> None:
    source = Source([(30, AnswerDelta("never"))])
    pacing = Pacing(waiting_after_s=10, first_token_timeout_s=0.2)
    with pytest.raises(FirstTokenTimeout, match="has not started answering in 0 s"):
        _ = [e async for e in coalesce(source.stream(), pacing)]
    assert source.closed


async def test_a_stall_mid_answer_gives_up_after_what_came() -> None:
    source = Source([(0, ReasoningDelta("r")), (0, AnswerDelta("a")), (30, AnswerDelta("b"))])
    out: list[StreamEvent | Waiting] = []
    with pytest.raises(StreamStalled, match="nothing for 0 s"):
        async for event in coalesce(source.stream(), Pacing(idle_timeout_s=0.2)):
            out.append(event)
    assert out == [ReasoningDelta("r"), AnswerDelta("a")] and source.closed


async def test_closing_mid_stall_closes_the_source_at_once() -> None:
    source = Source([(0, AnswerDelta("a")), (30, AnswerDelta("b"))])
    stream = coalesce(source.stream(), Pacing())
    assert await anext(stream) == AnswerDelta("a")
    await asyncio.wait_for(stream.aclose(), timeout=1)  # what Stop does
    assert source.closed


def test_pace_asks_one_ui_interval_of_tokens_per_chunk() -> None:
    pace = StreamPace(interval_s=0.05)
    assert pace.tokens_per_chunk() == 2  # nothing learnt: 40 tokens/s assumed
    pace.observe(tokens=199, seconds=1.99)  # 100 tokens/s: 5 arrive per 50 ms update
    assert pace.tokens_per_chunk() == 5
    pace.observe(tokens=10, seconds=0.01)  # too short an answer to time: ignored
    assert pace.tokens_per_chunk() == 5


@pytest.mark.parametrize(("assumed", "chunk"), [(10.0, 1), (40.0, 2), (100.0, 5), (1000.0, 32)])
def test_before_any_answer_the_pace_asks_one_update_at_the_assumed_speed(
    assumed: float, chunk: int
) -> None:
    pace = StreamPace(interval_s=0.05, max_tokens=32, assumed_tokens_per_s=assumed)
    assert pace.tokens_per_chunk() == chunk
    pace.observe(tokens=400, seconds=1.0)  # the first timed answer replaces the assumption
    assert pace.tokens_per_chunk() == 20


def test_pace_follows_the_server_and_stays_within_bounds() -> None:
    pace = StreamPace(interval_s=0.05, max_tokens=32, smoothing=0.5)
    pace.observe(tokens=300, seconds=1.0)
    assert pace.tokens_per_chunk() == 15  # 300 tokens/s
    pace.observe(tokens=100, seconds=1.0)  # the server got busy: halfway to 100 tokens/s
    assert pace.tokens_per_chunk() == 10
    slow = StreamPace(interval_s=0.05)
    slow.observe(tokens=100, seconds=20.0)  # 5 tokens/s: still every token
    assert slow.tokens_per_chunk() == 1
    fast = StreamPace(interval_s=0.05, max_tokens=32)
    fast.observe(tokens=5000, seconds=1.0)
    assert fast.tokens_per_chunk() == 32


async def timed(source: Source, pacing: Pacing) -> list[tuple[StreamEvent | Waiting, float]]:
    """What coalesce releases, each with the seconds since the source began."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    return [(e, loop.time() - start) async for e in coalesce(source.stream(), pacing)]


async def test_a_lone_opening_marker_does_not_hold_back_the_first_words() -> None:
    """The marker alone (an empty reasoning delta) opens the step, then the first words
    pass at once too; only later text waits for the interval."""
    source = Source([(0, ReasoningDelta("")), (0.02, ReasoningDelta("Okay")), (0.02, DONE)])
    source.events.insert(2, (0.02, ReasoningDelta(", so")))
    out = await timed(source, Pacing(interval_s=1.0))
    assert [e for e, _ in out] == [ReasoningDelta(""), ReasoningDelta("Okay"),
                                   ReasoningDelta(", so"), DONE]  # fmt: skip
    okay_at = out[1][1]
    assert okay_at < 0.5  # at once (about 0.02 s), not a 1 s interval after the marker
    assert out[2][1] >= 0.04  # ", so" waited for the end (Done), within the interval


async def test_the_first_answer_words_pass_at_once_after_released_reasoning() -> None:
    """The interval restarts for the answer even when no reasoning was held at its start."""
    source = Source([(0, ReasoningDelta("thinking")), (0.05, AnswerDelta("Answer")), (0.5, DONE)])
    out = await timed(source, Pacing(interval_s=1.0))
    assert [e for e, _ in out] == [ReasoningDelta("thinking"), AnswerDelta("Answer"), DONE]
    assert out[1][1] < 0.4  # at once (about 0.05 s), not after the 1 s interval


PACING = Pacing(interval_s=0.05, waiting_after_s=3.0, waiting_every_s=5.0)


def test_pacer_first_visible_words_pass_at_once_after_a_lone_marker() -> None:
    pacer = Pacer(PACING, started=0.0)
    assert pacer.feed(ReasoningDelta(""), 0.100) == [ReasoningDelta("")]  # the step opens
    assert pacer.feed(ReasoningDelta("Okay"), 0.105) == [ReasoningDelta("Okay")]  # at once
    assert pacer.feed(ReasoningDelta(","), 0.110) == []  # then paced: held
    assert pacer.feed(ReasoningDelta(" so"), 0.115) == []
    assert pacer.deadline() == pytest.approx(0.155)  # one interval after "Okay"
    assert pacer.tick(0.155) == [ReasoningDelta(", so")]
    assert pacer.feed(ReasoningDelta(" then"), 0.160) == []


def test_pacer_an_opened_reasoning_passes_at_once_and_the_server_is_still_waited_for() -> None:
    """The step opens as the server takes the request; until text comes the server has
    not started answering: the waiting notes and the first-token timeout still apply."""
    pacing = Pacing(interval_s=0.05, waiting_after_s=3.0, first_token_timeout_s=10.0)
    pacer = Pacer(pacing, started=0.0)
    assert pacer.feed(ReasoningOpened(), 0.01) == [ReasoningOpened()]
    assert pacer.deadline() == pytest.approx(3.0)
    assert pacer.tick(3.0) == [Waiting(3.0)]
    with pytest.raises(FirstTokenTimeout):
        pacer.tick(10.0)
    pacer = Pacer(pacing, started=0.0)
    pacer.feed(ReasoningOpened(), 0.01)
    assert pacer.feed(ReasoningDelta("Okay"), 0.02) == [ReasoningDelta("Okay")]  # at once


def test_pacer_whitespace_alone_is_no_visible_word() -> None:
    pacer = Pacer(PACING, started=0.0)
    assert pacer.feed(AnswerDelta("\n"), 0.01) == [AnswerDelta("\n")]
    assert pacer.feed(AnswerDelta("Hi"), 0.02) == [AnswerDelta("Hi")]
    assert pacer.feed(AnswerDelta("!"), 0.03) == []


def test_pacer_a_new_kind_passes_at_once_and_held_text_goes_first() -> None:
    pacer = Pacer(PACING, started=0.0)
    assert pacer.feed(ReasoningDelta("r1"), 0.01) == [ReasoningDelta("r1")]
    assert pacer.feed(ReasoningDelta("r2"), 0.02) == []
    assert pacer.feed(AnswerDelta("a1"), 0.03) == [ReasoningDelta("r2"), AnswerDelta("a1")]
    assert pacer.feed(AnswerDelta("a2"), 0.04) == []
    assert pacer.feed(DONE, 0.05) == [AnswerDelta("a2"), DONE]
    assert pacer.deadline() is None  # nothing held, no idle timeout


def test_pacer_released_reasoning_does_not_hold_back_the_answer() -> None:
    pacer = Pacer(PACING, started=0.0)
    assert pacer.feed(ReasoningDelta("r"), 0.01) == [ReasoningDelta("r")]
    assert pacer.deadline() is None  # nothing held
    assert pacer.feed(AnswerDelta("a"), 0.02) == [AnswerDelta("a")]  # within r's interval


def test_pacer_waiting_then_giving_up_before_the_first_token() -> None:
    pacing = Pacing(waiting_after_s=3.0, waiting_every_s=5.0, first_token_timeout_s=10.0)
    pacer = Pacer(pacing, started=100.0)
    assert pacer.deadline() == 103.0
    assert pacer.tick(103.0) == [Waiting(3.0)]
    assert pacer.deadline() == 108.0
    assert pacer.tick(108.0) == [Waiting(8.0)]
    assert pacer.deadline() == 110.0
    with pytest.raises(FirstTokenTimeout, match="in 10 s"):
        pacer.tick(110.0)


def test_pacer_a_silent_stream_gives_up_after_the_idle_timeout() -> None:
    pacer = Pacer(Pacing(idle_timeout_s=2.0), started=0.0)
    assert pacer.feed(AnswerDelta("a"), 1.0) == [AnswerDelta("a")]
    assert pacer.deadline() == 3.0
    assert pacer.feed(AnswerDelta("b"), 1.01) == []
    assert pacer.deadline() == pytest.approx(1.05)  # the held "b" first
    assert pacer.tick(1.05) == [AnswerDelta("b")]
    assert pacer.deadline() == pytest.approx(3.01)
    with pytest.raises(StreamStalled, match="nothing for 2 s"):
        pacer.tick(3.01)
