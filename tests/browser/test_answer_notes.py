"""What sits around an answer: the line of timings (a switch in the settings panel, on by
default), one note per turn however many things it says, and signs drawn as icons, not
emoji (a machine without an emoji font, like this one, shows emoji as boxes)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PIL import Image
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import (
    ANSWERS,
    UNDER_ANSWERS,
    Stack,
    ask,
    attach,
    functional_context,
    screenshot,
    wait_answer_done,
)

pytestmark = pytest.mark.browser

APP_NOTES = '[data-step-type="assistant_message"]:has(.message-content)'
EMOJI = re.compile("[\u2139\u231a-\u23ff\u2600-\u27bf\ufe0f\U0001f000-\U0001ffff]")
"""Emoji and symbols that need an emoji font (and the emoji variation selector)."""


def open_page(chromium: Browser, stack: Stack, locale: str) -> Page:
    page = functional_context(chromium, locale=locale).new_page()
    page.goto(stack.ui_url)
    expect(page.locator("#chat-settings-open-modal")).to_be_visible()
    return page


@pytest.mark.parametrize(
    ("locale", "label", "ttft"),
    [("en-US", "Timings under answers", "TTFT"), ("zh-CN", "回答下方的用时", "首字延迟")],
    ids=["en-US", "zh-CN"],
)
def test_the_timings_under_answers_are_a_switch_that_is_on_by_default(
    chromium: Browser, stack: Stack, locale: str, label: str, ttft: str
) -> None:
    page = open_page(chromium, stack, locale)
    ask(page, "What is it? #scenario=plain")
    wait_answer_done(page)
    expect(page.locator(UNDER_ANSWERS).last).to_contain_text(ttft)
    page.locator("#chat-settings-open-modal").click()
    switch = page.locator("#show_stats")
    expect(page.get_by_text(label, exact=True)).to_be_visible()
    expect(switch).to_have_attribute("aria-checked", "true")
    switch.click()
    expect(switch).to_have_attribute("aria-checked", "false")
    screenshot(page, f"timings-switch-{locale}")
    page.locator("#confirm").click()
    ask(page, "And now? #scenario=plain")
    wait_answer_done(page)
    answers = page.locator(ANSWERS)
    expect(answers).to_have_count(2)
    expect(answers.last).to_contain_text("A little math")
    # Only the first answer's note has its timings: what was shown stays.
    expect(page.locator(UNDER_ANSWERS, has_text=ttft)).to_have_count(1)
    expect(page.locator(UNDER_ANSWERS).first).to_contain_text(ttft)
    screenshot(page, f"timings-off-{locale}")
    page.context.close()


def blinking_gif(path: Path) -> Path:
    frames = [Image.new("RGB", (96, 64), colour) for colour in ("red", "blue")]
    frames[0].save(path, save_all=True, append_images=frames[1:], duration=100, loop=0)
    return path


def test_a_turns_notices_are_one_note_and_signs_are_icons(
    chromium: Browser, stack: Stack, tmp_path: Path
) -> None:
    page = open_page(chromium, stack, "en-US")
    gifs = [blinking_gif(tmp_path / f"{name}.gif") for name in ("one", "two")]
    attach(page, *gifs)
    page.locator("#chat-input").fill("What changes? #scenario=plain")
    page.locator("#chat-submit").click()
    wait_answer_done(page)
    notes = page.locator(APP_NOTES, has_text="only the first frame is sent")
    expect(notes).to_have_count(1)  # both files' notices in one note
    expect(notes).to_contain_text("one.gif: animated GIF, only the first frame is sent")
    expect(notes).to_contain_text("two.gif: animated GIF, only the first frame is sent")
    screenshot(page, "one-note-per-turn")
    ask(page, "Again #scenario=error-500")
    wait_answer_done(page)
    error = page.locator(APP_NOTES, has_text="The model server failed")
    expect(error).to_be_visible()
    screenshot(page, "notes-as-icons")
    for note in (notes, error):
        text = note.locator(".message-content").inner_text()
        assert not EMOJI.search(text), text
        sign = note.locator('.message-content [role="article"]').first.evaluate(
            "p => getComputedStyle(p, '::before').maskImage"
        )
        assert sign.startswith('url("data:image/svg+xml'), sign  # an icon drawn by the page
    page.context.close()
