"""A turn as it is recorded, and the sink that records it.

The turn runner (:mod:`backend.turn_runner`) hands each turn to a :class:`TurnSink`
when its answer starts (status ``pending``; written once its first words are out, at most
:data:`FIRST_WORDS_WAIT_S` later) and again when it ends. The store
implements the sink (:class:`backend.store.turns.ThreadTurns`); open mode has none;
tests use an in-memory one. What is recorded is the turn's data (text, images,
answer, reasoning, status, the measured numbers), never rendered text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol

from backend.conversation import Turn
from backend.timings import Timings

INTERRUPTED: Final = "interrupted"
"""Stored status of a turn whose answer never ended (the app was killed)."""

FIRST_WORDS_WAIT_S: Final = 1.0
"""The longest a write made as a turn starts (its record as it starts, a chat's page writes)
waits for the answer's first words, in seconds: nothing needs it sooner, and on a loaded
machine its CPU would come out of the first words' time (docs/benchmarks.md)."""


@dataclass(frozen=True, slots=True)
class ComparedAnswer:
    """Another model's answer to a turn (Compare), as the chat showed it.

    Attributes:
        label: the other model's label (e.g. "Kimi-VL Instruct").
        turn: its answer, reasoning and status (text and images are the turn's own).
        timings: what was measured of it, if it ended normally.
    """

    label: str
    turn: Turn
    timings: Timings | None = None


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One recorded turn with what a resume and an export need beside the turn itself.

    Attributes:
        position: the turn's order in its chat. Written: its 0-based index in the chat
            that records it (for the log; the store keeps a turn's place once it has
            one and gives a new turn the place after the last stored one). Read: the
            stored order key (ascending).
        message_id: Chainlit id of the person's message: which turn this is (Edit
            names it; one row per message id in a chat).
        turn: text, prepared images, answer, reasoning and status; a turn stored
            ``pending`` or ``interrupted`` comes back with status ``stopped``.
        answer_id: Chainlit id of the answer message, once there is one.
        reasoning_id: Chainlit id of the reasoning step, if it has one on the page; its
            blocks (child steps) keep no copy of a stored reasoning (backend/store/pages.py).
        timings: what was measured of the answer, once it ended normally.
        model: served model name the turn was sent to.
        options: sampling options as sent (``temperature``, ``top_p``, ...).
        stored_status: the status as stored, ``interrupted`` included.
        created_at: ISO 8601 UTC time the turn was first saved.
        legacy_stats: the stats line as text, as versions before :class:`Timings` stored
            it (their rows have no numbers but the reasoning time); None for newer rows.
        compared: other models' answers to it (Compare), oldest first. Read: as stored
            (:meth:`TurnSink.record_compared`); a save ignores it.
        parent_id: the message id (key) of the turn it follows; None for a first turn.
            Versions of one turn (Regenerate, Edit) follow the same turn
            (:mod:`backend.versions`).
        chosen: when it was last chosen among its versions (the highest is shown);
            0: not said (the store keeps what it has, or gives a new row its place).
        beside: the key of another version of this turn (Regenerate, Edit): a new row
            follows the turn that one follows as stored (else ``parent_id``; None: a first
            turn). None: a turn asked in the composer, which the store puts after the
            chat's last stored turn, whatever the recording tab saw last (another tab may
            have added turns).
        restates: the save only restates a turn the chat already has (a version chosen
            or drawn again, ‹ n/m ›): a stored row keeps what it holds of the turn (another
            tab may have answered it again since this tab read it, and Compare answers may
            stand beside that answer) and takes only ``chosen`` and the page ids given; a
            turn not stored yet is saved whole.
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
    compared: tuple[ComparedAnswer, ...] = ()
    parent_id: str | None = None
    chosen: int = 0
    beside: str | None = None
    reasoning_id: str | None = None
    restates: bool = False

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


class TurnSink(Protocol):
    """Where a chat's turns are recorded (the store, or a test's list).

    :meth:`record` stores ``record`` as the chat's turn of ``record.message_id``; no
    turn is ever dropped (versions: :mod:`backend.versions`). It never raises for a
    storage failure: it holds the write until the store takes it, or gives it up, and
    says so in its :class:`Saving`.
    """

    async def record(self, record: TurnRecord) -> Saving:
        """Store ``record`` (see the class docstring); how the chat's storing stands."""
        ...

    async def record_compared(self, message_id: str, answer: ComparedAnswer, beside: str) -> Saving:
        """Store ``answer``, another model's answer to the turn of ``message_id`` (Compare),
        after those stored before it, while the turn's own answer is ``beside`` (the one it
        was shown beside); an answer of the turn's own that replaces an ended one in place
        (Retry) drops them. How the chat's storing stands."""
        ...

    async def stored(self, keys: Sequence[str]) -> list[TurnRecord]:
        """What is stored of the turns of ``keys`` (another tab of the chat may have
        answered one again since this one read it): their answers, numbers, models and
        Compare answers, not their images; a key with nothing stored is left out, and
        nothing comes back while the store cannot be read."""
        ...


class ShownAnswers:
    """What this session showed of each turn's answers beyond the turn itself: the
    measured numbers and model (open mode stores none) and the Compare answers, by the
    turn's key (:mod:`backend.versions`); for an export of what the chat looks like, and
    for a version drawn again. A resumed chat starts with the stored Compare answers
    (:meth:`resumed`)."""

    def __init__(self) -> None:
        self._timings: dict[str, Timings | None] = {}
        self._models: dict[str, str | None] = {}
        self._compared: dict[str, list[ComparedAnswer]] = {}

    def resumed(
        self, compared: Mapping[str, Sequence[ComparedAnswer]], models: Mapping[str, str]
    ) -> None:
        """Start from a stored chat's Compare answers and the models that answered its
        turns, by turn key."""
        for key, answers in compared.items():
            self._compared[key] = list(answers)
        self._models.update(models)

    def stored(self, record: TurnRecord) -> None:
        """What the store holds of the turn of ``record.message_id`` (its numbers, model
        and Compare answers) replaces what this session showed of it."""
        key = record.message_id
        self._timings[key] = record.timings
        self._models[key] = record.model
        self._compared[key] = list(record.compared)

    def model(self, key: str) -> str | None:
        """The served model that answered the turn of ``key``, if known."""
        return self._models.get(key)

    def ended(
        self,
        key: str,
        turn: Turn,
        timings: Timings | None,
        compared: str | None,
        model: str | None = None,
    ) -> ComparedAnswer | None:
        """An answer to the turn of ``key`` ended: the turn's own, from served ``model``
        (``compared`` None; its earlier Compare answers were of an answer now replaced),
        or another model's, labelled ``compared``, which is returned."""
        if compared is None:
            self._timings[key] = timings
            self._models[key] = model
            self._compared.pop(key, None)
            return None
        answer = ComparedAnswer(compared, turn, timings)
        self._compared.setdefault(key, []).append(answer)
        return answer

    def compared(self, key: str) -> tuple[ComparedAnswer, ...]:
        """The other models' answers to the turn of ``key`` shown (or stored), oldest first."""
        return tuple(self._compared.get(key, ()))

    def completed(self, record: TurnRecord) -> TurnRecord:
        """``record`` with what this session showed of it: its numbers and model if the
        record has none, and its Compare answers: the stored ones, then those shown here
        that are not stored (yet)."""
        shown = self._timings.get(record.message_id)
        timings = record.timings if record.timings is not None else shown
        model = record.model or self._models.get(record.message_id)
        stored = [(c.label, c.turn.answer) for c in record.compared]
        unstored = []
        for answer in self.compared(record.message_id):
            same = (answer.label, answer.turn.answer)
            if same in stored:
                stored.remove(same)  # one stored answer stands for one shown
            else:
                unstored.append(answer)
        compared = (*record.compared, *unstored)
        return replace(record, timings=timings, model=model, compared=compared)
