"""A PDF in a real browser: a text PDF is read as its text layer (not as page images),
its picture pages go as images, and the note says plainly what was read and what was
left out, in English and Chinese."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.conftest import (
    ANSWERS,
    Stack,
    functional_context,
    screenshot,
    wait_answer_done,
)
from tests.fakes.kimi_server import conversation
from tests.media import paragraph, text_pdf

pytestmark = pytest.mark.browser

NOTES = '[data-step-type="assistant_message"]'


@pytest.mark.parametrize(
    ("locale", "said"),
    [
        ("en-US", "report.pdf: pages 1-4, 6 of 6 read as text, page 5 sent as images"),
        ("zh-CN", "report.pdf：共 6 页，已读取第 1-4, 6 页的文字，第 5 页没有文字，已作为图片发送"),
    ],
    ids=["en-US", "zh-CN"],
)
def test_a_text_pdf_is_read_as_text_and_its_picture_page_as_an_image(
    chromium: Browser, stack: Stack, tmp_path: Path, locale: str, said: str
) -> None:
    pages: list[str | None] = [paragraph(n) for n in range(1, 7)]
    pages[4] = None  # page 5: a picture (a scan, a chart), no text
    pdf = text_pdf(tmp_path / "report.pdf", pages)
    page = functional_context(
        chromium, locale=locale, viewport={"width": 1440, "height": 900}
    ).new_page()
    page.goto(stack.ui_url)
    expect(page.locator("#chat-settings-open-modal")).to_be_visible()
    stack.clear_requests()
    page.locator("#upload-button-input").set_input_files([str(pdf)])
    expect(page.locator("#attachments")).to_contain_text("report.pdf")
    page.locator("#chat-input").fill("Summarise this report #scenario=plain")
    page.locator("#chat-submit").click()
    wait_answer_done(page)
    note = page.locator(NOTES, has_text="report.pdf")
    expect(note).to_contain_text(said)
    expect(page.locator(ANSWERS).last).to_contain_text("A little math")
    screenshot(page, f"pdf-read-as-text-{locale}")
    (request,) = stack.requests()
    content = conversation(request)[-1]["content"]
    texts = "\n".join(part["text"] for part in content if part["type"] == "text")
    images = [part for part in content if part["type"] == "image_url"]
    assert len(images) == 1  # page 5 only
    for number in (1, 2, 3, 4, 6):
        assert f"Section {number}.12: revenue grew in region 12 of {number}." in texts
    assert "Summarise this report" in texts
    page.context.close()
