"""Below the fold, on a desktop and a phone: photos a person sent are thumbnails, a long
text is folded to a few lines (a click unfolds it), and the view follows a grounding
overlay that arrives after the answer but not a message's avatar, and moves to the note of
a Regenerate on an older answer (public/ux.js, public/style.css)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, expect

from tests.browser.conftest import (
    ANSWERS,
    Stack,
    ask,
    functional_context,
    screenshot,
    wait_answer_done,
)
from tests.conftest import DATA

pytestmark = pytest.mark.browser

SIZES: dict[str, ViewportSize] = {
    "desktop": {"width": 1440, "height": 900},
    "phone": {"width": 390, "height": 844},
}
SENT = '[data-step-type="user_message"]'


@pytest.fixture(params=list(SIZES))
def sized_page(request: pytest.FixtureRequest, chromium: Browser, stack: Stack) -> Iterator[Page]:
    """A page on the UI at the size ``request.param`` names."""
    context = functional_context(chromium, viewport=SIZES[request.param])
    page = context.new_page()
    page.goto(stack.ui_url)
    expect(page.locator("#chat-settings-open-modal")).to_be_attached()  # the session is up
    yield page
    context.close()


def size_of(page: Page) -> str:
    viewport = page.viewport_size
    assert viewport is not None
    return "phone" if viewport["width"] < 600 else "desktop"


def test_ten_photos_are_thumbnails_and_the_reply_stays_in_view(
    sized_page: Page, tmp_path: Path
) -> None:
    page = sized_page
    photos = []
    for number in range(10):
        photos.append(tmp_path / f"photo{number}.jpg")
        shutil.copy(DATA / "rocket.jpg", photos[-1])
    ask(page, "What do these show? #scenario=plain", *photos)
    wait_answer_done(page)
    thumbnails = page.locator(f"{SENT} img.inline-image")
    expect(thumbnails).to_have_count(10)
    for thumbnail in thumbnails.all():
        box = thumbnail.bounding_box()
        assert box is not None and box["height"] <= 100 and box["width"] <= 100, box
    sent = page.locator(SENT).last.bounding_box()
    viewport = page.viewport_size
    assert sent is not None and viewport is not None
    assert sent["height"] < viewport["height"] / 2, sent  # the reply fits under it
    expect(page.locator(ANSWERS).last).to_be_in_viewport()
    screenshot(page, f"photos-as-thumbnails-{size_of(page)}")


def test_a_long_text_is_folded_and_a_click_unfolds_it(sized_page: Page) -> None:
    page = sized_page
    long_text = " ".join(f"Line {n} of a long brief." for n in range(300))
    ask(page, long_text + " #scenario=plain")
    wait_answer_done(page)
    text = page.locator(f'{SENT} [role="article"]').last
    folded = text.bounding_box()
    assert folded is not None and folded["height"] <= 260, folded
    expect(text).to_have_attribute("aria-expanded", "false")
    expect(page.locator(ANSWERS).last).to_be_in_viewport()
    screenshot(page, f"long-text-folded-{size_of(page)}")
    text.click()
    expect(text).to_have_attribute("aria-expanded", "true")
    unfolded = text.bounding_box()
    assert unfolded is not None and unfolded["height"] > 3 * folded["height"], unfolded
    expect(text).to_contain_text("Line 299 of a long brief.")
    text.press("Enter")
    expect(text).to_have_attribute("aria-expanded", "false")


@pytest.mark.serial  # the view must follow within 3 s
def test_the_view_follows_the_grounding_overlay(sized_page: Page) -> None:
    page = sized_page
    page.locator('[id="starter-where-should-i-click?"]').click()
    wait_answer_done(page)
    copy = page.locator('img[alt="settings (marked).png"]')
    expect(copy).to_be_visible()
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=copy.element_handle())
    expect(copy).to_be_in_viewport(ratio=0.95, timeout=3000)
    screenshot(page, f"grounding-overlay-followed-{size_of(page)}")


@pytest.fixture
def three_turns(chromium: Browser, stack: Stack) -> Iterator[Page]:
    """A page on the UI with three questions answered, the chat's end in view."""
    context = functional_context(chromium)
    page = context.new_page()
    page.goto(stack.ui_url)
    for n in (1, 2, 3):
        ask(page, f"Question {n} #scenario=plain")
        expect(page.locator(ANSWERS)).to_have_count(n)
        wait_answer_done(page)
    expect(page.locator(SENT).first).not_to_be_in_viewport()
    yield page
    context.close()


def test_an_avatar_loading_again_does_not_move_the_view(three_turns: Page) -> None:
    """Chainlit draws a message again (a note, an answer that ends) with a fresh avatar,
    whose load is not a picture the view should follow: the view stays where it is."""
    page = three_turns
    # Chainlit's message list: the closest ancestor of a message that scrolls
    container = page.locator(SENT).first.locator(
        "xpath=ancestor::div[contains(@class, 'overflow-y-auto')][1]"
    )
    container.evaluate("(list) => { list.scrollTop = 0; }")  # not by hand: no wheel, no key
    page.wait_for_timeout(300)
    avatar = page.locator('[data-step-type="assistant_message"] img:not(.inline-image)').last
    expect(avatar).to_be_attached()
    avatar.dispatch_event("load")
    page.wait_for_timeout(300)
    assert container.evaluate("(list) => list.scrollTop") == 0


PUT_FORK_NOTE = """(question) => {
    const note = document.createElement("div");
    note.id = "step-" + crypto.randomUUID().slice(0, -12) + "00000000a005";
    note.textContent = "Answering again";
    question.append(note);
    return note.id;
}"""
"""Put a fork note (ui/notes.py NOTE_MARKS) at the end of a question on the page, as
Chainlit puts the app's note under the turn that Regenerate answers again; its id."""

PRESS_A_MESSAGE_BUTTON = """(question) => {
    const button = document.createElement("button");
    question.append(button);
    button.click();
    button.remove();
}"""
"""A press on a button inside a message (Regenerate, Retry), in the page's own events."""


@pytest.mark.parametrize("then", ["pressed", "not pressed", "pressed, then scrolled"])
def test_a_fork_note_comes_into_view_only_after_a_press_on_a_message(
    three_turns: Page, then: str
) -> None:
    """The note that an older turn is answered again is brought into view when it comes
    after a press on a button in a message, not when a chat is opened (no press) and not
    when the person scrolled after the press."""
    page = three_turns
    first = page.locator(SENT).first  # out of view: the chat's end is in view
    if then != "not pressed":
        first.evaluate(PRESS_A_MESSAGE_BUTTON)
    if then == "pressed, then scrolled":
        page.mouse.move(550, 400)
        page.mouse.wheel(0, 5)
        page.wait_for_timeout(300)  # the wheel's events reach the page
    note = page.locator(f"#{first.evaluate(PUT_FORK_NOTE)}")
    if then == "pressed":
        expect(note).to_be_in_viewport()
    else:
        page.wait_for_timeout(500)
        expect(note).not_to_be_in_viewport()
