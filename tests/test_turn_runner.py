"""The turn runner: one owner of a turn from plan to recorded result, against the scripted
server, with an in-memory sink; and the layering that keeps it the only owner."""

from __future__ import annotations

import ast
import asyncio
from contextlib import aclosing
from dataclasses import replace
from pathlib import Path

import pytest

from backend.chat import ChatSession
from backend.record import TurnRecord
from backend.render import (
    AnswerEnd,
    AnswerText,
    ButtonsUnder,
    ButtonUsed,
    Note,
    ReasoningEnd,
    ReasoningText,
    RenderEvent,
    TurnEnded,
)
from backend.settings import Settings
from backend.timings import Timings
from backend.turn_runner import TurnRunner
from tests.conftest import RunningFake, SessionFactory
from tests.fakes.kimi_server import ANSWER, REASONING

ROOT = Path(__file__).resolve().parent.parent


class Recorded:
    """An in-memory sink: every record handed to it, in order (a snapshot of the turn)."""

    def __init__(self) -> None:
        self.records: list[TurnRecord] = []

    async def record(self, record: TurnRecord) -> None:
        turn = record.turn
        snapshot = replace(turn, images=list(turn.images))
        self.records.append(replace(record, turn=snapshot))


async def drain(events: object) -> list[RenderEvent]:
    return [e async for e in events]  # type: ignore[attr-defined]


@pytest.fixture
def chat(fake: RunningFake, make_session: SessionFactory) -> ChatSession:
    return make_session(Settings(base_url=fake.base_url))


async def test_a_turn_is_recorded_as_it_starts_and_as_it_ends_with_numbers_not_words(
    chat: ChatSession,
) -> None:
    sink = Recorded()
    events = await drain(
        TurnRunner(chat, sink).new_turn("m1", "What is it? #scenario=thinking", [])
    )
    started, ended = sink.records
    assert (started.position, started.message_id, started.turn.status) == (0, "m1", "pending")
    assert started.answer_id is None and started.timings is None
    assert ended.turn.status == "done" and ended.turn.reasoning == REASONING
    assert ended.turn.answer == ANSWER.lstrip()
    assert ended.model == "kimi-vl-thinking-2506" and ended.options["max_tokens"] == 4096
    timings = ended.timings
    assert isinstance(timings, Timings) and timings.completion_tokens is not None
    assert timings.ttft_s is not None and timings.reasoning_s is not None
    assert ended.legacy_stats is None
    final = next(e for e in events if isinstance(e, AnswerEnd))
    streamed = {e.answer_id for e in events if isinstance(e, AnswerText)}
    assert streamed == {final.answer_id} == {ended.answer_id}  # the stored id is the message's
    assert final.content == ANSWER.lstrip()  # exactly the answer: what Copy copies
    assert "TTFT" in final.footer  # the words are made for the screen, not stored
    assert isinstance(events[-1], TurnEnded) and events[-1].status == "done"


async def test_the_events_say_the_turn_in_order(chat: ChatSession) -> None:
    events = await drain(TurnRunner(chat).new_turn("m1", "#scenario=thinking", []))
    kinds = [type(e).__name__ for e in events]
    first_answer = kinds.index("AnswerText")
    assert set(kinds[: first_answer - 1]) == {"ReasoningText"}  # the step, then it ends
    assert kinds[first_answer - 1] == "ReasoningEnd"
    ends = [e for e in events if isinstance(e, ReasoningEnd)]
    assert ends == [ReasoningEnd("done")]
    assert "".join(e.text for e in events if isinstance(e, ReasoningText)) == REASONING
    assert "".join(e.text for e in events if isinstance(e, AnswerText)) == ANSWER.lstrip()
    assert kinds[-2:] == ["AnswerEnd", "TurnEnded"]


async def test_a_stop_while_an_event_is_drawn_ends_the_turn_stopped_and_says_so(
    chat: ChatSession, fake: RunningFake
) -> None:
    """The front end throws the Stop in (as ui/answer.draw does); the runner closes the
    stream, records the turn stopped with what was shown, says so, and raises."""
    sink = Recorded()
    events = TurnRunner(chat, sink).new_turn("m1", "#scenario=slow", [])
    shown: list[RenderEvent] = []
    async with aclosing(events):
        while not any(isinstance(e, ReasoningText) and e.text for e in shown):
            shown.append(await anext(events))
        shown.append(await events.athrow(asyncio.CancelledError()))
        with pytest.raises(asyncio.CancelledError):
            while True:
                shown.append(await anext(events))
    turn = chat.conversation.turns[-1]
    assert turn.status == "stopped" and turn.reasoning and REASONING.startswith(turn.reasoning)
    assert [r.turn.status for r in sink.records] == ["pending", "stopped"]
    assert sink.records[-1].answer_id is not None  # the "Stopped" message is the answer
    assert ReasoningEnd("stopped") in shown
    stopped = next(e for e in shown if isinstance(e, AnswerEnd))
    assert stopped.content == "" and "Stopped while thinking" in stopped.footer
    assert [b.label for b in stopped.buttons] == ["Retry"]
    for _ in range(100):
        if fake.server.aborted:
            break
        await asyncio.sleep(0.01)
    assert fake.server.aborted == [fake.server.headers[-1]["x-request-id"]]


async def test_closing_the_events_early_stops_the_turn(chat: ChatSession) -> None:
    sink = Recorded()
    async with aclosing(TurnRunner(chat, sink).new_turn("m1", "#scenario=slow", [])) as events:
        async for event in events:
            if isinstance(event, ReasoningText) and event.text:
                break
    assert chat.conversation.turns[-1].status == "stopped"
    assert [r.turn.status for r in sink.records] == ["pending", "stopped"]


async def test_a_failed_stream_is_recorded_failed_and_said_with_retry(chat: ChatSession) -> None:
    sink = Recorded()
    events = await drain(TurnRunner(chat, sink).new_turn("m1", "#scenario=midstream-error", []))
    assert [r.turn.status for r in sink.records] == ["pending", "failed"]
    note = next(e for e in events if isinstance(e, Note) and e.level == "error")
    assert "engine died" in note.text and [b.kind for b in note.buttons] == ["retry"]
    assert ReasoningEnd("failed") in events


async def test_a_rerun_rewinds_and_reanswers_the_same_turn(chat: ChatSession) -> None:
    runner = TurnRunner(chat, Recorded())
    await drain(runner.new_turn("m1", "first #scenario=plain", []))
    await drain(runner.new_turn("m2", "second #scenario=plain", []))
    first = chat.conversation.turns[0]
    events = await drain(runner.rerun("m1"))
    assert isinstance(events[0], ButtonUsed)
    assert any(isinstance(e, Note) and "1 later turn(s)" in e.text for e in events)
    assert chat.conversation.turns == [first] and first.status == "done"
    gone = await drain(runner.rerun("m2"))
    assert gone == [Note("That turn is no longer part of the conversation; ask again below.")]


async def test_a_compare_is_not_recorded_and_leaves_the_chat_as_it_was(chat: ChatSession) -> None:
    sink = Recorded()
    runner = TurnRunner(chat, sink)
    await drain(runner.new_turn("m1", "#scenario=plain", []))
    other = (await chat.client.list_models())[0]
    chat.others = [replace(other, id="kimi-vl")]  # served by the same scripted server here
    events = await drain(runner.compare("m1", "kimi-vl"))
    assert len(sink.records) == 2  # the first turn's two, nothing for the compare
    final = next(e for e in events if isinstance(e, AnswerEnd))
    assert final.content == ANSWER.lstrip() and final.buttons == ()  # the label is not copied
    assert final.footer.startswith("***Kimi-VL Instruct** (compare) · TTFT")
    assert len(chat.conversation.turns) == 1 and chat.model is not None
    assert chat.model.id == "kimi-vl-thinking-2506"


async def test_a_resumed_chat_gets_regenerate_under_its_last_answer(chat: ChatSession) -> None:
    runner = TurnRunner(chat)
    assert await drain(runner.resumed("a1")) == []  # nothing to regenerate yet
    await drain(runner.new_turn("m1", "#scenario=plain", []))
    (under,) = await drain(runner.resumed("a1"))
    assert isinstance(under, ButtonsUnder) and under.message_id == "a1"
    assert [(b.label, b.payload) for b in under.buttons] == [("Regenerate", {"message": "m1"})]


# --- the layering that keeps one owner per turn ------------------------------------------


def imports(path: Path) -> set[str]:
    """The modules ``path`` imports (absolute names)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def under(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def test_the_backend_never_imports_the_ui_or_chainlit() -> None:
    for path in under("backend"):
        bad = {m for m in imports(path) if m.split(".")[0] in ("ui", "chainlit", "app")}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_store_never_imports_the_chat_or_its_words() -> None:
    for path in under("backend/store"):
        bad = {m for m in imports(path) if m.startswith(("backend.chat", "backend.presenter"))}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_the_client_only_talks_http() -> None:
    bad = {
        m
        for m in imports(ROOT / "backend/client.py")
        if m.startswith(("backend.batching", "backend.metrics"))
    }
    assert not bad


def test_only_the_turn_runner_writes_a_turns_status() -> None:
    """``Turn.status`` is assigned in backend/turn_runner.py only (a turn is made with one)."""
    writers = []
    for path in [*under("backend"), *under("ui"), ROOT / "app.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                elements = target.elts if isinstance(target, ast.Tuple) else [target]
                if any(isinstance(t, ast.Attribute) and t.attr == "status" for t in elements):
                    writers.append(str(path.relative_to(ROOT)))
    assert sorted(set(writers)) == ["backend/turn_runner.py"]
