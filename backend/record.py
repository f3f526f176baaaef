"""A turn as it is recorded, and the sink that records it.

The turn runner (:mod:`backend.turn_runner`) hands each turn to a :class:`TurnSink`
when its answer starts (status ``pending``) and again when it ends. The store
implements the sink (:class:`backend.store.turns.ThreadTurns`); open mode has none;
tests use an in-memory one. What is recorded is the turn's data (text, images,
answer, reasoning, status, the measured numbers), never rendered text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from backend.conversation import Turn
from backend.timings import Timings

INTERRUPTED: Final = "interrupted"
"""Stored status of a turn whose answer never ended (the app was killed)."""


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One recorded turn with what a resume and an export need beside the turn itself.

    Attributes:
        position: the turn's order in its chat. Written: its 0-based index in the chat
            that records it (for the log; the store keeps a turn's place once it has
            one and gives a new turn the place after the last stored one). Read: the
            stored order key (ascending; gaps where turns were dropped).
        message_id: Chainlit id of the person's message: which turn this is (Edit
            names it; one row per message id in a chat).
        turn: text, prepared images, answer, reasoning and status; a turn stored
            ``pending`` or ``interrupted`` comes back with status ``stopped``.
        answer_id: Chainlit id of the answer message, once there is one.
        timings: what was measured of the answer, once it ended normally.
        model: served model name the turn was sent to.
        options: sampling options as sent (``temperature``, ``top_p``, ...).
        stored_status: the status as stored, ``interrupted`` included.
        created_at: ISO 8601 UTC time the turn was first saved.
        legacy_stats: the stats line as text, as versions before :class:`Timings` stored
            it (their rows have no numbers but the reasoning time); None for newer rows.
        dropped: message ids of the turns the recording chat rewound away since its
            previous record (an edit or a rerun of an earlier turn): the store drops
            those, and only those (another tab's turns of the same chat stay).
    """

    position: int
    message_id: str
    turn: Turn
    answer_id: str | None = None
    timings: Timings | None = None
    model: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    stored_status: str = "done"
    created_at: str = ""
    legacy_stats: str | None = None
    dropped: tuple[str, ...] = ()

    @property
    def interrupted(self) -> bool:
        """True if the app stopped before this turn's answer ended."""
        return self.stored_status in ("pending", INTERRUPTED)

    @property
    def reasoning_s(self) -> float | None:
        """Seconds the model reasoned ("Thought for N.Ns"), if it did and it was measured."""
        return self.timings.reasoning_s if self.timings is not None else None


@dataclass(frozen=True, slots=True)
class Saving:
    """How a chat's storing stands after a record.

    Attributes:
        held: some of the chat's writes wait in memory for the store (it cannot be
            written now: :mod:`backend.store.pending`); they are written once it can.
        lost: what of the chat will not be saved (each a sentence's object, e.g.
            ``'your message "Hello" and its answer'``), since the previous record said.
    """

    held: bool = False
    lost: tuple[str, ...] = ()


SAVED: Final = Saving()
"""Everything of the chat is stored."""


class TurnSink(Protocol):
    """Where a chat's turns are recorded (the store, or a test's list).

    :meth:`record` stores ``record`` as the chat's turn of ``record.message_id`` and
    drops the turns named in ``record.dropped`` (an edit or a rerun of an earlier
    turn rewinds the chat). It never raises for a storage failure: it holds the write
    until the store takes it, or gives it up, and says so in its :class:`Saving`.
    """

    async def record(self, record: TurnRecord) -> Saving:
        """Store ``record`` (see the class docstring); how the chat's storing stands."""
        ...
