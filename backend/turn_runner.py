"""The one owner of a turn, from plan to recorded result.

Every answer goes through :class:`TurnRunner`, however it started: a new message
(:meth:`~TurnRunner.ask`, an edit included), "Send without them"
(:meth:`~TurnRunner.send_draft`), Retry, Regenerate and "Retry with more tokens"
(:meth:`~TurnRunner.rerun`), Compare (:meth:`~TurnRunner.compare`), and a resumed
chat's buttons (:meth:`~TurnRunner.resumed`). For each it plans the request
(:mod:`backend.planning`, with a deadline on the server's token count), streams it
on the UI's clock (:class:`backend.pacing.ServerPace`), is the only writer of
``Turn.status``, records the turn through its :class:`backend.record.TurnSink`
when the answer starts and when it ends, and yields render events
(:mod:`backend.render`) that a front end draws.

Stop is a cancellation of the task iterating the events. Wherever it lands, in
the runner's own awaits or while the front end draws an event (it then throws the
``CancelledError`` in with ``athrow``), the HTTP stream is closed at once in that
task, the turn is recorded ``stopped`` with what was shown, and the events that
say so are yielded before the cancellation goes on. Closing the events early
(``aclose``) stops the turn the same way, without those events. A Stop after the
answer ended changes nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Sequence
from contextlib import aclosing
from dataclasses import asdict, dataclass
from typing import Literal

from backend.batching import Pacing
from backend.chat import ChatSession, Upload
from backend.client import ServedModel
from backend.conversation import Turn, TurnStatus
from backend.errors import ChatError, ServerLoading, ServerUnreachable
from backend.events import AnswerDelta, Done, ReasoningDelta, StreamEvent, Waiting
from backend.images import PreparedImage
from backend.logs import LOGGER_NAME
from backend.planning import Planned, plan_compare, plan_turn
from backend.presenter import (
    ALREADY_SENT_NOTE,
    REGENERATE_LABEL,
    TURN_GONE_NOTE,
    in_markdown,
    not_started_note,
    rerun_note,
    server_away_note,
)
from backend.record import ShownAnswers, TurnRecord, TurnSink
from backend.render import (
    AnswerText,
    ButtonsUnder,
    ButtonUsed,
    Ending,
    Marks,
    Note,
    ReasoningEnd,
    ReasoningText,
    RenderEvent,
    TextBack,
    TurnEnded,
    WaitingNote,
    WaitingOver,
    draft_kept,
    error_note,
    finished,
    incomplete,
    retry_button,
    stopped,
)
from backend.resources import Server
from backend.safety import escape_markdown, link_remote_images_off_loop
from backend.settings import profile_for
from backend.timings import StepEnd, Timings

log = logging.getLogger(LOGGER_NAME)

Events = AsyncGenerator[RenderEvent, None]
"""What every entry point of the runner yields."""


@dataclass(frozen=True, slots=True)
class Answering:
    """An answer to give: to ``turn`` of the person's message ``message_id``, from ``server``.

    Attributes:
        max_tokens, make_room: as :func:`backend.planning.plan_turn`.
        planned: the request, when it is planned already (Compare); else the turn is
            planned for the chat's model and is one of the chat's turns.
        compared: the other model's label (Compare), or None.
    """

    message_id: str
    turn: Turn
    server: Server
    max_tokens: int | None = None
    make_room: bool = False
    planned: Planned | None = None
    compared: str | None = None


@dataclass(frozen=True, slots=True)
class Opening:
    """What an entry point found before any answer: notes to show first, and the answer
    to give (None: there is none, the notes say why)."""

    notes: list[RenderEvent]
    answer: Answering | None = None


class TurnRunner:
    """Runs the turns of one chat (see the module docstring).

    Each entry point returns the render events of one turn: one generator per turn
    (:meth:`_run`), so that a Stop thrown into it reaches the stream it reads.

    Args:
        chat: the chat's state (borrowed; the runner changes its turns only).
        sink: where turns are recorded; None records nothing (open mode, the CLI).
    """

    def __init__(self, chat: ChatSession, sink: TurnSink | None = None) -> None:
        self.chat = chat
        self.sink = sink
        self.shown = ShownAnswers()
        """What the chat showed beyond its turns (numbers, Compare answers): the export's."""

    @property
    def records(self) -> bool:
        """True if this chat's turns are recorded (a stored chat can be seen later)."""
        return self.sink is not None

    def ask(self, message_id: str, typed: str, uploads: Sequence[Upload]) -> Events:
        """Answer a new message (or an edit of an earlier one, which rewinds the chat).

        Its files are prepared first; if some cannot be used the message is kept
        back with a note (and "Send without them" when something can go).
        """
        return self._run(self._asked(message_id, typed, uploads))

    def send_draft(self, message_id: str) -> Events:
        """Send the kept-back draft of ``message_id`` with the files that could be used."""
        return self._run(self._drafted(message_id))

    def new_turn(
        self,
        message_id: str,
        text: str,
        images: list[PreparedImage],
        max_tokens: int | None = None,
    ) -> Events:
        """Start the turn of UI message ``message_id`` and answer it."""
        return self._run(self._started(message_id, text, images, max_tokens))

    def rerun(
        self, message_id: str, max_tokens: int | None = None, make_room: bool = False
    ) -> Events:
        """Answer again the turn of ``message_id`` (Retry, Regenerate, more tokens).

        An older turn is answered with the history up to it (later turns leave
        the conversation the model sees, as with an edit), and a note says so.
        ``max_tokens``/``make_room``: as :func:`backend.planning.plan_turn`.
        """
        return self._run(self._rewound(message_id, max_tokens, make_room))

    def compare(self, message_id: str, model: str) -> Events:
        """Ask another served model the turn of ``message_id`` (same images and history);
        its answer comes next, labelled with the model, and the chat goes on with its own."""
        return self._run(self._compared(message_id, model))

    async def resumed(self, last_answer_id: str | None) -> Events:
        """What a resumed chat shows besides its stored page: Regenerate under the last
        answer (``last_answer_id``), when the last turn has an answer the model sees."""
        turns = self.chat.conversation.turns
        last = self.chat.message_of(turns[-1]) if turns else None
        if last_answer_id is not None and last is not None and turns[-1].in_history:
            regenerate = retry_button(last, self.chat.tr, REGENERATE_LABEL)
            yield ButtonsUnder(last_answer_id, (regenerate,))

    async def _asked(self, message_id: str, typed: str, uploads: Sequence[Upload]) -> Opening:
        prepared = await self.chat.prepare_uploads(uploads)
        text = prepared.message_text(typed)  # with PDF pages / video frame times
        if prepared.problems:
            self.chat.keep_draft(message_id, text, prepared.images)
            text_back = bool(typed.strip())
            can_send = text_back or bool(prepared.images)
            note = draft_kept(message_id, prepared.problems, can_send, text_back, self.chat.tr)
            return Opening([note, TextBack(typed)] if text_back else [note])
        opened = await self._started(message_id, text, prepared.images)
        notes: list[RenderEvent] = [Note(in_markdown(n, self.chat.tr)) for n in prepared.notices]
        return Opening(notes, opened.answer)

    async def _drafted(self, message_id: str) -> Opening:
        draft = self.chat.take_draft(message_id)
        if draft is None:
            return Opening([Note(self.chat.tr(ALREADY_SENT_NOTE))])
        return await self._started(message_id, draft.text, draft.images)

    async def _started(
        self, message_id: str, text: str, images: list[PreparedImage], max_tokens: int | None = None
    ) -> Opening:
        turn = self.chat.start_turn(message_id, text, images)
        return Opening([], Answering(message_id, turn, self.chat.server, max_tokens))

    async def _rewound(self, message_id: str, max_tokens: int | None, make_room: bool) -> Opening:
        found = self.chat.rewind_to(message_id)
        if found is None:
            return Opening([Note(self.chat.tr(TURN_GONE_NOTE))])
        turn, later_turns = found
        notes: list[RenderEvent] = [ButtonUsed()]
        if later_turns:
            notes.append(Note(rerun_note(turn.text, later_turns, self.chat.tr), "plain"))
        answering = Answering(message_id, turn, self.chat.server, max_tokens, make_room)
        return Opening(notes, answering)

    async def _compared(self, message_id: str, model: str) -> Opening:
        tr = self.chat.tr
        other = next((m for m in self.chat.others if m.id == model), None)
        turn = self.chat.turn_of(message_id)
        if other is None:
            gone = tr("{model} is not served any more.", model=escape_markdown(model))
            return Opening([Note(gone)])
        if turn is None:
            return Opening([Note(tr(TURN_GONE_NOTE))])
        try:
            asked, planned = plan_compare(self.chat, turn, other)
            server = await self._server_of(other)
        except ChatError as exc:
            return Opening([Note(in_markdown(exc.message, tr), "error")])
        label = tr.text(profile_for(other.id).label)
        return Opening([], Answering(message_id, asked, server, planned=planned, compared=label))

    async def _server_of(self, model: ServedModel) -> Server:
        locate = self.chat.locate
        return await locate(model.id) if locate is not None else self.chat.server

    async def _run(self, opening: Awaitable[Opening]) -> Events:
        """The render events of one turn: the opening's notes, then (if there is an answer
        to give) plan, stream, record and say how it ended."""
        opened = await opening
        answering = opened.answer
        if answering is None:
            for note in opened.notes:
                yield note
            return
        turn = answering.turn
        shown = Shown(self.chat, answering.message_id, answering.compared)
        attempt = Attempt(self.chat.settings.server_back_wait_s)
        if answering.planned is None:  # one of the chat's turns, answered afresh
            turn.answer, turn.reasoning, turn.status = "", "", "pending"
        try:
            for note in opened.notes:
                yield note
            while True:
                try:
                    async for drawn in self._attempt(answering, shown, attempt):
                        yield drawn
                    break
                except (ServerUnreachable, ServerLoading) as exc:
                    if shown.started or not attempt.may_wait():
                        raise
                    log.info("waiting for the model server to come back: %s", exc)
                    shown.waiting = True  # taken off the screen by what comes next
                    yield WaitingNote(server_away_note(attempt.waited_s, self.chat.tr))
                    await asyncio.sleep(SERVER_POLL_S)
            planned = attempt.planned
            assert planned is not None
        except asyncio.CancelledError:
            request_id = attempt.request_id
            if turn.status in ("done", "cut_off"):
                raise  # finished is finished: a late Stop changes nothing
            await self._end(turn, shown, "stopped", request_id)
            for drawn in await shown.stopped(turn):
                yield drawn
            raise
        except GeneratorExit:  # closed before the end by whoever reads it: stopped too
            if turn.status not in ("done", "cut_off"):
                await self._end(turn, shown, "stopped", attempt.request_id)
            raise
        except ChatError as exc:
            await self._end(turn, shown, "failed", attempt.request_id)
            for drawn in await shown.failed(turn, exc):
                yield drawn
            return
        for drawn in await self._finished(answering, turn, shown, planned):
            yield drawn

    async def _attempt(self, answering: Answering, shown: Shown, attempt: Attempt) -> Events:
        """Plan (unless planned) and stream one answer once, recording the turn as it
        starts; what it yields is drawn. Raises what the server's failure maps to."""
        planned = answering.planned or await self._plan(answering)
        attempt.planned, attempt.request_id = planned, planned.request.request_id
        if not attempt.noticed:  # said once, however often the server is waited for
            attempt.noticed = True
            for notice in planned.notices:
                yield Note(in_markdown(notice, self.chat.tr))
        await self._record(answering.turn)
        async with aclosing(answering.server.pace.paced(planned.request, self._pacing())) as events:
            async for event in events:
                for drawn in shown.on(event):
                    yield drawn

    async def _plan(self, answering: Answering) -> Planned:
        """Plan a turn of the chat for its model, connecting first if needed."""
        if not self.chat.connected:
            await self.chat.connect()
        return await plan_turn(
            self.chat, answering.turn, answering.max_tokens, make_room=answering.make_room
        )

    def _pacing(self) -> Pacing:
        settings = self.chat.settings
        return Pacing(
            first_token_timeout_s=settings.first_token_timeout_s,
            idle_timeout_s=settings.idle_timeout_s,
        )

    async def _finished(
        self, answering: Answering, turn: Turn, shown: Shown, planned: Planned
    ) -> list[RenderEvent]:
        """End a turn whose stream ended normally; learn its exact token counts (not for a
        Compare: those are another model's) and return the events that show its end."""
        done = shown.done
        assert done is not None, "a stream that ends normally ends with Done"
        request = planned.request
        await self._end(turn, shown, _status_of(done), request.request_id, done)
        if answering.compared is None:
            self.chat.in_background(self._learn_token_counts(turn, request.model))
        return await shown.finished(turn, done, planned)

    async def _end(
        self,
        turn: Turn,
        shown: Shown,
        status: TurnStatus,
        request_id: str | None,
        done: Done | None = None,
    ) -> None:
        """End ``turn`` with what was shown of it and record it (a Stop landing during
        the record does not cut it short)."""
        reasoning, answer = shown.texts(done)
        turn.reasoning, turn.answer, turn.status = reasoning, answer, status
        if request_id is not None:
            log.info("request %s ended: %s", request_id, status)
        timings = Timings.from_done(done) if done is not None else None
        model = self.chat.model.id if self.chat.model else None
        self.shown.ended(shown.message_id, turn, timings, shown.compared, model)
        answer_id = shown.answer_id if status != "failed" or shown.answer_started else None
        await asyncio.shield(self._record(turn, answer_id, timings))

    async def _record(
        self, turn: Turn, answer_id: str | None = None, timings: Timings | None = None
    ) -> None:
        """Hand ``turn`` to the sink, if there is one and the turn is the chat's;
        ``answer_id``: its answer message, once it has one."""
        chat = self.chat
        if self.sink is None or turn not in chat.conversation.turns:
            return
        message_id = chat.message_of(turn)
        if message_id is None:
            return
        record = TurnRecord(
            position=chat.conversation.turns.index(turn),
            message_id=message_id,
            turn=turn,
            answer_id=answer_id,
            timings=timings,
            model=chat.model.id if chat.model else None,
            options=asdict(chat.options) if chat.options else {},
        )
        await self.sink.record(record)

    async def _learn_token_counts(self, turn: Turn, model: str) -> None:
        """Ask the server's tokenizer for the exact counts of a finished turn's texts."""
        counter = self.chat.token_counter
        for text in (turn.text, turn.answer):
            if text and not counter.knows(text):
                count = await self.chat.client.count_text_tokens(model, text)
                if count is not None:
                    counter.learn(text, count)


SERVER_POLL_S = 1.0
"""Seconds between two tries of a message while its model server cannot be reached."""


@dataclass(slots=True)
class Attempt:
    """The tries of one answer: what was planned, and how long the server was waited for.

    Args:
        wait_s: how long a server that cannot be reached (or is loading) is waited for
            before the answer fails (``Settings.server_back_wait_s``).
    """

    wait_s: float
    planned: Planned | None = None
    request_id: str | None = None
    noticed: bool = False
    _since: float | None = None

    @property
    def waited_s(self) -> float:
        """Seconds since the first try that found the server away (0 before)."""
        return 0.0 if self._since is None else time.monotonic() - self._since

    def may_wait(self) -> bool:
        """The server was found away (again): True while it may still be waited for."""
        if self._since is None:
            self._since = time.monotonic()
        return self.waited_s < self.wait_s


def _status_of(done: Done) -> TurnStatus:
    return "cut_off" if done.finish_reason == "length" else "done"


class Shown:
    """What the person has seen of one answer so far, and the render events for it.

    Args:
        chat: the chat (its language, options, others, limits).
        message_id: the person's message the answer's buttons act on.
        compared: the other model's label (Compare), or None.
    """

    def __init__(self, chat: ChatSession, message_id: str, compared: str | None) -> None:
        self.chat = chat
        self.message_id = message_id
        self.compared = compared
        self.answer_id = str(uuid.uuid4())
        """Chainlit id the answer message gets (the record names it)."""
        self.show_reasoning = chat.options is None or chat.options.show_reasoning
        self.reasoning: list[str] = []
        self.answer: list[str] = []
        self.step_open = False
        self.answer_started = False
        self.waiting = False
        self.done: Done | None = None

    @property
    def started(self) -> bool:
        """True once any of the answer (reasoning or text) came."""
        return bool(self.reasoning or self.answer or self.done)

    def on(self, event: StreamEvent | Waiting) -> list[RenderEvent]:
        """The render events for one paced stream event."""
        if isinstance(event, Waiting):
            self.waiting = True
            return [WaitingNote(not_started_note(event.seconds, event.queued, self.chat.tr))]
        drawn = self._waiting_over()
        if isinstance(event, ReasoningDelta):
            self.reasoning.append(event.text)
            if self.show_reasoning:
                self.step_open = True
                drawn.append(ReasoningText(event.text))
        elif isinstance(event, AnswerDelta):
            self.answer.append(event.text)
            drawn += self._step_end("done")
            self.answer_started = True
            drawn.append(AnswerText(self.answer_id, event.text, self.compared))
        else:
            self.done = event
            drawn += self._step_end("discarded" if event.answer_in_reasoning else "done")
        return drawn

    def texts(self, done: Done | None) -> tuple[str, str]:
        """The reasoning and the answer as shown; a Thinking model's unmarked output
        (streamed as reasoning) is the answer."""
        reasoning, answer = "".join(self.reasoning), "".join(self.answer)
        if done is not None and done.answer_in_reasoning:
            return "", reasoning + answer
        return reasoning, answer

    async def finished(self, turn: Turn, done: Done, planned: Planned) -> list[RenderEvent]:
        """The end of an answer that ended normally (or was cut off by max tokens)."""
        shown = await link_remote_images_off_loop(turn.answer)  # no image fetches
        chat = self.chat
        ending = Ending(
            message_id=self.message_id,
            max_tokens=planned.request.max_tokens,
            more_tokens=planned.more_tokens,
            max_model_len=chat.max_model_len,
            others=tuple(chat.others),
            compared=self.compared,
            dev_mode=chat.settings.dev_mode,
        )
        drawn: list[RenderEvent] = [finished(self.answer_id, shown, done, ending, chat.tr)]
        if turn.images and turn.answer:
            drawn.append(Marks(turn.answer, tuple(turn.images)))
        return [*drawn, TurnEnded(turn.status, turn.answer, turn.reasoning, done)]

    async def stopped(self, turn: Turn) -> list[RenderEvent]:
        """The end of an answer Stop cut short: what came, marked, with Retry."""
        drawn = [*self._waiting_over(), *self._step_end("stopped")]
        shown = await link_remote_images_off_loop(turn.answer)
        drawn.append(stopped(self.answer_id, shown, self.message_id, self.chat.tr))
        return [*drawn, TurnEnded(turn.status, turn.answer, turn.reasoning)]

    async def failed(self, turn: Turn, exc: ChatError) -> list[RenderEvent]:
        """The end of an answer that failed: what came marked incomplete, and why."""
        drawn = [*self._waiting_over(), *self._step_end("failed")]
        if self.answer_started:
            shown = await link_remote_images_off_loop(turn.answer)
            drawn.append(incomplete(self.answer_id, shown, self.chat.tr))
        drawn.append(error_note(exc, self.message_id, self.chat.tr))
        return [*drawn, TurnEnded(turn.status, turn.answer, turn.reasoning)]

    def _waiting_over(self) -> list[RenderEvent]:
        if not self.waiting:
            return []
        self.waiting = False
        return [WaitingOver()]

    def _step_end(self, ended: StepEnd | Literal["discarded"]) -> list[RenderEvent]:
        if not self.step_open:
            return []
        self.step_open = False
        return [ReasoningEnd(ended)]
