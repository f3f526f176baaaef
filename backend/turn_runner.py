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
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Literal

from backend.batching import Pacing, visible
from backend.chat import ChatSession, Upload
from backend.client import ServedModel
from backend.conversation import Turn, TurnStatus
from backend.errors import ChatError, ServerLoading, ServerUnreachable
from backend.events import (
    AnswerDelta,
    Done,
    ReasoningDelta,
    ReasoningOpened,
    StreamEvent,
    Waiting,
)
from backend.families import family_for
from backend.grounding import referred_images
from backend.i18n import msg
from backend.images import PreparedImage
from backend.logs import LOGGER_NAME
from backend.planning import Planned, new_request_id, plan_compare, plan_turn
from backend.presenter import (
    ALREADY_SENT_NOTE,
    NOT_SAVED_NOTE,
    REGENERATE_LABEL,
    SAVED_AGAIN_NOTE,
    TURN_GONE_NOTE,
    in_markdown,
    not_started_note,
    rerun_note,
    server_away_note,
)
from backend.record import (
    FIRST_WORDS_WAIT_S,
    ComparedAnswer,
    Saving,
    ShownAnswers,
    TurnRecord,
    TurnSink,
)
from backend.render import (
    AnswerText,
    Button,
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
    TurnsGone,
    WaitingNote,
    WaitingOver,
    compare_button,
    draft_kept,
    error_note,
    finished,
    incomplete,
    merged,
    reference,
    retry_button,
    stopped,
    version_buttons,
)
from backend.resources import Server
from backend.safety import escape_markdown, link_remote_images_off_loop
from backend.timings import StepEnd, Timings
from backend.versions import Version
from backend.vllm_errors import log_reason

log = logging.getLogger(LOGGER_NAME)

Events = AsyncGenerator[RenderEvent, None]
"""What every entry point of the runner yields."""

COUNT_TEXT_ABOVE = 0.25
"""Share of a plan's room (max model length less the answer budget) that a conversation's
text may fill on estimates alone. Below it a plan fits with the over-estimate and exact
counts change nothing; each costs a ``/tokenize`` request (two a turn: 11 % of the app's CPU
samples in a burst of 64 first questions, ``bench/bench_burst.py``). Past it, every text of
the conversation not counted yet is counted, after each turn."""


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
        when_unsaved: called when the chat says it is not being saved, e.g. to say when
            it is again without waiting for the next turn (``ui/session.py``).
    """

    def __init__(
        self,
        chat: ChatSession,
        sink: TurnSink | None = None,
        when_unsaved: Callable[[TurnRunner], None] | None = None,
    ) -> None:
        self.chat = chat
        self.sink = sink
        self.when_unsaved = when_unsaved
        self.unsaved_said = False
        """True once the chat said it is not being saved (said again only when it is)."""
        self.shown = ShownAnswers()
        """What the chat showed beyond its turns (numbers, Compare answers): the export's."""
        self.answer_ids: dict[str, str] = {}
        """Each version's answer message (Chainlit id), by the version's key: recorded, or
        stored (a resumed chat's): the page draws a version again with it."""

    @property
    def records(self) -> bool:
        """True if this chat's turns are recorded (a stored chat can be seen later)."""
        return self.sink is not None

    def ask(self, message_id: str, typed: str, uploads: Sequence[Upload]) -> Events:
        """Answer a new message (or an edit of an earlier one: a new version of its turn).

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

        A turn with an answer, or with later turns, gets a new version beside it
        (:meth:`ChatSession.new_version`), answered with the history up to it: its later
        turns stay with the earlier version and leave the screen
        (:class:`backend.render.TurnsGone`), as with an edit, and a note says so. The
        last turn without an answer the model sees (failed, stopped early) is answered in
        place.
        ``max_tokens``/``make_room``: as :func:`backend.planning.plan_turn`.
        """
        return self._run(self._rewound(message_id, max_tokens, make_room))

    def compare(self, message_id: str, model: str) -> Events:
        """Ask another served model the turn of ``message_id`` (same images and history);
        its answer comes next, labelled with the model, and the chat goes on with its own."""
        return self._run(self._compared(message_id, model))

    async def resumed(self, last_answer_id: str | None) -> Events:
        """What a resumed chat shows besides its stored page: Regenerate and Compare (one
        per other served model: :meth:`ChatSession.served_besides`) under the last answer
        (``last_answer_id``), when the last turn has an answer the model sees; ‹ n/m ›
        under each answer (:attr:`answer_ids`) of a turn with other versions."""
        turns, tr = self.chat.conversation.turns, self.chat.tr
        shown = self.chat.versions.branch()
        for version in shown[:-1]:
            places = version_buttons(self.chat.versions, version.key)
            if places and version.key in self.answer_ids:
                yield ButtonsUnder(self.answer_ids[version.key], places)
        last = self.chat.message_of(turns[-1]) if turns else None
        if last_answer_id is not None and last is not None and turns[-1].in_history:
            buttons = [retry_button(last, tr, REGENERATE_LABEL)]
            buttons += [compare_button(last, other, tr) for other in self.chat.others]
            buttons += list(version_buttons(self.chat.versions, shown[-1].key))
            yield ButtonsUnder(last_answer_id, tuple(buttons))

    async def _asked(self, message_id: str, typed: str, uploads: Sequence[Upload]) -> Opening:
        prepared = await self.chat.prepare_uploads(uploads)
        text = prepared.message_text(typed)  # with PDF pages / video frame times
        if prepared.problems:
            log.warning(
                "message %s kept back, files it cannot use: %s",
                message_id,
                " | ".join(map(str, prepared.problems)),
            )
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
        chat = self.chat
        earlier = chat.turn_of(message_id)
        if earlier is None:
            return Opening([Note(chat.tr(TURN_GONE_NOTE))])
        later_turns = len(chat.conversation.turns) - chat.conversation.turns.index(earlier) - 1
        turn = earlier  # the last turn, with no answer the model sees: answered in place
        if later_turns or earlier.in_history:  # a version beside it, its later turns kept
            turn = chat.new_version(message_id) or earlier
        notes: list[RenderEvent] = [ButtonUsed()]
        if later_turns:  # forked there: the later turns leave the page, the answer comes under it
            notes.append(TurnsGone(message_id))
            notes.append(Note(rerun_note(turn.text, later_turns, chat.tr), "fork"))
        answering = Answering(message_id, turn, chat.server, max_tokens, make_room)
        return Opening(notes, answering)

    async def choose(self, key: str) -> tuple[list[Version], list[RenderEvent]]:
        """Show version ``key`` of its turn (‹ n/m ›) and record the choice: the branch
        shown from its place on (the version first), and the notes on how the chat's
        storing stands.

        Raises:
            KeyError: the chat has no such version.
        """
        shown = self.chat.choose(key)
        await self._as_stored(shown)
        return shown, await self._record(shown[0].turn, restates=True)

    async def _as_stored(self, versions: list[Version]) -> None:
        """Give each of ``versions`` the answer its stored row holds where that one ended
        and is not this tab's copy (another tab answered it again in place, and may have
        compared it since), with its numbers, model and Compare answers: the branch drawn
        and sent to the model is the one the chat stores. Where the answers are the same,
        the Compare answers stored beside it (another tab's too) join those shown here."""
        if self.sink is None:
            return
        for record in await self.sink.stored([v.key for v in versions]):
            stored, turn = record.turn, self.chat.versions[record.message_id].turn
            same = (stored.answer, stored.reasoning, stored.status) == (
                turn.answer,
                turn.reasoning,
                turn.status,
            )
            if same:
                self.shown.stored(self.shown.completed(record))
            elif not record.interrupted:  # not an answer still streaming elsewhere, or cut
                turn.answer, turn.reasoning = stored.answer, stored.reasoning
                turn.status, turn.reasoning_s = stored.status, stored.reasoning_s
                self.shown.stored(record)

    async def drawn_again(
        self, key: str, answer_id: str, reasoning_id: str | None = None
    ) -> list[RenderEvent]:
        """Version ``key``'s answer is on the page again as message ``answer_id`` (the
        branch drawn again after ‹ n/m ›), its reasoning as step ``reasoning_id`` (None: it
        has none): recorded with them, so a resume puts its buttons there and draws the
        reasoning from the turn; the notes on how the chat's storing stands.

        Raises:
            KeyError: the chat has no such version.
        """
        return await self._record(
            self.chat.versions[key].turn, answer_id, reasoning_id=reasoning_id, restates=True
        )

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
            ref = new_request_id()
            log.warning("request %s refused before sending: %s", ref, log_reason(exc))
            return Opening([error_note(exc, None, tr, reference(ref, datetime.now(), tr))])
        label = tr.text(family_for(other.id).label)
        return Opening([], Answering(message_id, asked, server, planned=planned, compared=label))

    async def _server_of(self, model: ServedModel) -> Server:
        locate = self.chat.locate
        return await locate(model.id) if locate is not None else self.chat.server

    async def _run(self, opening: Awaitable[Opening]) -> Events:
        """The render events of one turn: the opening's notes, then (if there is an answer
        to give) plan, stream, record and say how it ended. The turn's notices (its files',
        its plan's) are said in one note, once the plan is made; a ``fork`` note (an older
        turn answered again, its later turns gone) is said at once, before the plan, so that
        the page brings it into view as the later turns leave. A model server that cannot
        be reached (or is loading) is waited for, with a note, before the answer fails."""
        opened = await opening
        answering = opened.answer
        if answering is None:
            for note in opened.notes:
                yield note
            return
        turn = answering.turn
        shown = Shown(self.chat, answering.message_id, answering.compared)
        attempt = Attempt(self.chat.settings.server_back_wait_s, answering.planned)
        if answering.planned is None:  # one of the chat's turns, answered afresh
            turn.answer, turn.reasoning, turn.status = "", "", "pending"
        saving = Checkpoints(self, turn, shown)
        attempt.notices = [n for n in opened.notes if isinstance(n, Note) and n.level == "info"]
        try:
            for note in opened.notes:
                if note not in attempt.notices:
                    yield note
            async for drawn in self._attempts(answering, shown, attempt, saving):
                yield drawn
            planned = attempt.planned
            assert planned is not None
        except asyncio.CancelledError:
            if turn.status in ("done", "cut_off"):
                raise  # finished is finished: a late Stop changes nothing
            notes = await self._end(turn, shown, "stopped", attempt.sent, saving=saving)
            for drawn in [*await shown.stopped(turn), *notes]:
                yield drawn
            raise
        except GeneratorExit:  # closed before the end by whoever reads it: stopped too
            if turn.status not in ("done", "cut_off"):
                await self._end(turn, shown, "stopped", attempt.sent, saving=saving)
            raise
        except ChatError as exc:
            for drawn in await self._failed(turn, shown, attempt, saving, exc):
                yield drawn
            return
        for drawn in await self._finished(answering, turn, shown, planned, saving):
            yield drawn

    async def _attempts(
        self, answering: Answering, shown: Shown, attempt: Attempt, saving: Checkpoints
    ) -> Events:
        """:meth:`_attempt` until it streams, waiting (with a note that keeps counting) while
        the model server cannot be reached and nothing was shown yet."""
        while True:
            try:
                async for drawn in self._attempt(answering, shown, attempt, saving):
                    yield drawn
                return
            except (ServerUnreachable, ServerLoading) as exc:
                if shown.started or not attempt.may_wait():
                    raise
                log.info("waiting for the model server to come back: %s", exc)
                shown.waiting = shown.away = True  # taken off the screen by what comes next
                yield WaitingNote(server_away_note(attempt.waited_s, self.chat.tr))
                await asyncio.sleep(SERVER_POLL_S)

    async def _attempt(
        self, answering: Answering, shown: Shown, attempt: Attempt, saving: Checkpoints
    ) -> Events:
        """Plan (unless planned) and stream one answer once, recording the turn as it
        starts and saving it while it streams; what it yields is drawn. Raises what the
        server's failure maps to."""
        planned = answering.planned or await self._plan(answering, attempt.request_id)
        attempt.planned = planned
        attempt.request_id = planned.request.request_id or attempt.request_id
        if not attempt.noticed:  # said once, however often the server is waited for
            attempt.noticed = True
            tr = self.chat.tr
            attempt.notices += [Note(in_markdown(notice, tr)) for notice in planned.notices]
            if attempt.notices:
                yield merged(attempt.notices)
                attempt.notices = []
        saving.begin()
        async with aclosing(answering.server.pace.paced(planned.request, self._pacing())) as events:
            async for event in events:
                for drawn in [*shown.on(event), *saving.due()]:
                    yield drawn
                if shown.words_out:  # drawn: the caller asks for more once it has
                    saving.words_out()

    async def _failed(
        self, turn: Turn, shown: Shown, attempt: Attempt, saving: Checkpoints, exc: ChatError
    ) -> list[RenderEvent]:
        """End a turn that failed with ``exc``: logged (a refusal before sending too),
        recorded, and the events that say so (after the turn's notices not said yet). The
        note's time is the log line's, taken before the record (which may take a while)."""
        failed_at = datetime.now()
        if attempt.planned is None:
            log.warning(
                "request %s refused before sending: %s", attempt.request_id, log_reason(exc)
            )
        notes = await self._end(turn, shown, "failed", attempt.sent, failure=exc, saving=saving)
        ended = [*await shown.failed(turn, exc, attempt.request_id, failed_at), *notes]
        return [merged(attempt.notices), *ended] if attempt.notices else ended

    async def _plan(self, answering: Answering, request_id: str) -> Planned:
        """Plan a turn of the chat for its model, connecting first if needed."""
        if not self.chat.connected:
            await self.chat.connect()
        return await plan_turn(
            self.chat,
            answering.turn,
            answering.max_tokens,
            make_room=answering.make_room,
            request_id=request_id,
        )

    def _pacing(self) -> Pacing:
        settings = self.chat.settings
        return Pacing(
            first_token_timeout_s=settings.first_token_timeout_s,
            idle_timeout_s=settings.idle_timeout_s,
        )

    async def _finished(
        self, answering: Answering, turn: Turn, shown: Shown, planned: Planned, saving: Checkpoints
    ) -> list[RenderEvent]:
        """End a turn whose stream ended normally; learn its exact token counts (not for a
        Compare: those are another model's) and return the events that show its end."""
        done = shown.done
        assert done is not None, "a stream that ends normally ends with Done"
        request = planned.request
        notes = await self._end(
            turn, shown, _status_of(done), request.request_id, done, saving=saving
        )
        if answering.compared is None and self._counts_matter(planned.wanted_max_tokens):
            self.chat.in_background(self._learn_token_counts(request.model))
        return [*await shown.finished(turn, done, planned), *notes]

    async def _end(
        self,
        turn: Turn,
        shown: Shown,
        status: TurnStatus,
        request_id: str | None,
        done: Done | None = None,
        failure: ChatError | None = None,
        saving: Checkpoints | None = None,
    ) -> list[RenderEvent]:
        """End ``turn`` with what was shown of it and record it (a Stop landing during
        the record does not cut it short; a save made while it streamed lands first);
        the notes on how the chat's storing stands. ``request_id``: the request sent,
        logged with how it ended (and why it failed: ``failure``); None: nothing was sent."""
        reasoning, answer = shown.texts(done)
        turn.reasoning, turn.answer, turn.status = reasoning, answer, status
        if request_id is not None and failure is not None:
            log.warning("request %s ended: failed: %s", request_id, log_reason(failure))
        elif request_id is not None:
            log.info("request %s ended: %s", request_id, status)
        timings = Timings.from_done(done) if done is not None else None
        turn.reasoning_s = timings.reasoning_s if timings is not None else None
        model = self.chat.model.id if self.chat.model else None
        key = self._key_of(shown.message_id)
        compared = self.shown.ended(key, turn, timings, shown.compared, model)
        answer_id = shown.answer_id if status != "failed" or shown.answer_started else None

        async def last() -> list[RenderEvent]:
            if compared is not None:
                return await self._record_compared(key, compared)
            earlier = await saving.settled() if saving is not None else []
            return [
                *earlier,
                *await self._record(turn, answer_id, timings, reasoning_id=shown.reasoning_id),
            ]

        return await asyncio.shield(last())

    async def _record(
        self,
        turn: Turn,
        answer_id: str | None = None,
        timings: Timings | None = None,
        stored: Turn | None = None,
        reasoning_id: str | None = None,
        restates: bool = False,
    ) -> list[RenderEvent]:
        """Hand ``turn`` to the sink, if there is one and the turn is one of the chat's
        versions (shown or not: a version answered while another is chosen is kept too);
        ``answer_id``: its answer message, once it has one; ``stored``: what to store of
        it, if not the turn as it is (an answer still streaming); ``reasoning_id``: its
        reasoning step on the page, if it has one; ``restates``: the turn is only chosen
        or drawn again (:attr:`TurnRecord.restates`). Returns the notes that
        say how the chat's storing stands, when that changed."""
        chat = self.chat
        version = chat.version_of(turn)
        if version is not None and answer_id is not None:
            self.answer_ids[version.key] = answer_id
        if self.sink is None or version is None:
            return []
        shown = chat.conversation.turns
        record = TurnRecord(
            position=shown.index(turn) if turn in shown else len(shown),
            message_id=version.key,
            turn=stored or replace(turn, images=list(turn.images)),  # a held save keeps it
            answer_id=answer_id,
            reasoning_id=reasoning_id,
            timings=timings,
            model=chat.model.id if chat.model else None,
            options=asdict(chat.options) if chat.options else {},
            parent_id=version.parent,
            chosen=version.chosen,
            beside=next(
                (v.key for v in chat.versions.siblings(version.key) if v is not version), None
            ),
            restates=restates,
        )
        return self._storing_notes(await self.sink.record(record))

    def _key_of(self, message_id: str) -> str:
        """The key of the turn of UI message ``message_id`` (:mod:`backend.versions`); the
        id itself where it names no turn of the chat (any more)."""
        turn = self.chat.turn_of(message_id)
        version = self.chat.version_of(turn) if turn is not None else None
        return version.key if version is not None else message_id

    async def _record_compared(self, key: str, answer: ComparedAnswer) -> list[RenderEvent]:
        """Hand another model's ``answer`` to the turn of ``key`` to the sink, if there is
        one; the notes on how the chat's storing stands."""
        if self.sink is None or key not in self.chat.versions:
            return []
        beside = self.chat.versions[key].turn.answer
        return self._storing_notes(await self.sink.record_compared(key, answer, beside))

    def _storing_notes(self, saving: Saving) -> list[RenderEvent]:
        """Say once that the chat is not being saved, once that it is again, and each thing
        that will not be saved."""
        tr = self.chat.tr
        notes: list[RenderEvent] = [
            Note(in_markdown(msg("Not saved, and it will not be: {what}.", what=what), tr), "error")
            for what in saving.lost
        ]
        if saving.held and not self.unsaved_said:
            notes.append(Note(tr(NOT_SAVED_NOTE), "warning"))
            if self.when_unsaved is not None:
                self.when_unsaved(self)
        elif not saving.held and self.unsaved_said:
            notes.append(Note(tr(SAVED_AGAIN_NOTE), "info"))
        self.unsaved_said = saving.held
        return notes

    def _counts_matter(self, max_tokens: int) -> bool:
        """Whether the conversation's text fills :data:`COUNT_TEXT_ABOVE` of the room an
        answer budget of ``max_tokens`` leaves (estimates where no exact count is known)."""
        counter, chat = self.chat.token_counter, self.chat
        text = sum(counter(t.text) + counter(t.answer) for t in chat.conversation.turns)
        return text >= COUNT_TEXT_ABOVE * (chat.max_model_len - max_tokens)

    async def _learn_token_counts(self, model: str) -> None:
        """Ask the server's tokenizer for the exact counts of the conversation's texts
        not counted yet."""
        counter = self.chat.token_counter
        for turn in list(self.chat.conversation.turns):
            for text in (turn.text, turn.answer):
                if text and not counter.knows(text):
                    count = await self.chat.client.count_text_tokens(model, text)
                    if count is not None:
                        counter.learn(text, count)


class Checkpoints:
    """Saves of one answer while it streams, every ``settings.save_every_s`` seconds, so a
    crash of the app loses at most that much of it.

    Each save runs as a task of its own (the stream never waits on the store) and holds
    the turn as shown so far, still ``pending``; one at a time: a save due while the last
    is still running is skipped. :meth:`settled` waits for the last one, so the turn's
    final record always lands after it.
    """

    def __init__(self, runner: TurnRunner, turn: Turn, shown: Shown) -> None:
        self.runner = runner
        self.turn = turn
        self.shown = shown
        self.every_s = runner.chat.settings.save_every_s
        self._last = time.monotonic()
        self._task: asyncio.Task[list[RenderEvent]] | None = None
        self._words_out = asyncio.Event()

    def begin(self) -> None:
        """Save the turn as it starts (``pending``, its question) in a task of its own, once
        :meth:`words_out` says its first words are out, or :data:`FIRST_WORDS_WAIT_S` after
        this call, whichever comes first. Awaited before the request, the write took 2.5-4.7
        ms of a question's first words; run while the request was out, its CPU still came
        out of them on a loaded machine (docs/benchmarks.md, "The turn stored after its first
        words"). Its notes come with :meth:`due` or :meth:`settled`; no-op while an earlier
        save's notes are not collected yet (a try after the server was found away: the turn
        is stored once)."""
        if self._task is None:
            started = replace(self.turn, images=list(self.turn.images))
            self._task = asyncio.create_task(self._save_start(started))

    async def _save_start(self, started: Turn) -> list[RenderEvent]:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(FIRST_WORDS_WAIT_S):
                await self._words_out.wait()
        return await self.runner._record(self.turn, stored=started)

    def words_out(self) -> None:
        """The answer's first words are drawn (or it ended): the turn as it started is saved now."""
        self._words_out.set()

    def due(self) -> list[RenderEvent]:
        """Start a save if one is due; the notes of a save that has finished since."""
        notes = self._collected()
        if self._task is None and time.monotonic() - self._last >= self.every_s:
            self._last = time.monotonic()
            reasoning, answer = self.shown.texts(None)
            snapshot = replace(self.turn, reasoning=reasoning, answer=answer)
            answer_id = self.shown.answer_id if self.shown.answer_started else None
            self._task = asyncio.create_task(
                self.runner._record(
                    self.turn, answer_id, stored=snapshot, reasoning_id=self.shown.reasoning_id
                )
            )
        return notes

    def _collected(self) -> list[RenderEvent]:
        if self._task is None or not self._task.done():
            return []
        task, self._task = self._task, None
        return task.result() if not task.cancelled() else []

    async def settled(self) -> list[RenderEvent]:
        """Wait for the save in flight, if any (the turn as it started is saved at once if it
        still waits for the first words); its notes."""
        self._words_out.set()
        if self._task is not None:
            await asyncio.wait([self._task])
        return self._collected()


SERVER_POLL_S = 1.0
"""Seconds between two tries of a message while its model server cannot be reached."""


@dataclass(slots=True)
class Attempt:
    """The tries of one answer: its request id, what was planned, the turn's notices not
    said yet, and how long the server was waited for.

    Args:
        wait_s: how long a server that cannot be reached (or is loading) is waited for
            before the answer fails (``Settings.server_back_wait_s``).
        planned: the answer's plan if made before (a Compare's); else made by the first try.
    """

    wait_s: float
    planned: Planned | None = None
    request_id: str = ""
    notices: list[Note] = field(default_factory=list)
    noticed: bool = False
    _since: float | None = None

    def __post_init__(self) -> None:
        planned_id = self.planned.request.request_id if self.planned is not None else ""
        self.request_id = self.request_id or planned_id or new_request_id()

    @property
    def sent(self) -> str | None:
        """The request id once planned (the request is sent, or about to be); else None."""
        return self.request_id if self.planned is not None else None

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
        self.reasoning_id: str | None = None
        """Chainlit id of the reasoning step on the page, while there is one (recorded)."""
        self.answer_started = False
        self.waiting = False
        self.away = False
        """True while the note on screen says the server cannot be reached (not that it
        has not started answering)."""
        self.done: Done | None = None
        self.words_out = False
        """True once the answer's first visible words (or its end) were handed out."""

    @property
    def started(self) -> bool:
        """True once any of the answer (reasoning or text) came."""
        return bool(self.reasoning or self.answer or self.done)

    def on(self, event: StreamEvent | Waiting) -> list[RenderEvent]:
        """The render events for one paced stream event."""
        if isinstance(event, Waiting):
            self.waiting, self.away = True, False
            return [WaitingNote(not_started_note(event.seconds, event.queued, self.chat.tr))]
        if isinstance(event, ReasoningOpened):  # the step shows while the server prepares
            back = self._waiting_over() if self.away else []  # not started: still true
            return [*back, *self._step_open()]
        drawn = self._waiting_over()
        self.words_out = self.words_out or isinstance(event, Done) or visible(event.text)
        if isinstance(event, ReasoningDelta):
            self.reasoning.append(event.text)
            drawn += self._step_open(event.text)
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
            show_stats=chat.shows_stats,
            versions=self._versions(turn),
        )
        drawn: list[RenderEvent] = [finished(self.answer_id, shown, done, ending, chat.tr)]
        referred = referred_images(turn.text, turn.images, chat.conversation.images_before(turn))
        if (referred.images or referred.missing) and turn.answer:
            drawn.append(Marks(self.answer_id, turn.answer, referred.images, referred.missing))
        return [*drawn, TurnEnded(turn.status, turn.answer, turn.reasoning, done)]

    def _versions(self, turn: Turn) -> tuple[Button, ...]:
        """‹ n/m › for the answer of ``turn`` (none for a Compare, or one version)."""
        version = self.chat.version_of(turn)
        if self.compared is not None or version is None:
            return ()
        return version_buttons(self.chat.versions, version.key)

    async def stopped(self, turn: Turn) -> list[RenderEvent]:
        """The end of an answer Stop cut short: what came, marked, with Retry."""
        drawn = [*self._waiting_over(), *self._step_end("stopped")]
        shown = await link_remote_images_off_loop(turn.answer)
        drawn.append(stopped(self.answer_id, shown, self.message_id, self.chat.tr))
        return [*drawn, TurnEnded(turn.status, turn.answer, turn.reasoning)]

    async def failed(
        self, turn: Turn, exc: ChatError, request_id: str, at: datetime
    ) -> list[RenderEvent]:
        """The end of an answer that failed at ``at`` (the app's clock, as its log line):
        what came marked incomplete, and why (with the request's reference,
        :func:`backend.render.reference`)."""
        drawn = [*self._waiting_over(), *self._step_end("failed")]
        if self.answer_started:
            shown = await link_remote_images_off_loop(turn.answer)
            drawn.append(incomplete(self.answer_id, shown, self.chat.tr))
        ref = reference(request_id, at, self.chat.tr)
        drawn.append(error_note(exc, self.message_id, self.chat.tr, ref))
        return [*drawn, TurnEnded(turn.status, turn.answer, turn.reasoning)]

    def _waiting_over(self) -> list[RenderEvent]:
        if not self.waiting:
            return []
        self.waiting = self.away = False
        return [WaitingOver()]

    def _step_open(self, text: str = "") -> list[RenderEvent]:
        """The step opened (if the person sees the reasoning), with ``text`` in it."""
        if not self.show_reasoning:
            return []
        if not self.step_open or self.reasoning_id is None:
            self.reasoning_id = str(uuid.uuid4())
        self.step_open = True
        return [ReasoningText(text, self.reasoning_id)]

    def _step_end(self, ended: StepEnd | Literal["discarded"]) -> list[RenderEvent]:
        """The open step's end; a step that got no reasoning to show (opened as the server
        took the request, then stopped, failed, or answered at once) leaves the page."""
        if not self.step_open:
            return []
        self.step_open = False
        if not any(visible(text) for text in self.reasoning):
            ended = "discarded"
        if ended == "discarded":
            self.reasoning_id = None  # off the page
        return [ReasoningEnd(ended)]
