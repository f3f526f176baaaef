"""Regenerate on an older answer forks the chat there, in a real browser.

The later turns leave the page (and the conversation the model sees), and the new
answer streams under the question it answers, in view.
"""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.browser.conftest import ANSWERS, Stack, ask, screenshot, wait_answer_done

pytestmark = pytest.mark.browser

QUESTIONS = '[data-step-type="user_message"]'


def user_texts(request: dict[str, Any]) -> list[str]:
    """The text of each user message of a chat completion request."""
    texts = []
    for message in request["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        parts = content if isinstance(content, list) else [{"type": "text", "text": content}]
        texts.append(" ".join(p["text"] for p in parts if p["type"] == "text"))
    return texts


def test_regenerate_an_older_answer_takes_the_later_turns_away(page: Page, stack: Stack) -> None:
    for n in (1, 2, 3):
        ask(page, f"Question {n} #scenario=plain")
        wait_answer_done(page)
    expect(page.locator(QUESTIONS)).to_have_count(3)
    page.evaluate("window.scrollTo(0, 0)")
    stack.clear_requests()

    page.get_by_role("button", name="Regenerate", exact=True).first.click()
    expect(page.locator(QUESTIONS)).to_have_count(1)  # questions 2 and 3 left the page
    wait_answer_done(page)
    expect(page.locator(QUESTIONS)).to_have_text(["Question 1 #scenario=plain"])
    answers = page.locator(ANSWERS, has_text="A rocket stands")
    expect(answers).to_have_count(2)  # the first answer, then the new one
    note = page.get_by_text("Answering again: “Question 1 #scenario=plain”.")
    expect(note).to_contain_text("The 2 later turn(s) were removed.")
    new = answers.last
    expect(new).to_be_in_viewport()
    assert new.bounding_box()["y"] > note.bounding_box()["y"]  # type: ignore[index]
    screenshot(page, "regenerate-older-answer")
    (regenerated,) = stack.requests()
    assert user_texts(regenerated) == ["Question 1 #scenario=plain"]

    stack.clear_requests()
    ask(page, "Question 4 #scenario=plain")
    wait_answer_done(page)
    (asked,) = stack.requests()
    assert user_texts(asked) == ["Question 1 #scenario=plain", "Question 4 #scenario=plain"]
