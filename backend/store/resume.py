"""Resume: rebuild a chat's conversation from its stored turns.

The rebuilt :class:`backend.conversation.Conversation` holds the same turns the
model saw: the text as sent, the prepared image copies (the stored bytes, never
prepared again), answers, and reasoning for display only (it never goes back:
:meth:`backend.conversation.Turn.assistant_message`). A turn whose answer never
ended (the app was killed) comes back ``stopped`` with what was stored, so it is
left out of the history when it has no answer; other models' answers to a turn
(Compare) come back with it. Message ids map to turns again,
so Edit of a message and Regenerate of the last answer work as before. Every version of
a turn comes back (:mod:`backend.versions`); the conversation is the branch shown when the
chat was left.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backend.conversation import Conversation, Turn
from backend.record import ComparedAnswer, TurnRecord
from backend.versions import Versions


@dataclass
class Restored:
    """What a resumed chat starts from.

    Attributes:
        conversation: the turns of the branch shown, oldest first.
        versions: every version of every turn.
        message_turns: the key (Chainlit message id of the person's message, or a
            version's own id) of each version -> its turn (the page's messages are then
            mapped to the version shown at their place: ui/history.py).
        model: served model name of the last turn that names one (None if none does).
        options: sampling options of that turn, as stored.
        last_answer_id: Chainlit id of the last answer message (for its Regenerate).
        answer_ids: each version's answer message (Chainlit id), by its key, where stored.
        interrupted: the turns whose answer never ended.
        compared: other models' answers to a turn (Compare), by its key, oldest first.
        models: the served model name each turn was answered by, by its key, where stored.
    """

    conversation: Conversation
    versions: Versions = field(default_factory=Versions)
    message_turns: dict[str, Turn] = field(default_factory=dict)
    model: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    last_answer_id: str | None = None
    answer_ids: dict[str, str] = field(default_factory=dict)
    interrupted: list[TurnRecord] = field(default_factory=list)
    compared: dict[str, tuple[ComparedAnswer, ...]] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)


def restore(records: list[TurnRecord]) -> Restored:
    """Rebuild the conversation of one chat from its records (oldest first)."""
    ordered = sorted(records, key=lambda r: r.position)
    versions = _versions(ordered)
    shown = {v.key for v in versions.branch()}
    restored = Restored(
        conversation=Conversation(turns=[v.turn for v in versions.branch()]), versions=versions
    )
    for record in ordered:
        restored.message_turns[record.message_id] = record.turn
        if record.answer_id:
            restored.answer_ids[record.message_id] = record.answer_id
        if record.interrupted:
            restored.interrupted.append(record)
        if record.compared:
            restored.compared[record.message_id] = record.compared
        if record.model:
            restored.models[record.message_id] = record.model
    asked = [r for r in ordered if r.model]
    if asked:  # the model and options the chat was last asked with
        restored.model, restored.options = asked[-1].model, dict(asked[-1].options)
    on_screen = [r for r in ordered if r.message_id in shown]
    if on_screen:
        restored.last_answer_id = on_screen[-1].answer_id
    return restored


def shown_records(records: list[TurnRecord]) -> list[TurnRecord]:
    """The records of the branch shown (the conversation :func:`restore` rebuilds), oldest
    first: what an export of the chat holds."""
    ordered = sorted(records, key=lambda r: r.position)
    shown = {v.key for v in _versions(ordered).branch()}
    return [record for record in ordered if record.message_id in shown]


def _versions(ordered: list[TurnRecord]) -> Versions:
    """Every version of the records (in stored order), as chosen when last stored."""
    versions = Versions()
    for record in ordered:
        parent = record.parent_id if record.parent_id in versions else None
        versions.add(record.message_id, record.turn, parent, record.chosen)
    return versions
