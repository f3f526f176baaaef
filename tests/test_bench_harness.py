"""bench/harness.py: the apps a benchmark starts have the app's defaults; the scripted
workloads the benchmarks stream are what they say."""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from backend.client import output_limit
from backend.events import Done, Usage
from backend.families import INSTRUCT
from backend.i18n import ENGLISH
from backend.render import Ending, finished
from backend.settings import Settings
from bench import bench_tab
from bench.bench_tab import TabRun, json_run, runs_table
from bench.harness import (
    PICKER_ID,
    ROOT,
    DirectClient,
    Tab,
    Timing,
    Workload,
    cut_off_notes,
    direct_first_words,
    frame_text,
    hermetic_environ,
    pin_tree,
    question,
    running_stack,
    scripted,
)
from tests.conftest import RunningFake
from tests.fakes.kimi_server import long_code
from ui.model_picker import MODE_ID

READ_SETTINGS = (
    "import chainlit\n"  # Chainlit loads CHAINLIT_ENV_FILE (default ./.env) into os.environ
    "from backend.settings import Settings\n"
    "settings = Settings()\n"
    "print(repr(settings.model), settings.api_key.get_secret_value())\n"
)


def test_a_benchmarked_app_reads_neither_the_env_file_nor_the_callers_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's ``.env`` and exported ``KIMI_*`` stay out of a benchmark's app (a
    ``KIMI_MODEL`` of theirs made every tab of bench_burst wait for a model the scripted
    server does not serve); the names kept, a real server's key, come through."""
    (tmp_path / ".env").write_text("KIMI_MODEL=from-dotenv\nKIMI_API_KEY=dotenv-key\n")
    (tmp_path / "kimi.env").write_text("KIMI_MODEL=from-kimi-env-file\n")
    monkeypatch.setenv("KIMI_ENV_FILE", str(tmp_path / "kimi.env"))
    monkeypatch.setenv("KIMI_MODEL", "exported")
    monkeypatch.setenv("KIMI_API_KEY", "exported-key")
    env = {**hermetic_environ(("KIMI_API_KEY",)), "PYTHONPATH": str(ROOT)}
    shown = subprocess.run(
        [sys.executable, "-c", READ_SETTINGS], cwd=tmp_path, env=env,
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.split()  # fmt: skip
    assert shown == [repr(Settings.model_fields["model"].default), "exported-key"]


def test_the_scripted_code_answer_is_token_sized_and_fits_an_instruct_answer() -> None:
    """Defect: the scripted code "tokens" were 10-14 characters each, so bench_tab's
    10,000-token code answer passed the 100,000 characters an Instruct answer may bring
    and was cut before its end (the case waited for an end that never came)."""
    pieces = long_code("a", 10_000)
    code = pieces[1:-1]  # between the opening sentence and the closing fence
    assert len([p for p in code if p != "\n"]) == 10_000
    assert max(len(p) for p in code) <= 8  # a BPE token of code, not a word and its comma
    assert len("".join(pieces)) < output_limit(INSTRUCT.max_tokens)
    assert "".join(pieces).startswith("Here is the whole program:\n\n```python\n")
    assert "total = step(total, a1427)\n" in "".join(pieces)


def test_the_benchmark_knows_the_apps_cut_off_line_under_an_answer() -> None:
    """Defect: the benchmark's tab looked for a cut-off note as a "⚠️" message, which the
    app no longer writes (the note is an italic line under the answer): every answer of
    random weights that used its whole budget was counted incomplete on the H200."""
    for reasoning_unclosed in (True, False):
        done = Done(
            "length",
            Usage(10, 512),
            ttft_s=0.5,
            reasoning_s=1.5,
            elapsed_s=2.0,
            reasoning_unclosed=reasoning_unclosed,
        )
        ending = Ending(message_id="m1", max_tokens=512, more_tokens=1024, max_model_len=32768)
        footer = finished("a1", "", done, ending, ENGLISH).footer
        assert footer.startswith(cut_off_notes(512)), footer
    assert cut_off_notes(None) == ()


async def cut_off_and_failed(ui_url: str) -> tuple[Timing, Timing, Timing]:
    async with httpx.AsyncClient(timeout=60) as http:
        tab = Tab(ui_url, http)
        await tab.open()
        try:
            cut = await tab.ask(question("cutoff"), marker="never-in-an-answer")
            max_tokens = int(re.findall(r"all ([\d,]+) tokens", " ".join(tab.texts()))[0])
            expected = await tab.ask(question("cutoff"), cut_off_at=max_tokens)
            failed = await tab.ask(question("error-500"))
        finally:
            await tab.close()
    return cut, expected, failed


def test_a_tab_counts_an_expected_cut_off_as_complete_and_a_failed_turn_as_an_error(
    fake: RunningFake,
) -> None:
    """Defect: the tab looked for the app's cut-off and failure notes as "⚠️" messages,
    which the app no longer writes: every cut-off answer of random weights was counted
    incomplete (the H200 run of 2026-12-03) and a failed turn was not an error."""
    with running_stack(server_url=fake.base_url) as stack:
        cut, expected, failed = asyncio.run(cut_off_and_failed(stack.ui_url))
    assert not cut.complete and not cut.error  # a cut-off nobody expected: incomplete
    assert expected.complete and not expected.error
    assert not failed.complete and failed.error.startswith("The model server failed")


MARKER_THEN_WORDS = "Think. #scenario=long-think #reasoning=3 #answer=3 #rate=5"
"""A stream whose first piece is ``◁think▷`` alone; every piece 0.2 s after the one before
(tests/fakes/kimi_server.py, ``long_scenario``)."""


async def first_words(base_url: str, ui_url: str, model: str) -> tuple[Timing, Timing]:
    """One answer of ``model`` to :data:`MARKER_THEN_WORDS`, asked directly and in a tab."""
    direct = DirectClient(base_url)
    async with httpx.AsyncClient(timeout=60) as http:
        tab = Tab(ui_url, http)
        await tab.open()
        try:
            work = Workload(MARKER_THEN_WORDS, 9, 2.0, "(end of answer)", model=model)
            return await direct.ask(work), await tab.ask(work.text, marker=work.end, model=model)
        finally:
            await tab.close()
            await direct.aclose()


@pytest.mark.serial
def test_first_visible_words_are_timed_at_the_words_not_at_a_lone_marker(
    two_models: RunningFake,
) -> None:
    """Issue 23 counts the first visible words, and a marker alone is not one, nor a token
    of text. A model whose request does not write the marker (Instruct's profile): the
    stream's first piece is the lone ``◁think▷``, on which the app opens its reasoning
    step; on both sides the first token and the first words are the words, a piece (0.2 s)
    after it."""
    with running_stack(server_url=two_models.base_url) as stack:
        direct, tab = asyncio.run(first_words(two_models.base_url, stack.ui_url, "kimi-vl"))
    for side in (direct, tab):
        assert side.complete and side.words_s is not None, side
        assert side.words_s - side.first_s < 0.15 and 0.15 <= side.words_s <= 1.0, side


def test_a_tab_reads_streamed_text_from_each_frame_that_carries_it() -> None:
    assert frame_text({"id": "b", "output": "r0 "}) == "r0 "  # stream_start
    assert frame_text({"id": "b", "token": "r1 "}) == "r1 "  # stream_token
    assert frame_text({"kimi": {"kind": "live", "id": "b", "text": "r2 "}}) == "r2 "
    assert frame_text({"kimi": {"kind": "composer", "text": "put back"}}) == ""
    assert frame_text(["r3 "]) == ""


@pytest.mark.serial
def test_a_thinking_models_first_token_is_a_word_on_both_sides(two_models: RunningFake) -> None:
    """Both sides write Thinking-2506's opening marker in the request
    (backend/families.py, ``ModelFamily.reply_start``): the stream's first piece is a word, a
    piece (0.2 s) after the question, and it is the first visible words (the tab's
    reasoning step, opened as the server took the request, is no token)."""
    thinking = "kimi-vl-thinking-2506"
    with running_stack(server_url=two_models.base_url) as stack:
        direct, tab = asyncio.run(first_words(two_models.base_url, stack.ui_url, thinking))
    for side in (direct, tab):
        assert side.complete and side.words_s is not None, side
        assert side.words_s - side.first_s < 0.15 and 0.15 <= side.words_s <= 1.0, side


def test_the_tabs_direct_call_writes_the_thinking_marker_as_the_app_does(
    two_models: RunningFake,
) -> None:
    """bench_tab's direct side asked Thinking-2506 without the opening marker the app's
    request writes (backend/families.py, ``ModelFamily.reply_start``), so its first words
    came a token later than the app's and the tab's "added" read low by that token; it
    asks as the app does now, and Instruct as asked."""
    two_models.reset()
    with httpx.Client(timeout=60) as http:
        thinking = direct_first_words(http, two_models.base_url, question("paced"),
                                      "kimi-vl-thinking-2506")  # fmt: skip
        direct_first_words(http, two_models.base_url, question("paced"), "kimi-vl")
    asked_thinking, asked_instruct = two_models.requests
    assert asked_thinking["messages"][-1] == {"role": "assistant", "content": "◁think▷"}
    assert asked_thinking["continue_final_message"] is True
    assert asked_instruct["model"] == "kimi-vl"
    assert asked_instruct["messages"][-1]["role"] == "user"
    assert thinking > 0


async def ask_picking(ui_url: str, model: str) -> Timing:
    async with httpx.AsyncClient(timeout=60) as http:
        tab = Tab(ui_url, http)
        await tab.open()
        try:
            return await tab.ask(question("paced"), model=model)
        finally:
            await tab.close()


def test_a_tab_picks_a_model_as_the_composers_picker_does(two_models: RunningFake) -> None:
    """The tab sends the picked model the way the page does (``cl.Message.modes``, under
    the picker's id), and the app asks that model."""
    assert PICKER_ID == MODE_ID
    two_models.reset()
    with running_stack(server_url=two_models.base_url) as stack:
        asked = asyncio.run(ask_picking(stack.ui_url, "kimi-vl"))
    assert asked.complete, asked
    assert [r["model"] for r in two_models.requests if "messages" in r] == ["kimi-vl"]


async def asked_twice(base_url: str) -> list[Timing]:
    direct = DirectClient(base_url)
    try:
        return [await direct.ask(scripted("paced")) for _ in range(2)]
    finally:
        await direct.aclose()


def test_the_direct_side_asks_the_chunks_the_app_would_ask(fake: RunningFake) -> None:
    """Defect: the direct side asked for every token while the app asks one UI update's
    worth at the learnt speed (backend/pacing.py): the driver's own reading of every
    token then slowed the scripted server beside it. The scripted ``paced`` answer runs
    at 100 tokens/s, so the second request asks 5 tokens a chunk (100 x 50 ms), or 4 when
    the measured speed comes out a little under 100 (the app's rounds down)."""
    first, second = asyncio.run(asked_twice(fake.base_url))
    assert first.complete and second.complete
    assert fake.requests[0]["stream_interval"] == 2  # nothing learnt yet: 40 tokens/s assumed
    assert fake.requests[1]["stream_interval"] in (4, 5)
    assert fake.requests[1]["messages"][-1] == {"role": "assistant", "content": "◁think▷"}


def test_the_tab_table_says_a_step_that_could_not_be_clicked() -> None:
    run = TabRun("Open WebUI", "toggle", 7.6, 42_000, 698, 265, 185.7, 500.5, 767.9)
    run.toggles = [math.inf, 48.4]
    row = runs_table([run])[-1]
    assert "| not clickable in 60 s / 48 ms |" in row
    assert json.loads(json.dumps(json_run(run), allow_nan=False))["toggles"] == [None, 48.4]


CHILD_WITH_A_THREAD = (
    "import threading, time\n"
    "threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
    "print('ready', flush=True)\n"
    "time.sleep(30)\n"
)
LAUNCHER = (  # a process that starts CHILD_WITH_A_THREAD and says its pid
    "import subprocess, sys, time\n"
    f"child = subprocess.Popen([sys.executable, '-c', {CHILD_WITH_A_THREAD!r}],"
    " stdout=subprocess.PIPE)\n"
    "child.stdout.readline()\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(30)\n"
)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to tell them apart")
def test_pinning_a_tree_keeps_every_thread_of_every_process_under_it() -> None:
    """bench_tab's ``--pin`` places the servers (children of the benchmark) and chromium
    (under Playwright's driver) by the tree; a thread left out would run anywhere."""
    first = {min(os.sched_getaffinity(0))}
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, start_new_session=True
    )
    try:
        assert launcher.stdout is not None
        grandchild = int(launcher.stdout.readline())
        pin_tree(launcher.pid, first)
        for pid in (launcher.pid, grandchild):
            threads = [int(t.name) for t in Path(f"/proc/{pid}/task").iterdir()]
            assert all(os.sched_getaffinity(t) == first for t in threads), pid
        assert len(list(Path(f"/proc/{grandchild}/task").iterdir())) >= 2
    finally:
        os.killpg(launcher.pid, 9)
        launcher.wait()


def test_a_stream_starts_once_the_cpus_are_quiet_or_the_wait_is_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    readings = iter([90.0, 40.0, 12.0, 3.0])
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval: next(readings))
    assert bench_tab.wait_quiet() == 12.0  # the first reading at most 15 %
    busy = iter([95.0] * 5)
    monkeypatch.setattr(psutil, "cpu_percent", lambda interval: next(busy))
    assert bench_tab.wait_quiet(limit_s=0) == 95.0  # no wait left: the reading it had
