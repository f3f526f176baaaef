"""Resume: rebuild a chat's conversation from its stored turns.

The rebuilt :class:`backend.conversation.Conversation` holds the same turns the
model saw: the text as sent, the prepared image copies (the stored bytes, never
prepared again), answers, and reasoning for display only (it never goes back:
:meth:`backend.conversation.Turn.assistant_message`). A turn whose answer never
ended (the app was killed) comes back ``stopped`` with what was stored, so it is
left out of the history when it has no answer. Message ids map to turns again,
so Edit of a message and Regenerate of the last answer work as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backend.conversation import Conversation, Turn
from backend.record import TurnRecord


@dataclass
class Restored:
    """What a resumed chat starts from.

    Attributes:
        conversation: the turns, oldest first.
        message_turns: Chainlit message id of each person's message -> its turn.
        model: served model name of the last turn that names one (None if none does).
        options: sampling options of that turn, as stored.
        last_answer_id: Chainlit id of the last answer message (for its Regenerate).
        interrupted: the turns whose answer never ended.
    """

    conversation: Conversation
    message_turns: dict[str, Turn] = field(default_factory=dict)
    model: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    last_answer_id: str | None = None
    interrupted: list[TurnRecord] = field(default_factory=list)


def restore(records: list[TurnRecord]) -> Restored:
    """Rebuild the conversation of one chat from its records (oldest first)."""
    ordered = sorted(records, key=lambda r: r.position)
    restored = Restored(conversation=Conversation(turns=[r.turn for r in ordered]))
    for record in ordered:
        restored.message_turns[record.message_id] = record.turn
        if record.interrupted:
            restored.interrupted.append(record)
    asked = [r for r in ordered if r.model]
    if asked:  # the model and options the chat was last asked with
        restored.model, restored.options = asked[-1].model, dict(asked[-1].options)
    if ordered:
        restored.last_answer_id = ordered[-1].answer_id
    return restored
