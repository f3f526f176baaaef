"""The whole app in the browser's language: a zh-CN browser reads Chinese, en-US English.

The same flow in both: starters, the settings panel, a thinking answer (the step's
title and the stats line), its Regenerate button, a server error with Retry, and Stop
(said once, in the chat's language).
The expected words are written out here, not read from the catalogue.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.conftest import (
    ANSWERS,
    REASONING_STEP,
    REASONING_TEXT,
    UNDER_ANSWERS,
    Stack,
    ask,
    new_context,
    screenshot,
    wait_answer_done,
)

pytestmark = pytest.mark.browser


@dataclass(frozen=True)
class Words:
    """What a person reading one language sees at each point of the flow."""

    locale: str
    starters: tuple[str, ...]
    settings: tuple[str, ...]
    thought: re.Pattern[str]
    stats: re.Pattern[str]
    regenerate: str
    error: str
    retry: str
    commands: tuple[str, ...]
    stopped: str


CHINESE = Words(
    locale="zh-CN",
    starters=("读这一页", "照片里有什么？", "该点哪里？", "找到勺子"),
    settings=("温度", "回答的随机程度。", "最大 token 数", "隐藏推理过程"),
    thought=re.compile(r"^\s*思考了 \d+\.\d 秒\s*$"),
    stats=re.compile(
        r"首字延迟 \d+\.\d\d 秒 · 思考 \d+\.\d 秒 · \d+ 个 token · [\d.]+ token/秒 · 总计 [\d.]+ 秒"
    ),
    regenerate="重新生成",
    error="模型服务器在回答时出错。请重试。",
    retry="重试",
    commands=("服务器", "导出"),
    stopped="已在思考时停止",
)
ENGLISH = Words(
    locale="en-US",
    starters=("Read this page", "What is in this photo?", "Where should I click?"),
    settings=("Temperature", "Randomness of the answer.", "Max tokens", "Hide reasoning"),
    thought=re.compile(r"^\s*Thought for \d+\.\ds\s*$"),
    stats=re.compile(
        r"TTFT \d+\.\d\d s · thought \d+\.\d s · \d+ tokens · [\d.]+ tokens/s · total"
    ),
    regenerate="Regenerate",
    error="The model server failed while answering. Try again.",
    retry="Retry",
    commands=("Server", "Export"),
    stopped="Stopped while thinking",
)


@pytest.mark.parametrize("words", [CHINESE, ENGLISH], ids=["zh-CN", "en-US"])
def test_the_app_speaks_the_browsers_language(
    chromium: Browser, stack: Stack, words: Words
) -> None:
    context = new_context(chromium, locale=words.locale)
    page = context.new_page()
    try:
        page.goto(stack.ui_url)
        page.wait_for_load_state("networkidle")
        for label in words.starters:
            expect(page.locator("#starters")).to_contain_text(label)
        settings_button = page.locator("#chat-settings-open-modal")
        expect(settings_button).to_be_visible()
        for command in words.commands:  # the composer's command buttons
            expect(page.locator(".command-buttons-container")).to_contain_text(command)

        settings_button.click()
        dialog = page.get_by_role("dialog")
        for text in words.settings:
            expect(dialog).to_contain_text(text)
        screenshot(page, f"{words.locale}-settings")
        page.locator("#confirm").click()
        expect(page.locator("#confirm")).to_be_hidden()

        ask(page, "#scenario=steady")
        thought = page.locator(f"{REASONING_STEP} button[id^='step-']:not(#step-block)").last
        expect(thought).to_have_text(words.thought)
        wait_answer_done(page)
        expect(page.locator(UNDER_ANSWERS).last).to_contain_text(words.stats)
        expect(page.get_by_role("button", name=words.regenerate, exact=True)).to_be_visible()

        ask(page, "#scenario=error-500")
        expect(page.get_by_text(words.error)).to_be_visible()
        expect(page.get_by_role("button", name=words.retry, exact=True)).to_be_visible()

        ask(page, "#scenario=slow")
        expect(page.locator(REASONING_TEXT).last).not_to_be_empty()
        page.locator("#stop-button").click()
        said = page.locator(f"{ANSWERS}, {UNDER_ANSWERS}", has_text=words.stopped)
        expect(said).to_have_count(1)  # said once,
        expect(page.locator("#root")).not_to_contain_text("Task manually stopped")  # ours only
        page.set_viewport_size({"width": 1100, "height": 1250})  # the whole exchange
        page.locator('[data-step-type="user_message"]').first.scroll_into_view_if_needed()
        page.mouse.move(550, 300)
        page.mouse.wheel(0, -2000)  # Chainlit keeps the last question at the top: scroll back
        expect(page.locator('[data-step-type="user_message"]').first).to_be_in_viewport()
        screenshot(page, f"{words.locale}-chat")
    finally:
        context.close()


def test_a_chinese_starter_gets_a_chinese_grounding_caption(
    chromium: Browser, stack: Stack
) -> None:
    context = new_context(chromium, locale="zh-CN")
    page = context.new_page()
    page.set_viewport_size({"width": 1100, "height": 1350})
    try:
        page.goto(stack.ui_url)
        page.wait_for_load_state("networkidle")
        expect(page.locator("#chat-settings-open-modal")).to_be_visible()
        page.locator("#starters").get_by_text("该点哪里？").click()
        wait_answer_done(page)
        # Under the answer, above its buttons (ui/answer_view.py), as in test_grounding.py
        overlay = page.locator('[data-step-type="system_message"]', has_text="已在")
        expect(overlay).to_contain_text("已在 settings.png 上标注（这是副本，原图不变）：点 1。")
        expect(overlay.locator('img[alt="settings (marked).png"]')).to_be_visible()
        screenshot(page, "zh-CN-grounding")  # docs/screenshots/zh-cn.png
    finally:
        context.close()


def test_the_server_panel_speaks_chinese(chromium: Browser, stack: Stack) -> None:
    context = new_context(chromium, locale="zh-CN")
    page = context.new_page()
    try:
        page.goto(stack.ui_url)
        page.wait_for_load_state("networkidle")
        expect(page.locator("#chat-settings-open-modal")).to_be_visible()
        page.locator(".command-buttons-container button", has_text="服务器").click()
        page.locator("#chat-input").press("Enter")
        panel = page.locator("#side-view-content")
        table = panel.locator("table", has_text="KV 缓存占用")
        expect(table).to_be_visible()
        # The scripted server counts what it streams: nothing, while the panel opens.
        for text in ("生成中", "0 个请求", "前缀缓存命中率", "70.9 %"):
            expect(table).to_contain_text(text)
        expect(panel).to_contain_text("实时：每 3 秒读取一次。")
        screenshot(page, "zh-CN-server-panel")
    finally:
        context.close()
