"""Rendering one answer in Chainlit: the reasoning step, the streamed answer, its buttons.

Every button under an answer (Regenerate, Retry, Retry with more tokens) carries
the id of the person's message it answers in its payload, so it acts on the turn
it sits under, never on "the last one".
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import chainlit as cl

from backend.batching import Pacing, coalesce
from backend.chat import ChatSession, Planned, UploadResult
from backend.client import ChatClient, ServedModel
from backend.conversation import Turn
from backend.errors import ChatError, can_retry
from backend.events import AnswerDelta, Done, ReasoningDelta, Waiting
from backend.i18n import Translator
from backend.presenter import (
    ALREADY_SENT_NOTE,
    DEV_STATS_SUFFIX,
    MORE_TOKENS_LABEL,
    REGENERATE_LABEL,
    RETRY_LABEL,
    SEND_ANYWAY_LABEL,
    TURN_GONE_NOTE,
    cut_off_note,
    incomplete_note,
    no_more_tokens_note,
    not_started_note,
    rerun_note,
    stats_line,
    stopped_note,
    unusable_files_note,
)
from backend.settings import profile_for
from ui import history
from ui.blocks import MessageBlocks
from ui.grounding_view import show_marks
from ui.reasoning_view import ReasoningView

AUTHOR = "Kimi-VL Chat"
"""Author of the app's own notes (not the model's answers)."""


async def say(text: str, actions: list[cl.Action] | None = None) -> None:
    """A short note from the app (not from the model)."""
    await cl.Message(content=text, author=AUTHOR, actions=actions or []).send()


def retry_action(
    message_id: str,
    tr: Translator,
    label: str = RETRY_LABEL,
    max_tokens: int | None = None,
    make_room: bool = False,
) -> cl.Action:
    """A button that answers the turn of the person's message ``message_id`` again.

    ``label``: a msgid (e.g. :data:`backend.presenter.RETRY_LABEL`), shown in ``tr``'s language.

    ``max_tokens``/``make_room``: ask for that answer budget and leave out older
    turns until it fits ("Retry with more tokens").
    """
    payload: dict[str, object] = {"message": message_id}
    if max_tokens:
        payload |= {"max_tokens": max_tokens, "make_room": make_room}
    return cl.Action(name="retry", payload=payload, label=tr(label), icon="refresh-cw")


def compare_action(message_id: str, other: ServedModel, tr: Translator) -> cl.Action:
    """A button that asks ``other`` the turn of the person's message ``message_id``."""
    label = tr("Compare with {model}", model=tr.text(profile_for(other.id).label))
    payload = {"message": message_id, "model": other.id}
    return cl.Action(name="compare", payload=payload, label=label, icon="columns-2")


async def run_turn(
    session: ChatSession,
    message_id: str,
    turn: Turn,
    max_tokens: int | None = None,
    make_room: bool = False,
) -> None:
    """Stream one answer: reasoning into a collapsible step, then the answer message.

    ``max_tokens``/``make_room``: as :meth:`ChatSession.plan_request`. The answer
    message is created at its first token, so it sits below the step. A Stop
    after the answer finished changes nothing.
    """
    tr = session.tr
    try:
        planned = await session.plan_request(turn, max_tokens, make_room=make_room)
    except ChatError as exc:
        turn.status = "failed"
        retry = [retry_action(message_id, tr)] if can_retry(exc) else None
        await say("⚠️ " + tr.text(exc.message), retry)
        return
    await stream_answer(session, message_id, turn, planned)


async def hold_draft(
    session: ChatSession, message_id: str, text: str, prepared: UploadResult, typed: str
) -> None:
    """Keep back a message some of whose files could not be used (``prepared.problems``)
    and say which; a "Send anyway" button under the note sends the rest, when the person
    typed something (``typed``) or some images could be used."""
    session.keep_draft(message_id, text, prepared.images)
    can_send = bool(typed.strip() or prepared.images)
    label = session.tr(SEND_ANYWAY_LABEL)
    send = cl.Action(name="send_anyway", payload={"message": message_id}, label=label)
    note = unusable_files_note(prepared.problems, can_send, session.tr)
    await say(note, [send] if can_send else None)


async def send_draft(session: ChatSession, message_id: str) -> None:
    """Send the kept draft of ``message_id`` (only the files that could be used)."""
    draft = session.take_draft(message_id)
    if draft is None:
        await say("ℹ️ " + session.tr(ALREADY_SENT_NOTE))
        return
    await run_turn(session, message_id, session.start_turn(message_id, draft.text, draft.images))


async def rerun_turn(
    session: ChatSession,
    message_id: str,
    button: cl.Action,
    max_tokens: int | None = None,
    make_room: bool = False,
) -> None:
    """Answer again the turn of ``message_id`` (Retry, Regenerate, more tokens).

    An older turn is answered with the history up to it (later turns leave the
    conversation the model sees, as with an edit), and a note says so.
    """
    found = session.rerun(message_id)
    if found is None:
        await say("ℹ️ " + session.tr(TURN_GONE_NOTE))
        return
    await button.remove()
    turn, later_turns = found
    if later_turns:
        await say(rerun_note(turn.text, later_turns, session.tr))
    await run_turn(session, message_id, turn, max_tokens, make_room)


async def run_compare(
    session: ChatSession, message_id: str, other: ServedModel, client: ChatClient
) -> None:
    """Ask ``other`` the turn of ``message_id`` (same images and history) and show its
    answer next, labelled with the model, with its own stats line."""
    tr = session.tr
    try:
        found = session.compare_plan(message_id, other)
    except ChatError as exc:
        await say("⚠️ " + tr.text(exc.message))
        return
    if found is None:
        await say("ℹ️ " + tr(TURN_GONE_NOTE))
        return
    turn, planned = found
    label = tr.text(profile_for(other.id).label)
    await stream_answer(session, message_id, turn, planned, client, label)


async def stream_answer(
    session: ChatSession,
    message_id: str,
    turn: Turn,
    planned: Planned,
    client: ChatClient | None = None,
    compared: str | None = None,
) -> None:
    """Stream a planned answer into the reasoning step and the answer message.

    ``client``/``compared``: another model's server and label (Compare): the
    answer is labelled with it and gets no buttons of its own.
    """
    tr = session.tr
    for notice in planned.notices:
        await say("ℹ️ " + tr.text(notice))
    show_reasoning = session.options is None or session.options.show_reasoning
    heading = tr("**{model}** (compare):", model=compared) if compared else ""
    answer = MessageBlocks(compared, heading)  # a compared model's answer is authored by it
    reasoning = ReasoningView(tr=tr)
    waiting = WaitingNote()
    pacing = Pacing(
        first_token_timeout_s=session.settings.first_token_timeout_s,
        idle_timeout_s=session.settings.idle_timeout_s,
    )
    model = planned.request.model

    server = client or session.client

    async def queued() -> int | None:
        return await server.queued_requests(model)

    stream = coalesce(session.respond(turn, planned.request, client), pacing, queued)
    done: Done | None = None
    turn.status = "pending"
    await history.save_turn(session, turn)  # a no-op without sign-in, or for a Compare
    try:
        async with aclosing(stream) as events:
            async for event in events:
                if isinstance(event, Waiting):
                    await waiting.show(not_started_note(event.seconds, event.queued, tr))
                    continue
                await waiting.remove()
                if isinstance(event, ReasoningDelta):
                    if show_reasoning:
                        await reasoning.add(event.text)
                elif isinstance(event, AnswerDelta):
                    await reasoning.close()
                    await answer.add(event.text)
                elif isinstance(event, Done):
                    done = event
                    if event.answer_in_reasoning:
                        await reasoning.discard()  # no marker came: that text was the answer
                        await answer.add(turn.answer)
                    await reasoning.close()
                    await finish_answer(answer, message_id, turn, event, planned, session, compared)
    except asyncio.CancelledError:
        await waiting.remove()
        if turn.status in ("done", "cut_off"):
            raise  # finished is finished: a late Stop changes nothing
        await reasoning.close("stopped")
        await answer.end(lambda tail: stopped_note(tail, tr), [retry_action(message_id, tr)])
        raise
    except ChatError as exc:
        turn.status = "failed"
        await waiting.remove()
        await reasoning.close("failed")
        if answer.id is not None:
            await answer.end(lambda tail: incomplete_note(tail, tr), [])
        retry = [retry_action(message_id, tr)] if can_retry(exc) else None
        await say("⚠️ " + tr.text(exc.message), retry)
    finally:
        await history.save_turn(session, turn, done, answer.id)


class WaitingNote:
    """The app's note while the server has not started answering; one message, updated."""

    def __init__(self) -> None:
        self._message: cl.Message | None = None

    async def show(self, text: str) -> None:
        """Send the note, or update it if it is on screen."""
        if self._message is None:
            self._message = cl.Message(content=text, author=AUTHOR)
            await self._message.send()
        else:
            self._message.content = text
            await self._message.update()

    async def remove(self) -> None:
        """Take the note off the screen (the answer started, or ended)."""
        if self._message is not None:
            message, self._message = self._message, None
            await message.remove()


async def finish_answer(
    answer: MessageBlocks,
    message_id: str,
    turn: Turn,
    done: Done,
    planned: Planned,
    session: ChatSession,
    compared: str | None = None,
) -> None:
    """End the answer message: stats line, cut-off note, its buttons.

    ``compared``: the label of the other model a Compare asked; its answer has
    no buttons.
    """
    lines: list[str] = []
    tr = session.tr
    actions = [retry_action(message_id, tr, REGENERATE_LABEL)]
    actions += [compare_action(message_id, other, tr) for other in session.others]
    if done.finish_reason == "length":
        max_tokens = planned.request.max_tokens
        cut_off = cut_off_note(max_tokens, in_reasoning=done.reasoning_unclosed, tr=tr)
        lines.append(f"⚠️ {cut_off}")
        actions = [retry_action(message_id, tr)]
        if planned.more_tokens:
            more = retry_action(message_id, tr, MORE_TOKENS_LABEL, planned.more_tokens, True)
            actions.insert(0, more)
        else:
            lines.append(f"ℹ️ {no_more_tokens_note(max_tokens, session.max_model_len, tr)}")
    stats = stats_line(done, tr)
    if session.settings.dev_mode:
        stats += " · " + tr(DEV_STATS_SUFFIX)
    if compared:
        stats = f"{compared} · {stats}"
        actions = []
    lines.append(f"*{stats}*")
    await answer.end(lambda tail: "\n\n".join([tail, *lines] if tail else lines), actions)
    await show_marks(turn.answer, turn.images, session.workers, tr)  # drawn on a copy, below
