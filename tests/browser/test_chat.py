"""The chat in a real browser: uploads, the reasoning step, rendering, Stop, refusals.

Against the scripted Kimi-VL server (``tests/fakes/kimi_server.py``), which the
app reaches over HTTP exactly as it reaches vLLM.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, Response, expect

from tests.browser.conftest import (
    ANSWERS,
    REASONING_STEP,
    REASONING_TEXT,
    UNDER_ANSWERS,
    Stack,
    ask,
    attach,
    new_context,
    screenshot,
    wait_answer_done,
)
from tests.conftest import DATA
from tests.fakes.kimi_server import ANSWER, REASONING, conversation

pytestmark = pytest.mark.browser

THOUGHT = re.compile(r"^\s*Thought for \d+\.\ds\s*$")


def test_reasoning_streams_open_then_collapses_and_answer_renders(page: Page, stack: Stack) -> None:
    ask(page, "What is in this picture? #scenario=steady", DATA / "rocket.jpg")
    user = page.locator('[data-step-type="user_message"]').last
    expect(user.locator('img[alt="rocket.jpg"]')).to_be_visible()

    thinking = page.locator(f'{REASONING_STEP} button[id="step-Thinking…"]')
    expect(thinking).to_have_attribute("aria-expanded", "true")
    expect(thinking).to_have_text(re.compile(r"^\s*Thinking…\s*$"))
    reasoning = page.locator(REASONING_TEXT).last
    expect(reasoning).to_contain_text("Okay, the user")
    seen = len(reasoning.inner_text())
    page.wait_for_function(
        "([sel, n]) => document.querySelector(sel).innerText.length > n",
        arg=[REASONING_TEXT, seen + 20],
    )  # still streaming into the open step
    screenshot(page, "reasoning-streaming")

    thought = page.locator(f'{REASONING_STEP} button[id^="step-Thought for"]')
    expect(thought).to_have_text(THOUGHT)  # no "Used" prefix
    expect(thought).to_have_attribute("aria-expanded", "false")
    wait_answer_done(page)
    answer = page.locator(ANSWERS).last
    expect(answer.locator("h2")).to_have_text("What the picture shows")
    expect(answer).to_contain_text("A rocket stands on its launch pad")
    expect(answer.locator(".katex").first).to_be_visible()
    expect(answer.locator("pre")).to_contain_text("print('liftoff')")
    expect(answer).not_to_contain_text("TTFT")  # the answer alone: what Copy copies
    stats = page.locator(UNDER_ANSWERS).last
    expect(stats).to_contain_text(re.compile(r"TTFT [\d.]+ s · thought [\d.]+ s · \d+ tokens"))
    expect(answer).not_to_contain_text("◁")
    expect(reasoning).to_be_hidden()
    screenshot(page, "reasoning-collapsed")

    thought.click()
    expect(thought).to_have_attribute("aria-expanded", "true")
    expect(reasoning).to_be_visible()
    expect(reasoning).to_contain_text(REASONING)
    screenshot(page, "reasoning-expanded")

    sent = conversation(stack.requests()[-1])
    assert isinstance(sent, list)
    assert [part["type"] for part in sent[-1]["content"]] == ["image_url", "text"]


def test_several_images_show_previews_and_all_are_sent(page: Page, stack: Stack) -> None:
    images = [DATA / "rocket.jpg", DATA / "page.png", DATA / "chelsea.png"]
    attach(page, *images)
    screenshot(page, "several-images-previews")
    ask(page, "What do these have in common? #scenario=plain")
    wait_answer_done(page)
    user = page.locator('[data-step-type="user_message"]').last
    for image in images:
        expect(user.locator(f'img[alt="{image.name}"]')).to_be_visible()
    expect(page.locator(ANSWERS).last.locator("h2")).to_have_text("What the picture shows")
    expect(page.locator(REASONING_STEP)).to_have_count(0)
    screenshot(page, "several-images-answer")
    content = conversation(stack.requests()[-1])[-1]["content"]
    assert [part["type"] for part in content] == ["image_url"] * 3 + ["text"]


def test_stop_mid_reasoning_is_tidy_and_the_next_question_works(page: Page) -> None:
    ask(page, "Think slowly #scenario=slow")
    reasoning = page.locator(REASONING_TEXT).last
    expect(reasoning).to_contain_text("Let me look carefully")
    page.locator("#stop-button").click()

    stopped = page.locator(f'{REASONING_STEP} button[id^="step-Thought for"]')
    expect(stopped).to_have_text(re.compile(r"^\s*Thought for \d+\.\ds \(stopped\)\s*$"))
    note = page.locator(UNDER_ANSWERS, has_text="Stopped while thinking")
    expect(note).to_contain_text("the reasoning so far is kept above")
    said = page.locator(f"{ANSWERS}, {UNDER_ANSWERS}", has_text="Stopped")
    expect(said).to_have_count(1)  # said once, by the app
    expect(page.locator("#root")).not_to_contain_text("Task manually stopped")
    expect(page.get_by_role("button", name="Retry", exact=True)).to_be_visible()
    if stopped.get_attribute("aria-expanded") == "false":
        stopped.click()
    expect(reasoning).to_contain_text("Okay, the user wants to know")
    partial = reasoning.inner_text()
    assert len(partial) < len(REASONING) * 20  # cut short, yet kept
    for bad in ("Error", "error", "Traceback", "CancelledError"):
        expect(page.locator("#root")).not_to_contain_text(bad)
    screenshot(page, "stop-mid-reasoning")

    ask(page, "And now a short one #scenario=plain")
    wait_answer_done(page)
    expect(page.locator(ANSWERS).last.locator("h2")).to_have_text("What the picture shows")
    screenshot(page, "stop-then-next-question")


def test_wrong_file_types_are_refused_with_a_message(page: Page, tmp_path: Path) -> None:
    """Judged by their content, on attach, in the app's words (tests/browser/test_attachments.py
    has the rest): a text file, and a web page named like a photo."""
    notes = tmp_path / "notes.txt"
    notes.write_text("not an image")
    page.locator("#upload-button-input").set_input_files(str(notes))
    refused = page.locator("[data-sonner-toast]", has_text="notes.txt")
    expect(refused).to_contain_text("only those can be attached")
    expect(page.locator("#attachments")).to_have_count(0)
    screenshot(page, "wrong-type-refused-by-browser")

    disguised = tmp_path / "holiday.jpg"
    disguised.write_text("<html>not a photo</html>")
    page.locator("#upload-button-input").set_input_files(str(disguised))
    refused = page.locator("[data-sonner-toast]", has_text="holiday.jpg")
    expect(refused).to_contain_text("an HTML page, not an image")
    expect(page.locator("#attachments")).to_have_count(0)
    screenshot(page, "wrong-type-refused-by-app")


def test_cut_off_in_reasoning_offers_more_tokens(page: Page, stack: Stack) -> None:
    stack.clear_requests()
    ask(page, "#scenario=cutoff")
    wait_answer_done(page)
    step = page.locator(f'{REASONING_STEP} button[id^="step-Thought for"]')
    expect(step).to_have_text(THOUGHT)
    note = page.locator(UNDER_ANSWERS).last
    expect(note).to_contain_text("cut off")
    expect(note).to_contain_text("while still thinking")
    more = page.get_by_role("button", name="Retry with more tokens")
    expect(more).to_be_visible()
    if step.get_attribute("aria-expanded") == "false":
        step.click()
    expect(page.locator(REASONING_TEXT).first).to_contain_text(REASONING)
    screenshot(page, "cut-off-in-reasoning")

    first = stack.requests()[-1]["max_tokens"]
    assert isinstance(first, int)
    more.click()
    expect(page.locator(f"{REASONING_STEP}")).to_have_count(2)
    wait_answer_done(page)
    retried = stack.requests()[-1]["max_tokens"]
    assert isinstance(retried, int) and retried > first  # doubled, within the context


def test_starter_attaches_its_sample_image(page: Page, stack: Stack) -> None:
    stack.clear_requests()
    starter = page.locator('[id="starter-what-is-in-this-photo?"]')
    expect(starter.locator("img")).to_be_visible()
    screenshot(page, "welcome-starters")
    starter.click()
    expect(page.locator('img[alt="rocket.jpg"]').first).to_be_visible()
    wait_answer_done(page)
    expect(page.locator(UNDER_ANSWERS).last).to_contain_text("tokens/s")
    screenshot(page, "starter-sample-photo")
    content = conversation(stack.requests()[-1])[-1]["content"]
    assert [part["type"] for part in content] == ["image_url", "text"]
    assert content[-1]["text"] == "What is in this sample photo?"


def test_a_second_browser_does_not_break_the_first(chromium: Browser, stack: Stack) -> None:
    """Another person opening the page must not close the client every chat uses."""
    first, second = new_context(chromium), new_context(chromium)
    try:
        a = first.new_page()
        a.goto(stack.ui_url)
        expect(a.locator("#chat-settings-open-modal")).to_be_visible()
        ask(a, "Tab A, first question #scenario=plain")
        wait_answer_done(a)
        expect(a.locator(ANSWERS).last).to_contain_text("A rocket stands")

        b = second.new_page()  # a second person joins the demo
        b.goto(stack.ui_url)
        expect(b.locator("#chat-settings-open-modal")).to_be_visible()
        ask(b, "Tab B asks #scenario=plain")
        wait_answer_done(b)
        expect(b.locator(ANSWERS).last).to_contain_text("A rocket stands")

        ask(a, "Tab A, again #scenario=plain")
        wait_answer_done(a)
        expect(a.locator(ANSWERS)).to_have_count(2)
        expect(a.locator(ANSWERS).last).to_contain_text("A rocket stands")
        expect(a.locator("#root")).not_to_contain_text("Unexpected failure")
        screenshot(a, "two-browsers-tab-a")
    finally:
        first.close()
        second.close()


COPY = '[data-step-type="assistant_message"] button:has(svg.lucide-copy):not(.message-content *)'
"""Chainlit's Copy button under an answer (it copies the message's text), not a code
block's own."""


def copied(page: Page, button: int, timeout_s: float = 10.0) -> str:
    """Click the ``button``-th Copy button of the page (-1: the last) and read the clipboard
    until it holds text (at most ``timeout_s``; "" if it never does).

    Read from here, not with ``wait_for_function``: that does not wait for a promise, and
    the promise of ``readText()`` is itself truthy, so the wait returned at once and the
    read after it sometimes came before the copy (one run of many, 2026-12-05)."""
    page.evaluate("() => navigator.clipboard.writeText('')")
    page.locator(COPY).nth(button).click()
    deadline = time.monotonic() + timeout_s
    while not (text := str(page.evaluate("() => navigator.clipboard.readText()"))):
        if time.monotonic() > deadline:
            break
        page.wait_for_timeout(50)
    return text


def test_copy_copies_exactly_the_answer_also_after_regenerate(
    chromium: Browser, stack: Stack
) -> None:
    """Not the stats line; answers from Regenerate have a Copy button too (Chainlit gives
    one to the last answer of a run only)."""
    context = new_context(chromium, bypass_csp=True)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=stack.ui_url)
    page = context.new_page()
    try:
        page.goto(stack.ui_url)
        expect(page.locator("#chat-settings-open-modal")).to_be_visible()
        ask(page, "What is in this picture? #scenario=thinking")
        wait_answer_done(page)
        expect(page.locator(COPY)).to_have_count(1)
        assert copied(page, -1) == ANSWER.lstrip()
        screenshot(page, "copy-answer")

        page.get_by_role("button", name="Regenerate", exact=True).last.click()
        expect(page.locator(ANSWERS)).to_have_count(2)
        wait_answer_done(page)
        expect(page.locator(COPY)).to_have_count(2)
        assert copied(page, -1) == ANSWER.lstrip()

    finally:
        context.close()


def test_the_ui_reports_its_open_chats_to_the_operator(chromium: Browser, stack: Stack) -> None:
    """``./launch.sh status`` reads ``GET /kimi/status`` (loopback only): a tab counts
    while its socket is connected and stops counting when it closes, not 60 s later when
    Chainlit forgets its session (the count of an earlier try stayed up). Other tests'
    tabs share this app, so the count is read with this tab open, then after it closed."""

    def open_chats() -> int:
        count: int = httpx.get(f"{stack.ui_url}/kimi/status", timeout=5).json()["open_chats"]
        return count

    context = new_context(chromium)
    try:
        page = context.new_page()
        page.goto(stack.ui_url)
        expect(page.locator("#chat-settings-open-modal")).to_be_visible()
        with_this_tab = open_chats()
    finally:
        context.close()
    assert with_this_tab >= 1
    deadline = time.monotonic() + 5
    while open_chats() != with_this_tab - 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert open_chats() == with_this_tab - 1


def test_a_turn_leaves_the_page_console_clean(chromium: Browser, stack: Stack) -> None:
    """No console warning or error, and no failed request, while a reasoning and an
    answer stream into a stored chat; loading the page and its first turn log only
    react-dropzone's note that it skips "*/*" (``.chainlit/config.toml``: every file
    reaches the app), once per mount of Chainlit's chat (at ``/`` and at ``/thread/<id>``).

    Before: with ``accept`` a list, that note came at every render of the chat, 29 times
    a turn; and the reasoning step asked for the avatar "Thinking…", which Chainlit's
    server refuses (HTTP 400)."""
    context = new_context(chromium)
    said: list[str] = []
    failed: list[str] = []

    def note_failure(response: Response) -> None:
        if response.status >= 400:
            failed.append(f"{response.status} {response.url}")

    try:
        page = context.new_page()
        page.on("console", lambda m: said.append(f"{m.type}: {m.text}"))
        page.on("response", note_failure)
        page.goto(stack.ui_url)
        expect(page.locator("#chat-settings-open-modal")).to_be_visible()
        ask(page, "What is in this picture? #scenario=steady", DATA / "rocket.jpg")
        wait_answer_done(page)
        offline = "net::ERR_FAILED"  # the test's own refusal of CDN requests (block_cdn)
        notes = [s for s in said if s.startswith(("warning", "error")) and offline not in s]
        assert notes and all(n.startswith('warning: Skipped "*/*"') for n in notes), notes
        said.clear()
        ask(page, "And once more? #scenario=steady")
        wait_answer_done(page)
        expect(page.locator(ANSWERS)).to_have_count(2)
    finally:
        context.close()
    assert [s for s in said if s.startswith(("warning", "error"))] == []
    assert failed == []
