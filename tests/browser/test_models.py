"""Which model answers, seen from the browser: the model picker in the message box, a
switch between Thinking and Instruct that keeps the conversation, and a page opened while
the model server is down that gets its picker, starters and Compare once the server is up
(no reload)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, expect

from tests.browser.conftest import (
    ANSWERS,
    DESKTOP,
    INSTRUCT_MODEL,
    PHONE,
    REASONING_STEP,
    THINKING_MODEL,
    Process,
    Stack,
    ask,
    functional_context,
    screenshot,
    start_scripted_server,
    start_ui,
    wait_answer_done,
)
from tests.conftest import free_port
from tests.fakes.kimi_server import conversation

pytestmark = pytest.mark.browser

PICKER = "#mode-picker-trigger-model"


def pick_model(page: Page, label: str) -> None:
    """Pick ``label`` in the message box's model picker."""
    page.locator(PICKER).click()
    page.locator("#mode-picker-popover-model").get_by_text(label, exact=True).click()
    expect(page.locator(PICKER)).to_contain_text(label)


@pytest.mark.parametrize(
    ("locale", "viewport", "instruct", "switched"),
    [
        ("en-US", DESKTOP, "Kimi-VL Instruct", "Kimi-VL Instruct answers from here on"),
        ("zh-CN", PHONE, "Kimi-VL Instruct", "从这里起由 Kimi-VL Instruct 回答"),
    ],
    ids=["en-desktop", "zh-phone"],
)
def test_switching_to_instruct_keeps_the_conversation(
    chromium: Browser,
    stack: Stack,
    locale: str,
    viewport: ViewportSize,
    instruct: str,
    switched: str,
) -> None:
    """Defect: the model was Chainlit's chat profile, and picking Instruct asked
    "Create New Chat: this will clear your current chat history" and started over."""
    context = functional_context(chromium, locale, viewport)
    try:
        page = context.new_page()
        page.goto(stack.ui_url)
        expect(page.locator("#chat-settings-open-modal")).to_be_visible()
        ask(page, "First question")
        wait_answer_done(page)
        expect(page.locator(REASONING_STEP)).to_have_count(1)  # Thinking reasoned
        first = page.locator(ANSWERS).first.inner_text()

        send = page.locator("#chat-submit").bounding_box()
        assert send is not None
        buttons = page.locator(f"{PICKER}, .command-buttons-container button").all()
        assert len(buttons) == 3  # the picker, Server, Export: one row with Send
        for button in buttons:  # on Send's row: each overlaps its height
            box = button.bounding_box()
            assert box is not None and box["y"] < send["y"] + send["height"]
            assert box["y"] + box["height"] > send["y"]
            assert box["x"] + box["width"] <= send["x"]
        screenshot(page, f"model-picker-thinking-{locale}")
        stack.clear_requests()
        pick_model(page, instruct)
        screenshot(page, f"model-picker-{locale}")
        expect(page.locator("#confirm")).to_have_count(0)  # no "new chat?" question
        ask(page, "Second question")
        wait_answer_done(page)
        expect(page.get_by_text("First question")).to_be_visible()
        assert page.locator(ANSWERS).first.inner_text() == first  # the first answer stays
        expect(page.locator(ANSWERS).filter(has_text="What the picture shows")).to_have_count(2)
        expect(page.locator(ANSWERS).filter(has_text=switched)).to_have_count(1)
        expect(page.locator(REASONING_STEP)).to_have_count(1)  # Instruct has none
        screenshot(page, f"model-switched-{locale}")
        request = stack.requests()[-1]
        assert request["model"] == INSTRUCT_MODEL and request["temperature"] == 0.2
        history = conversation(request)
        assert isinstance(history, list) and len(history) == 3  # first turn, then this one
        page.locator("#chat-settings-open-modal").click()
        expect(page.locator("#temperature [role=slider]")).to_have_attribute("aria-valuenow", "0.2")
        expect(page.locator("#hide_reasoning")).to_have_count(0)
    finally:
        context.close()


@pytest.fixture
def server_down_ui(tmp_path: Path) -> Iterator[tuple[str, int, list[Process]]]:
    """A UI whose model server is not started yet: its URL, the server's port and a list
    the test adds the server to (stopped at the end)."""
    server_port, ui_port = free_port(), free_port()
    ui = start_ui(ui_port, f"http://127.0.0.1:{server_port}/v1", tmp_path)
    started: list[Process] = []
    yield f"http://127.0.0.1:{ui_port}", server_port, started
    for process in [*started, ui]:
        process.stop()


@pytest.mark.parametrize(
    ("locale", "waiting", "ready", "starter", "compare"),
    [
        (
            "en-US",
            "Waiting for the model server",
            "The model server is ready (Kimi-VL Thinking (2506)). Ask away.",
            "What is in this photo?",
            "Compare with Kimi-VL Instruct",
        ),
        (
            "zh-CN",
            "正在等待模型服务器",
            "模型服务器已就绪",
            "照片里有什么？",
            "与 Kimi-VL Instruct 对比",
        ),
    ],
    ids=["en", "zh"],
)
def test_a_page_opened_while_the_server_is_down_gets_everything_once_it_is_up(
    chromium: Browser,
    server_down_ui: tuple[str, int, list[Process]],
    locale: str,
    waiting: str,
    ready: str,
    starter: str,
    compare: str,
) -> None:
    """Defect: the page stayed without the model picker, the starters and Compare until a
    reload, even after "The model server is ready"."""
    url, server_port, started = server_down_ui
    context = functional_context(chromium, locale, DESKTOP)
    try:
        page = context.new_page()
        page.goto(url)
        status = page.locator(ANSWERS).first
        expect(status).to_contain_text(waiting)
        expect(status).not_to_contain_text("127.0.0.1")  # the address is the operator's
        expect(page.locator(PICKER)).to_have_count(0)
        screenshot(page, f"server-waiting-{locale}")

        started.append(start_scripted_server(server_port, THINKING_MODEL, INSTRUCT_MODEL))
        expect(page.get_by_text(ready)).to_be_visible(timeout=60_000)  # a toast
        expect(page.get_by_text(waiting)).to_have_count(0)  # the note is gone
        expect(page.get_by_text(starter)).to_be_visible()  # the welcome screen is back
        expect(page.locator(PICKER)).to_contain_text("Kimi-VL Thinking")
        screenshot(page, f"server-ready-{locale}")
        ask(page, "What is in this picture?")
        wait_answer_done(page)
        expect(page.get_by_role("button", name=compare)).to_be_visible()
        screenshot(page, f"server-ready-answered-{locale}")
    finally:
        context.close()
