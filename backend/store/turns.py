"""The conversation as the model saw it, stored per chat (thread) and turn.

Chainlit stores what the page shows (steps and elements); this module stores
what the app needs to go on with a chat after a restart, exactly as before:
each turn's text as sent (with PDF page and video frame lines), its answer and
reasoning, how it ended, the model and sampling options it was asked with, what
was measured of its answer (:class:`backend.timings.Timings`: numbers, never the
words shown), and the prepared image copies (the very bytes that went to vLLM, so
a resumed chat never prepares an upload again). Other models' answers to a turn
(Compare) are stored beside it, so an export and a version drawn again show them after
a resume too. Tables ``kimi_turns``, ``kimi_images`` and ``kimi_compared``
(:mod:`backend.store.schema`); image bytes in the file store under
``prepared/<thread id>/<sha256>.<jpg|png|webp>``.

A turn is found by its message id (one row per message in a chat); ``position``
orders the turns. Versions of a turn (Regenerate, Edit) are turns of their own that name
the turn they follow (``parent_id``) and when they were last chosen (``chosen``): the
branch shown is rebuilt from those (:mod:`backend.versions`); choosing a version is a save
of it with its new ``chosen``. A turn is saved when its answer starts (status ``pending``) and again
when it ends; a turn found ``pending`` later was cut short by a crash and reads back
as interrupted (nothing is written for it: a save that still comes makes it what it
is). :class:`ThreadTurns` is the turn runner's sink (:class:`backend.record.TurnSink`) for one chat.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Any, Final

from sqlalchemy import RowMapping, bindparam, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from backend.conversation import Turn, TurnStatus
from backend.i18n import msg
from backend.images import PREPARED_SUFFIXES, PREPARED_TYPES, PreparedImage, data_url
from backend.logs import LOGGER_NAME
from backend.record import INTERRUPTED, ComparedAnswer, Saving, TurnRecord
from backend.store import pages
from backend.store.files import Files
from backend.store.pending import PendingWrites, Write, cause, retryable
from backend.timings import Timings

log = logging.getLogger(LOGGER_NAME)


def image_file(thread_id: str, image: PreparedImage) -> tuple[str, bytes]:
    """The object key of a prepared image (content-addressed inside its chat's folder)
    and its encoded bytes (:meth:`PreparedImage.encoded`: a spilled image's are read from
    its file, never through a data URL)."""
    mime, data = image.encoded()
    digest = hashlib.sha256(data).hexdigest()[:40]
    return f"prepared/{thread_id}/{digest}{PREPARED_SUFFIXES[mime]}", data


MEASURED: Final = ("ttft_s", "reasoning_s", "elapsed_s", "completion_tokens")
"""The columns of what was measured of an answer (:class:`backend.timings.Timings`)."""


def _now() -> str:
    return datetime.now(UTC).isoformat()


@dataclass(frozen=True)
class Place:
    """Where a turn is stored in its chat.

    Attributes:
        position: its row's place (0 first), in the order turns were first stored.
        new: True if no row of the turn is stored yet.
        parent_id: the message id of the turn a new turn follows (None: a first turn, or
            an existing row, which keeps what it has).
        stored: an existing row's answer; None for a new turn.
    """

    position: int
    new: bool
    parent_id: str | None = None
    stored: StoredAnswer | None = None


@dataclass(frozen=True)
class StoredAnswer:
    """What a stored turn's row holds of its answer (:func:`_kept`, :func:`_page_copies`)."""

    status: str
    answer: str
    reasoning: str
    reasoning_id: str | None

    def same_as(self, turn: Turn) -> bool:
        """True if ``turn`` is this answer again (a version chosen or drawn again), not
        another answer to the same message (Retry or more tokens, in place)."""
        return (_read_status(self.status), self.answer, self.reasoning) == (
            turn.status,
            turn.answer,
            turn.reasoning,
        )


class TurnStore:
    """Reads and writes :class:`TurnRecord` rows and their image files.

    Borrows ``engine`` and ``files`` (the app's :class:`backend.store.core.Store`
    owns them). Errors: SQLAlchemy's exceptions and ``OSError`` propagate; a
    failed save raises rather than being logged and forgotten.
    """

    def __init__(self, engine: AsyncEngine, files: Files) -> None:
        self.engine = engine
        self.files = files

    async def save(self, thread_id: str, record: TurnRecord) -> None:
        """Store ``record`` as the turn of ``record.message_id`` in ``thread_id``.

        A turn already stored keeps its place (its ``position``); a new one goes after
        the last stored turn, so two tabs of one chat that each add a turn keep both.
        No turn is ever removed (an edit or a rerun of an earlier turn is a version
        beside it). A record without an answer id (reasoning step id, measured numbers,
        stats line) keeps the stored one. Image files are written before the rows that
        name them, off the event loop. Writes
        to one chat wait for each other (SQLite's BEGIN IMMEDIATE, a PostgreSQL
        advisory lock per chat), so two writers never take the same place. The page's
        step of the answer's message keeps no copy of an answer stored here, nor do the
        blocks of its reasoning step once the answer has ended (:mod:`backend.store.pages`).
        """
        if record.restates and await self._restated(thread_id, record):
            return
        keys = await asyncio.to_thread(self._write_images, thread_id, record.turn.images)
        async with self.engine.begin() as db:
            await _one_writer(db, thread_id)
            place = await _place_of(db, thread_id, record)
            if record.restates and place.stored is not None:  # stored by another tab since
                await _restate(db, thread_id, record, place.stored)
                return
            position = place.position
            row = _row(thread_id, record, place)
            columns = ", ".join(f'"{c}"' for c in row)
            values = ", ".join(f":{c}" for c in row)
            kept = _kept(record, place.stored)
            updates = ", ".join(f'"{c}" = EXCLUDED."{c}"' for c in row if c not in kept)
            await db.execute(
                text("DELETE FROM kimi_images WHERE thread_id = :t AND turn = :p"),
                {"t": thread_id, "p": position},
            )
            await _page_copies(db, thread_id, record, place.stored)
            if _answer_replaced(record, place.stored):  # Compare answers were beside that one
                await db.execute(
                    text("DELETE FROM kimi_compared WHERE thread_id = :t AND message_id = :m"),
                    {"t": thread_id, "m": record.message_id},
                )
            await db.execute(
                text(
                    f"INSERT INTO kimi_turns ({columns}) VALUES ({values}) "
                    f'ON CONFLICT ("thread_id", "position") DO UPDATE SET {updates}'
                ),
                row,
            )
            for index, (image, key) in enumerate(zip(record.turn.images, keys, strict=True)):
                await db.execute(
                    text(
                        'INSERT INTO kimi_images (thread_id, turn, "position", name, object_key, '
                        "width, height, tokens, source_bytes) VALUES (:thread_id, :turn, "
                        ":position, :name, :key, :width, :height, :tokens, :source_bytes)"
                    ),
                    {
                        "thread_id": thread_id,
                        "turn": position,
                        "position": index,
                        "name": image.name,
                        "key": key,
                        "width": image.width,
                        "height": image.height,
                        "tokens": image.tokens,
                        "source_bytes": image.source_bytes,
                    },
                )

    async def _restated(self, thread_id: str, record: TurnRecord) -> bool:
        """:func:`_restate` ``record`` on its stored row; False, with nothing written, when
        no row of it is stored."""
        async with self.engine.begin() as db:
            await _one_writer(db, thread_id)
            found = await _stored_answer(db, thread_id, record.message_id)
            if found is None:
                return False
            await _restate(db, thread_id, record, found[1])
        return True

    async def save_compared(
        self, thread_id: str, message_id: str, answer: ComparedAnswer, beside: str
    ) -> None:
        """Store ``answer``, another model's answer to the turn of ``message_id`` (Compare),
        after the ones stored before it, if the turn's own answer is still ``beside``, the
        one it was shown beside (a write held while the store was away may come after a
        Retry in place replaced it). Writes to one chat wait for each other, as
        :meth:`save`'s do."""
        turn, timings = answer.turn, answer.timings or Timings()
        async with self.engine.begin() as db:
            await _one_writer(db, thread_id)
            await db.execute(
                text(
                    'INSERT INTO kimi_compared (thread_id, message_id, "position", label, answer, '
                    "reasoning, status, ttft_s, reasoning_s, elapsed_s, completion_tokens, "
                    'created_at) SELECT :t, :m, (SELECT COALESCE(MAX("position") + 1, 0) '
                    "FROM kimi_compared WHERE thread_id = :t AND message_id = :m), :label, "
                    ":answer, :reasoning, :status, :ttft_s, :reasoning_s, :elapsed_s, "
                    ":completion_tokens, :created_at WHERE EXISTS (SELECT 1 FROM kimi_turns "
                    "WHERE thread_id = :t AND message_id = :m AND answer = :beside)"
                ),
                {
                    "t": thread_id,
                    "m": message_id,
                    "beside": beside,
                    "label": answer.label,
                    "answer": turn.answer,
                    "reasoning": turn.reasoning,
                    "status": turn.status,
                    "ttft_s": timings.ttft_s,
                    "reasoning_s": timings.reasoning_s,
                    "elapsed_s": timings.elapsed_s,
                    "completion_tokens": timings.completion_tokens,
                    "created_at": _now(),
                },
            )

    def _write_images(self, thread_id: str, images: list[PreparedImage]) -> list[str]:
        """Write each image's file unless it is there already; their keys, in order."""
        keys = []
        for image in images:
            key, data = image_file(thread_id, image)
            if not self.files.exists(key):
                self.files.write(key, data)
            keys.append(key)
        return keys

    async def load(self, thread_id: str) -> list[TurnRecord]:
        """The stored turns of ``thread_id``, oldest first, images read back from disk.

        Raises:
            FileNotFoundError: an image file named by a row is missing.
        """
        async with self.engine.connect() as db:
            found = await db.execute(
                text('SELECT * FROM kimi_turns WHERE thread_id = :t ORDER BY "position"'),
                {"t": thread_id},
            )
            turns = found.mappings().all()
            found = await db.execute(
                text('SELECT * FROM kimi_images WHERE thread_id = :t ORDER BY turn, "position"'),
                {"t": thread_id},
            )
            images = found.mappings().all()
            found = await db.execute(
                text(
                    "SELECT * FROM kimi_compared WHERE thread_id = :t "
                    'ORDER BY message_id, "position"'
                ),
                {"t": thread_id},
            )
            compared = _compared_by_message(found.mappings())
        payloads = await asyncio.to_thread(
            lambda: [self.files.read(str(row["object_key"])) for row in images]
        )
        by_turn: dict[int, list[PreparedImage]] = {}
        for row, data in zip(images, payloads, strict=True):
            by_turn.setdefault(int(row["turn"]), []).append(_image(row, data))
        return [
            _record(
                row,
                by_turn.get(int(row["position"]), []),
                tuple(compared.get(str(row["message_id"]), ())),
            )
            for row in turns
        ]

    async def answers(self, thread_id: str, keys: Sequence[str]) -> list[TurnRecord]:
        """The stored turns of ``thread_id`` whose message ids are among ``keys``, with
        the other models' answers to them but not their images (a version's images never
        change), in no set order; a key with no row is left out."""
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return []
        among = {"t": thread_id, "m": wanted}
        async with self.engine.connect() as db:
            found = await db.execute(
                text(
                    "SELECT * FROM kimi_turns WHERE thread_id = :t AND message_id IN :m"
                ).bindparams(bindparam("m", expanding=True)),
                among,
            )
            turns = found.mappings().all()
            found = await db.execute(
                text(
                    "SELECT * FROM kimi_compared WHERE thread_id = :t AND message_id IN :m "
                    'ORDER BY message_id, "position"'
                ).bindparams(bindparam("m", expanding=True)),
                among,
            )
            compared = _compared_by_message(found.mappings())
        return [_record(row, [], tuple(compared.get(str(row["message_id"]), ()))) for row in turns]

    async def delete_thread(self, thread_id: str) -> None:
        """Remove the turns, image rows and image files of ``thread_id``."""
        async with self.engine.begin() as db:
            await db.execute(text("DELETE FROM kimi_images WHERE thread_id = :t"), {"t": thread_id})
            await db.execute(text("DELETE FROM kimi_turns WHERE thread_id = :t"), {"t": thread_id})
            await db.execute(
                text("DELETE FROM kimi_compared WHERE thread_id = :t"), {"t": thread_id}
            )
        await asyncio.to_thread(self.files.delete_tree, f"prepared/{thread_id}")


async def _one_writer(db: AsyncConnection, thread_id: str) -> None:
    """Make the other writers of chat ``thread_id`` wait for this transaction: on PostgreSQL
    an advisory lock per chat; SQLite's transactions take the write lock at BEGIN
    (:mod:`backend.store.db`)."""
    if db.dialect.name == "postgresql":
        await db.execute(text("SELECT pg_advisory_xact_lock(hashtext(:t))"), {"t": thread_id})


async def _place_of(db: AsyncConnection, thread_id: str, record: TurnRecord) -> Place:
    """Where the turn of ``record`` goes: its stored place, or the next free one. A new
    version (``record.beside``) follows what that version follows as stored; any other
    new turn follows the end of the stored branch through ``record.parent_id`` (the turn
    the recording tab showed last; at each later place the version chosen last), so a
    turn another tab added after that one comes before it (:mod:`backend.versions`)."""
    stored = await _stored_answer(db, thread_id, record.message_id)
    if stored is not None:
        return Place(stored[0], new=False, stored=stored[1])
    found = await db.execute(
        text(
            'SELECT "position", message_id, parent_id, chosen FROM kimi_turns '
            'WHERE thread_id = :t ORDER BY "position"'
        ),
        {"t": thread_id},
    )
    rows = found.all()
    after = int(rows[-1][0]) + 1 if rows else 0
    if record.beside is not None:
        parent = next((row[2] for row in rows if row[1] == record.beside), record.parent_id)
        return Place(after, new=True, parent_id=parent)
    children: dict[str | None, list[tuple[int, str]]] = {}
    for _, key, parent, chosen in rows:
        children.setdefault(parent, []).append((int(chosen or 0), str(key)))
    end = record.parent_id
    while end in children:  # at each place the version chosen last (the first of a tie)
        end = max(children[end], key=lambda child: child[0])[1]
    return Place(after, new=True, parent_id=end)


async def _stored_answer(
    db: AsyncConnection, thread_id: str, message_id: str
) -> tuple[int, StoredAnswer] | None:
    """The place and answer of the stored row of message ``message_id``; None if none."""
    found = await db.execute(
        text(
            'SELECT "position", status, answer, reasoning, reasoning_id FROM kimi_turns '
            "WHERE thread_id = :t AND message_id = :m"
        ),
        {"t": thread_id, "m": message_id},
    )
    row = found.first()
    if row is None:
        return None
    position, *answer = row
    return int(position), StoredAnswer(*answer)


async def _restate(
    db: AsyncConnection, thread_id: str, record: TurnRecord, stored: StoredAnswer
) -> None:
    """Record on the stored row of ``record`` (:attr:`TurnRecord.restates`), whose answer
    is ``stored``, only its ``chosen`` and the page ids it names, the steps of those ids
    keeping no copy of what the row holds (:mod:`backend.store.pages`); the row's text,
    answer, reasoning, status, numbers and images stay as stored."""
    await pages.empty_copies(
        db,
        thread_id,
        question=(record.message_id, record.turn.text),
        answer_id=record.answer_id if stored.answer else None,
        reasoning_id=(
            record.reasoning_id if stored.reasoning and stored.status != "pending" else None
        ),
    )
    given = {
        "chosen": record.chosen,
        "answer_id": record.answer_id,
        "reasoning_id": record.reasoning_id,
    }
    changes = {column: value for column, value in given.items() if value}
    changes["updated_at"] = _now()
    assignments = ", ".join(f'"{column}" = :{column}' for column in changes)
    await db.execute(
        text(
            f"UPDATE kimi_turns SET {assignments} "
            "WHERE thread_id = :thread_id AND message_id = :message_id"
        ),
        {**changes, "thread_id": thread_id, "message_id": record.message_id},
    )


def _answer_replaced(record: TurnRecord, stored: StoredAnswer | None) -> bool:
    """True if ``record`` answers its message again in place (Retry, more tokens) where an
    answer had ended: the other models' answers stored beside the earlier one go."""
    return stored is not None and stored.status != "pending" and not stored.same_as(record.turn)


def _kept(record: TurnRecord, stored: StoredAnswer | None) -> tuple[str, ...]:
    """The columns of a stored row that a save of ``record`` leaves as they are: its place
    among versions (unless the record chooses it), the answer id it does not name, and, for
    the same answer saved again with nothing of its own (a version chosen or drawn again),
    its reasoning step and measured numbers. Another answer to the message (Retry, more
    tokens) replaces them, also with nothing."""
    kept: tuple[str, ...] = ("thread_id", "position", "created_at", "parent_id")
    kept += () if record.chosen else ("chosen",)
    kept += () if record.answer_id else ("answer_id",)
    same = stored is not None and stored.same_as(record.turn)
    if same and record.reasoning_id is None:
        kept += ("reasoning_id",)
    if same and record.timings is None and record.legacy_stats is None:
        kept += (*MEASURED, "stats")
    return kept


async def _page_copies(
    db: AsyncConnection, thread_id: str, record: TurnRecord, stored: StoredAnswer | None
) -> None:
    """Keep the page's steps from holding a second copy of what ``record`` stores: its
    question's message (where it holds exactly the turn's text), its answer's message, and
    once the answer ended its reasoning step's blocks, keep no text
    (:mod:`backend.store.pages` draws them from this row). A reasoning this row held
    before (a Retry in place answers its message again) is given back to its blocks,
    which stay on the page with no turn to draw them from."""
    if (
        stored is not None
        and stored.reasoning_id
        and stored.status != "pending"  # its blocks were emptied
        and stored.reasoning_id != record.reasoning_id
        and not stored.same_as(record.turn)
    ):
        await pages.give_reasoning_back(db, thread_id, stored.reasoning_id, stored.reasoning)
    turn = record.turn
    await pages.empty_copies(
        db,
        thread_id,
        question=(record.message_id, turn.text),
        answer_id=record.answer_id if turn.answer else None,
        reasoning_id=record.reasoning_id if turn.reasoning and turn.status != "pending" else None,
    )


def _row(thread_id: str, record: TurnRecord, place: Place) -> dict[str, Any]:
    """The ``kimi_turns`` row of ``record`` at ``place``; the stats line is never
    stored as text."""
    turn, timings, now = record.turn, record.timings or Timings(), _now()
    return {
        "thread_id": thread_id,
        "position": place.position,
        "message_id": record.message_id,
        "answer_id": record.answer_id,
        "reasoning_id": record.reasoning_id,
        "text": turn.text,
        "answer": turn.answer,
        "reasoning": turn.reasoning,
        "reasoning_s": timings.reasoning_s,
        "ttft_s": timings.ttft_s,
        "elapsed_s": timings.elapsed_s,
        "completion_tokens": timings.completion_tokens,
        "stats": record.legacy_stats,
        "status": turn.status,
        "model": record.model,
        "options": json.dumps(record.options),
        "created_at": now,
        "updated_at": now,
        "parent_id": place.parent_id,
        "chosen": record.chosen or place.position,
    }


_EARLIER_TYPES: Final = {".bin": "image/webp"}
"""Suffixes of keys that releases before :data:`backend.images.PREPARED_SUFFIXES` wrote: a
WebP sent as uploaded was stored under ``.bin`` (JPEG and PNG had their suffixes)."""


def _image(row: RowMapping, data: bytes) -> PreparedImage:
    """A prepared image from its ``kimi_images`` row and the bytes of its file."""
    suffix = PurePosixPath(str(row["object_key"])).suffix
    mime = PREPARED_TYPES.get(suffix) or _EARLIER_TYPES[suffix]
    return PreparedImage(
        name=str(row["name"]),
        data=data_url(mime, data),
        width=int(row["width"]),
        height=int(row["height"]),
        tokens=int(row["tokens"]),
        source_bytes=int(row["source_bytes"]),
    )


def _compared_by_message(rows: Iterable[RowMapping]) -> dict[str, list[ComparedAnswer]]:
    """Other models' answers from ``kimi_compared`` rows, by the message id they answer,
    in the rows' order."""
    compared: dict[str, list[ComparedAnswer]] = {}
    for row in rows:
        compared.setdefault(str(row["message_id"]), []).append(_compared(row))
    return compared


def _compared(row: RowMapping) -> ComparedAnswer:
    """Another model's answer from its ``kimi_compared`` row."""
    turn = Turn(
        text="",
        answer=str(row["answer"]),
        reasoning=str(row["reasoning"]),
        reasoning_s=row["reasoning_s"],
        status=_status(str(row["status"])),
    )
    return ComparedAnswer(str(row["label"]), turn, _measured(row))


def _measured(row: RowMapping) -> Timings | None:
    """What was measured of the answer of a ``kimi_turns`` or ``kimi_compared`` row (its
    :data:`MEASURED` columns); None if nothing was."""
    numbers = Timings(row["ttft_s"], row["reasoning_s"], row["elapsed_s"], row["completion_tokens"])
    return None if numbers == Timings() else numbers


def _record(
    row: RowMapping, images: list[PreparedImage], compared: tuple[ComparedAnswer, ...]
) -> TurnRecord:
    """A record from its ``kimi_turns`` row, its images and the other models' answers to it;
    a turn whose answer never ended is ``stopped``."""
    stored = str(row["status"])
    status = _read_status(stored)
    return TurnRecord(
        position=int(row["position"]),
        message_id=str(row["message_id"]),
        answer_id=row["answer_id"],
        reasoning_id=row["reasoning_id"],
        turn=Turn(
            text=str(row["text"]),
            images=images,
            answer=str(row["answer"]),
            reasoning=str(row["reasoning"]),
            reasoning_s=row["reasoning_s"],
            status=status,
        ),
        timings=_measured(row),
        model=row["model"],
        options=json.loads(row["options"] or "{}"),
        stored_status=stored,
        created_at=str(row["created_at"]),
        legacy_stats=row["stats"],
        parent_id=row["parent_id"],
        chosen=int(row["chosen"] or 0),
        compared=compared,
    )


class ThreadTurns:
    """The turn runner's sink (:class:`backend.record.TurnSink`) for one stored chat.

    Borrows ``turns`` and ``pending`` (the store's): every save goes through ``pending``,
    which holds it while the store cannot take it (:mod:`backend.store.pending`).
    """

    def __init__(self, turns: TurnStore, pending: PendingWrites, thread_id: str) -> None:
        self.turns = turns
        self.pending = pending
        self.thread_id = thread_id

    async def record(self, record: TurnRecord) -> Saving:
        """Save ``record`` in this chat (:meth:`TurnStore.save`), now or once the store
        takes writes again; how this chat's storing stands."""
        turn = record.turn
        size = len(turn.text) + len(turn.answer) + len(turn.reasoning)
        size += sum(len(i.data) for i in turn.images if isinstance(i.data, str))
        first_line = turn.text.strip().splitlines()[0] if turn.text.strip() else ""
        short = first_line[:60] + ("…" if len(first_line) > 60 else "")
        whole = _turn_key(self.thread_id, record.message_id)
        restating = _restate_key(self.thread_id, record.message_id)
        job = Write(
            run=lambda: self.turns.save(self.thread_id, record),
            chat=self.thread_id,
            what=msg("your message “{text}” and its answer", text=short),
            size=size,
            # The latest replaces a held one; a restatement never replaces a whole save, and
            # a whole save (which names the turn's current choice and page ids) drops a held
            # restatement, so an older one is never written after it.
            key=restating if record.restates else whole,
            supersedes=None if record.restates else restating,
        )
        return await self._written(job)

    async def stored(self, keys: Sequence[str]) -> list[TurnRecord]:
        """What this chat stores of the turns of ``keys`` (:meth:`TurnStore.answers`), but
        for a turn whose save waits for the store (the row is older than what this process
        holds); none while the store cannot be read (what the tab holds stands)."""
        written = [
            key for key in keys if not self.pending.holds_key(_turn_key(self.thread_id, key))
        ]
        try:
            return await self.turns.answers(self.thread_id, written)
        except Exception as error:  # a version is shown whatever the read meets
            log.warning(
                "the store cannot be read (%s): the chat shows what it holds",
                cause(error, self.pending.where),
                exc_info=not retryable(error),
            )
            return []

    async def record_compared(self, message_id: str, answer: ComparedAnswer, beside: str) -> Saving:
        """Save ``answer``, another model's, beside the turn of ``message_id`` and its own
        answer ``beside`` (:meth:`TurnStore.save_compared`), now or once the store takes
        writes again."""
        job = Write(
            run=lambda: self.turns.save_compared(self.thread_id, message_id, answer, beside),
            chat=self.thread_id,
            what=msg("the answer of {model}", model=answer.label),
            size=len(answer.turn.answer) + len(answer.turn.reasoning),
        )
        return await self._written(job)

    async def _written(self, job: Write) -> Saving:
        await self.pending.write(job)
        lost = tuple(self.pending.take_lost(self.thread_id))
        return Saving(held=self.pending.holds(self.thread_id) > 0, lost=lost)


def _turn_key(thread_id: str, message_id: str) -> tuple[str, str, str]:
    """The :attr:`backend.store.pending.Write.key` of a turn's whole save."""
    return ("turn", thread_id, message_id)


def _restate_key(thread_id: str, message_id: str) -> tuple[str, str, str]:
    """The :attr:`backend.store.pending.Write.key` of a turn's restatement."""
    return ("chosen", thread_id, message_id)


def _read_status(stored: str) -> TurnStatus:
    """A stored status as a turn read back has it: one whose answer never ended (``pending``,
    ``interrupted``) is ``stopped``."""
    return "stopped" if stored in ("pending", INTERRUPTED) else _status(stored)


def _status(stored: str) -> TurnStatus:
    known: tuple[TurnStatus, ...] = ("pending", "done", "stopped", "cut_off", "failed")
    for status in known:
        if stored == status:
            return status
    return "done"
