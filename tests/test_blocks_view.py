"""A long reasoning and answer over Chainlit's socket, as blocks (ui/blocks.py).

The app's handlers run in a Chainlit context whose socket is recorded
(``tests/test_app.py``'s :class:`Browser`), against the scripted server's
``long-think`` stream at a fast pace. What the browser gets must be the model's
text, whole and in order, in blocks that are never sent again once closed (the answer
becomes one message when it ends): that is what keeps the page's work per update
independent of the text's length.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

import app
from backend.blocks import HARD_CHARS
from backend.settings import Settings
from tests.conftest import RunningFake
from tests.fakes.kimi_server import LONG_END, long_prose
from tests.test_app import Browser, carries_text, start_chat, user_message
from tests.test_app import close_resources as close_resources  # the app's resources, per test
from ui.answer_view import ANSWER_HARD_CHARS, AnswerView
from ui.blocks import BLOCK_ID_TAIL, LIVE_PLACEHOLDER
from ui.notes import AUTHOR
from ui.session import runner

LONG = "#scenario=long-think #reasoning=3000 #answer=3000 #rate=20000"


@pytest.fixture
async def browser(fake: RunningFake, monkeypatch: pytest.MonkeyPatch) -> Browser:
    return await start_chat(Settings(base_url=fake.base_url), monkeypatch)


def frames_of(browser: Browser, step_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The frames about one step or message, in order."""
    return [(e, d) for e, d in browser.frames if isinstance(d, dict) and d.get("id") == step_id]


def assert_closed_once(browser: Browser, step_id: str, closing: str) -> None:
    """The block was drawn blank, showed its text live, then got its final text once, then
    nothing more."""
    events = [e for e, _ in frames_of(browser, step_id)]
    assert events[0] == "stream_start" and events.count(closing) == 1
    assert events[-1] == closing, f"{step_id} was sent again after it closed: {events}"
    assert "stream_token" not in events  # the text went live (ui/bridge.py), not to React
    start = next(d for e, d in frames_of(browser, step_id) if e == "stream_start")
    assert start["output"] == LIVE_PLACEHOLDER and browser.live(step_id)


def live_then_drawn(browser: Browser, block_id: str, final: str) -> None:
    """A block's first live words came before the block itself, its final text is what
    showed live (a code block cut in two gets its closing fence: backend/blocks.py), and
    the page was told its live text ended after that final text was sent."""
    live = [
        i
        for i, (e, d) in enumerate(browser.frames)
        if carries_text(e, d) and d["kimi"]["id"] == block_id
    ]
    start = next(
        i for i, (e, d) in enumerate(browser.frames) if e == "stream_start" and d["id"] == block_id
    )
    assert live[0] < start
    shown = browser.live(block_id)
    assert final.startswith(shown) and re.fullmatch(r"(\n?(`{3,}|~{3,})\n?)?", final[len(shown) :])
    ends = [
        i
        for i, (e, d) in enumerate(browser.frames)
        if e == "window_message" and d["kimi"] == {"kind": "live_end", "id": block_id}
    ]
    whole = max(
        i
        for i, (e, d) in enumerate(browser.frames)
        if e in ("update_message", "new_message") and d["id"] == block_id
    )
    assert len(ends) == 1 and ends[0] > whole


async def test_a_long_reasoning_and_answer_stream_as_blocks_that_stop_changing(
    browser: Browser,
) -> None:
    await app.on_message(user_message(f"Think at length {LONG}"))
    step = next(iter(browser.steps("llm").values()))
    blocks = browser.steps("undefined")
    assert len(blocks) >= 6
    for block_id, block in blocks.items():
        assert block_id.endswith(BLOCK_ID_TAIL) and block["parentId"] == step["id"]
        assert len(block["output"]) <= HARD_CHARS + 100
        assert_closed_once(browser, block_id, "update_message")
        live_then_drawn(browser, block_id, block["output"])
    assert browser.reasoning() == "".join(long_prose("r", 3000))  # exactly, in order
    assert step["output"] == "" and step["name"].startswith("Thought for ")

    # The answer's messages, not the app's notes: a chat that started before the server's
    # model list came (a loaded machine) says it is connecting, then takes that away.
    answers = {k: v for k, v in browser.steps("assistant_message").items() if v["name"] != AUTHOR}
    first, *answer_blocks = answers.values()
    assert answer_blocks and not first["id"].endswith(BLOCK_ID_TAIL)
    for block in answer_blocks:  # streamed, sent whole once, taken off the page
        assert (
            block["id"].endswith(BLOCK_ID_TAIL) and len(block["output"]) <= ANSWER_HARD_CHARS + 100
        )
        events = [e for e, _ in frames_of(browser, block["id"])]
        assert events[0] == "stream_start" and events[-1] == "delete_message"
        assert "stream_token" not in events and browser.live(block["id"])
        assert events.count("new_message") <= 1  # the open one ends unsent
    assert "delete_message" not in [e for e, _ in frames_of(browser, first["id"])]
    answer = "".join(long_prose("a", 3000))
    assert (
        first["output"].startswith(answer) and LONG_END in first["output"]
    )  # one message holds the whole answer at the end
    assert first["output"] == runner().chat.conversation.turns[-1].answer  # what Copy copies
    (footer,) = browser.steps("system_message").values()
    assert re.search(r"TTFT [\d.]+ s", footer["output"])
    actions = [d for e, d in browser.frames if e == "action"]
    assert actions and all(a["forId"] == footer["id"] for a in actions)  # Regenerate, under it
    turn = runner().chat.conversation.turns[-1]
    assert turn.reasoning == browser.reasoning() and turn.status == "done"


async def test_a_block_is_drawn_whole_one_update_after_the_next_one_opens(
    browser: Browser,
) -> None:
    """Each is a render of Chainlit's whole page in the browser: in one update they would
    make one long frame. Until then the cut block's text stays live."""
    view = AnswerView("answer-id", soft_chars=20, hard_chars=40)
    await view.add("A first paragraph, long enough.\n\nThe sec")
    first, second = view._messages  # the first block cut, the second opened
    assert [e for e, _ in frames_of(browser, first.id)] == ["stream_start"]
    assert [e for e, _ in frames_of(browser, second.id)] == ["stream_start"]
    assert browser.live(first.id) == "A first paragraph, long enough.\n\n"
    await view.add("ond one")
    drawn = [d for e, d in browser.frames if e == "new_message" and d["id"] == first.id]
    assert [d["output"] for d in drawn] == ["A first paragraph, long enough.\n\n"]
    assert browser.live(second.id) == "The second one"
    await view.finish("A first paragraph, long enough.\n\nThe second one", [])
    ended = [
        d["kimi"]["id"]
        for e, d in browser.frames
        if e == "window_message" and d["kimi"]["kind"] == "live_end"
    ]
    assert ended == [first.id, second.id]


async def test_a_stop_while_live_text_is_sent_keeps_that_text_in_the_block(
    browser: Browser,
) -> None:
    """Defect: the text being sent when a Stop landed reached the page (a send, once
    started, goes out) but not the block's final text, which replaced it."""
    browser.token_delay_s = 10  # a slow browser: Stop lands while the first text is sent
    task = asyncio.create_task(app.on_message(user_message(f"Think {LONG}")))
    await asyncio.wait_for(browser.sending_token.wait(), timeout=30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    ((block_id, block),) = browser.steps("undefined").items()
    assert browser.live(block_id).strip()
    live_then_drawn(browser, block_id, block["output"])


async def test_stop_mid_long_reasoning_closes_the_open_block_with_what_came(
    browser: Browser,
) -> None:
    task = asyncio.create_task(
        app.on_message(user_message("#scenario=long-think #reasoning=20000 #rate=400"))
    )
    while len(browser.steps("undefined")) < 3:
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    step = next(iter(browser.steps("llm").values()))
    assert step["name"].endswith("(stopped)")
    for block_id, block in browser.steps("undefined").items():
        assert_closed_once(browser, block_id, "update_message")
        live_then_drawn(browser, block_id, block["output"])
    turn = runner().chat.conversation.turns[-1]
    assert turn.status == "stopped"
    assert turn.reasoning.startswith(browser.reasoning()) and len(browser.reasoning()) > 4000
    assert "Stopped while thinking" in browser.texts()[-1]
