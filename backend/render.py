"""Render events: what a front end draws of a turn, as plain values.

The turn runner (:mod:`backend.turn_runner`) yields these; ``ui/answer.py`` draws
each one with Chainlit and decides nothing; the CLI prints the texts. Every
sentence in them is already in the chat's language. Buttons carry the id of the
person's message they act on, so a button acts on the turn it sits under.

The functions below make the events that end an answer (its final text and
buttons, a stopped or broken answer, an error note) from the turn's data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from backend.client import ServedModel
from backend.conversation import TurnStatus
from backend.errors import ChatError, can_retry
from backend.events import Done
from backend.families import family_for
from backend.i18n import Message, Translator
from backend.images import PreparedImage
from backend.presenter import (
    DEV_STATS_SUFFIX,
    MORE_TOKENS_LABEL,
    REGENERATE_LABEL,
    RETRY_LABEL,
    SEND_ANYWAY_LABEL,
    cut_off_note,
    in_markdown,
    incomplete_note,
    no_more_tokens_note,
    stopped_note,
    too_long_note,
    unusable_files_note,
)
from backend.timings import StepEnd, Timings, stats_line
from backend.versions import Versions


@dataclass(frozen=True, slots=True)
class Button:
    """A button under a message: ``kind`` names what it does (Chainlit's action name),
    ``payload`` says on what (the person's message id as ``"message"``; for ‹ and › the
    version to show as ``"version"``)."""

    kind: Literal["retry", "compare", "send_anyway", "version"]
    label: str
    payload: dict[str, Any] = field(hash=False)
    icon: str = ""


@dataclass(frozen=True, slots=True)
class Note:
    """A note from the app (not from the model). ``level``: ``info`` and ``warning`` get
    their sign when drawn (an icon, drawn by the page: not an emoji, which a machine
    without an emoji font shows as a box), ``error`` is a failure said as a warning,
    ``fork`` says that an older turn is answered again (drawn as ``info``; the page
    brings it into view, the new answer under it), ``plain`` is drawn as it is."""

    text: str
    level: Literal["info", "warning", "error", "fork", "plain"] = "info"
    buttons: tuple[Button, ...] = ()


@dataclass(frozen=True, slots=True)
class WaitingNote:
    """The server has taken the request but sent no text yet: show or update the note."""

    text: str


@dataclass(frozen=True, slots=True)
class WaitingOver:
    """Take the waiting note off the screen (the answer started, or ended)."""


@dataclass(frozen=True, slots=True)
class ReasoningText:
    """More reasoning: the step opens at the first (expanded), then grows.

    Attributes:
        text: the reasoning's next piece ("" at the step's opening, "Thinking…").
        step_id: the Chainlit id of the reasoning step it goes in (the turn's record names
            it, :attr:`backend.record.TurnRecord.reasoning_id`): a new one at each opening.
    """

    text: str
    step_id: str


@dataclass(frozen=True, slots=True)
class ReasoningEnd:
    """The open reasoning step ends (its title says how), or is ``discarded``: what
    streamed into it was the answer."""

    ended: StepEnd | Literal["discarded"]


@dataclass(frozen=True, slots=True)
class AnswerText:
    """More of the answer ``answer_id`` (created at its first text, below the step);
    ``author``: a compared model's label, else the model's own name is used."""

    answer_id: str
    text: str
    author: str | None = None


@dataclass(frozen=True, slots=True)
class AnswerEnd:
    """The answer message ``answer_id`` as it stays (created now if no text streamed into
    it): ``content`` is the answer exactly as shown (what Copy copies), ``footer`` what the
    app says under it (how it ended, the stats line), drawn apart with the ``buttons``."""

    answer_id: str
    content: str
    buttons: tuple[Button, ...] = ()
    author: str | None = None
    footer: str = ""


@dataclass(frozen=True, slots=True)
class Marks:
    """Draw what ``answer`` points at on ``images`` (the grounding overlay, under answer
    ``answer_id`` and before its buttons): the turn's own, or the chat's image a question
    without images refers to (:func:`backend.grounding.referred_images`)."""

    answer_id: str
    answer: str
    images: tuple[PreparedImage, ...]
    missing: Message | None = None
    """Why there is no image to draw on: the question names one the chat does not have
    (:attr:`backend.grounding.Referred.missing`)."""


@dataclass(frozen=True, slots=True)
class ButtonUsed:
    """The button that started this (Retry, Regenerate...) is used up: remove it."""


@dataclass(frozen=True, slots=True)
class TurnsGone:
    """The turns after the one of the person's message ``message_id`` left the
    conversation (Regenerate on an older answer): take them off the screen, so that the
    new answer comes under that message."""

    message_id: str


@dataclass(frozen=True, slots=True)
class ButtonsUnder:
    """Put ``buttons`` under the existing message ``message_id`` (a resumed chat's last answer)."""

    message_id: str
    buttons: tuple[Button, ...]


@dataclass(frozen=True, slots=True)
class TextBack:
    """Put ``text`` back in the message box: its message was kept back, not sent."""

    text: str


@dataclass(frozen=True, slots=True)
class TurnEnded:
    """The turn is over and recorded; nothing to draw (the CLI reads how it ended)."""

    status: TurnStatus
    answer: str
    reasoning: str
    done: Done | None = None


RenderEvent = (
    Note
    | WaitingNote
    | WaitingOver
    | ReasoningText
    | ReasoningEnd
    | AnswerText
    | AnswerEnd
    | Marks
    | ButtonUsed
    | TurnsGone
    | ButtonsUnder
    | TextBack
    | TurnEnded
)
"""Everything the turn runner yields."""


def retry_button(
    message_id: str,
    tr: Translator,
    label: str = RETRY_LABEL,
    max_tokens: int | None = None,
    make_room: bool = False,
) -> Button:
    """A button that answers the turn of the person's message ``message_id`` again.

    ``label``: a msgid (e.g. :data:`backend.presenter.RETRY_LABEL`), shown in ``tr``'s
    language. ``max_tokens``/``make_room``: ask for that answer budget and leave out
    older turns until it fits ("Retry with more tokens").
    """
    payload: dict[str, Any] = {"message": message_id}
    if max_tokens:
        payload |= {"max_tokens": max_tokens, "make_room": make_room}
    return Button("retry", tr(label), payload, "refresh-cw")


def compare_button(message_id: str, other: ServedModel, tr: Translator) -> Button:
    """A button that asks ``other`` the turn of the person's message ``message_id``."""
    label = tr("Compare with {model}", model=tr.text(family_for(other.id).label))
    return Button("compare", label, {"message": message_id, "model": other.id}, "columns-2")


def draft_kept(
    message_id: str, problems: list[str], can_send: bool, text_back: bool, tr: Translator
) -> Note:
    """The note under a message kept back because some of its files could not be used,
    with "Send without them" when something is left to send; ``text_back``: its text is
    put back in the message box too (:class:`TextBack`)."""
    send = Button("send_anyway", tr(SEND_ANYWAY_LABEL), {"message": message_id})
    note = unusable_files_note(problems, can_send, text_back, tr)
    return Note(note, "warning", (send,) if can_send else ())


def error_note(exc: ChatError, message_id: str | None, tr: Translator, ref: str = "") -> Note:
    """Say what failed, with Retry when sending the same again may work (``message_id``: the
    turn Retry answers again; None: no Retry) and ``ref`` (:func:`reference`) below."""
    retry = (retry_button(message_id, tr),) if message_id and can_retry(exc) else ()
    text = in_markdown(exc.message, tr)
    return Note(f"{text}\n\n{ref}" if ref else text, "error", retry)


def short_ref(request_id: str) -> str:
    """A request id as a person reads it out: ``chat-`` and the first 6 hex digits of the
    id (``chat-1a2b3c``), enough to find its lines in app.log and llm.log, which hold
    the whole id."""
    prefix, _, digits = request_id.partition("-")
    return f"{prefix}-{digits[:6]}" if digits else request_id[:11]


def reference(request_id: str, at: datetime, tr: Translator) -> str:
    """The quiet line under an error note that a person can read to the operator: the
    request's short id and the time of the failure on the app's clock (app.log's), e.g.
    ``*ref chat-1a2b3c, 14:03:07*``."""
    ref = tr("ref {ref}, {time}", ref=short_ref(request_id), time=at.strftime("%H:%M:%S"))
    return f"*{ref}*"


def merged(notes: list[Note]) -> Note:
    """One note saying what ``notes`` (info notes of one turn, at least one) say, one
    paragraph each, with their buttons."""
    text = "\n\n".join(note.text for note in notes)
    return Note(text, notes[0].level, tuple(b for note in notes for b in note.buttons))


@dataclass(frozen=True, slots=True)
class Ending:
    """What a finished answer's last message needs to know besides the turn itself.

    Attributes:
        message_id: the person's message the answer's buttons act on.
        max_tokens: the request's answer budget (named in a cut-off note).
        more_tokens: the budget "Retry with more tokens" offers, or None.
        max_model_len: the model's max model length (a note says why no more fit).
        others: other served models, one Compare button each.
        compared: the label of the other model a Compare asked (its answer has no buttons).
        dev_mode: the stats line says the text is noise.
        show_stats: the answer ends with its line of timings (the settings panel's
            "Timings under answers"); without it, a dev answer still says it is noise.
        versions: ‹ n/m › of a turn with other versions (:func:`version_buttons`).
    """

    message_id: str
    max_tokens: int
    more_tokens: int | None
    max_model_len: int
    others: tuple[ServedModel, ...] = ()
    compared: str | None = None
    dev_mode: bool = False
    show_stats: bool = True
    versions: tuple[Button, ...] = ()


def version_buttons(versions: Versions, key: str) -> tuple[Button, ...]:
    """‹ n/m › under the answer of version ``key`` when its turn has other versions
    (Regenerate, Edit): two buttons that show the version before and after it (going
    round); none for a turn of one version."""
    n, count = versions.place(key)
    if count < 2:
        return ()
    earlier, later = versions.neighbours(key)
    return (
        Button("version", f"‹ {n}/{count}", {"version": earlier}),
        Button("version", "›", {"version": later}),
    )


def finished(answer_id: str, shown: str, done: Done, ending: Ending, tr: Translator) -> AnswerEnd:
    """The answer as it stays: its text (``shown``: the answer with remote images made
    links, :func:`backend.safety.link_remote_images`), a cut-off note, the stats line and
    its buttons."""
    lines: list[str] = []  # under the answer
    message_id = ending.message_id
    buttons = [retry_button(message_id, tr, REGENERATE_LABEL)]
    buttons += [compare_button(message_id, other, tr) for other in ending.others]
    if done.finish_reason == "length":
        cut_off = cut_off_note(ending.max_tokens, in_reasoning=done.reasoning_unclosed, tr=tr)
        lines.append(f"*{cut_off}*")
        buttons = [retry_button(message_id, tr)]
        if ending.more_tokens:
            more = retry_button(message_id, tr, MORE_TOKENS_LABEL, ending.more_tokens, True)
            buttons.insert(0, more)
        else:
            lines.append(f"*{no_more_tokens_note(ending.max_tokens, ending.max_model_len, tr)}*")
    if done.cut_at_chars:
        lines.append(f"*{too_long_note(done.cut_at_chars, tr)}*")
    said = [stats_line(Timings.from_done(done), tr)] if ending.show_stats else []
    if ending.dev_mode:
        said.append(tr(DEV_STATS_SUFFIX))
    buttons += ending.versions
    if ending.compared:  # its column is titled with the model (ui/compare_view.py)
        buttons = []  # a Compare has no buttons
    if said:
        lines.append("*" + " · ".join(said) + "*")
    return AnswerEnd(answer_id, shown, tuple(buttons), ending.compared, "\n\n".join(lines))


def stopped(answer_id: str, shown: str, message_id: str, tr: Translator) -> AnswerEnd:
    """The answer left by Stop: what came (``shown``, as in :func:`finished`), marked as
    stopped, with Retry."""
    return AnswerEnd(
        answer_id, shown, (retry_button(message_id, tr),), None, stopped_note(bool(shown), tr)
    )


def incomplete(answer_id: str, shown: str, tr: Translator) -> AnswerEnd:
    """The answer of a stream that broke: what came (``shown``, as in :func:`finished`),
    marked as incomplete."""
    return AnswerEnd(answer_id, shown, footer=incomplete_note(tr))
