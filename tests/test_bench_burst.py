"""bench/bench_burst.py's arithmetic: added time, CPU per chat, the side-by-side table, the
split of CPUs with ``--pin`` (hermetic: no app, no Open WebUI), and the scripted answer its
first-question measure waits on."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter

import httpx
import pytest

from bench.bench_burst import (
    ANSWERS,
    APP,
    DIRECT,
    PEER,
    QUEUED,
    Ask,
    Closer,
    Level,
    Round,
    Side,
    app_cores,
    burst,
    burst_table,
    first_question_summary,
    parse_args,
    run_kinds,
)
from bench.harness import PACED, PACED_512, DirectClient, Target, Timing
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


def test_text_and_photo_rounds_take_turns_so_neither_pays_for_the_others_leftovers() -> None:
    """Defect: every text round ran before every photo round, and the chats the earlier
    rounds left (they end a minute after their tabs close) made the photo chats cost
    10-25 ms more each (2026-12-07). Rounds now alternate, the first kind rotating; Open
    WebUI, whose tabs attach no photo, runs in the text rounds only."""
    order: list[tuple[str, bool]] = []

    def side(name: str) -> Side:
        async def open_tab(
            _: httpx.AsyncClient, __: int, photo: bytes | None, ___: float
        ) -> tuple[Ask, Closer]:
            async def ask() -> Timing:
                return answered(0.01)

            async def close() -> None:
                return None

            order.append((name, photo is not None))
            return ask, close

        return Side(name, [], open_tab)

    args = parse_args(["--kinds", "text", "photo", "photo", "--rounds", "3", "--pause-s", "0"])
    args.peer_levels = [1]
    target = Target("http://x/v1", ["http://x"], [], float("nan"))

    async def run() -> list[tuple[str, Level, Counter[str] | None]]:
        async with httpx.AsyncClient() as http:
            sides = [side(DIRECT), side(APP), side(PEER)]
            return await run_kinds(sides, http, 1, b"jpeg", args, target)

    (_, text, _), (_, photo, _) = asyncio.run(run())
    kinds = [with_photo for name, with_photo in order if name == APP]
    assert kinds == [False, True, True, False, False, True]
    assert [with_photo for name, with_photo in order if name == PEER] == [False] * 3
    assert (len(text.timings(APP)), len(photo.timings(APP))) == (3, 3)
    assert len(text.timings(PEER)) == 3 and not photo.timings(PEER)
    assert not text.photo and photo.photo


def test_a_spread_burst_asks_evenly_over_the_span_and_none_waits_by_default() -> None:
    """``--spread-ms 200`` with 4 tabs: the questions go 0, 50, 100 and 150 ms after the
    first; without it all go in the same tick."""

    async def asked_at(spread_s: float) -> list[float]:
        times: list[float] = []

        async def open_tab(
            _: httpx.AsyncClient, __: int, ___: bytes | None, ____: float
        ) -> tuple[Ask, Closer]:
            async def ask() -> Timing:
                times.append(time.monotonic())
                return answered(0.01)

            async def close() -> None:
                return None

            return ask, close

        async with httpx.AsyncClient() as http:
            await burst(Side(APP, [], open_tab), http, 4, None, 0.0, spread_s)
        return [round((t - times[0]) * 1000) for t in times]

    spread = asyncio.run(asked_at(parse_args(["--spread-ms", "200"]).spread_ms / 1000))
    assert all(abs(got - want) <= 15 for got, want in zip(spread, [0, 50, 100, 150], strict=True))
    assert asyncio.run(asked_at(parse_args([]).spread_ms / 1000)) == [0, 0, 0, 0]


def test_tokens_512_picks_the_512_token_answer_and_the_default_the_200_token_one() -> None:
    assert ANSWERS[parse_args(["--tokens", "512"]).tokens] is PACED_512
    assert ANSWERS[parse_args([]).tokens] is PACED


def test_the_512_token_answer_streams_512_pieces_to_its_end(fake: RunningFake) -> None:
    """Issue 53 prices a photo chat against a text chat of a 512-token answer: the scripted
    ``paced-512`` answer is that long and ends with the marker the tabs wait for."""

    async def ask() -> Timing:
        direct = DirectClient(fake.base_url)
        try:
            return await direct.ask(PACED_512)
        finally:
            await direct.aclose()

    timing = asyncio.run(ask())
    assert timing.complete and timing.text.endswith(PACED_512.end)
    words = timing.text.split()
    assert sum(w[0] in "ra" and w[1:].isdigit() for w in words) == 512 - 3  # less 2 markers + end
    assert 5.0 <= timing.last_s <= 7.0  # 512 pieces 10 ms apart


def test_paced_answers_asked_apart_tick_together_as_on_vllms_engine(fake: RunningFake) -> None:
    """vLLM gives every running request its next token at each engine step, so answers
    asked a few milliseconds apart stream together. The scripted server keeps one clock for
    all its paced answers: asked 5 ms apart, their chunks come at the same moments, not 5
    ms apart. (Paced from each request's own start, a photo chat's larger body, parsed
    first, put its stream out of step with the rest; docs/benchmarks.md, "Photo against
    text".)"""

    async def arrivals(http: httpx.AsyncClient, after_s: float) -> list[float]:
        await asyncio.sleep(after_s)
        body = {
            "model": "kimi-vl-thinking-2506",
            "stream": True,
            "messages": [{"role": "user", "content": f"{PACED.text}"}],
        }
        times = []
        async with http.stream("POST", f"{fake.base_url}/chat/completions", json=body) as got:
            async for line in got.aiter_lines():
                if line.startswith("data: {"):
                    times.append(time.monotonic())
        return times

    async def both() -> tuple[list[float], list[float]]:
        async with httpx.AsyncClient(timeout=30) as http:
            return await asyncio.gather(arrivals(http, 0.0), arrivals(http, 0.005))

    first, second = asyncio.run(both())
    assert len(first) == len(second) > 150
    apart = sorted(min(abs(t - u) for u in first) for t in second[10:-10])
    assert apart[len(apart) // 2] < 0.001  # the median: the same step, not 5 ms apart


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
