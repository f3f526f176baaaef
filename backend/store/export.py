"""Export a chat as one self-contained HTML file that reads as the chat looks.

The file needs nothing else to open, online or not: the images are the prepared
copies the model saw, inline as ``data:`` URLs; the style is inline; there is no
script at all. Each answer's reasoning sits in a collapsed ``<details>`` titled
"Thought for N.Ns", followed by the answer rendered as the chat renders it
(Markdown, code blocks, math as MathML: :mod:`backend.markdown_html`), its stats
line and how it ended; then the other models' answers to the same turn (Compare),
labelled as in the chat, and the copies of the turn's images with the answer's
points and boxes drawn on them. The head names the model and the sampling options.

The model's text is kept exactly as it came: only its rendering differs from the
Markdown source. Everything that comes from a person or the model is escaped (the
person's text with ``html.escape``; Markdown with raw HTML off), and the page's
Content-Security-Policy allows no script and no request except ``data:`` images: a
``<script>`` in an answer shows as text and could not run even if it slipped through.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from backend.conversation import Turn
from backend.families import family_for
from backend.grounding import caption, overlays, referred_images
from backend.i18n import ENGLISH, Translator, msg
from backend.images import PreparedImage
from backend.markdown_html import to_html
from backend.record import ComparedAnswer, TurnRecord
from backend.safety import escape_markdown
from backend.timings import Timings, stats_line, stored_thought_label

CONTENT_SECURITY_POLICY: Final = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

_STYLE: Final = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 52rem; margin: 2rem auto; padding: 0 1rem;
       color: #1a1a1a; background: #fff; }
header { border-bottom: 1px solid #ddd; margin-bottom: 1.5rem; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 0 1rem; }
dt { color: #666; }
.turn { margin-bottom: 2rem; }
.user { background: #f1f3f5; border-radius: 12px; padding: .75rem 1rem; }
.user img { max-width: 100%; max-height: 24rem; display: block; margin: .5rem 0; }
.text { white-space: pre-wrap; overflow-wrap: anywhere; }
.answer, .reasoning { overflow-wrap: anywhere; }
.answer > :first-child, .reasoning > :first-child { margin-top: .5rem; }
details { margin: .75rem 0; color: #555; }
summary { cursor: pointer; }
.reasoning { border-left: 3px solid #ccc; padding-left: .75rem; }
.stats, .note { color: #666; font-size: 13px; margin-top: .5rem; }
.stats { font-style: italic; }
.compared { border-top: 1px dashed #ccc; margin-top: 1rem; padding-top: .5rem;
            display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 0 1.5rem; }
.compared .label { font-weight: 600; }
@media (max-width: 640px) { .compared { grid-template-columns: minmax(0, 1fr); }
                            .compared .column + .column { margin-top: 1rem; } }
pre { background: #f6f8fa; border: 1px solid #e1e4e8; border-radius: 8px; padding: .75rem;
      overflow-x: auto; }
code { font: 13px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
:not(pre) > code { background: #f1f3f5; border-radius: 4px; padding: .1em .3em; }
table { border-collapse: collapse; } th, td { border: 1px solid #ddd; padding: .3rem .6rem; }
math[display="block"] { margin: .75rem 0; font-size: 1.15em; }
figure { margin: 1rem 0; } figure img { max-width: 100%; display: block; }
figcaption { color: #555; font-size: 13px; margin-bottom: .25rem; }
"""

INTERRUPTED_NOTE: Final = msg("Interrupted: the app stopped before this answer ended.")

_ENDINGS: Final = {
    "stopped": msg("Stopped before the end."),
    "cut_off": msg("Cut off: the answer reached its token limit."),
    "failed": msg("The answer failed."),
}


@dataclass(frozen=True, slots=True)
class MarkedCopy:
    """A copy of one of a turn's images with an answer's points and boxes drawn on it,
    as the chat showed it under that answer.

    Attributes:
        caption: the line above it (Markdown, from :func:`backend.grounding.caption`).
        data_url: the drawn copy, ``data:image/png;base64,...`` or ``image/jpeg``.
    """

    caption: str
    data_url: str


def answer_key(message_id: str, compared: str | None = None) -> str:
    """The key of an answer in :attr:`ChatExport.marked`: the turn's own answer
    (``compared`` None) or another model's, by its label."""
    return f"{message_id}\n{compared or ''}"


@dataclass(frozen=True, slots=True)
class ChatExport:
    """What an export shows.

    Attributes:
        title: the chat's name (the first message, as Chainlit names threads).
        model: label of the model (e.g. "Kimi-VL Thinking (2506)").
        options: sampling options of the last turn (temperature, top_p, max_tokens, ...).
        records: the stored turns, oldest first (with their Compare answers, if any).
        exported_at: when, as text (e.g. ISO 8601).
        sign_in_url: set for a shared chat's public page (``ui/share.py``): the
            time is labelled "Shared" and the page ends with a link to sign in
            (a relative URL of the app, e.g. ``"/login?next=/share/<id>"``).
        marked: the drawn copies under each answer, by :func:`answer_key`.
    """

    title: str
    model: str
    options: dict[str, Any]
    records: Sequence[TurnRecord]
    exported_at: str
    sign_in_url: str | None = None
    marked: Mapping[str, Sequence[MarkedCopy]] = field(default_factory=dict)


def marked_copies(
    records: Sequence[TurnRecord], tr: Translator = ENGLISH
) -> dict[str, list[MarkedCopy]]:
    """The drawn copies the chat shows under each answer of ``records`` (the turn's own
    and its Compare answers), by :func:`answer_key`, captions in ``tr``'s language.
    Decodes and draws images (tens to hundreds of ms each,
    :func:`backend.grounding.overlays`): call it off the event loop."""
    marked: dict[str, list[MarkedCopy]] = {}
    earlier: list[PreparedImage] = []  # the chat's images before this turn
    for record in records:
        images = referred_images(record.turn.text, record.turn.images, earlier).images
        earlier += record.turn.images
        answers: list[tuple[str | None, str]] = [(None, record.turn.answer)]
        answers += [(c.label, c.turn.answer) for c in record.compared]
        for label, answer in answers:
            if not images or not answer:
                continue
            drawn, _ = overlays(answer, images)
            copies = [
                MarkedCopy(
                    caption(images[o.image].name, o.marks, tr),
                    f"data:{o.mime};base64,{base64.b64encode(o.content).decode('ascii')}",
                )
                for o in drawn
            ]
            if copies:
                marked[answer_key(record.message_id, label)] = copies
    return marked


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _turn(
    record: TurnRecord, marked: Mapping[str, Sequence[MarkedCopy]], tr: Translator, model: str
) -> str:
    """One turn: the question, its answer, then each Compare as two labelled columns (the
    turn's answer, labelled with its model, else ``model``, and the other model's)."""
    turn = record.turn
    parts = ['<section class="turn">', '<div class="user">']
    for image in turn.images:
        # The data URL is base64 of our own encoder's bytes; escaped all the same.
        parts.append(f'<img src="{_e(image.data_url)}" alt="{_e(image.name)}">')
    parts.append(f'<div class="text">{_e(turn.text)}</div></div>')
    parts += _answer(turn, record.reasoning_s, tr)
    if record.interrupted:
        parts.append(f'<div class="note">{_e(tr(INTERRUPTED_NOTE))}</div>')
    elif turn.status in _ENDINGS:
        parts.append(f'<div class="note">{_e(tr(_ENDINGS[turn.status]))}</div>')
    stats = _stats(record, tr)
    if stats:
        parts.append(f'<div class="stats">{_e(stats)}</div>')
    parts += _marked(marked.get(answer_key(record.message_id), ()))
    for compared in record.compared:  # as the chat shows a Compare: two labelled columns
        parts.append('<div class="compared">')
        label = tr.text(family_for(record.model).label) if record.model else model
        own = ComparedAnswer(label, turn, record.timings)
        for column in (own, compared):
            parts.append('<div class="column">')
            parts.append(f'<div class="label">{_e(column.label)}</div>')
            parts += _answer(column.turn, _reasoning_s(column.timings), tr)
            if column.turn.status in _ENDINGS:
                parts.append(f'<div class="note">{_e(tr(_ENDINGS[column.turn.status]))}</div>')
            if column.timings is not None and column.timings.elapsed_s is not None:
                line = f"{column.label} · {stats_line(column.timings, tr)}"
                parts.append(f'<div class="stats">{_e(line)}</div>')
            if column is compared:
                parts += _marked(marked.get(answer_key(record.message_id, compared.label), ()))
            parts.append("</div>")
        parts.append("</div>")
    parts.append("</section>")
    return "\n".join(parts)


def _reasoning_s(timings: Timings | None) -> float | None:
    return timings.reasoning_s if timings is not None else None


def _answer(turn: Turn, reasoning_s: float | None, tr: Translator) -> list[str]:
    """The reasoning step (folded) and the answer, rendered."""
    parts = []
    if turn.reasoning:
        parts.append(
            f"<details><summary>{_e(stored_thought_label(reasoning_s, tr))}</summary>"
            f'<div class="reasoning">{to_html(turn.reasoning)}</div></details>'
        )
    if turn.answer:
        parts.append(f'<div class="answer">{to_html(turn.answer)}</div>')
    return parts


def _marked(copies: Sequence[MarkedCopy]) -> list[str]:
    return [
        f"<figure><figcaption>{to_html(copy.caption)}</figcaption>"
        f'<img src="{_e(copy.data_url)}" alt=""></figure>'
        for copy in copies
    ]


def _stats(record: TurnRecord, tr: Translator) -> str:
    """The stats line: made from the stored numbers in ``tr``'s language, or, for a turn
    stored before numbers were (it has only its reasoning time), the line as it was shown."""
    if record.legacy_stats:
        return record.legacy_stats
    timings = record.timings
    return stats_line(timings, tr) if timings is not None and timings.elapsed_s is not None else ""


def _turns(chat: ChatExport, tr: Translator) -> list[str]:
    """Each turn, with the chat's note where another model took over (a switch)."""
    parts, model = [], None
    for record in chat.records:
        if model is not None and record.model is not None and record.model != model:
            label = tr.text(family_for(record.model).label)
            # The chat's note there (backend/presenter.py, model_switched_note).
            switched = tr(
                "{model} answers from here on, with the conversation so far.",
                model=escape_markdown(label),
            )
            parts.append(f'<div class="note">{to_html(switched)}</div>')
        model = record.model or model
        parts.append(_turn(record, chat.marked, tr, chat.model))
    return parts


OPTION_LABELS: Final = {
    "temperature": msg("Temperature"),
    "top_p": msg("Top p"),
    "max_tokens": msg("Max tokens"),
}
"""The sampling options the head names, by the settings panel's labels (backend/panel.py),
not their keys; the others (what the page shows) are not the model's settings."""


def export_html(chat: ChatExport, tr: Translator = ENGLISH) -> str:
    """The whole chat as one HTML document (UTF-8 text) in ``tr``'s language; see the
    module docstring. (Stats lines stored as text by older versions stay as they were.)"""
    model = _e(tr("Model"))
    exported = _e(tr("Shared") if chat.sign_in_url is not None else tr("Exported"))
    sign_in = ""
    if chat.sign_in_url is not None:
        link = _e(tr("Sign in"))
        sign_in = f'<p class="note"><a href="{_e(chat.sign_in_url)}">{link}</a></p>'

    settings = "".join(
        f"<dt>{_e(tr(label))}</dt><dd>{_e(chat.options[key])}</dd>"
        for key, label in OPTION_LABELS.items()
        if key in chat.options
    )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            f'<html lang="{_e(tr.locale)}"><head><meta charset="utf-8">',
            f'<meta http-equiv="Content-Security-Policy" content="{CONTENT_SECURITY_POLICY}">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{_e(chat.title)}</title><style>{_STYLE}</style></head><body>",
            f"<header><h1>{_e(chat.title)}</h1><dl><dt>{model}</dt><dd>{_e(chat.model)}</dd>",
            f"{settings}<dt>{exported}</dt><dd>{_e(chat.exported_at)}</dd></dl></header>",
            *_turns(chat, tr),
            sign_in,
            "</body></html>",
            "",
        ]
    )
