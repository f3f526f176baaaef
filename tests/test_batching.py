"""Batching of streamed text for the UI."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterable

from backend.batching import coalesce
from backend.events import AnswerDelta, Done, ReasoningDelta, StreamEvent

DONE = Done(finish_reason="stop", usage=None, ttft_s=0.1, reasoning_s=None, elapsed_s=1.0)


async def replay(events: Iterable[StreamEvent]) -> AsyncGenerator[StreamEvent, None]:
    for event in events:
        yield event


class Clock:
    """A clock that advances by ``step`` seconds each time it is read."""

    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


async def run(events: list[StreamEvent], step: float) -> list[StreamEvent]:
    return [e async for e in coalesce(replay(events), interval_s=0.05, clock=Clock(step))]


async def test_tokens_are_merged_within_the_interval() -> None:
    events: list[StreamEvent] = [ReasoningDelta(f"r{i} ") for i in range(100)]
    events += [AnswerDelta(f"a{i} ") for i in range(100)] + [DONE]
    out = await run(events, step=0.001)  # 1 ms between tokens: 50 per batch
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
    assert await run(events, step=0.1) == events


async def test_held_text_is_released_before_done() -> None:
    out = await run([AnswerDelta("a"), AnswerDelta("b"), AnswerDelta("c"), DONE], step=0.001)
    assert out == [AnswerDelta("a"), AnswerDelta("bc"), DONE]
