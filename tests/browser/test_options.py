"""Settings panel, languages, update rate, README shots (the model choice and the server's
status: test_models.py)."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import (
    ANSWERS,
    REASONING_STEP,
    REASONING_TEXT,
    ROOT,
    UNDER_ANSWERS,
    Stack,
    ask,
    new_context,
    screenshot,
    wait_answer_done,
)
from tests.conftest import DATA

pytestmark = pytest.mark.browser

RATE_REPORT = ROOT / "artifacts" / "ui-update-rate.json"
WATCH_UPDATES = """
window.__frames = [];
window.__paints = [];
const NativeSocket = window.WebSocket;
window.WebSocket = class extends NativeSocket {
  constructor(...args) {
    super(...args);
    this.addEventListener("message", (e) => {
      const m = typeof e.data === "string" && e.data.match(/^42\\["([a-z_]+)"/);
      if (!m) return;
      // An open block's live text (ui/bridge.py, show_live) counts as a text update.
      const live = m[1] === "window_message" && e.data.includes('"kind":"live"');
      window.__frames.push([performance.now(), live ? "live" : m[1]]);
    });
  }
};
const paint = (t) => { window.__paints.push(t); requestAnimationFrame(paint); };
requestAnimationFrame(paint);
"""
"""Timestamps every socket.io event the page receives (an open block's live text as
"live") and every animation frame."""


def open_settings(page: Page) -> None:
    """Open the settings panel."""
    page.locator("#chat-settings-open-modal").click()
    expect(page.locator("#confirm")).to_be_visible()


def test_settings_panel_changes_sampling_and_hides_reasoning(page: Page, stack: Stack) -> None:
    open_settings(page)
    temperature = page.locator("#temperature [role=slider]")
    expect(temperature).to_have_attribute("aria-valuenow", "0.8")  # Thinking-2506 default
    expect(page.locator("#max_tokens [role=slider]")).to_have_attribute("aria-valuenow", "16384")
    temperature.focus()
    for _ in range(4):
        page.keyboard.press("ArrowLeft")
    expect(temperature).to_have_attribute("aria-valuenow", "0.6")
    page.locator("#hide_reasoning").click()
    screenshot(page, "settings-panel")
    page.locator("#confirm").click()
    expect(page.locator("#confirm")).to_be_hidden()

    stack.clear_requests()
    ask(page, "What is in this picture?")
    wait_answer_done(page)
    answer = page.locator(ANSWERS).last
    expect(answer).to_contain_text("What the picture shows")
    # It did think, the step is just hidden: the timings under the answer say so.
    expect(page.locator(UNDER_ANSWERS).last).to_contain_text("thought")
    expect(page.locator(REASONING_STEP)).to_have_count(0)
    screenshot(page, "settings-reasoning-hidden")
    request = stack.requests()[-1]
    assert request["temperature"] == 0.6 and request["top_p"] == 1.0


def test_chinese_welcome_readme_and_starters(chromium: Browser, stack: Stack) -> None:
    context = new_context(chromium, locale="zh-CN")
    page = context.new_page()
    try:
        page.goto(stack.ui_url)
        page.wait_for_load_state("networkidle")
        expect(page.locator("#starters")).to_contain_text("读这一页")
        expect(page.locator("#starters")).to_contain_text("照片里有什么？")
        screenshot(page, "zh-CN-welcome")
        page.locator("#readme-button").click()
        expect(page.get_by_text("向 Kimi-VL 询问你的图片", exact=False)).to_be_visible()
        screenshot(page, "zh-CN-readme")
    finally:
        context.close()


@pytest.mark.serial  # the page's own clock times the stream and its frames
def test_long_reasoning_is_batched_and_the_page_keeps_painting(
    chromium: Browser, stack: Stack
) -> None:
    context = new_context(chromium)
    context.add_init_script(WATCH_UPDATES)
    page = context.new_page()
    try:
        page.goto(stack.ui_url)
        page.wait_for_load_state("networkidle")
        ask(page, "#scenario=long")
        wait_answer_done(page)
        expect(page.locator(ANSWERS).last).to_contain_text("Done.")
        frames: list[tuple[float, str]] = page.evaluate("window.__frames")
        paints: list[float] = page.evaluate("window.__paints")
        screenshot(page, "long-reasoning")
    finally:
        context.close()
    start = next(t for t, kind in frames if kind == "stream_start")
    end = next(t for t, kind in reversed(frames) if kind == "task_end")
    updates = [
        kind
        for t, kind in frames
        if start <= t <= end
        and kind in ("stream_start", "stream_token", "live", "new_message", "update_message")
    ]
    seconds = (end - start) / 1000
    during = [t for t in paints if start <= t <= end]
    longest_frame_ms = max(b - a for a, b in pairwise(during))
    report = {
        "reasoning_tokens": 30000,
        "stream_seconds": round(seconds, 2),
        "ui_updates": len(updates),
        "ui_updates_per_second": round(len(updates) / seconds, 1),
        "longest_frame_ms": round(longest_frame_ms),
    }
    RATE_REPORT.write_text(json.dumps(report, indent=2) + "\n")
    print(report)
    # Tokens go out batched, at most 20 sends a second (backend/batching.py's 50 ms UI
    # interval; the first delta and the last flush may each come sooner) as an open
    # block's live text; each reasoning block also opens and closes with one send of its
    # own (ui/blocks.py), so the total depends on the blocks, but stays far from one update
    # per token. ``seconds`` is timed in the page, from the first frame's message event: the
    # page's script gets it 90-140 ms after it reached the tab, while Chainlit renders the
    # question (README, first visible words), so the page's span is up to 0.15 s shorter
    # than the server's (the fresh-clone run of 2026-12-05 19:50: 14 sends in 0.58 s).
    token_sends = sum(kind in ("stream_token", "live") for kind in updates)
    assert 0 < token_sends <= (seconds + 0.15) * 20 + 2
    assert len(updates) < 30_000 / 100
    assert longest_frame_ms < 1000  # the page never froze for a second


def test_readme_screenshots(page: Page) -> None:
    """The two README pictures: reasoning collapsed and expanded (docs/screenshots)."""
    page.set_viewport_size({"width": 1000, "height": 860})
    ask(page, "What is in this picture?", DATA / "rocket.jpg")
    wait_answer_done(page)
    user = page.locator('[data-step-type="user_message"]').last
    expect(user.locator('img[alt="rocket.jpg"]')).to_be_visible()
    thought = page.locator(f'{REASONING_STEP} button[id^="step-Thought for"]')
    expect(thought).to_have_attribute("aria-expanded", "false")
    screenshot(page, "readme-reasoning-collapsed")
    thought.click()
    expect(page.locator(REASONING_TEXT)).to_be_visible()
    screenshot(page, "readme-reasoning-expanded")
