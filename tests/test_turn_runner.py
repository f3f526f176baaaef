"""The turn runner: one owner of a turn from plan to recorded result, against the scripted
server, with an in-memory sink; and the layering that keeps it the only owner."""

from __future__ import annotations

import ast
import asyncio
import logging
import re
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, aclosing
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest
from PIL import Image

from backend.chat import ChatSession, Upload
from backend.conversation import Turn
from backend.events import ReasoningDelta, ReasoningOpened, Waiting
from backend.logs import LOGGER_NAME
from backend.record import ComparedAnswer, Saving, TurnRecord
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
    TurnsGone,
    WaitingNote,
    WaitingOver,
)
from backend.settings import Settings
from backend.timings import Timings
from backend.turn_runner import Shown, TurnRunner
from tests.conftest import RunningFake, SessionFactory, free_port, serving
from tests.fakes.kimi_server import ANSWER, REASONING, KimiServer

ROOT = Path(__file__).resolve().parent.parent


class Recorded:
    """An in-memory sink: every record handed to it, in order (a snapshot of the turn)."""

    def __init__(self) -> None:
        self.records: list[TurnRecord] = []
        self.compared: list[tuple[str, ComparedAnswer]] = []
        self.beside: list[str] = []
        self.elsewhere: list[TurnRecord] = []
        """What the store holds of turns as another tab stored them (:meth:`stored`)."""

    async def record(self, record: TurnRecord) -> Saving:
        turn = record.turn
        snapshot = replace(turn, images=list(turn.images))
        self.records.append(replace(record, turn=snapshot))
        return Saving()  # everything stored

    async def record_compared(self, message_id: str, answer: ComparedAnswer, beside: str) -> Saving:
        self.compared.append((message_id, answer))
        self.beside.append(beside)
        return Saving()

    async def stored(self, keys: Sequence[str]) -> list[TurnRecord]:
        return [r for r in self.elsewhere if r.message_id in keys]


async def drain(events: object) -> list[RenderEvent]:
    return [e async for e in events]  # type: ignore[attr-defined]


@pytest.fixture
def chat(fake: RunningFake, make_session: SessionFactory) -> ChatSession:
    return make_session(Settings(base_url=fake.base_url))


class Lines(logging.Handler):
    """The app log's lines (the app's logger does not propagate once configured)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []
        self.times: list[float] = []  # each line's time (the log's clock, time.time())

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")
        self.times.append(record.created)


@pytest.fixture
def app_log() -> Iterator[Lines]:
    logger, lines = logging.getLogger(LOGGER_NAME), Lines()
    level = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    yield lines
    logger.removeHandler(lines)
    logger.setLevel(level)


async def test_a_turn_is_recorded_as_it_starts_and_as_it_ends_with_numbers_not_words(
    chat: ChatSession,
) -> None:
    sink = Recorded()
    events = await drain(
        TurnRunner(chat, sink).new_turn("m1", "What is it? #scenario=thinking", [])
    )
    started, *streaming, ended = sink.records  # saves while it streams: save_every_s
    assert (started.position, started.message_id, started.turn.status) == (0, "m1", "pending")
    assert all(r.turn.status == "pending" for r in streaming)
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
    steps = {e.step_id for e in events if isinstance(e, ReasoningText)}
    assert steps == {ended.reasoning_id} and started.reasoning_id is None  # its reasoning step's
    assert final.content == ANSWER.lstrip()  # exactly the answer: what Copy copies
    assert "TTFT" in final.footer  # the words are made for the screen, not stored
    assert isinstance(events[-1], TurnEnded) and events[-1].status == "done"


class StoreThatWaitsForTheRequest(Recorded):
    """A sink whose first write (the turn as it starts) is held until the scripted server
    has the turn's request, or 3 s; whether it came."""

    def __init__(self, fake: RunningFake) -> None:
        super().__init__()
        self.fake = fake
        self.request_came_first: bool | None = None

    async def record(self, record: TurnRecord) -> Saving:
        if self.request_came_first is None:
            async with asyncio.timeout(3):
                while not self.fake.requests:
                    await asyncio.sleep(0.01)
            self.request_came_first = bool(self.fake.requests)
        return await super().record(record)


async def test_the_request_goes_out_while_the_turn_as_it_starts_is_stored(
    chat: ChatSession, fake: RunningFake
) -> None:
    fake.reset()
    sink = StoreThatWaitsForTheRequest(fake)
    events = await drain(TurnRunner(chat, sink).new_turn("m1", "#scenario=thinking", []))
    assert sink.request_came_first  # a write held 3 s would time out and fail the turn
    # The turn as it starts, the saves while it streams (settings.save_every_s: on a busy
    # machine the stream outlasts one), the turn as it ended.
    *streaming, ended = sink.records
    assert [r.turn.status for r in streaming] == ["pending"] * len(streaming) and streaming
    assert ended.turn.status == "done"
    assert "".join(e.text for e in events if isinstance(e, AnswerText)) == ANSWER.lstrip()


class StoreThatSeesTheScreen(Recorded):
    """A sink that notes, at each write, the words the person had been shown by then."""

    def __init__(self) -> None:
        super().__init__()
        self.drawn: list[RenderEvent] = []
        self.words_at_write: list[str] = []

    async def record(self, record: TurnRecord) -> Saving:
        texts = (e.text for e in self.drawn if isinstance(e, ReasoningText | AnswerText))
        self.words_at_write.append("".join(texts))
        return await super().record(record)


async def test_the_turn_as_it_starts_is_stored_once_its_first_words_are_drawn(
    chat: ChatSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: the first write ran while the request was out, and on a loaded machine its
    CPU came out of the first words' time (docs/benchmarks.md)."""
    monkeypatch.setattr("backend.turn_runner.FIRST_WORDS_WAIT_S", 30.0)  # a slow machine
    sink = StoreThatSeesTheScreen()
    async for event in TurnRunner(chat, sink).new_turn("m1", "#scenario=thinking", []):
        sink.drawn.append(event)
    started, *streaming, ended = sink.records  # saves while it streams: save_every_s
    assert (started.turn.status, ended.turn.status) == ("pending", "done")
    assert all(r.turn.status == "pending" for r in streaming)
    assert started.turn.reasoning == started.turn.answer == ""  # the turn as it started
    first_words = sink.words_at_write[0]
    assert first_words.strip() and REASONING.startswith(first_words)


async def test_a_silent_server_does_not_hold_the_turn_as_it_starts_back(
    chat: ChatSession,
) -> None:
    """No text for 4 s: the turn as it starts is stored about a second after the request,
    long before the words (and checkpoints follow every ``save_every_s``, 3 s)."""
    sink = StoreThatSeesTheScreen()
    async for event in TurnRunner(chat, sink).new_turn("m1", "#scenario=silent", []):
        sink.drawn.append(event)
    assert sink.records[0].turn.status == "pending" and sink.words_at_write[0] == ""
    assert sink.records[-1].turn.status == "done" and sink.words_at_write[-1] == ANSWER


async def test_a_stop_before_the_first_words_stores_the_turn_as_it_started_then_stopped(
    chat: ChatSession, fake: RunningFake
) -> None:
    fake.reset()
    sink = Recorded()
    answering = asyncio.create_task(
        drain(TurnRunner(chat, sink).new_turn("m1", "#scenario=silent", []))
    )
    async with asyncio.timeout(5):
        while not fake.requests:  # out, and no words for 4 s
            await asyncio.sleep(0.01)
    answering.cancel()  # what Stop does
    with pytest.raises(asyncio.CancelledError):
        await answering
    assert [r.turn.status for r in sink.records] == ["pending", "stopped"]
    assert sink.records[0].turn.answer == sink.records[1].turn.answer == ""


async def test_the_step_opens_as_the_server_takes_the_request_and_leaves_if_nothing_came(
    chat: ChatSession,
) -> None:
    """A Thinking model's reply is reasoning from its first token: "Thinking…" shows while
    the server prepares it (4 s here), and a Stop before any reasoning takes it away."""
    drawn: list[RenderEvent] = []

    async def answer() -> None:
        async for event in TurnRunner(chat).new_turn("m1", "#scenario=silent", []):
            drawn.append(event)

    answering = asyncio.create_task(answer())
    async with asyncio.timeout(3):
        while not drawn:
            await asyncio.sleep(0.01)
    (opened,) = drawn
    assert isinstance(opened, ReasoningText) and opened.text == "" and opened.step_id
    answering.cancel()  # what Stop does
    with pytest.raises(asyncio.CancelledError):
        await answering
    assert ReasoningEnd("discarded") in drawn and ReasoningEnd("stopped") not in drawn


def test_the_server_taking_the_request_ends_a_note_that_it_was_away_not_one_that_it_waits(
    chat: ChatSession,
) -> None:
    """Headers after 3 s (a busy server): "has not started answering" is still true when
    the step opens; "cannot be reached" is not."""
    waited = Shown(chat, "m1", None)
    assert isinstance(waited.on(Waiting(3.0))[0], WaitingNote)
    assert waited.on(ReasoningOpened()) == [ReasoningText("", step := str(waited.reasoning_id))]
    assert waited.on(ReasoningDelta("r0 ")) == [WaitingOver(), ReasoningText("r0 ", step)]
    away = Shown(chat, "m2", None)
    away.waiting = away.away = True  # as TurnRunner._attempts says the server is away
    assert away.on(ReasoningOpened()) == [WaitingOver(), ReasoningText("", str(away.reasoning_id))]
    assert away.reasoning_id != step  # each opening its own step


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
    assert "reported an error" in note.text and "engine died" not in note.text
    assert [b.kind for b in note.buttons] == ["retry"]
    assert ReasoningEnd("failed") in events


async def test_a_failed_request_is_logged_with_why_and_its_note_names_it(
    chat: ChatSession, fake: RunningFake, app_log: Lines
) -> None:
    events = await drain(TurnRunner(chat).new_turn("m1", "#scenario=error-500", []))
    sent = fake.server.headers[-1]["x-request-id"]
    assert re.fullmatch(r"chat-[0-9a-f]{32}", sent)
    assert (
        f"WARNING request {sent} ended: failed: ServerFailed (HTTP 500, InternalServerError): "
        "The model server failed while answering. Try again. "
        "The server said: EngineCore encountered an issue."
    ) in app_log.lines
    note = next(e for e in events if isinstance(e, Note) and e.level == "error")
    text, ref = note.text.rsplit("\n\n", 1)
    assert text == "The model server failed while answering. Try again."  # ours only
    assert re.fullmatch(rf"\*ref {sent[:11]}, \d\d:\d\d:\d\d\*", ref)  # chat- and 6 digits


class SlowToStoreTheEnd(Recorded):
    """A sink that takes 1.1 s to store a turn's end (a busy database)."""

    async def record(self, record: TurnRecord) -> Saving:
        if record.turn.status != "pending":
            await asyncio.sleep(1.1)
        return await super().record(record)


async def test_the_time_on_a_failures_note_is_its_log_lines_when_storing_is_slow(
    chat: ChatSession, fake: RunningFake, app_log: Lines
) -> None:
    """The person reads the time to the operator, who looks for it in app.log."""
    events = await drain(
        TurnRunner(chat, SlowToStoreTheEnd()).new_turn("m1", "#scenario=error-500", [])
    )
    (logged,) = [
        t for t, line in zip(app_log.times, app_log.lines, strict=True) if "ended: failed" in line
    ]
    note = next(e for e in events if isinstance(e, Note) and e.level == "error")
    shown = re.search(r"(\d\d:\d\d:\d\d)\*$", note.text)
    assert shown is not None
    assert shown.group(1) == datetime.fromtimestamp(logged).strftime("%H:%M:%S")


async def test_a_refusal_before_sending_is_logged_and_named_on_screen(
    chat: ChatSession, fake: RunningFake, app_log: Lines
) -> None:
    events = await drain(TurnRunner(chat).new_turn("m1", "word " * 40_000, []))
    assert fake.requests == []  # nothing was sent
    refused = [line for line in app_log.lines if "refused before sending" in line]
    assert len(refused) == 1
    assert re.fullmatch(
        r"WARNING request (chat-[0-9a-f]{32}) refused before sending: ContextTooLong: "
        r"This message needs about \d+ tokens, .*",
        refused[0],
    )
    ref = refused[0].split()[2][:11]
    note = next(e for e in events if isinstance(e, Note) and e.level == "error")
    assert f"*ref {ref}, " in note.text
    assert not any(" ended: " in line for line in app_log.lines)  # no request to end


async def test_a_message_kept_back_for_its_files_is_logged(
    chat: ChatSession, app_log: Lines, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)
    await drain(TurnRunner(chat).ask("m1", "what is it?", [Upload("broken.png", broken)]))
    kept = [line for line in app_log.lines if "kept back" in line]
    assert len(kept) == 1 and kept[0].startswith("WARNING message m1 kept back")
    assert "broken.png" in kept[0]


async def test_a_turns_notices_are_said_in_one_note(chat: ChatSession, tmp_path: Path) -> None:
    """The upload's notice (an animated GIF) and the plan's (a smaller answer budget)."""
    gif = tmp_path / "blink.gif"
    frames = [Image.new("RGB", (64, 64), colour) for colour in ("red", "blue")]
    frames[0].save(gif, save_all=True, append_images=frames[1:], duration=100)
    await chat.connect()
    chat.with_options(max_tokens=8_000)  # the text leaves less room in 8192 tokens
    text = "word " * 1_000 + "#scenario=plain"
    events = await drain(TurnRunner(chat).ask("m1", text, [Upload("blink.gif", gif)]))
    notes = [e for e in events if isinstance(e, Note)]
    assert len(notes) == 1 and notes[0].level == "info"
    first, second = notes[0].text.split("\n\n")
    assert first == "blink.gif: animated GIF, only the first frame is sent"
    assert second.startswith("The answer may use at most ")


async def test_a_rerun_of_an_older_turn_answers_a_new_version_and_keeps_the_later_turns(
    chat: ChatSession,
) -> None:
    sink = Recorded()
    runner = TurnRunner(chat, sink)
    await drain(runner.new_turn("m1", "first #scenario=plain", []))
    await drain(runner.new_turn("m2", "second #scenario=plain", []))
    first, second = chat.conversation.turns
    events = await drain(runner.rerun("m1"))
    assert isinstance(events[0], ButtonUsed) and events[1] == TurnsGone("m1")
    fork = events[2]  # said at once, not held for the plan's notices
    assert isinstance(fork, Note) and "1 later turn(s) stay with the earlier version" in fork.text
    assert fork.level == "fork"  # the page brings this note into view (public/ux.js)
    (again,) = chat.conversation.turns
    assert again is not first and again.text == first.text and again.status == "done"
    assert (first.status, second.status) == ("done", "done")  # kept, with their answers
    last = sink.records[-1]
    assert last.turn.text == first.text and last.message_id not in ("m1", "m2")
    assert (last.parent_id, last.beside) == (None, "m1")
    gone = await drain(runner.rerun("m2"))  # turn 2 is not on the branch shown
    assert gone == [Note("That turn is no longer part of the conversation; ask again below.")]
    assert await drain(runner.rerun("m1")) != gone  # the message shows the new version


async def test_a_compare_is_recorded_beside_its_turn_and_leaves_the_chat_as_it_was(
    chat: ChatSession,
) -> None:
    sink = Recorded()
    runner = TurnRunner(chat, sink)
    await drain(runner.new_turn("m1", "#scenario=plain", []))
    other = (await chat.client.list_models())[0]
    chat.others = [replace(other, id="kimi-vl")]  # served by the same scripted server here
    events = await drain(runner.compare("m1", "kimi-vl"))
    assert len(sink.records) == 2  # the first turn's two, no turn for the compare
    ((key, stored),) = sink.compared  # beside the turn, by its key
    assert key == "m1" and stored.label == "Kimi-VL Instruct"
    assert sink.beside == [sink.records[-1].turn.answer]  # and beside its own answer
    assert (stored.turn.answer, stored.turn.status) == (ANSWER.lstrip(), "done")
    assert stored.timings is not None and stored.timings.completion_tokens
    final = next(e for e in events if isinstance(e, AnswerEnd))
    assert final.content == ANSWER.lstrip() and final.buttons == ()  # the label is not copied
    assert final.author == "Kimi-VL Instruct"  # its column's title (ui/compare_view.py)
    assert final.footer.startswith("*TTFT")
    assert len(chat.conversation.turns) == 1 and chat.model is not None
    assert chat.model.id == "kimi-vl-thinking-2506"


async def test_a_compare_of_a_regenerated_answer_is_recorded_with_that_version(
    chat: ChatSession,
) -> None:
    """The message shows the newest version; its Compare answer belongs to that version
    (drawn again with it after ‹ n/m ›), not to the first one."""
    sink = Recorded()
    runner = TurnRunner(chat, sink)
    await drain(runner.new_turn("m1", "#scenario=plain", []))
    await drain(runner.rerun("m1"))  # Regenerate: a new version of the turn
    newest = sink.records[-1].message_id
    other = (await chat.client.list_models())[0]
    chat.others = [replace(other, id="kimi-vl")]
    await drain(runner.compare("m1", "kimi-vl"))
    ((key, _),) = sink.compared
    assert key == newest != "m1"
    assert [c.label for c in runner.shown.compared(newest)] == ["Kimi-VL Instruct"]
    assert runner.shown.compared("m1") == ()


async def test_choosing_or_drawing_a_version_again_only_restates_it(chat: ChatSession) -> None:
    """‹ n/m › and the branch drawn again save records that restate the turn (the store keeps
    what a row holds of it: another tab may have answered it since); a Regenerate's answer
    is saved whole."""
    sink = Recorded()
    runner = TurnRunner(chat, sink)
    await drain(runner.new_turn("m1", "#scenario=plain", []))
    await drain(runner.rerun("m1"))
    assert sink.records and not any(r.restates for r in sink.records)
    saved = len(sink.records)
    await runner.choose("m1")
    await runner.drawn_again("m1", "a9", "s9")
    chosen, drawn = sink.records[saved:]
    assert (chosen.message_id, chosen.restates) == ("m1", True)
    assert (drawn.message_id, drawn.answer_id, drawn.reasoning_id, drawn.restates) == (
        "m1", "a9", "s9", True,
    )  # fmt: skip


async def test_a_version_chosen_shows_the_answer_another_tab_stored_since(
    chat: ChatSession,
) -> None:
    """Another tab answered m1 again in place and compared it; this tab still holds the
    first answer. Chosen (‹ n/m ›), the version takes the stored answer and its Compare
    answer, which the page then draws and the model gets; an answer still streaming in
    the other tab (stored ``pending``) leaves this tab's copy as it is."""
    sink = Recorded()
    runner = TurnRunner(chat, sink)
    await drain(runner.new_turn("m1", "#scenario=plain", []))
    await drain(runner.rerun("m1"))
    newer = Turn(text="#scenario=plain", answer="Since the sky is blue.", status="done")
    other = ComparedAnswer("Kimi-VL Instruct", Turn(text="", answer="Blue.", status="done"))
    sink.elsewhere = [TurnRecord(0, "m1", newer, model="kimi-vl", compared=(other,))]
    shown, _ = await runner.choose("m1")
    assert shown[0].turn.answer == "Since the sky is blue." and shown[0].turn.in_history
    assert runner.shown.compared("m1") == (other,) and runner.shown.model("m1") == "kimi-vl"
    assert sink.records[-1].restates and sink.records[-1].turn.answer == newer.answer
    streaming = Turn(text="#scenario=plain", answer="Half", status="pending")
    sink.elsewhere = [TurnRecord(0, "m1", streaming, stored_status="pending")]
    (again, *_), _ = await runner.choose("m1")
    assert again.turn.answer == "Since the sky is blue."


async def test_a_version_chosen_shows_the_compare_answers_another_tab_stored_beside_it(
    chat: ChatSession,
) -> None:
    """The answer is the same in both tabs, but the other tab compared it: chosen again,
    the version shows the stored Compare answer beside this tab's own (not stored yet)."""
    sink = Recorded()
    runner = TurnRunner(chat, sink)
    await drain(runner.new_turn("m1", "#scenario=plain", []))
    other = (await chat.client.list_models())[0]
    chat.others = [replace(other, id="kimi-vl")]
    await drain(runner.compare("m1", "kimi-vl"))
    await drain(runner.rerun("m1"))
    (mine,) = runner.shown.compared("m1")
    turn = chat.versions["m1"].turn
    theirs = ComparedAnswer("Kimi-VL A", Turn(text="", answer="Blue.", status="done"))
    sink.elsewhere = [TurnRecord(0, "m1", replace(turn), compared=(theirs,))]
    await runner.choose("m1")
    assert runner.shown.compared("m1") == (theirs, mine)


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


def notes_in(events: list[RenderEvent]) -> list[str]:
    """The texts of the waiting notes among ``events``."""
    return [e.text for e in events if isinstance(e, WaitingNote)]


async def test_a_message_sent_while_the_server_is_away_is_answered_once_it_is_back(
    make_session: SessionFactory,
) -> None:
    """A vLLM restart mid-demo: the message waits, a note says so in the person's words
    (no address, no log file) and counts up, and the answer comes by itself."""
    port = free_port()
    chat = make_session(Settings(base_url=f"http://127.0.0.1:{port}/v1", connect_timeout_s=1))
    events: list[RenderEvent] = []
    sink = Recorded()
    runner = TurnRunner(chat, sink)
    with ExitStack() as stack:
        async with aclosing(runner.new_turn("m1", "hi #scenario=plain", [])) as turn:
            async for event in turn:
                events.append(event)
                # The server comes back after three tries (started once: the events after
                # the third note would start it again on the same port).
                if isinstance(event, WaitingNote) and len(notes_in(events)) == 3:
                    stack.enter_context(serving(KimiServer(max_model_len=8192), port))
    notes = notes_in(events)
    assert len(notes) >= 3 and notes[0] != notes[-1]  # updated: the seconds count up
    assert all("as soon as it is back" in n for n in notes)
    assert not any("127.0.0.1" in n or "llm.log" in n for n in notes)
    kinds = [type(e).__name__ for e in events]
    assert kinds.index("WaitingOver") > kinds.index("WaitingNote")  # the note goes
    assert isinstance(events[-1], TurnEnded) and events[-1].status == "done"
    assert events[-1].answer.startswith("## What the picture shows")
    stored = [r.turn.status for r in sink.records]  # as it starts (and saves), then done
    assert stored[0] == "pending" and stored[-1] == "done" and stored.count("done") == 1


async def test_a_server_away_past_the_wait_fails_with_retry(make_session: SessionFactory) -> None:
    port = free_port()
    settings = Settings(base_url=f"http://127.0.0.1:{port}/v1", server_back_wait_s=0)
    events = await drain(TurnRunner(make_session(settings)).new_turn("m1", "hi", []))
    assert not [e for e in events if isinstance(e, WaitingNote)]
    failure = next(e for e in events if isinstance(e, Note) and e.level == "error")
    assert "cannot be reached" in failure.text and "127.0.0.1" not in failure.text
    assert [b.kind for b in failure.buttons] == ["retry"]
    assert isinstance(events[-1], TurnEnded) and events[-1].status == "failed"


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


async def test_every_request_of_a_chat_carries_the_chat_id_for_the_router(
    chat: ChatSession, fake: RunningFake, make_session: SessionFactory
) -> None:
    """vLLM's router keeps a chat on one replica by its ``X-Session-Id`` (serving/replicas.py)."""
    other = make_session(Settings(base_url=fake.base_url))
    for runner in (TurnRunner(chat, Recorded()), TurnRunner(other, Recorded())):
        await drain(runner.new_turn("m1", "#scenario=plain", []))
        await drain(runner.new_turn("m2", "#scenario=plain", []))
    asked = [h for h in fake.server.headers if "x-request-id" in h]
    sent = [h.get("x-session-id") for h in asked]
    assert sent == [chat.chat_id] * 2 + [other.chat_id] * 2
    assert chat.chat_id != other.chat_id and len(chat.chat_id) == 32
    assert len({h["x-request-id"] for h in asked}) == 4  # the request ids stay per request
