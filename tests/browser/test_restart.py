"""A model server restart mid-demo, seen from the browser: a message sent while it is
down is told so in the person's words, the note keeps counting, and the answer comes by
itself once the server is back (no Retry to guess at)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.conftest import (
    ANSWERS,
    THINKING_MODEL,
    Process,
    ask,
    functional_context,
    screenshot,
    start_scripted_server,
    start_ui,
    wait_answer_done,
)
from tests.conftest import free_port

pytestmark = pytest.mark.browser


@dataclass
class Restartable:
    """A UI in front of a scripted server that the test stops and starts again."""

    ui_url: str
    server_port: int
    server: Process | None

    def stop_server(self) -> None:
        assert self.server is not None
        self.server.stop()
        self.server = None

    def start_server(self) -> None:
        self.server = start_scripted_server(self.server_port, THINKING_MODEL)


@pytest.fixture
def restartable(tmp_path: Path) -> Iterator[Restartable]:
    server_port, ui_port = free_port(), free_port()
    stack = Restartable(f"http://127.0.0.1:{ui_port}", server_port, None)
    stack.start_server()
    ui = start_ui(ui_port, f"http://127.0.0.1:{server_port}/v1", tmp_path)
    yield stack
    ui.stop()
    if stack.server is not None:
        stack.server.stop()


@pytest.mark.serial  # the waiting note's count must move within 5 s
@pytest.mark.parametrize(
    ("locale", "away", "back"),
    [
        ("en-US", "The model server is not answering right now", "as soon as it is back"),
        ("zh-CN", "模型服务器暂时没有应答", "它一恢复"),
    ],
)
def test_a_message_sent_during_a_restart_is_answered_when_the_server_is_back(
    chromium: Browser, restartable: Restartable, locale: str, away: str, back: str
) -> None:
    context = functional_context(chromium, locale)
    try:
        page = context.new_page()
        page.goto(restartable.ui_url)
        expect(page.locator("#chat-settings-open-modal")).to_be_visible()
        ask(page, "First question #scenario=plain")
        wait_answer_done(page)
        expect(page.locator(ANSWERS)).to_have_count(1)

        restartable.stop_server()  # vLLM dies; launch.sh is restarting it
        ask(page, "What is in this picture?")
        note = page.locator(ANSWERS).last
        expect(note).to_contain_text(away, timeout=10_000)
        expect(note).to_contain_text(back)
        said = note.inner_text()
        assert "127.0.0.1" not in said and "llm.log" not in said and "http" not in said
        seconds = re.compile(r"\d+")
        first = seconds.findall(said)
        expect(note).not_to_have_text(said, timeout=5_000)  # it keeps counting
        assert seconds.findall(note.inner_text()) != first
        screenshot(page, f"restart-waiting-{locale}")

        restartable.start_server()
        wait_answer_done(page)
        answer = page.locator(ANSWERS).last
        expect(answer.locator("h2")).to_have_text("What the picture shows")
        expect(page.get_by_text(away)).to_have_count(0)  # the note is gone
        expect(page.get_by_role("button", name=re.compile("Retry|重试"))).to_have_count(0)
        screenshot(page, f"restart-answered-{locale}")
    finally:
        context.close()
