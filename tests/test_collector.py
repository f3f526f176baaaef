"""Full garbage collections at quiet moments (backend/collector.py); CPython up to 3.13,
where the collector has generations and thresholds to take over."""

from __future__ import annotations

import asyncio
import gc
import sys
import time
import weakref
from collections.abc import Iterator

import pytest

from backend.collector import FullCollections
from backend.fair_use import AnswerQueues
from backend.resources import AppResources
from backend.safety import collector_paused
from backend.settings import Settings

pytestmark = pytest.mark.skipif(
    sys.version_info >= (3, 14), reason="Python 3.14's incremental collector: no takeover"
)


def full_passes() -> int:
    """How many generation-2 collections this process has run."""
    return int(gc.get_stats()[2]["collections"])


def allocate_like_a_burst() -> None:
    """Containers that survive the young collections, more than half as many as the
    oldest generation holds: CPython runs an automatic full pass once the survivors
    since the last one are over a quarter of it, so without a schedule this sets off
    at least one (three in a fresh process, measured)."""
    count = max(300_000, len(gc.get_objects(2)))
    kept = [[i] for i in range(count)]
    assert len(kept) == count


class Node:
    """Something that can refer to itself."""

    me: Node


def old_garbage() -> list[bool]:
    """A reference cycle that reached the oldest generation and was then dropped: only a
    full pass frees it. The returned list gets True when it is freed."""
    freed: list[bool] = []
    node = Node()
    node.me = node
    weakref.finalize(node, freed.append, True)
    gc.collect(1)  # survivors of the young generations move to the oldest
    del node
    return freed


@pytest.fixture
def thresholds() -> Iterator[None]:
    """Whatever a test does, the process's thresholds are as they were after it."""
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_no_automatic_full_pass_once_taken_over_until_handed_back(thresholds: None) -> None:
    before = gc.get_threshold()
    collections = FullCollections(lambda: -1.0)
    collections.take_over()
    passes = full_passes()
    allocate_like_a_burst()
    assert full_passes() == passes
    collections.hand_back()
    assert gc.get_threshold() == before
    allocate_like_a_burst()
    assert full_passes() > passes


async def test_a_full_pass_waits_for_a_quiet_moment_and_frees_old_garbage(
    thresholds: None,
) -> None:
    asked = [time.monotonic()]
    collections = FullCollections(lambda: asked[0], every_s=0.5, quiet_s=0.3)
    collections.take_over()
    freed = old_garbage()
    passes = full_passes()
    started = time.monotonic()
    running = asyncio.create_task(collections.run())
    try:
        while time.monotonic() - started < 0.6:  # a question every 20 ms for 0.6 s
            asked[0] = time.monotonic()
            await asyncio.sleep(0.02)
        assert full_passes() == passes and not freed
        last_question = asked[0]
        while not freed and time.monotonic() - started < 3:
            await asyncio.sleep(0.01)
        assert freed and full_passes() > passes
        assert time.monotonic() - last_question >= 0.3
    finally:
        running.cancel()
        collections.hand_back()


async def test_questions_without_a_pause_do_not_put_a_full_pass_off_for_ever(
    thresholds: None,
) -> None:
    collections = FullCollections(time.monotonic, every_s=0.1, quiet_s=10)  # never quiet
    collections.take_over()
    freed = old_garbage()
    running = asyncio.create_task(collections.run())
    try:
        for _ in range(100):
            if freed:
                break
            await asyncio.sleep(0.01)
        assert freed  # within about twice every_s, though no moment was quiet
    finally:
        running.cancel()
        collections.hand_back()


async def test_no_full_pass_while_collection_is_paused(thresholds: None) -> None:
    """A long answer being read turns collection off (backend/safety.py): the schedule
    leaves that moment alone and frees the garbage once collection is back on."""
    collections = FullCollections(lambda: -1.0, every_s=0.05, quiet_s=0.01)
    collections.take_over()
    freed = old_garbage()
    running = asyncio.create_task(collections.run())
    try:
        with collector_paused():
            await asyncio.sleep(0.3)  # six rounds of the schedule
            assert not freed
        for _ in range(100):
            if freed:
                break
            await asyncio.sleep(0.01)
        assert freed
    finally:
        running.cancel()
        collections.hand_back()


async def test_the_app_runs_its_full_passes_from_its_start_to_its_stop(
    thresholds: None,
) -> None:
    before = gc.get_threshold()
    shared = AppResources.start(Settings())
    shared.start_housekeeping(preload_after_s=3600)
    passes = full_passes()
    allocate_like_a_burst()
    assert full_passes() == passes
    await shared.aclose()
    assert gc.get_threshold() == before


def test_two_holders_in_one_process_restore_what_it_had_whatever_the_order(
    thresholds: None,
) -> None:
    before = gc.get_threshold()
    first, second = FullCollections(lambda: -1.0), FullCollections(lambda: -1.0)
    first.take_over()
    second.take_over()
    first.hand_back()
    passes = full_passes()
    allocate_like_a_burst()
    assert full_passes() == passes  # the second still holds
    second.hand_back()
    assert gc.get_threshold() == before


def test_each_question_asked_is_the_last_one_asked() -> None:
    queues = AnswerQueues(per_chat=1, per_person=1)
    before = time.monotonic()
    place = queues.enter("chat", "ann")
    assert before <= queues.last_entered <= time.monotonic()
    place.leave()
