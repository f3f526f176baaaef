"""Hostile or huge answers must not stall the app: every chat of a process shares its event loop.

Each test streams an answer from the scripted server (tests/fakes/kimi_server.py: 10,000
links, 10,000 boxes on a photo, 5 MB of text) through app.py's handlers, as test_app.py
does, while an event-loop probe runs: a task that sleeps 5 ms again and again and notes
how late it wakes. Work done on the loop while the answer is handled (links rewritten,
boxes read and drawn, the turn saved, a thread holding the GIL) shows as lateness; the
longest must stay under :data:`LONGEST_STALL_S`. The machine may be shared: the time the
loop's thread spent waiting for a CPU (Linux's ``/proc/thread-self/schedstat``) is not
the app's doing and is taken off; the raw lateness is in the failure message. (A worker
thread that the system stops while it holds the GIL still stalls the loop: on a machine
loaded ten times over its cores that alone came near 100 ms.)
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import chainlit as cl
import pytest

import app
from backend.client import output_limit
from backend.settings import Settings
from backend.store.core import Store
from tests.conftest import DATA, RunningFake, serving
from tests.fakes.kimi_server import HUGE_ANSWER, KimiServer
from tests.test_app import Browser, start_chat, user_message
from tests.test_resume import open_page, store, thread  # noqa: F401  (store: a fixture)
from ui.session import runner

LONGEST_STALL_S = 0.1
"""The longest the event loop may be held while a hostile answer is handled."""

PROBE_INTERVAL_S = 0.005


def cpu_wait_s() -> float:
    """Seconds this thread has waited, runnable, for a CPU (0 where Linux does not say)."""
    try:
        with open("/proc/thread-self/schedstat") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


@dataclass
class Probe:
    """How late a task that sleeps :data:`PROBE_INTERVAL_S` in a loop woke, each time."""

    lateness_s: list[float] = field(default_factory=list)
    """Wall-clock lateness of each wake-up."""
    stalls_s: list[float] = field(default_factory=list)
    """The same, less the time the loop's thread waited for a CPU meanwhile."""

    @property
    def longest_s(self) -> float:
        """The longest stall that is the app's own doing."""
        return max(self.stalls_s, default=0.0)

    def __str__(self) -> str:
        late = max(self.lateness_s, default=0.0)
        return f"stalled {self.longest_s:.3f} s ({late:.3f} s late on the clock)"


@asynccontextmanager
async def event_loop_probe() -> AsyncIterator[Probe]:
    """Measure, while the block runs, how late the event loop wakes a sleeping task."""
    probe = Probe()

    async def sleep_and_measure() -> None:
        while True:
            before, waited = time.perf_counter(), cpu_wait_s()
            await asyncio.sleep(PROBE_INTERVAL_S)
            late = time.perf_counter() - before - PROBE_INTERVAL_S
            probe.lateness_s.append(late)
            probe.stalls_s.append(late - (cpu_wait_s() - waited))

    task = asyncio.create_task(sleep_and_measure())
    await asyncio.sleep(0)  # the probe's first sleep starts before the block
    try:
        yield probe
    finally:
        task.cancel()


async def warm_up() -> None:
    """A first ordinary answer: what a process does once (imports, the catalogue) is done."""
    await app.on_message(user_message("#scenario=quick"))


@pytest.fixture(autouse=True)
async def close_resources() -> AsyncIterator[None]:
    """Close the app's shared resources after each test, as the app does at stop."""
    yield
    await app.shutdown()


@pytest.fixture(scope="module")
def roomy() -> Iterator[RunningFake]:
    """The scripted server with Thinking-2506's max model length (131,072 tokens), so
    answers are asked for its 32,768 max tokens and may bring 327,680 characters."""
    with serving(KimiServer(max_model_len=131072)) as running:
        yield running


@pytest.fixture
async def browser(roomy: RunningFake, monkeypatch: pytest.MonkeyPatch) -> Browser:
    roomy.reset()
    return await start_chat(Settings(base_url=roomy.base_url), monkeypatch)


async def test_ten_thousand_links_keep_the_loop_free_and_leave_no_image(browser: Browser) -> None:
    await warm_up()
    async with event_loop_probe() as probe:
        await app.on_message(user_message("#scenario=links"))
    reasoning = browser.reasoning()  # its blocks' final text (ui/blocks.py)
    answer = max(browser.texts(), key=len)
    assert "[9999](/s/9999)" in reasoning and "[9999](/s/9999)" in answer
    assert "[x](http://h/r.png)" in reasoning and "![" not in reasoning
    assert "[y](http://h/a.png)" in answer and "![" not in answer
    assert probe.longest_s < LONGEST_STALL_S, f"the event loop {probe}"


async def test_ten_thousand_boxes_draw_fifty_and_say_so_without_stalling(
    browser: Browser, tmp_path: Path
) -> None:
    await warm_up()
    async with event_loop_probe() as probe:
        await app.on_message(user_message("#scenario=boxes", DATA / "coffee.png"))
    texts = browser.texts()
    # The caption and the note are in the message under the answer (above its buttons).
    (under,) = [t for t in texts if "Marked on" in t]
    caption = under[under.index("Marked on") :]
    assert "box 50." in caption and "box 51" not in caption
    assert "\n\nNot drawn: " in caption and "9950 more points and boxes are not drawn" in caption
    assert probe.longest_s < LONGEST_STALL_S, f"the event loop {probe}"


async def test_a_huge_answer_is_cut_stored_and_said_and_the_server_told_to_stop(
    store: Store,  # noqa: F811  (the fixture imported above)
    fake: RunningFake,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    thread_id = str(uuid.uuid4())
    page = open_page(thread_id, monkeypatch, fake)
    await app.on_chat_start()
    await app.on_message(cl.Message(content="#scenario=quick", type="user_message"))
    async with event_loop_probe() as probe:
        await app.on_message(cl.Message(content="#scenario=huge", type="user_message"))
    answers = [d for e, d in page.frames if e in ("new_message", "update_message")]
    shown = max((str(d.get("output") or "") for d in answers), key=len)
    limit = output_limit(fake.requests[-1]["max_tokens"])  # 4,096 tokens: the least, 100,000
    assert limit == 100_000
    assert shown.startswith(HUGE_ANSWER[:1000])
    under = [str(d.get("output")) for d in answers if d["type"] == "system_message"]
    assert any("The answer was cut here, at 100,000 characters" in note for note in under)
    assert len(shown) < limit + 1000
    assert fake.server.aborted  # the stream was closed: vLLM stops generating
    (_, record) = await store.turns.load(thread_id)
    assert record.turn.answer == HUGE_ANSWER[: limit - len("Long.")]
    assert record.turn.status == "done"
    assert probe.longest_s < LONGEST_STALL_S, f"the event loop {probe}"
    async with event_loop_probe() as probe:
        await app.on_chat_resume(thread(thread_id))
    assert runner().chat.conversation.turns[1].answer == record.turn.answer
    assert probe.longest_s < LONGEST_STALL_S, f"resume: the event loop {probe}"
