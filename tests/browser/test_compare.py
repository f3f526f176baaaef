"""Compare in a real browser: the turn's answer and the other model's side by side on a
desktop, one under the other on a phone, each with its model's label at the top, the
other model's streaming into its column; a resumed chat shows the same pair and has its
Compare buttons again (ui/compare_view.py, public/style.css). Under the app's own
Content-Security-Policy: the checks are Playwright's, not the test's own scripts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, FloatRect, Locator, Page, ViewportSize, expect

from tests.browser.conftest import (
    DESKTOP,
    PHONE,
    REASONING_STEP,
    SIGNED_USER,
    Stack,
    ask,
    new_context,
    reopen_from_sidebar,
    screenshot,
    sign_in,
    stored_chat,
    wait_answer_done,
)
from tests.browser.test_export import export
from tests.conftest import DATA
from tests.fakes.kimi_server import conversation

pytestmark = pytest.mark.browser

PAIR = '[id^="step-"][id$="c0a1c0a1c0a1"]'
COLUMNS = '[id^="step-"][id$="c0a1c0a1c01a"]'
"""The pair's step and its columns (ui/compare_view.py's id tails)."""
TITLE = "h3 button"
THOUGHT = f'{REASONING_STEP} button[id^="step-Thought for"]'
"""The title of a reasoning step that has ended."""
COMPARE = "Compare with Kimi-VL Instruct"


def box(locator: Locator) -> FloatRect:
    found = locator.bounding_box()
    assert found is not None, f"{locator} is not on the page"
    return found


def assert_laid_out(page: Page, phone: bool) -> None:
    """Two columns titled Thinking then Instruct, the titles above their text; side by
    side (same top, left before right) on a desktop, one under the other on a phone."""
    columns = page.locator(COLUMNS)
    expect(columns).to_have_count(2)
    left, right = columns.first, columns.last
    expect(left.locator(TITLE).first).to_have_text("Kimi-VL Thinking (2506)")
    expect(right.locator(TITLE).first).to_have_text("Kimi-VL Instruct")
    for column in (left, right):
        expect(column.locator("h2").first).to_have_text("What the picture shows")
        assert box(column.locator(TITLE).first)["y"] < box(column.locator("h2").first)["y"]
    left.scroll_into_view_if_needed()
    one, two = box(left), box(right)
    if phone:
        assert abs(one["x"] - two["x"]) < 2 and two["y"] >= one["y"] + one["height"] - 1
    else:
        assert abs(one["y"] - two["y"]) < 2 and two["x"] >= one["x"] + one["width"]
        assert one["width"] > 250 and two["width"] > 250


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_compare_shows_both_answers_side_by_side_and_resumes_so(
    chromium: Browser, signed_stack: Stack, viewport: ViewportSize
) -> None:
    phone = viewport == PHONE
    context = new_context(chromium)
    try:
        page = sign_in(context, signed_stack.ui_url, *SIGNED_USER)
        page.set_viewport_size(viewport)
        size = "phone" if phone else "desktop"
        question = f"What is in this picture? ({size})"
        ask(page, question, DATA / "rocket.jpg")
        wait_answer_done(page)
        signed_stack.clear_requests()
        page.get_by_role("button", name=COMPARE).last.click()
        # The other model's column is on the page, titled, while its answer streams.
        expect(page.locator(PAIR)).to_have_count(1)
        expect(page.locator(COLUMNS).last.locator(TITLE).first).to_have_text("Kimi-VL Instruct")
        wait_answer_done(page)
        assert_laid_out(page, phone)
        expect(page.locator(COLUMNS).last).to_contain_text("TTFT")  # how it ended, under it
        requests = signed_stack.requests()
        asked = [(r["model"], str(conversation(r)[-1]["content"])[-120:]) for r in requests]
        assert len(requests) == 1, asked
        (request,) = requests
        assert request["model"] == "kimi-vl"
        content = conversation(request)[-1]["content"]
        assert [part["type"] for part in content] == ["image_url", "text"]
        screenshot(page, f"compare-{size}")

        chat = stored_chat(page, signed_stack.ui_url, question)
        page.wait_for_timeout(1_000)  # the rest of the chat's writes reach the database
        page = reopen_from_sidebar(page, signed_stack.ui_url, question, chat)
        assert_laid_out(page, phone)
        expect(page.get_by_role("button", name=COMPARE)).to_have_count(1)  # under the answer
        screenshot(page, f"compare-resumed-{size}")
    finally:
        context.close()


def test_an_earlier_version_comes_back_with_its_compare_and_a_resumed_chat_exports_it(
    chromium: Browser, signed_stack: Stack, tmp_path: Path
) -> None:
    """Defects: ‹ n/m › drew an earlier version without the Compare it had, and a resumed
    chat's Export left out the Compare answers its page showed (they were held by the
    session that showed them; now stored with their turn)."""
    context = new_context(chromium)
    try:
        page = sign_in(context, signed_stack.ui_url, *SIGNED_USER)
        question = "What is in this picture? (versions)"
        ask(page, question, DATA / "rocket.jpg")
        wait_answer_done(page)
        page.get_by_role("button", name=COMPARE).last.click()
        expect(page.locator(COLUMNS).last).to_contain_text("TTFT")
        page.get_by_role("button", name="Regenerate", exact=True).last.click()
        earlier = page.get_by_role("button", name="‹ 2/2", exact=True)
        expect(earlier).to_have_count(1)  # under the new answer, once it has ended
        earlier.click()
        expect(page.get_by_role("button", name="‹ 1/2", exact=True)).to_have_count(1)
        expect(page.locator(PAIR)).to_have_count(1)  # drawn again with its version
        expect(page.get_by_role("button", name=COMPARE)).to_have_count(1)  # the last answer's
        assert_laid_out(page, phone=False)
        expect(page.locator(COLUMNS).last).to_contain_text("TTFT")
        page.get_by_role("button", name="‹ 1/2", exact=True).scroll_into_view_if_needed()
        screenshot(page, "compare-earlier-version")
        page.get_by_role("button", name="›", exact=True).click()  # the newer version again
        expect(earlier).to_have_count(1)
        expect(page.locator(PAIR)).to_have_count(0)  # it has no Compare
        expect(page.locator(THOUGHT)).to_have_count(1)  # its reasoning, not the other's too
        earlier.click()
        expect(page.locator(PAIR)).to_have_count(1)

        chat = stored_chat(page, signed_stack.ui_url, question)
        page.wait_for_timeout(1_000)  # the rest of the chat's writes reach the database
        page = reopen_from_sidebar(page, signed_stack.ui_url, question, chat)
        expect(page.locator(PAIR)).to_have_count(1)
        html = export(page, "Export", tmp_path / "chat.html").read_text()
        assert html.count('class="compared"') == 1
        assert html.count(">Kimi-VL Instruct<") == 1
    finally:
        context.close()
