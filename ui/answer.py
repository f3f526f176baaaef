"""Drawing a turn in Chainlit: each render event of the turn runner, as it comes.

Nothing here decides anything about a turn: what is said, which buttons an answer
gets and how a turn ends are the runner's (backend/turn_runner.py), which yields
plain render events (backend/render.py); this module draws them as Chainlit
messages, steps and actions. Reasoning text goes through
:class:`ui.reasoning_view.ReasoningView`, answer text through
:class:`ui.answer_view.AnswerView`.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import aclosing, asynccontextmanager
from contextvars import ContextVar
from typing import Any, ParamSpec

import chainlit as cl

from backend.batching import visible
from backend.chat import ChatSession
from backend.errors import ChatError
from backend.fair_use import Confirming
from backend.logs import LOGGER_NAME
from backend.presenter import in_markdown
from backend.render import (
    AnswerEnd,
    AnswerText,
    Button,
    ButtonsUnder,
    ButtonUsed,
    Marks,
    Note,
    ReasoningEnd,
    ReasoningText,
    RenderEvent,
    TextBack,
    TurnsGone,
    WaitingNote,
    WaitingOver,
)
from backend.turn_runner import Events
from ui import bridge, history
from ui.answer_view import AnswerView
from ui.compare_view import CompareColumn, ComparePair
from ui.first_words import FIRST_WORDS
from ui.grounding_view import show_marks
from ui.language import session_translator
from ui.notes import AUTHOR, NoteKind, note_id
from ui.reasoning_view import ReasoningView

log = logging.getLogger(LOGGER_NAME)

AfterFirst = Callable[[], Awaitable[None]]
"""What :func:`draw` runs once a turn's first event (not an empty step's) is drawn."""


async def say(text: str, buttons: Sequence[Button] = (), kind: NoteKind = "plain") -> None:
    """A short note from the app (not from the model), with its buttons and its sign."""
    actions = [action(b) for b in buttons]
    await cl.Message(content=text, author=AUTHOR, actions=actions, id=note_id(kind)).send()


def action(button: Button) -> cl.Action:
    """The Chainlit action of a button (its callback is named by ``button.kind``)."""
    return cl.Action(name=button.kind, payload=button.payload, label=button.label, icon=button.icon)


UNCONFIRMED: ContextVar[Confirming | None] = ContextVar("unconfirmed", default=None)
"""The place of the answer this task draws while its lease in the shared store is being
taken (set by ``ui/tasks.py`` ``one_at_a_time``): :func:`draw` waits for it before the
answer's first event reaches the page, so the model request goes out meanwhile."""


async def draw(
    events: Events,
    chat: ChatSession,
    pressed: cl.Action | None = None,
    after_first: AfterFirst | None = None,
    compare: ComparePair | None = None,
) -> None:
    """Draw every event of one turn; ``pressed``: the button that started it, if any.

    A Stop (cancellation) that lands while an event is being drawn is thrown into the
    runner, which closes the stream, ends the turn and yields what says so; those are
    drawn and the Stop goes on. A Stop that lands inside the runner is handled there.
    ``after_first`` runs once the first event is on its way to the page, not counting
    the reasoning step opening or leaving with nothing in it (or the turn ended without
    one): what the page can be told later than the first words. ``compare``: the pair a
    Compare run's answer is drawn in.
    """
    await _draw(events, TurnView(chat, pressed, compare), after_first)


async def draw_run(
    events: Events,
    chat: ChatSession,
    pressed: cl.Action | None = None,
    compare: ComparePair | None = None,
) -> None:
    """:func:`draw` a turn a button started (Retry, Regenerate, Compare, Send without
    them) inside a run step, as Chainlit runs ``on_message``: its page puts the Copy
    button under the last answer of a run, and only there."""
    async with button_run():
        await draw(events, chat, pressed, compare=compare)


@asynccontextmanager
async def button_run() -> AsyncIterator[cl.Step]:
    """A run step for what a button draws, as Chainlit runs ``on_message``; kept in the
    session (``history.RUNS``) so that the turns it drew leave the page with it when the
    chat forks before them (:func:`ui.history.fork_after`, a version shown instead)."""
    # The page knows a run by its step's name (CL_RUN_NAMES in chainlit/context.py).
    async with cl.Step(name="on_message", type="run", show_input=False) as run:
        runs: list[cl.Step] = cl.user_session.get(history.RUNS) or []
        cl.user_session.set(history.RUNS, [*runs, run])
        yield run


async def _draw(events: Events, view: TurnView, after_first: AfterFirst | None = None) -> None:
    stop: asyncio.CancelledError | None = None
    try:
        async with aclosing(events):  # a refusal closes the turn: its runner ends it
            while True:
                try:
                    event = await (events.athrow(stop) if stop else anext(events))
                except StopAsyncIteration:
                    if stop is not None:
                        raise stop from None
                    return
                stop = None
                await _confirmed()
                words = not _before_the_words(event)
                try:
                    await view.draw(event)
                    if after_first is not None and words:
                        then, after_first = after_first, None
                        await then()
                except asyncio.CancelledError as cancelled:
                    stop = cancelled
                if words:  # the chat's page writes may go now (ui/first_words.py)
                    FIRST_WORDS.open()
    finally:
        if after_first is not None:  # the turn ended before its first event
            await after_first()


async def _confirmed() -> None:
    """Wait, once, for the lease of the answer being drawn (:data:`UNCONFIRMED`).

    Raises:
        backend.fair_use.Busy: the shared store refused it; nothing of the answer is drawn.
    """
    confirming = UNCONFIRMED.get()
    if confirming is not None:
        UNCONFIRMED.set(None)
        await confirming.confirmed()


def _before_the_words(event: RenderEvent) -> bool:
    """True for what a turn draws before its first words: the reasoning step opening with
    nothing to read in it ("Thinking…" while the server prepares the reply) and leaving
    again (a reply that closes its reasoning at once). What waits for the first words
    (the chat's page writes, ``after_first``) waits on."""
    if isinstance(event, ReasoningText):
        return not visible(event.text)
    return event == ReasoningEnd("discarded")


class TurnView:
    """What one turn has on screen: its waiting note, reasoning step and answer messages."""

    def __init__(
        self,
        chat: ChatSession,
        pressed: cl.Action | None = None,
        compare: ComparePair | None = None,
    ) -> None:
        self.chat = chat
        self.pressed = pressed
        self.compare = compare  # a Compare run: its answer goes in the pair's column
        self._reasoning = ReasoningView(tr=chat.tr)
        self.answers: dict[str, AnswerView | CompareColumn] = {}
        self.waiting: cl.Message | None = None

    async def answer(self, answer_id: str, author: str | None) -> AnswerView | CompareColumn:
        """The view of answer ``answer_id`` (made at its first event)."""
        if answer_id not in self.answers:
            column = await self.compare.column() if self.compare is not None else None
            self.answers[answer_id] = column or AnswerView(answer_id, author)
        return self.answers[answer_id]

    async def reasoning(self) -> ReasoningView:
        """The reasoning step's view: in a Compare run, inside the pair's column."""
        if self.compare is not None:
            return (await self.compare.column()).reasoning
        return self._reasoning

    async def draw(self, event: RenderEvent) -> None:
        """Draw one render event (see backend/render.py for what each one means)."""
        if isinstance(event, ReasoningText):
            await (await self.reasoning()).add(event.text, event.step_id)
        elif isinstance(event, AnswerText):
            await (await self.answer(event.answer_id, event.author)).add(event.text)
        elif isinstance(event, ReasoningEnd):
            if event.ended == "discarded":
                await (await self.reasoning()).discard()
            else:
                await (await self.reasoning()).close(event.ended)
        elif isinstance(event, AnswerEnd):
            answer = await self.answer(event.answer_id, event.author)
            await answer.finish(event.content, [action(b) for b in event.buttons], event.footer)
        elif isinstance(event, Note):
            await say(event.text, event.buttons, event.level)
        elif isinstance(event, WaitingNote | WaitingOver):
            await self.show_waiting(event.text if isinstance(event, WaitingNote) else None)
        elif isinstance(event, Marks):
            view = self.answers.get(event.answer_id)
            if view is not None:
                await show_marks(view, event, self.chat.workers, self.chat.tr)
        elif isinstance(event, ButtonUsed) and self.pressed is not None:
            await self.pressed.remove()
        elif isinstance(event, TurnsGone):
            await history.fork_after(event.message_id)
        elif isinstance(event, TextBack):
            await bridge.put_back(event.text)
        elif isinstance(event, ButtonsUnder):
            for button in event.buttons:
                await action(button).send(for_id=event.message_id)

    async def show_waiting(self, text: str | None) -> None:
        """Show or update the note that the server has not started answering (one
        message, updated); None takes it off the screen."""
        if text is not None and self.waiting is None:
            self.waiting = cl.Message(content=text, author=AUTHOR, id=note_id("waiting"))
            await self.waiting.send()
        elif text is not None and self.waiting is not None:
            self.waiting.content = text
            await self.waiting.update()
        elif self.waiting is not None:
            message, self.waiting = self.waiting, None
            await message.remove()


P = ParamSpec("P")


def said(handler: Callable[P, Awaitable[Any]]) -> Callable[P, Awaitable[Any]]:
    """A Chainlit handler whose failures are said in the app's words: a
    :class:`backend.errors.ChatError` by its own sentence, anything else (a bug, a
    library's exception) by a sentence of ours (its name and traceback go to app.log).
    Chainlit would otherwise show the exception's own text."""

    @functools.wraps(handler)
    async def run(*args: P.args, **kwargs: P.kwargs) -> Any:
        try:
            return await handler(*args, **kwargs)
        except ChatError as exc:
            log.warning("%s: %s", handler.__name__, exc)
            await say(in_markdown(exc.message, session_translator()), kind="warning")
        except Exception:
            log.exception("%s failed", handler.__name__)
            tr = session_translator()
            await say(
                tr("Something went wrong inside the app; app.log has the details. Try again."),
                kind="warning",
            )
        return None

    return run
