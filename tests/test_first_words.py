"""A chat's page writes wait until its answer's first words are out (ui/first_words.py),
through the real data layer on SQLite: while the task answering the chat's message has
not sent its first words, a statement another task makes for that chat is not run; the
answering task's own statements are never held; an answer that ends, or a wait that
passes its bound, lets them go."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable

import pytest
from chainlit.context import init_ws_context
from chainlit.session import WebsocketSession
from chainlit.step import StepDict

from backend.store.core import Store
from tests.conftest import rows
from ui.datalayer import KimiDataLayer
from ui.files import FilesStorageClient
from ui.first_words import FirstWordsGate


async def _no_emit(*_: object) -> None:
    return None


def chat_session() -> WebsocketSession:
    """A tab's session, made the context of this task (and of the tasks it starts)."""
    session = WebsocketSession(
        id=str(uuid.uuid4()),
        socket_id=str(uuid.uuid4()),
        emit=_no_emit,  # type: ignore[arg-type]
        emit_call=_no_emit,
        user_env={},
        client_type="webapp",
    )
    session.has_first_interaction = True
    init_ws_context(session)
    return session


def step_of(session: WebsocketSession, kind: str, output: str) -> StepDict:
    """A new step of ``session``'s chat, as Chainlit sends it to the data layer."""
    return StepDict(
        id=str(uuid.uuid4()),
        threadId=session.thread_id,
        name="User" if kind == "user_message" else "Kimi-VL Chat",
        type=kind,  # type: ignore[typeddict-item]
        output=output,
        createdAt="2026-12-02T12:00:00.000Z",
        streaming=False,
        waitForAnswer=False,
        isError=False,
    )


async def thread_names(store: Store) -> list[str]:
    return [r["name"] for r in await rows(store, "SELECT name FROM kimi_threads")]


@pytest.fixture
def gate() -> FirstWordsGate:
    return FirstWordsGate(wait_s=30)


@pytest.fixture
def layer(store: Store, gate: FirstWordsGate) -> KimiDataLayer:
    return KimiDataLayer(store, FilesStorageClient(store.files), first_words=gate)


def answering(session: WebsocketSession, body: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
    """Start ``body`` as the task answering ``session``'s message (as Chainlit does)."""
    task = session.current_task = asyncio.ensure_future(body())
    return task


async def test_a_write_for_the_chat_waits_until_the_answer_shows_its_first_words(
    store: Store, layer: KimiDataLayer, gate: FirstWordsGate
) -> None:
    session = chat_session()
    words = asyncio.Event()

    async def answer() -> None:
        await layer.update_thread(session.thread_id, name="its own write")  # never held
        await words.wait()
        gate.open()
        await asyncio.sleep(30)  # still streaming

    task = answering(session, answer)
    stored = asyncio.create_task(layer.update_thread(session.thread_id, name="Hello there"))
    await asyncio.sleep(0.3)
    assert not stored.done()
    assert await thread_names(store) == ["its own write"]
    words.set()
    await asyncio.wait_for(stored, 5)
    assert await thread_names(store) == ["Hello there"]
    task.cancel()


async def test_an_answer_that_ends_without_words_lets_the_writes_go(
    store: Store, layer: KimiDataLayer
) -> None:
    session = chat_session()
    ending = asyncio.Event()

    async def answer() -> None:
        await ending.wait()  # e.g. a refused upload: a note, no answer

    answering(session, answer)
    stored = asyncio.create_task(layer.update_thread(session.thread_id, name="Hello there"))
    await asyncio.sleep(0.3)
    assert not stored.done()
    ending.set()
    await asyncio.wait_for(stored, 5)
    assert await thread_names(store) == ["Hello there"]


async def test_writes_wait_for_the_first_words_at_most_the_bound_then_go_at_once(
    store: Store,
) -> None:
    layer = KimiDataLayer(store, FilesStorageClient(store.files), FirstWordsGate(wait_s=0.5))
    session = chat_session()
    task = answering(session, lambda: asyncio.sleep(30))  # a server that never starts answering
    first = asyncio.create_task(layer.update_thread(session.thread_id, name="first"))
    await asyncio.sleep(0.2)
    assert not first.done()
    await asyncio.wait_for(first, 5)
    await asyncio.wait_for(layer.update_thread(session.thread_id, name="second"), 0.5)
    assert await thread_names(store) == ["second"]
    task.cancel()


async def test_a_write_outside_any_answer_is_never_held(store: Store, layer: KimiDataLayer) -> None:
    session = chat_session()  # no task answering: a chat start, an HTTP route
    await asyncio.wait_for(layer.update_thread(session.thread_id, name="Hello"), 5)
    assert await thread_names(store) == ["Hello"]


async def test_the_writes_that_waited_run_in_the_order_they_were_made(
    store: Store, layer: KimiDataLayer, gate: FirstWordsGate
) -> None:
    """A message stored and then deleted before the first words (a command picked from
    the "/" list is taken off the transcript) stays deleted: the deletion does not look
    for the message before it is written."""
    session = chat_session()
    words = asyncio.Event()

    async def answer() -> None:
        await words.wait()
        gate.open()
        await asyncio.sleep(30)

    task = answering(session, answer)
    step = step_of(session, "user_message", "/Export")
    writes = [
        asyncio.create_task(layer.create_step(step)),
        asyncio.create_task(layer.delete_step(step["id"])),
    ]
    await asyncio.sleep(0.2)
    words.set()
    await asyncio.wait_for(asyncio.gather(*writes), 5)
    assert await rows(store, "SELECT id FROM kimi_steps") == []
    await layer.create_step(step)  # the gate is open: written at once (the test's own check)
    assert await rows(store, "SELECT id FROM kimi_steps") == [{"id": step["id"]}]
    assert len(await rows(store, "SELECT id FROM kimi_threads")) == 1
    task.cancel()


async def test_a_note_from_before_the_first_message_is_stored_before_its_deletion(
    store: Store, layer: KimiDataLayer, gate: FirstWordsGate
) -> None:
    """A status note sent at chat start (Chainlit queues its write until the first
    message) and deleted after the first message but before its first words is not
    in the stored chat: the queued write runs where the thread is written, before the
    deletion, not after it in Chainlit's later flush."""
    session = chat_session()
    session.has_first_interaction = False
    note = step_of(session, "assistant_message", "Connecting to the model server…")
    await layer.create_step(note)  # queued by Chainlit: no message yet
    assert await rows(store, "SELECT id FROM kimi_steps") == []
    session.has_first_interaction = True
    words = asyncio.Event()

    async def answer() -> None:
        await words.wait()
        gate.open()
        await asyncio.sleep(30)

    task = answering(session, answer)

    async def first_interaction() -> None:  # as Chainlit's init_thread does
        await layer.update_thread(session.thread_id, name="Hello")
        await asyncio.create_task(session.flush_method_queue())

    writes = [
        asyncio.create_task(first_interaction()),
        asyncio.create_task(layer.delete_step(note["id"])),  # the note taken away
    ]
    await asyncio.sleep(0.2)
    words.set()
    await asyncio.wait_for(asyncio.gather(*writes), 5)
    assert await rows(store, "SELECT id FROM kimi_steps") == []
    assert await thread_names(store) == ["Hello"]
    task.cancel()


async def test_a_write_made_inside_a_write_that_went_at_once_is_never_held() -> None:
    """A write that went at once (its answer's words were out) and writes again inside
    itself, once a newer answer (Retry, Regenerate) waits for its first words and a write
    queued for it waits for the first one (a step's lock): the inner write is not queued
    behind that write, so neither waits forever."""
    gate = FirstWordsGate(wait_s=0.3)
    older = asyncio.create_task(asyncio.sleep(30))
    newer = asyncio.create_task(asyncio.sleep(30))
    gate.open(older)
    first_done = asyncio.Event()
    newer_started = asyncio.Event()
    written: list[str] = []

    async def inner() -> None:
        written.append("inner")

    async def first() -> None:
        await newer_started.wait()
        await asyncio.sleep(0.05)  # the newer answer's write is queued by now
        await gate.run(newer, inner)  # e.g. the step's thread upsert inside create_step
        written.append("first")
        first_done.set()

    async def queued() -> None:
        await first_done.wait()  # e.g. the same step's lock
        written.append("queued")

    async def newer_write() -> None:
        newer_started.set()
        await gate.run(newer, queued)

    await asyncio.wait_for(asyncio.gather(gate.run(older, first), newer_write()), 3)
    assert written == ["inner", "first", "queued"]
    older.cancel()
    newer.cancel()


async def test_drawing_the_answers_first_event_lets_the_writes_go(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The turn's view opens the app's gate once it has drawn an event (ui/answer.py):
    a write waiting for that answer goes then, not after the gate's bound."""
    from types import SimpleNamespace
    from typing import Any, cast

    from backend.i18n import ENGLISH
    from backend.render import ButtonsUnder, RenderEvent
    from ui.answer import TurnView, _draw
    from ui.first_words import FIRST_WORDS

    monkeypatch.setattr(FIRST_WORDS, "wait_s", 30.0)
    chat_session()
    words = asyncio.Event()

    async def events() -> AsyncGenerator[RenderEvent, None]:
        await words.wait()
        yield ButtonsUnder(message_id="m", buttons=())
        await asyncio.sleep(30)  # still streaming

    async def answer() -> None:
        await _draw(events(), TurnView(cast(Any, SimpleNamespace(tr=ENGLISH))))

    task = asyncio.create_task(answer())
    written = asyncio.Event()

    async def write() -> None:
        written.set()

    waiting = asyncio.create_task(FIRST_WORDS.run(task, write))
    await asyncio.sleep(0.2)
    assert not written.is_set()
    words.set()
    await asyncio.wait_for(waiting, 2)
    task.cancel()


async def test_what_waits_for_the_first_event_runs_once_after_it_or_at_an_empty_end() -> None:
    """``draw``'s ``after_first`` (the settings panel and picker after a switch, app.py):
    once, right after the turn's first event is drawn; once at the end of a turn that
    drew nothing."""
    from types import SimpleNamespace
    from typing import Any, cast

    from backend.i18n import ENGLISH
    from backend.render import ButtonsUnder, RenderEvent
    from ui.answer import TurnView, _draw

    chat_session()
    drawn: list[str] = []
    view = TurnView(cast(Any, SimpleNamespace(tr=ENGLISH)))

    async def draw_event(event: RenderEvent) -> None:
        drawn.append("event")

    view.draw = draw_event  # type: ignore[method-assign]

    async def two() -> AsyncGenerator[RenderEvent, None]:
        for _ in range(2):
            yield ButtonsUnder(message_id="m", buttons=())

    async def none() -> AsyncGenerator[RenderEvent, None]:
        return
        yield

    async def caught_up() -> None:
        drawn.append("after first")

    await _draw(two(), view, caught_up)
    assert drawn == ["event", "after first", "event"]
    drawn.clear()
    await _draw(none(), view, caught_up)
    assert drawn == ["after first"]


async def test_an_empty_step_opening_and_leaving_is_not_the_first_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A Thinking reply's step opens as the server takes the request, before the model's
    first token, and leaves if the reply closes its reasoning at once: what waits for the
    first words (the chat's page writes, ``after_first``) still waits, and goes once the
    words are drawn."""
    from types import SimpleNamespace
    from typing import Any, cast

    from backend.i18n import ENGLISH
    from backend.render import AnswerText, ReasoningEnd, ReasoningText, RenderEvent
    from ui.answer import TurnView, _draw
    from ui.first_words import FIRST_WORDS

    monkeypatch.setattr(FIRST_WORDS, "wait_s", 30.0)
    chat_session()
    drawn: list[str] = []
    view = TurnView(cast(Any, SimpleNamespace(tr=ENGLISH)))

    async def draw_event(event: RenderEvent) -> None:
        drawn.append(f"text {event.text!r}" if isinstance(event, ReasoningText) else "other")

    view.draw = draw_event  # type: ignore[method-assign]
    words = asyncio.Event()

    async def events() -> AsyncGenerator[RenderEvent, None]:
        yield ReasoningText("", "r")  # "Thinking…"
        yield ReasoningText("\n", "r")  # nothing to read yet
        yield ReasoningEnd("discarded")  # a reply that closed its reasoning at once
        await words.wait()
        yield AnswerText("a", "a0 ", None)
        await asyncio.sleep(30)  # still streaming

    async def caught_up() -> None:
        drawn.append("after first")

    task = asyncio.create_task(_draw(events(), view, caught_up))
    written = asyncio.Event()

    async def write() -> None:
        written.set()

    waiting = asyncio.create_task(FIRST_WORDS.run(task, write))
    await asyncio.sleep(0.2)
    assert drawn == ["text ''", "text '\\n'", "other"] and not written.is_set()
    words.set()
    await asyncio.wait_for(waiting, 2)
    assert drawn == ["text ''", "text '\\n'", "other", "other", "after first"]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_queued_writes_of_one_step_keep_their_order_when_the_thread_is_written(
    store: Store, layer: KimiDataLayer, gate: FirstWordsGate
) -> None:
    """A note sent and then updated before the first message (both queued by Chainlit)
    is stored with its update, not with its first text."""
    session = chat_session()
    session.has_first_interaction = False
    note = step_of(session, "assistant_message", "Connecting to the model server…")
    await layer.create_step(note)
    await layer.update_step(StepDict(**{**note, "output": "Connected."}))
    session.has_first_interaction = True
    task = answering(session, lambda: asyncio.sleep(30))
    gate.open(task)
    # Chainlit's first write of the thread (a queued write flushed inside a queued write
    # of the same step would wait for that step's lock forever).
    await asyncio.wait_for(layer.update_thread(session.thread_id, name="Hello"), 5)
    assert await rows(store, "SELECT output FROM kimi_steps") == [{"output": "Connected."}]
    task.cancel()
