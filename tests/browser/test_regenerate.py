"""Regenerate on an older answer forks the chat there, in a real browser.

The answer is a new version of its turn: the later turns leave the page (and the
conversation the model sees) and stay with the earlier version, the new answer streams
under the question it answers, in view, and ‹ n/m › under it brings the earlier version
back with its later turns, after a reload too.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import (
    ANSWERS,
    REASONING_STEP,
    REASONING_TEXT,
    THINKING_MODEL,
    Stack,
    ask,
    copy_app,
    screenshot,
    signed_in_page,
    start_scripted_server,
    wait_answer_done,
)
from tests.browser.test_persistence import PASSWORDS, App
from tests.conftest import free_port
from tests.fakes.kimi_server import REASONING, conversation

pytestmark = pytest.mark.browser

QUESTIONS = '[data-step-type="user_message"]'


def user_texts(request: dict[str, Any]) -> list[str]:
    """The text of each user message of a chat completion request."""
    texts = []
    for message in conversation(request):
        if message["role"] != "user":
            continue
        content = message["content"]
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        texts.append(" ".join(p["text"] for p in parts if p["type"] == "text"))
    return texts


def fork_at_the_first_answer(page: Page, server_url: str, stored: bool = False) -> None:
    """Ask three questions, Regenerate the first answer: the later turns leave the page,
    the new answer comes under the first question, in view, asked with that turn only.
    ``stored``: the chat has a data layer, so Chainlit's page moves to ``/thread/<id>``
    after the first question, which mounts a new message box (what was typed in the
    old one is gone): the next question waits for that."""
    for n in (1, 2, 3):
        ask(page, f"Question {n} #scenario=plain")
        expect(page.locator(ANSWERS)).to_have_count(n)
        wait_answer_done(page)
        if stored and n == 1:
            page.wait_for_url(re.compile(r"/thread/"))
    expect(page.locator(QUESTIONS)).to_have_count(3)
    page.evaluate("window.scrollTo(0, 0)")
    httpx.delete(f"{server_url}/debug/requests")

    page.get_by_role("button", name="Regenerate", exact=True).first.click()
    expect(page.locator(QUESTIONS)).to_have_count(1)  # questions 2 and 3 left the page
    wait_answer_done(page)
    expect(page.locator(QUESTIONS)).to_have_text(["Question 1 #scenario=plain"])
    answers = page.locator(ANSWERS, has_text="A rocket stands")
    expect(answers).to_have_count(2)  # the first answer, then the new one
    note = page.get_by_text("Answering again: “Question 1 #scenario=plain”, as a new version.")
    expect(note).to_contain_text("The 2 later turn(s) stay with the earlier version.")
    new = answers.last
    expect(new).to_be_in_viewport()
    assert new.bounding_box()["y"] > note.bounding_box()["y"]  # type: ignore[index]
    (regenerated,) = requests(server_url)
    assert user_texts(regenerated) == ["Question 1 #scenario=plain"]


def asks_after_the_first_turn(page: Page, server_url: str) -> None:
    """The next question goes with the first turn only."""
    httpx.delete(f"{server_url}/debug/requests")
    ask(page, "Question 4 #scenario=plain")
    wait_answer_done(page)
    (asked,) = requests(server_url)
    assert user_texts(asked) == ["Question 1 #scenario=plain", "Question 4 #scenario=plain"]


def requests(server_url: str) -> list[dict[str, Any]]:
    """The chat completion requests the scripted server received."""
    found: list[dict[str, Any]] = httpx.get(f"{server_url}/debug/requests").json()["requests"]
    return found


def test_regenerate_an_older_answer_takes_the_later_turns_off_the_page(
    page: Page, stack: Stack
) -> None:
    fork_at_the_first_answer(page, stack.server_url)
    screenshot(page, "regenerate-older-answer")
    asks_after_the_first_turn(page, stack.server_url)


@pytest.fixture
def stored_app(tmp_path: Path) -> Iterator[App]:
    """The app with sign-in on (a SQLite store in ``tmp_path``) before the scripted server."""
    port = free_port()
    server = start_scripted_server(port, THINKING_MODEL)
    copy_app(tmp_path)
    running = App(tmp_path, f"http://127.0.0.1:{port}", "", "sqlite")
    try:
        running.add_users()
        running.start()
        yield running
    finally:
        running.stop()
        server.stop()


@pytest.mark.serial  # reloads at a chat's address: docs/facts.md, a chat loaded afresh
def test_the_branch_shown_stays_after_a_reload_and_the_earlier_version_comes_back(
    chromium: Browser, stored_app: App
) -> None:
    server_url = stored_app.env["KIMI_BASE_URL"].removesuffix("/v1")
    context, page = signed_in_page(chromium, stored_app.url, "alice", PASSWORDS["alice"])
    try:
        fork_at_the_first_answer(page, server_url, stored=True)
        page.wait_for_timeout(1_000)  # the chat's writes reach the database
        page.reload()
        expect(page.locator(QUESTIONS)).to_have_text(["Question 1 #scenario=plain"])
        expect(page.locator(ANSWERS, has_text="A rocket stands")).to_have_count(2)
        screenshot(page, "regenerate-older-answer-reloaded")
        asks_after_the_first_turn(page, server_url)
        page.get_by_role("button", name="‹ 2/2", exact=True).click()  # the earlier version
        shown = [f"Question {n} #scenario=plain" for n in (1, 2, 3)]
        expect(page.locator(QUESTIONS)).to_have_text(shown)
        page.wait_for_timeout(1_000)  # the chat's writes reach the database
        page.reload()
        expect(page.locator(QUESTIONS)).to_have_text(shown)
        expect(page.get_by_role("button", name="‹ 1/2", exact=True)).to_have_count(1)
        screenshot(page, "versions-earlier-branch-reloaded")
    finally:
        context.close()


def test_an_earlier_version_comes_back_with_its_reasoning(page: Page, stack: Stack) -> None:
    """‹ n/m › draws the version's reasoning step again, titled with its time (issue 47,
    item 3: it drew the answers without their reasoning)."""
    for n in (1, 2):
        ask(page, f"Question {n}")  # the Thinking model's default scenario: it reasons
        expect(page.locator(ANSWERS)).to_have_count(n)
        wait_answer_done(page)
    page.get_by_role("button", name="Regenerate", exact=True).first.click()
    expect(page.locator(QUESTIONS)).to_have_count(1)
    wait_answer_done(page)

    page.get_by_role("button", name="‹ 2/2", exact=True).click()  # the earlier version
    expect(page.locator(QUESTIONS)).to_have_text(["Question 1", "Question 2"])
    thought = page.locator(f'{REASONING_STEP} button[id^="step-Thought for"]')
    expect(thought).to_have_count(2)
    expect(thought.first).to_have_text(re.compile(r"^\s*Thought for \d+\.\ds\s*$"))
    expect(thought.first).to_have_attribute("aria-expanded", "false")
    thought.first.click()
    expect(page.locator(REASONING_TEXT).first).to_contain_text(REASONING[:40])
    screenshot(page, "versions-earlier-branch-with-reasoning")
