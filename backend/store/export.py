"""Export a chat as one self-contained HTML file.

The file needs nothing else to open, online or not: the images are the prepared
copies the model saw, inline as ``data:`` URLs; the style is inline; there is no
script at all. Each answer's reasoning sits in a collapsed ``<details>`` titled
"Thought for N.Ns", followed by the answer, its stats line and how it ended; the
head names the model and the sampling options.

Everything that comes from a person or the model is escaped (``html.escape``
with quotes), and the page's Content-Security-Policy allows no script and no
request except ``data:`` images: a ``<script>`` in an answer shows as text and
could not run even if it slipped through. Answers are shown as their Markdown
source (``white-space: pre-wrap``), not rendered.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from backend.i18n import ENGLISH, Translator, msg
from backend.record import TurnRecord
from backend.timings import stats_line, thought_label

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
.text, .answer, .reasoning { white-space: pre-wrap; overflow-wrap: anywhere; }
details { margin: .75rem 0; color: #555; }
summary { cursor: pointer; }
.reasoning { border-left: 3px solid #ccc; padding-left: .75rem; }
.stats, .note { color: #666; font-size: 13px; margin-top: .5rem; }
"""

INTERRUPTED_NOTE: Final = msg("Interrupted: the app stopped before this answer ended.")

_ENDINGS: Final = {
    "stopped": msg("Stopped before the end."),
    "cut_off": msg("Cut off: the answer reached its token limit."),
    "failed": msg("The answer failed."),
}


@dataclass(frozen=True, slots=True)
class ChatExport:
    """What an export shows.

    Attributes:
        title: the chat's name (the first message, as Chainlit names threads).
        model: label of the model (e.g. "Kimi-VL Thinking (2506)").
        options: sampling options of the last turn (temperature, top_p, max_tokens, ...).
        records: the stored turns, oldest first.
        exported_at: when, as text (e.g. ISO 8601).
        sign_in_url: set for a shared chat's public page (``ui/share.py``): the
            time is labelled "Shared" and the page ends with a link to sign in
            (a relative URL of the app, e.g. ``"/login?next=/share/<id>"``).
    """

    title: str
    model: str
    options: dict[str, Any]
    records: Sequence[TurnRecord]
    exported_at: str
    sign_in_url: str | None = None


def _e(value: object) -> str:
    return html.escape(str(value), quote=True)


def _turn(record: TurnRecord, tr: Translator) -> str:
    turn = record.turn
    parts = ['<section class="turn">', '<div class="user">']
    for image in turn.images:
        # The data URL is base64 of our own encoder's bytes; escaped all the same.
        parts.append(f'<img src="{_e(image.data_url)}" alt="{_e(image.name)}">')
    parts.append(f'<div class="text">{_e(turn.text)}</div></div>')
    if turn.reasoning:
        label = (
            thought_label(record.reasoning_s, tr=tr)
            if record.reasoning_s is not None
            else tr("Thought")
        )
        parts.append(
            f"<details><summary>{_e(label)}</summary>"
            f'<div class="reasoning">{_e(turn.reasoning)}</div></details>'
        )
    if turn.answer:
        parts.append(f'<div class="answer">{_e(turn.answer)}</div>')
    if record.interrupted:
        parts.append(f'<div class="note">{_e(tr(INTERRUPTED_NOTE))}</div>')
    elif turn.status in _ENDINGS:
        parts.append(f'<div class="note">{_e(tr(_ENDINGS[turn.status]))}</div>')
    stats = _stats(record, tr)
    if stats:
        parts.append(f'<div class="stats">{_e(stats)}</div>')
    parts.append("</section>")
    return "\n".join(parts)


def _stats(record: TurnRecord, tr: Translator) -> str:
    """The stats line: made from the stored numbers in ``tr``'s language, or, for a turn
    stored before numbers were (it has only its reasoning time), the line as it was shown."""
    if record.legacy_stats:
        return record.legacy_stats
    timings = record.timings
    return stats_line(timings, tr) if timings is not None and timings.elapsed_s is not None else ""


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
        f"<dt>{_e(name)}</dt><dd>{_e(value)}</dd>" for name, value in chat.options.items()
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
            *(_turn(record, tr) for record in chat.records),
            sign_in,
            "</body></html>",
            "",
        ]
    )
