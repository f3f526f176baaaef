"""What a person can tell the operator when an answer fails: the request's short id and
the time, quietly under the error note, in the browser's language; and app.log names the
same request with why it failed (our error's class, vLLM's status, error type and words)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, expect

from tests.browser.conftest import ANSWERS, Stack, ask, new_context, screenshot, wait_answer_done

pytestmark = pytest.mark.browser

REF = re.compile(r"(chat-[0-9a-f]{6})(?:, |，)(\d\d:\d\d:\d\d)")


@pytest.mark.parametrize(
    ("locale", "error", "ref"),
    [
        ("en-US", "The model server failed while answering.", "ref "),
        ("zh-CN", "模型服务器在回答时出错。", "编号 "),
    ],
    ids=["en-US", "zh-CN"],
)
def test_an_error_note_names_its_request_and_the_log_says_why(
    chromium: Browser, stack: Stack, locale: str, error: str, ref: str
) -> None:
    context = new_context(chromium, locale=locale)
    page = context.new_page()
    try:
        page.goto(stack.ui_url)
        expect(page.locator("#chat-settings-open-modal")).to_be_visible()
        ask(page, "Describe it #scenario=error-500")
        wait_answer_done(page)
        note = page.locator(ANSWERS, has_text=error)
        expect(note).to_contain_text(re.compile(ref + REF.pattern))
        quiet = note.locator("span.italic", has_text=REF)  # its own line, in italics
        expect(quiet).to_have_count(1)
        found = REF.search(quiet.inner_text())
        assert found is not None
        short, _ = found.groups()
        screenshot(page, f"error-ref-{locale}")
    finally:
        context.close()
    assert stack.app_log is not None
    log = stack.app_log.read_text()
    line = re.search(rf".* WARNING request {short}[0-9a-f]{{26}} ended: failed: .*", log)
    assert line is not None, log[-2000:]
    assert "ServerFailed (HTTP 500, InternalServerError): The model server failed while" in line[0]
    assert line[0].endswith("The server said: EngineCore encountered an issue.")  # theirs
    assert line[0][11:19] == found.group(2)  # the time on screen is the log line's time
