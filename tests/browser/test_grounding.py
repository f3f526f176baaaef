"""The grounding overlay in a real browser: the annotated copy below the answer.

The scripted server's ``click`` and ``bbox`` scenarios answer about the bundled
settings.png (Dark mode switch centred at pixel (1174, 161), Night light's at
(1174, 241): tests/data/settings-page/render.py) and coffee.png; the Thinking profile
takes both images at their own size (16384-patch budget), so pixels of the copy are
pixels of the original.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator

import pytest
from PIL import Image
from playwright.sync_api import Browser, Page, ViewportSize, expect

from backend.grounding import PALETTE
from tests.browser.conftest import (
    ANSWERS,
    DESKTOP,
    PHONE,
    REASONING_STEP,
    Stack,
    ask,
    new_context,
    screenshot,
    wait_answer_done,
)
from tests.conftest import DATA

pytestmark = pytest.mark.browser

MESSAGES = '[data-step-type="assistant_message"]'
UNDER = '[data-step-type="system_message"]'
"""The message under an answer: how it ended, the overlay, then the answer's buttons."""


@pytest.fixture
def tall_page(chromium: Browser, stack: Stack) -> Iterator[Page]:
    """A page on the UI, tall enough to show the answer and its overlay together."""
    context = new_context(chromium)
    page = context.new_page()
    page.set_viewport_size({"width": 1100, "height": 1350})
    page.goto(stack.ui_url)
    page.wait_for_load_state("networkidle")
    expect(page.locator("#chat-settings-open-modal")).to_be_visible()
    yield page
    context.close()


def fetch_image(page: Page, selector: str) -> Image.Image:
    """Download what an ``<img>`` shows, through the page's own session."""
    src = page.locator(selector).get_attribute("src")
    assert src is not None
    body = page.request.get(src if src.startswith("http") else page.url.rstrip("/") + src).body()
    return Image.open(io.BytesIO(body)).convert("RGB")


def test_click_starter_draws_the_point_below_the_answer(tall_page: Page, stack: Stack) -> None:
    page = tall_page
    stack.clear_requests()
    page.locator('[id="starter-where-should-i-click?"]').click()
    expect(page.locator('img[alt="settings.png"]').first).to_be_visible()
    wait_answer_done(page)

    answer = page.locator(ANSWERS, has_text="Click the grey switch")
    expect(answer).to_contain_text("pyautogui.click(x=0.917, y=0.201)")
    overlay = page.locator(UNDER, has_text="Marked on settings.png")
    expect(overlay).to_contain_text("(a copy; the original is unchanged): point 1.")
    copy = overlay.locator('img[alt="settings (marked).png"]')
    expect(copy).to_be_visible()
    answer_box, copy_box = answer.bounding_box(), copy.bounding_box()
    assert answer_box is not None and copy_box is not None
    assert copy_box["y"] >= answer_box["y"] + answer_box["height"]  # below the answer
    screenshot(page, "grounding-overlay")

    drawn = fetch_image(page, f'{UNDER} img[alt="settings (marked).png"]')
    original = Image.open(DATA / "settings.png").convert("RGB")
    assert drawn.size == original.size == (1280, 800)
    assert drawn.getpixel((1174, 161)) == PALETTE[0]  # the answer's point: Dark mode
    assert original.getpixel((1174, 161)) != PALETTE[0]
    # The reasoning's first guess (Night light) is not drawn: that switch is as it was.
    for pixel in [(1174, 241), (1150, 241), (1198, 241), (1174, 228), (1174, 254)]:
        assert drawn.getpixel(pixel) == original.getpixel(pixel)
    # The person's upload still shows unmarked in their message.
    user_copy = fetch_image(page, '[data-step-type="user_message"] img[alt="settings.png"]')
    assert user_copy.getpixel((1174, 161)) == original.getpixel((1174, 161))


def test_bbox_answer_draws_the_labelled_box(page: Page) -> None:
    ask(page, "Find the cup's spoon #scenario=bbox", DATA / "coffee.png")
    wait_answer_done(page)
    overlay = page.locator(UNDER, has_text="Marked on coffee.png")
    expect(overlay).to_contain_text("box 1, spoon.")
    expect(overlay.locator('img[alt="coffee (marked).jpg"]')).to_be_visible()
    drawn = fetch_image(page, f'{UNDER} img[alt="coffee (marked).jpg"]')
    assert drawn.size == (600, 400)
    # The box's left edge, x = 0.54 * 600 = 324, is red (JPEG: about).
    red, green, blue = drawn.getpixel((325, 200))  # type: ignore[misc]
    assert red > 180 and green < 90 and blue < 110
    screenshot(page, "grounding-bbox")


def test_several_images_and_no_name_are_not_drawn_but_said(page: Page) -> None:
    ask(page, "Where is it? #scenario=click", DATA / "settings.png", DATA / "coffee.png")
    wait_answer_done(page)
    expect(page.locator(ANSWERS, has_text="Click the grey switch")).to_be_visible()
    note = page.locator(UNDER, has_text="Not drawn")
    expect(note).to_contain_text(re.compile(r"does not say which of the 2 images it is on"))
    expect(page.locator(UNDER, has_text="Marked on")).to_have_count(0)
    expect(page.locator(f'{UNDER} img[alt$="(marked).png"]')).to_have_count(0)
    expect(page.locator(REASONING_STEP)).to_have_count(1)
    screenshot(page, "grounding-not-drawn")


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_a_follow_up_question_draws_on_the_photo_it_names_or_says_it_is_missing(
    chromium: Browser, stack: Stack, viewport: ViewportSize
) -> None:
    context = new_context(chromium)
    page = context.new_page()
    page.set_viewport_size(viewport)
    try:
        page.goto(stack.ui_url)
        expect(page.locator("#chat-settings-open-modal")).to_be_visible()
        ask(page, "What are these? #scenario=plain", DATA / "coffee.png", DATA / "settings.png")
        wait_answer_done(page)
        ask(page, "Find the spoon in the first photo #scenario=bbox")
        wait_answer_done(page)
        under = page.locator(UNDER).last
        expect(under).to_contain_text("Marked on coffee.png")
        copy = under.locator('img[alt="coffee (marked).jpg"]')
        expect(copy).to_be_visible()
        # Above the answer's buttons, in the message under the answer: no Copy of its own.
        regenerate = under.get_by_role("button", name="Regenerate")
        copy.scroll_into_view_if_needed()
        copy_box, button_box = copy.bounding_box(), regenerate.bounding_box()
        assert copy_box is not None and button_box is not None
        assert copy_box["y"] + copy_box["height"] <= button_box["y"]
        expect(page.locator(MESSAGES, has_text="Marked on")).to_have_count(0)
        drawn = fetch_image(page, f'{UNDER} img[alt="coffee (marked).jpg"]')
        assert drawn.size == (600, 400)  # the coffee photo, not the settings page
        red, green, blue = drawn.getpixel((325, 200))  # type: ignore[misc]
        assert red > 180 and green < 90 and blue < 110  # the box's left edge
        size = "desktop" if viewport == DESKTOP else "phone"
        screenshot(page, f"grounding-follow-up-{size}")
        # A photo the chat does not have: nothing drawn, one sentence says which and why.
        ask(page, "Find the spoon in the third photo #scenario=bbox")
        wait_answer_done(page)
        expect(page.locator(ANSWERS).last).to_contain_text("The spoon lies on the saucer")
        under = page.locator(UNDER).last
        expect(under).to_contain_text(
            "Not drawn: the question names image 3, but the chat's images end at image 2."
        )
        expect(under.locator('img[alt*="(marked)"]')).to_have_count(0)
        expect(page.locator(f'{UNDER} img[alt$="(marked).jpg"]')).to_have_count(1)
        screenshot(page, f"grounding-missing-photo-{size}")
    finally:
        context.close()
