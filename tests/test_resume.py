"""Resume, Regenerate, Edit and Export of a stored chat, through app.py's handlers.

A signed-in WebsocketSession stands in for the browser (as in test_app.py); a
second session on the same thread stands in for the page after a restart. The
store is a real one on SQLite (the browser test runs PostgreSQL too).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import chainlit as cl
import pytest
from chainlit.config import config as chainlit_config
from chainlit.context import init_ws_context
from chainlit.session import WebsocketSession
from chainlit.step import StepDict
from chainlit.types import ThreadDict
from chainlit.user import PersistedUser
from sqlalchemy import text

import app
from backend.blocks import block_texts
from backend.settings import Settings
from backend.store.core import Store
from tests.conftest import DATA, RunningFake
from tests.fakes.kimi_server import ANSWER, REASONING, conversation
from ui import history, process, turn_buttons, versions_view
from ui.datalayer import KimiDataLayer
from ui.session import runner


@dataclass
class Page:
    """What the app sent over the socket."""

    frames: list[tuple[str, Any]] = field(default_factory=list)

    async def emit(self, event: str, data: Any) -> None:
        self.frames.append((event, data))

    def actions(self) -> list[dict[str, Any]]:
        return [data for event, data in self.frames if event == "action"]


@pytest.fixture
async def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Store]:
    opened = Store(Settings(data_dir=str(tmp_path / "data"), database_url=""))
    await opened.check()
    monkeypatch.setattr(history, "_store", opened)
    yield opened
    await opened.close()


def open_page(thread_id: str, monkeypatch: pytest.MonkeyPatch, fake: RunningFake) -> Page:
    page = Page()

    async def emit_call(*_: Any) -> None:
        return None

    user = PersistedUser(id=str(uuid.uuid4()), identifier="alice", createdAt="", metadata={})
    session = WebsocketSession(
        id=str(uuid.uuid4()), socket_id=str(uuid.uuid4()),
        emit=page.emit,  # type: ignore[arg-type]  # Chainlit awaits it; its hint is wrong
        emit_call=emit_call, user_env={}, client_type="webapp", user=user, thread_id=thread_id,
    )  # fmt: skip
    init_ws_context(session)
    monkeypatch.setattr(process, "SETTINGS", Settings(base_url=fake.base_url))
    return page


def thread(thread_id: str) -> ThreadDict:
    return ThreadDict(
        id=thread_id, createdAt="", name="t", userId=None, userIdentifier="alice", tags=None,
        metadata={}, steps=[], elements=[],
    )  # fmt: skip


async def test_after_a_restart_regenerate_and_edit_send_what_was_sent_before(
    store: Store, fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread_id = str(uuid.uuid4())
    open_page(thread_id, monkeypatch, fake)
    await app.on_chat_start()
    first = cl.Message(content="What is this?", type="user_message", elements=[
        cl.Image(name="rocket.jpg", path=str(DATA / "rocket.jpg"), mime="image/jpeg"),
    ])  # fmt: skip
    await app.on_message(first)
    await app.on_message(cl.Message(content="And the sky?", type="user_message"))
    before = conversation(fake.requests[-1])
    assert before[1]["content"] == ANSWER and REASONING not in str(before)

    page = open_page(thread_id, monkeypatch, fake)  # the app restarted; the chat is opened
    await app.on_chat_resume(thread(thread_id))
    regenerate = [a for a in page.actions() if a["label"] == "Regenerate"]
    assert len(regenerate) == 1 and regenerate[0]["forId"]
    sent = len(fake.requests)
    await press("retry", regenerate[0])
    assert len(fake.requests) == sent + 1
    assert conversation(fake.requests[-1]) == before  # same images, same answers, same question

    first.content = "What is this, exactly?"  # Chainlit's edit: same id, new text, no files
    first.elements = []
    await app.on_message(first)
    edited = conversation(fake.requests[-1])
    assert len(edited) == 1
    assert edited[0]["content"][0] == before[0]["content"][0]  # the stored prepared photo
    assert edited[0]["content"][-1] == {"type": "text", "text": "What is this, exactly?"}
    stored = await store.turns.load(thread_id)  # every version is kept
    assert [r.turn.text for r in stored] == [
        "What is this?", "And the sky?", "And the sky?", "What is this, exactly?",
    ]  # fmt: skip
    assert [t.text for t in runner().chat.conversation.turns] == ["What is this, exactly?"]


async def press(name: str, frame: dict[str, Any]) -> None:
    """Press the button of ``frame`` (an ``action`` frame) and wait for the task it starts."""
    callbacks = {"retry": turn_buttons.on_retry, "version": versions_view.on_version}
    await callbacks[name](cl.Action(name=name, payload=frame["payload"], id=frame["id"]))
    task = cl.context.session.current_task
    if task is not None:
        await task


async def ask(text: str) -> None:
    """The person sends ``text`` (Chainlit puts it in the chat's context first)."""
    message = cl.Message(content=text, type="user_message")
    cl.chat_context.add(message)
    await app.on_message(message)


def asked(request: dict[str, Any]) -> list[str]:
    """The person's texts a chat completion request sends, oldest first."""
    return [m["content"][-1]["text"] for m in conversation(request) if m["role"] == "user"]


async def test_regenerate_keeps_the_later_turns_and_a_switch_back_shows_them_after_a_resume(
    store: Store, fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regenerate on the first of three answers: a second version, asked alone, the later
    turns kept with the first; the next question goes with the branch shown; ‹ draws
    turns 1-3 again and the next question goes with them; a resume shows that branch with
    ‹ n/m › under the first answer."""
    thread_id = str(uuid.uuid4())
    page = open_page(thread_id, monkeypatch, fake)
    await app.on_chat_start()
    for n in (1, 2, 3):
        await ask(f"q{n}")
    first_answer = next(a for a in page.actions() if a["label"] == "Regenerate")
    await press("retry", first_answer)
    assert asked(fake.requests[-1]) == ["q1"]
    await ask("q4")
    assert asked(fake.requests[-1]) == ["q1", "q4"]
    assert len(await store.turns.load(thread_id)) == 5  # nothing dropped

    back = next(a for a in page.actions() if a["label"] == "‹ 2/2")
    frames = len(page.frames)
    await press("version", back)
    sent = [d for e, d in page.frames[frames:] if e == "new_message"]
    new = [d for d in sent if d["type"] in ("user_message", "assistant_message")]
    drawn = [d["output"] for d in new]
    assert drawn[::2] == ["q1", "q2", "q3"] and all(a == ANSWER for a in drawn[1::2])
    thought = [d for d in sent if d["type"] == "llm"]  # each answer's reasoning step
    assert len(thought) == 3, [d["name"] for d in thought]
    assert [d["type"] for d in new[:2]] == ["user_message", "assistant_message"]
    removed = [d["id"] for e, d in page.frames[frames:] if e == "delete_message"]
    assert len(removed) >= 4  # q1's second version and q4, questions and answers
    await ask("q5")
    assert asked(fake.requests[-1]) == ["q1", "q2", "q3", "q5"]
    _, document = await history.export(runner())  # the branch shown, as shown
    assert all(f">q{n}<" in document for n in (1, 2, 3, 5)) and ">q4<" not in document
    assert document.count("TTFT") == 4  # one answer each

    page = open_page(thread_id, monkeypatch, fake)  # opened again
    await app.on_chat_resume(thread(thread_id))
    assert [t.text for t in runner().chat.conversation.turns] == ["q1", "q2", "q3", "q5"]
    places = [(a["label"], a["forId"]) for a in page.actions() if a["name"] == "version"]
    assert [label for label, _ in places] == ["‹ 1/2", "›"]
    assert places[0][1] == places[1][1] == new[1]["id"]  # under turn 1's answer, drawn again
    await ask("q6")
    assert asked(fake.requests[-1]) == ["q1", "q2", "q3", "q5", "q6"]


async def test_edit_and_regenerate_after_a_resume_act_on_the_version_a_message_shows(
    store: Store, fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message whose answer was regenerated shows the new version; after a resume, its
    Edit makes a version of that place and asks the edited question (before: "Something
    went wrong", the message was taken for a new one whose turn was already stored), and
    Regenerate answers it again."""
    thread_id = str(uuid.uuid4())
    page = open_page(thread_id, monkeypatch, fake)
    await app.on_chat_start()
    first = cl.Message(content="what is A?", type="user_message")
    cl.chat_context.add(first)
    await first.send()  # the page shows it, as Chainlit's socket does
    await app.on_message(first)
    await press("retry", next(a for a in page.actions() if a["label"] == "Regenerate"))
    assert len(await store.turns.load(thread_id)) == 2
    shown = page_steps(page)

    page = open_page(thread_id, monkeypatch, fake)  # opened again, with the page it showed
    await app.on_chat_resume(ThreadDict(**{**thread(thread_id), "steps": shown}))
    first.content = "what is B?"  # Chainlit's edit: same id, new text
    await app.on_message(first)
    assert asked(fake.requests[-1]) == ["what is B?"]
    said = [d["output"] for e, d in page.frames if e == "new_message"]
    assert not [text for text in said if "Something went wrong" in text]
    assert [t.text for t in runner().chat.conversation.turns] == ["what is B?"]
    assert len(await store.turns.load(thread_id)) == 3  # a third version, none replaced
    await press("retry", [a for a in page.actions() if a["label"] == "Regenerate"][-1])
    assert asked(fake.requests[-1]) == ["what is B?"]
    assert len(await store.turns.load(thread_id)) == 4


def page_steps(page: Page) -> list[StepDict]:
    """The messages and steps ``page`` shows now, oldest first, as last sent."""
    shown: dict[str, dict[str, Any]] = {}
    for event, data in page.frames:
        if event == "new_message":
            shown[data["id"]] = dict(data)
        elif event == "update_message" and data["id"] in shown:
            shown[data["id"]].update(data)
        elif event == "delete_message":
            shown.pop(data["id"], None)
    return [cast(StepDict, step) for step in shown.values()]


async def test_regenerate_after_a_resume_names_the_question_the_page_shows(
    store: Store, fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """‹ draws the first version again under a new question; after a resume, Regenerate
    under its answer names that question, so a later question leaves the page as in the
    tab (before: it named the first question, gone from the page, and the later question
    stayed on the page while the model no longer had it)."""
    thread_id = str(uuid.uuid4())
    page = open_page(thread_id, monkeypatch, fake)
    await app.on_chat_start()
    await ask("q1")
    await press("retry", next(a for a in page.actions() if a["label"] == "Regenerate"))
    await press("version", next(a for a in page.actions() if a["label"].startswith("‹")))
    shown = page_steps(page)

    page = open_page(thread_id, monkeypatch, fake)  # opened again, with the page it showed
    await app.on_chat_resume(ThreadDict(**{**thread(thread_id), "steps": shown}))
    regenerate = next(a for a in page.actions() if a["label"] == "Regenerate")
    [question] = [s for s in shown if s["type"] == "user_message"]
    assert regenerate["payload"]["message"] == question["id"]
    await ask("q2")
    later = [d["id"] for e, d in page.frames if e == "new_message" and d["output"] == "q2"]
    await press("retry", regenerate)
    assert asked(fake.requests[-1]) == ["q1"]
    assert [t.text for t in runner().chat.conversation.turns] == ["q1"]
    removed = {d["id"] for e, d in page.frames if e == "delete_message"}
    assert set(later) <= removed


async def test_export_sends_one_html_file_with_the_stored_chat(
    store: Store, fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    thread_id = str(uuid.uuid4())
    page = open_page(thread_id, monkeypatch, fake)
    await app.on_chat_start()
    commands = [data for event, data in page.frames if event == "set_commands"]
    assert [c["id"] for c in commands[-1]] == ["Server", "Export"]
    await app.on_message(cl.Message(content="What is this?", type="user_message", elements=[
        cl.Image(name="rocket.jpg", path=str(DATA / "rocket.jpg"), mime="image/jpeg"),
    ]))  # fmt: skip
    name, document = await history.export(runner())
    assert name.endswith(".html")
    assert document.count('<img src="data:image/') == 1
    assert "Thought for " in document and "<details>" in document
    assert "TTFT" in document  # the stats line, stored with the turn

    await app.on_window_message({"kimi_action": "export"})  # the Export button's click
    said = [data["kimi"] for event, data in page.frames if event == "window_message"]
    assert said[-1]["kind"] == "download" and said[-1]["name"].endswith(".html")
    assert "/project/file/" in said[-1]["url"]
    assert not [data for event, data in page.frames if event == "element"]  # no message
    assert len(fake.requests) == 1  # the button asked the model nothing


async def test_a_stored_nan_option_is_never_sent_after_resume(
    store: Store, fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older app stored what the socket sent (NaN, Infinity, 1e999): the resumed chat's
    next message goes with the model's defaults for those, and works."""
    thread_id = str(uuid.uuid4())
    open_page(thread_id, monkeypatch, fake)
    await app.on_chat_start()
    await app.on_message(cl.Message(content="What is this?", type="user_message"))
    stored = '{"temperature": NaN, "top_p": Infinity, "max_tokens": 1e999, "show_reasoning": true}'
    async with store.engine.begin() as db:
        await db.execute(text("UPDATE kimi_turns SET options = :o"), {"o": stored})
    open_page(thread_id, monkeypatch, fake)
    await app.on_chat_resume(thread(thread_id))
    await app.on_message(cl.Message(content="And the sky?", type="user_message"))
    sent = fake.requests[-1]
    assert (sent["temperature"], sent["top_p"]) == (0.8, 1.0)
    assert 0 < sent["max_tokens"] <= 8192
    assert runner().chat.conversation.turns[-1].status == "done"


async def test_a_stored_chats_answer_finishes_and_is_stored_after_its_tab_closed(
    store: Store, fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With sign-in the chat can be opened again from the history: an answer whose tab
    closed for good goes on to its end and is stored (README, "Closed tabs")."""
    monkeypatch.setattr(chainlit_config.project, "session_timeout", 0.2)
    thread_id = str(uuid.uuid4())
    open_page(thread_id, monkeypatch, fake)
    await app.on_chat_start()
    task = asyncio.create_task(
        app.on_message(cl.Message(content="#scenario=steady", type="user_message"))
    )
    for _ in range(500):
        await asyncio.sleep(0.01)
        if runner().chat.conversation.turns:
            break
    await app.on_chat_end()  # the tab closed, and does not come back
    await asyncio.wait_for(task, timeout=30)
    assert fake.server.aborted == []
    (stored,) = await store.turns.load(thread_id)
    assert stored.stored_status == "done" and stored.turn.answer == ANSWER.lstrip()


async def test_a_stored_reasoning_is_held_by_its_turn_and_drawn_from_it_on_resume(
    store: Store, layer: KimiDataLayer, fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The turn's record names the reasoning step the page got; written as Chainlit writes
    what it sent, the step's blocks keep no copy once the answer ended, and the chat opened
    again shows the reasoning from the turn."""
    thread_id = str(uuid.uuid4())
    page = open_page(thread_id, monkeypatch, fake)
    await app.on_chat_start()
    await app.on_message(cl.Message(content="Why? #scenario=thinking", type="user_message"))
    (stored,) = await store.turns.load(thread_id)
    assert stored.turn.reasoning == REASONING and stored.reasoning_id
    sent: dict[str, dict[str, Any]] = {}  # each step as last sent
    for event, data in page.frames:
        if event in ("new_message", "update_message") and isinstance(data, dict):
            sent[data["id"]] = data
    (reasoning,) = [s for s in sent.values() if s["type"] == "llm"]
    (block,) = [s for s in sent.values() if s.get("parentId") == reasoning["id"]]
    assert reasoning["id"] == stored.reasoning_id and block["output"] == REASONING

    cl.context.session.has_first_interaction = True  # as Chainlit's socket sets it: writes go
    for step in sent.values():  # what Chainlit's data layer is given
        await layer.create_step(cast(StepDict, {**step, "threadId": thread_id}))
    async with store.engine.connect() as db:
        found = await db.execute(
            text("SELECT output FROM kimi_steps WHERE id = :b"), {"b": block["id"]}
        )
        assert found.scalar_one() == ""  # its text only in the turn
    opened = await layer.get_thread(thread_id)  # the chat opened again
    assert opened is not None
    assert {s["id"]: s["output"] for s in opened["steps"]}[block["id"]] == REASONING


async def test_an_interrupted_turns_reasoning_step_is_found_by_never_having_ended() -> None:
    """Not by its title, which is in whatever language its browser had."""
    from backend.conversation import Turn
    from backend.record import TurnRecord

    def step(step_id: str, kind: str, name: str, end: str | None = None) -> dict[str, Any]:
        at = "2026-12-01T10:00:00.000000Z"
        return {"id": step_id, "type": kind, "name": name, "createdAt": at, "start": at,
                "end": end, "output": ""}  # fmt: skip

    steps = [
        step("m1", "user_message", "alice"),
        step("r1", "llm", "Thought for 2.0s", end="2026-12-01T10:00:02.000000Z"),
        step("a1", "assistant_message", "Kimi-VL Chat"),
        step("m2", "user_message", "alice"),
        step("r2", "llm", "Réflexion…"),  # streaming when the app was killed, in French
    ]
    page = thread("t")
    page["steps"] = steps  # type: ignore[typeddict-item]
    interrupted = TurnRecord(1, "m2", Turn(text="q", status="stopped"), stored_status="pending")
    await history.mark_interrupted(page, [interrupted])
    names = {s["id"]: s["name"] for s in page["steps"]}
    assert names["r1"] == "Thought for 2.0s"  # ended: left as it was
    assert names["r2"] == "Thought (interrupted)"
    assert page["steps"][-1]["output"].endswith(
        "Interrupted: the app stopped before this answer ended."
    )


async def test_a_turn_stopped_before_its_row_was_written_is_marked_interrupted_too() -> None:
    """The turn's row is written once its first words are out (backend/turn_runner.py), its
    reasoning step as it opens: an app killed between the two leaves a question and a
    reasoning step that never ended, and no turn record. A fresh-clone run at 437acd5
    resumed such a chat as "Thinking…" with no note (test_persistence, sqlite)."""
    at = "2026-12-01T10:00:0{}.000000Z"
    page = thread("t")
    page["steps"] = [
        {"id": "m1", "type": "user_message", "name": "alice", "createdAt": at.format(0),
         "output": "why?"},
        {"id": "r1", "type": "llm", "name": "Thought for 1.0s", "createdAt": at.format(1),
         "start": at.format(1), "end": at.format(2), "output": ""},
        {"id": "a1", "type": "assistant_message", "name": "Kimi-VL", "createdAt": at.format(3),
         "output": "Because."},
        {"id": "m2", "type": "user_message", "name": "alice", "createdAt": at.format(4),
         "output": "Think longer"},
        {"id": "r2", "type": "llm", "name": "Thinking…", "createdAt": at.format(5),
         "start": at.format(5), "end": None, "output": ""},
    ]  # fmt: skip
    await history.mark_interrupted(page, [])
    steps = page["steps"]
    assert [s["id"] for s in steps][:5] == ["m1", "r1", "a1", "m2", "r2"]
    assert {s["id"]: s["name"] for s in steps}["r1"] == "Thought for 1.0s"
    assert {s["id"]: s["name"] for s in steps}["r2"] == "Thought (interrupted)"
    assert len(steps) == 6 and steps[-1]["output"].endswith(
        "Interrupted: the app stopped before this answer ended."
    )
    assert steps[-1]["metadata"] == {"interrupted_turn": "m2"}


async def test_a_question_stopped_before_anything_of_its_answer_was_written_is_marked() -> None:
    """The page's writes wait for the answer's first words (ui/first_words.py): an app
    killed while the page showed "Thinking…" left the question alone, and the resumed chat
    showed it with no note (a fresh-clone run at 01e7189, test_persistence, postgresql)."""
    at = "2026-12-01T10:00:0{}.000000Z"
    page = thread("t")
    page["steps"] = [
        {"id": "m1", "type": "user_message", "name": "alice", "createdAt": at.format(0),
         "output": "why?"},
        {"id": "a1", "type": "assistant_message", "name": "Kimi-VL", "createdAt": at.format(1),
         "output": "Because."},
        {"id": "m2", "type": "user_message", "name": "alice", "createdAt": at.format(2),
         "output": "Think longer"},
    ]  # fmt: skip
    await history.mark_interrupted(page, [])
    steps = page["steps"]
    assert [s["id"] for s in steps][:3] == ["m1", "a1", "m2"] and len(steps) == 4
    assert steps[-1]["output"].endswith("Interrupted: the app stopped before this answer ended.")
    assert steps[-1]["metadata"] == {"interrupted_turn": "m2"}
    answered = thread("t")
    answered["steps"] = page["steps"][:2]
    await history.mark_interrupted(answered, [])
    assert len(answered["steps"]) == 2  # a chat whose last question was answered: no note


@pytest.mark.parametrize("stored_blocks", [0, 1, 3])
async def test_an_interrupted_reasoning_shows_each_saved_block_once(stored_blocks: int) -> None:
    """A block is stored once it closes; the reasoning saved while it streamed may hold
    more. The page shows the stored blocks and then the saved rest as blocks, each text
    once (never the whole reasoning again in the step itself)."""
    from backend.conversation import Turn
    from backend.record import TurnRecord
    from ui.blocks import BLOCK_NAME

    saved = "".join(f"Thought {i} about the sky and the sea.\n\n" for i in range(300))
    texts = block_texts(saved)
    assert len(texts) >= 3
    at = "2026-12-01T10:00:0{}.000000Z"
    page = thread("t")
    page["steps"] = [  # type: ignore[typeddict-item]
        {"id": "m1", "type": "user_message", "name": "alice", "createdAt": at.format(0),
         "output": "why?"},
        {"id": "r1", "type": "llm", "name": "Thinking…", "createdAt": at.format(1),
         "start": at.format(1), "end": None, "output": ""},
    ] + [
        {"id": f"b{i}", "type": "undefined", "name": BLOCK_NAME, "parentId": "r1",
         "createdAt": at.format(2 + i), "output": texts[i]}
        for i in range(stored_blocks)
    ]  # fmt: skip
    turn = Turn(text="why?", reasoning=saved, status="stopped")
    await history.mark_interrupted(page, [TurnRecord(0, "m1", turn, stored_status="pending")])
    steps = page["steps"]
    shown = [s["output"] for s in steps if s.get("parentId") == "r1"]
    assert shown == texts  # stored ones first, then the rest, in order
    (step,) = [s for s in steps if s["id"] == "r1"]
    assert step["output"] == "" and step["name"] == "Thought (interrupted)"
    assert [s["id"] for s in steps if s.get("parentId") == "r1"][:stored_blocks] == [
        f"b{i}" for i in range(stored_blocks)
    ]


async def test_an_interrupted_answer_never_stored_as_a_step_is_drawn_with_its_images_as_links() -> (
    None
):
    """The part of an answer saved while it streamed, drawn where its message never was
    stored, fetches no remote image (as every answer drawn: backend/safety.py)."""
    from backend.conversation import Turn
    from backend.record import TurnRecord

    at = "2026-12-01T10:00:00.000000Z"
    page = thread("t")
    page["steps"] = [
        {"id": "m1", "type": "user_message", "name": "alice", "createdAt": at, "output": "q"}
    ]
    answer = "Here: ![x](https://elsewhere.example/x.png) and"
    turn = Turn(text="q", answer=answer, status="stopped")
    await history.mark_interrupted(
        page, [TurnRecord(0, "m1", turn, answer_id="a1", stored_status="pending")]
    )
    drawn = {s["id"]: s["output"] for s in page["steps"]}
    assert drawn["a1"].startswith("Here: ") and "elsewhere.example/x.png" in drawn["a1"]
    assert "![x]" not in drawn["a1"]
