"""Faults seen from the browser: a silent server, a stalled answer, a server that never
answers its model list."""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import (
    ANSWERS,
    REASONING_STEP,
    REASONING_TEXT,
    Stack,
    ask,
    new_context,
    screenshot,
    start_ui,
    wait_answer_done,
)
from tests.conftest import free_port
from tests.fakes.kimi_server import REASONING, SCENARIOS, continued, grouped, prefill

pytestmark = pytest.mark.browser


@pytest.mark.serial  # the note must come within 6 s
def test_a_silent_server_is_explained_within_seconds(page: Page, stack: Stack) -> None:
    ask(page, "Anyone there? #scenario=silent")
    note = page.get_by_text("The model server has not started answering yet")
    expect(note).to_be_visible(timeout=6_000)  # said after 3 s, not after 10 minutes
    screenshot(page, "server-not-started")
    wait_answer_done(page)
    expect(note).to_have_count(0)  # gone once the answer came


def sent_before_the_stall(request: dict[str, Any]) -> str:
    """What the scripted server sends of ``stall`` before it goes silent, for ``request``:
    the pieces after the start the request wrote, in chunks of its ``stream_interval``
    (vLLM's grouping: the server holds an unfinished chunk), up to the pause."""
    stall = continued(SCENARIOS["stall"], prefill(request))
    assert stall.pause_at is not None
    chunks = grouped(stall.pieces, int(request.get("stream_interval") or 1))
    return "".join(text for last, text in chunks if last < stall.pause_at)


def test_text_before_a_stall_is_on_screen_and_stop_works(page: Page, stack: Stack) -> None:
    ask(page, "Think, then stall #scenario=stall")
    reasoning = page.locator(REASONING_TEXT).last
    expect(reasoning).not_to_be_empty()
    # Everything the server sent before its stall is on screen, although no chunk follows.
    before_stall = sent_before_the_stall(stack.requests()[-1]).strip()
    assert REASONING.startswith(before_stall) and before_stall
    expect(reasoning).to_contain_text(before_stall)
    shown, deadline = "", time.monotonic() + 10
    while time.monotonic() < deadline:  # until nothing new arrives: the stall
        latest = reasoning.inner_text()
        if latest == shown:
            break
        shown = latest
        time.sleep(0.4)
    assert shown.strip() == before_stall
    time.sleep(0.5)
    assert reasoning.inner_text() == shown  # the server is silent: nothing arrives
    page.locator("#stop-button").click()
    wait_answer_done(page)
    thought = page.locator(f'{REASONING_STEP} button[id^="step-Thought for"]')
    expect(thought).to_contain_text("(stopped)")


@pytest.fixture
def black_hole() -> Iterator[str]:
    """A server that accepts connections and never answers: its ``/v1`` base URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    stop.set()
    thread.join(timeout=2)
    for connection in held:
        connection.close()
    listener.close()


@pytest.mark.serial  # the page must answer within 15 s
def test_a_server_that_never_answers_does_not_blank_the_page(
    chromium: Browser, black_hole: str, tmp_path: Path
) -> None:
    """Page loads looked the chat profiles up on the model server, with no timeout."""
    port = free_port()
    ui = start_ui(port, black_hole, tmp_path)
    context = new_context(chromium)
    try:
        page = context.new_page()
        started = time.monotonic()
        page.goto(f"http://127.0.0.1:{port}")
        # Before the cache, the page stayed blank for as long as the server kept silent.
        expect(page.get_by_text("What is in this photo?")).to_be_visible(timeout=15_000)
        expect(page.get_by_text("Connecting to the model server")).to_be_visible()
        assert time.monotonic() - started < 15
        page.reload()  # and again: the profiles come from the cache
        expect(page.get_by_text("What is in this photo?")).to_be_visible(timeout=15_000)
        screenshot(page, "server-never-answers")
    finally:
        context.close()
        ui.stop()


SERVER_FAULTS = {
    "dropped": "ClientPayloadError",  # the connection dropped mid-answer (a crash)
    "garbled": "JSONDecodeError",
    "midstream-error": SCENARIOS["midstream-error"].error,
    "error-500": SCENARIOS["error-500"].error,
    "error-other-400": SCENARIOS["error-other-400"].error,
    "error-images": SCENARIOS["error-images"].error,
    "error-context": SCENARIOS["error-context"].error,
}
"""A fault of the scripted server, and the words of the server or the HTTP stack about it
that app.log holds and the chat must not show."""
REF = re.compile(r"ref (chat-[0-9a-f]{6}), \d\d:\d\d:\d\d")
"""The reference under an error note (backend/render.py, ``reference``)."""
INTERNAL_NAME = re.compile(r"\b[A-Z]\w*(Error|Exception)\b|EngineCore|Traceback")


def test_every_server_fault_is_said_in_our_words_and_logged_in_theirs(
    page: Page, stack: Stack
) -> None:
    """Issue 47 item 5: a crash mid-answer showed "ClientPayloadError", an HTTP 500 vLLM's
    "EngineCore encountered an issue."."""
    assert stack.app_log is not None
    errors = page.locator('[data-step-type$="_message"] .message-content', has_text=REF)
    for count, (scenario, theirs) in enumerate(SERVER_FAULTS.items(), start=1):
        ask(page, f"Go #scenario={scenario}")
        wait_answer_done(page)
        expect(errors).to_have_count(count)
        note = errors.last.inner_text()
        ref = REF.search(note)
        assert ref, note
        shown = page.locator("#root").inner_text()  # nowhere on the page either
        assert theirs not in shown and not INTERNAL_NAME.search(shown), (scenario, note)
        logged = [
            line
            for line in stack.app_log.read_text().splitlines()
            if ref.group(1) in line and "ended: failed" in line
        ]
        assert logged and theirs in logged[-1], (scenario, logged)
    screenshot(page, "server-faults-in-our-words")
    ask(page, "And now? #scenario=plain")  # the next message works
    wait_answer_done(page)
    expect(page.locator(ANSWERS).last).to_contain_text("A rocket stands on its launch pad")
