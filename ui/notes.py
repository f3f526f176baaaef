"""The app's notes on the page: which kind each is, told by its message id.

A note (a message from the app, not from the model) gets its sign from the page's
stylesheet, not from an emoji in its text: a machine without an emoji font shows
emoji as boxes. The kind travels in the last group of the message's id
(:data:`NOTE_MARKS`), which Chainlit puts on the page as ``#step-<id>`` and keeps
with a stored chat, so a resumed chat's notes keep their signs.
"""

from __future__ import annotations

import uuid
from typing import Final, Literal

AUTHOR: Final = "Kimi-VL Chat"
"""Author of the app's own messages (its notes, the grounding overlays; not the model's
answers)."""

NoteKind = Literal["info", "warning", "error", "waiting", "fork", "plain"]

NOTE_MARKS: Final[dict[NoteKind, str]] = {
    "info": "00000000a001",
    "warning": "00000000a002",
    "error": "00000000a003",
    "waiting": "00000000a004",
    "fork": "00000000a005",
}
"""The last group of a note's message id by its kind (public/style.css draws the kind's
sign before the note; a ``fork`` note, which says that an older turn is answered again,
has the ``info`` sign, and public/ux.js brings it into view). Hex digits, so the id is
still a UUID (PostgreSQL's data layer stores step ids as UUIDs). A ``plain`` note has no
sign."""


def note_id(kind: NoteKind) -> str:
    """A fresh message id for a note of ``kind`` (see :data:`NOTE_MARKS`)."""
    fresh = str(uuid.uuid4())
    mark = NOTE_MARKS.get(kind)
    return fresh[: -len(mark)] + mark if mark else fresh
