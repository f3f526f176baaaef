"""Chainlit's steps and messages are created without pausing the event loop, still in order."""

from __future__ import annotations

import time
from datetime import datetime

import chainlit as cl
import pytest
from chainlit.context import init_http_context

from ui import chainlit_patches


def _millisecond(stamp: str) -> datetime:
    """What the browser reads of a ``created_at``: milliseconds (JavaScript's Date)."""
    parsed = datetime.fromisoformat(stamp.removesuffix("Z"))
    return parsed.replace(microsecond=parsed.microsecond // 1000 * 1000)


def test_timestamps_taken_in_the_same_instant_are_a_millisecond_apart() -> None:
    frozen = datetime(2026, 12, 1, 16, 40, 0, 123456)
    ticks = chainlit_patches.DistinctClock(lambda: frozen)
    assert [ticks() for _ in range(3)] == [
        "2026-12-01T16:40:00.123456Z",
        "2026-12-01T16:40:00.124456Z",
        "2026-12-01T16:40:00.125456Z",
    ]


def test_the_clock_follows_the_wall_clock_once_it_is_ahead() -> None:
    times = iter([datetime(2026, 12, 1, 16, 40, 0), datetime(2026, 12, 1, 16, 40, 5)])
    ticks = chainlit_patches.DistinctClock(lambda: next(times))
    # Always with microseconds, so the strings sort as the times do.
    assert [ticks(), ticks()] == ["2026-12-01T16:40:00.000000Z", "2026-12-01T16:40:05.000000Z"]


async def test_steps_and_messages_are_made_in_order_without_sleeping(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chainlit_patches.unpause_constructors()
    init_http_context()

    def no_sleeping(seconds: float) -> None:
        raise AssertionError(f"time.sleep({seconds}) blocks the event loop")

    monkeypatch.setattr(time, "sleep", no_sleeping)
    steps = [cl.Step(name=f"step {i}") for i in range(5)]
    cl.Message(content="an answer")
    seen = [_millisecond(step.created_at or "") for step in steps]
    assert seen == sorted(set(seen))  # five distinct milliseconds, in creation order
