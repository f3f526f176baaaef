"""bench/bench_burst.py's arithmetic: added time, CPU per chat, the side-by-side table, the
split of CPUs with ``--pin`` (hermetic: no app, no Open WebUI), and the scripted answer its
first-question measure waits on."""

from __future__ import annotations

import asyncio
import os
import time

import httpx
import pytest

from bench.bench_burst import (
    APP,
    DIRECT,
    PEER,
    QUEUED,
    Level,
    Round,
    app_cores,
    burst_table,
    first_question_summary,
)
from bench.harness import Timing
from tests.conftest import RunningFake


def answered(first_s: float, last_s: float = 2.0) -> Timing:
    return Timing(first_s, last_s, last_s + 0.1, "... (end of answer)", complete=True)


def test_added_time_and_cpu_per_chat_are_per_side() -> None:
    direct = Round(DIRECT, [answered(0.010), answered(0.030)], cpu_s=0.0)
    app = [Round(APP, [answered(0.020), answered(0.050)], cpu_s=0.1)]
    app.append(Round(APP, [answered(0.020), answered(0.050)], cpu_s=0.06))
    level = Level(2, photo=False, rounds={DIRECT: [direct], APP: app})
    assert round(level.added_ms(APP, 50), 6) == 15.0  # 35 ms median less 20 ms
    assert round(level.cpu_ms_per_chat(APP), 6) == 40.0  # 0.16 s over 4 chats
    assert level.faults(APP) == "0 / 0"


def test_a_failed_ask_is_an_error_and_left_out_of_the_times() -> None:
    failed = Timing(float("nan"), float("nan"), float("nan"), error="TimeoutError: ")
    level = Level(1, photo=False)
    level.rounds = {DIRECT: [Round(DIRECT, [answered(0.01)], 0.0)]}
    level.rounds[APP] = [Round(APP, [answered(0.02), failed], 0.0)]
    assert round(level.first_ms(APP, 95), 6) == 20.0
    assert level.faults(APP) == "1 / 0"


def test_the_table_shows_a_side_that_did_not_run_as_a_dash() -> None:
    level = Level(8, photo=True, load_avg=1.5)
    level.rounds = {DIRECT: [Round(DIRECT, [answered(0.01)], 0.0)]}
    level.rounds[APP] = [Round(APP, [answered(0.02)], 0.05)]
    row = burst_table([level]).splitlines()[-1]
    assert row.startswith("| 8 | yes | 1 | +10 / +10 | - | 10 |")
    assert "| 50 / - |" in row and PEER not in row


def test_pinning_keeps_the_driver_to_the_first_cpu_and_gives_the_app_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pinned: dict[int, set[int]] = {}
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3, 1, 2})
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: pinned.update({pid: cpus}))
    assert app_cores(False) is None and pinned == {}
    assert app_cores(True) == {2, 3}
    assert pinned == {0: {1}}  # this process (and what it starts later): the first CPU
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    with pytest.raises(SystemExit, match="at least two CPUs"):
        app_cores(True)


def test_the_first_question_reads_as_its_median_with_every_tab_shown() -> None:
    """A tab whose idle second held a full collection reads negative; one whose question
    second held a closed tab's chat end reads high: neither moves the median."""
    summary = first_question_summary([2.5, -4.0, 2.7, 30.0, 2.6])
    assert summary.startswith("median 2.6 ms of 5 fresh tabs")
    assert summary.endswith("(each: 2.5, -4.0, 2.7, 30.0, 2.6)")


async def test_the_queued_answer_has_the_request_at_once_and_starts_it_after_1_5_s(
    fake: RunningFake,
) -> None:
    body = {"messages": [{"role": "user", "content": QUEUED}], "stream": True}
    async with httpx.AsyncClient(timeout=10) as http:
        asked = time.monotonic()
        async with http.stream("POST", f"{fake.base_url}/chat/completions", json=body) as response:
            status_s = time.monotonic() - asked  # the status and headers are in
            text = (await response.aread()).decode()
    assert len(fake.requests) == 1 and response.status_code == 200
    assert status_s >= 1.5 and '"content"' in text


@pytest.mark.serial
async def test_the_queued_server_reads_the_request_before_it_answers(fake: RunningFake) -> None:
    body = {"messages": [{"role": "user", "content": QUEUED}], "stream": True}
    started = asyncio.Event()
    async with httpx.AsyncClient(timeout=10) as http:

        async def ask() -> None:
            async with http.stream("POST", f"{fake.base_url}/chat/completions", json=body) as r:
                started.set()  # the status and headers are in
                await r.aread()

        asking = asyncio.ensure_future(ask())
        asked = time.monotonic()
        while not fake.requests and time.monotonic() - asked < 1.0:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # a server that answered at once would have by now
        read_s, answered_then = time.monotonic() - asked, started.is_set()
        await asking
    assert fake.requests and read_s < 1.0 and not answered_then
