"""The conversation as the model saw it, stored per chat (thread) and turn.

Chainlit stores what the page shows (steps and elements); this module stores
what the app needs to go on with a chat after a restart, exactly as before:
each turn's text as sent (with PDF page and video frame lines), its answer and
reasoning, how it ended, the model and sampling options it was asked with, the
stats line, and the prepared image copies (the very bytes that went to vLLM, so
a resumed chat never prepares an upload again). Tables ``kimi_turns`` and
``kimi_images`` (:mod:`backend.store.schema`); image bytes in the file store
under ``prepared/<thread id>/<sha256>.<jpg|png>``.

A turn is saved when its answer starts (status ``pending``) and again when it
ends; a turn found ``pending`` later was cut short by a crash:
:meth:`TurnStore.mark_interrupted` marks it ``interrupted``.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.conversation import Turn, TurnStatus
from backend.images import PreparedImage, decode_data_url
from backend.store.files import FileStore

INTERRUPTED: Final = "interrupted"
"""Stored status of a turn whose answer never ended (the app was killed)."""

_EXTENSIONS: Final = {"image/jpeg": "jpg", "image/png": "png"}


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One stored turn with what the UI and an export need beside the turn itself.

    Attributes:
        position: 0-based index of the turn in its chat.
        message_id: Chainlit id of the person's message (Edit names it).
        turn: text, prepared images, answer, reasoning and status; a turn stored
            ``pending`` or ``interrupted`` comes back with status ``stopped``.
        answer_id: Chainlit id of the answer message, once there is one.
        reasoning_s: seconds the model reasoned ("Thought for N.Ns"), if it did.
        stats: the stats line shown under the answer, if it ended normally.
        model: served model name the turn was sent to.
        options: sampling options as sent (``temperature``, ``top_p``, ...).
        stored_status: the status as stored, ``interrupted`` included.
        created_at: ISO 8601 UTC time the turn was first saved.
    """

    position: int
    message_id: str
    turn: Turn
    answer_id: str | None = None
    reasoning_s: float | None = None
    stats: str | None = None
    model: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    stored_status: str = "done"
    created_at: str = ""

    @property
    def interrupted(self) -> bool:
        """True if the app stopped before this turn's answer ended."""
        return self.stored_status in ("pending", INTERRUPTED)


def image_file(thread_id: str, image: PreparedImage) -> tuple[str, bytes]:
    """The object key of a prepared image (content-addressed inside its chat's folder)
    and its encoded bytes. Reads :attr:`PreparedImage.data_url` once: a spilled image's
    is a file."""
    mime, data = decode_data_url(image.data_url)
    digest = hashlib.sha256(data).hexdigest()[:40]
    return f"prepared/{thread_id}/{digest}.{_EXTENSIONS.get(mime, 'bin')}", data


def _now() -> str:
    return datetime.now(UTC).isoformat()


class TurnStore:
    """Reads and writes :class:`TurnRecord` rows and their image files.

    Borrows ``engine`` and ``files`` (the app's :class:`backend.store.Store`
    owns them). Errors: SQLAlchemy's exceptions and ``OSError`` propagate; a
    failed save raises rather than being logged and forgotten.
    """

    def __init__(self, engine: AsyncEngine, files: FileStore) -> None:
        self.engine = engine
        self.files = files

    async def save(self, thread_id: str, record: TurnRecord) -> None:
        """Store ``record`` as the last turn of ``thread_id``.

        Turns after ``record.position`` are removed (an edit of an earlier message
        rewinds the chat; a regenerate rewrites the last turn). Image files are
        written before the rows that name them, off the event loop.
        """
        keys = await asyncio.to_thread(self._write_images, thread_id, record.turn.images)
        turn, now = record.turn, _now()
        row = {
            "thread_id": thread_id,
            "position": record.position,
            "message_id": record.message_id,
            "answer_id": record.answer_id,
            "text": turn.text,
            "answer": turn.answer,
            "reasoning": turn.reasoning,
            "reasoning_s": record.reasoning_s,
            "stats": record.stats,
            "status": turn.status,
            "model": record.model,
            "options": json.dumps(record.options),
            "created_at": now,
            "updated_at": now,
        }
        columns = ", ".join(f'"{c}"' for c in row)
        values = ", ".join(f":{c}" for c in row)
        kept = ("thread_id", "position", "created_at")
        updates = ", ".join(f'"{c}" = EXCLUDED."{c}"' for c in row if c not in kept)
        where = {"thread_id": thread_id, "position": record.position}
        async with self.engine.begin() as db:
            await db.execute(
                text(
                    'DELETE FROM kimi_turns WHERE thread_id = :thread_id AND "position" > :position'
                ),
                where,
            )
            await db.execute(
                text("DELETE FROM kimi_images WHERE thread_id = :thread_id AND turn >= :position"),
                where,
            )
            await db.execute(
                text(
                    f"INSERT INTO kimi_turns ({columns}) VALUES ({values}) "
                    f'ON CONFLICT ("thread_id", "position") DO UPDATE SET {updates}'
                ),
                row,
            )
            for index, (image, key) in enumerate(zip(turn.images, keys, strict=True)):
                await db.execute(
                    text(
                        'INSERT INTO kimi_images (thread_id, turn, "position", name, object_key, '
                        "width, height, tokens, source_bytes) VALUES (:thread_id, :turn, "
                        ":position, :name, :key, :width, :height, :tokens, :source_bytes)"
                    ),
                    {
                        "thread_id": thread_id,
                        "turn": record.position,
                        "position": index,
                        "name": image.name,
                        "key": key,
                        "width": image.width,
                        "height": image.height,
                        "tokens": image.tokens,
                        "source_bytes": image.source_bytes,
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
            turns = (
                (
                    await db.execute(
                        text('SELECT * FROM kimi_turns WHERE thread_id = :t ORDER BY "position"'),
                        {"t": thread_id},
                    )
                )
                .mappings()
                .all()
            )
            images = (
                (
                    await db.execute(
                        text(
                            "SELECT * FROM kimi_images WHERE thread_id = :t "
                            'ORDER BY turn, "position"'
                        ),
                        {"t": thread_id},
                    )
                )
                .mappings()
                .all()
            )
        by_turn: dict[int, list[PreparedImage]] = {}
        payloads = await asyncio.to_thread(
            lambda: [self.files.read(str(row["object_key"])) for row in images]
        )
        for row, data in zip(images, payloads, strict=True):
            mime = "image/png" if str(row["object_key"]).endswith(".png") else "image/jpeg"
            by_turn.setdefault(int(row["turn"]), []).append(
                PreparedImage(
                    name=str(row["name"]),
                    data=f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}",
                    width=int(row["width"]),
                    height=int(row["height"]),
                    tokens=int(row["tokens"]),
                    source_bytes=int(row["source_bytes"]),
                )
            )
        records = []
        for row in turns:
            stored = str(row["status"])
            status: TurnStatus = (
                "stopped" if stored in ("pending", INTERRUPTED) else _status(stored)
            )
            position = int(row["position"])
            records.append(
                TurnRecord(
                    position=position,
                    message_id=str(row["message_id"]),
                    answer_id=row["answer_id"],
                    turn=Turn(
                        text=str(row["text"]),
                        images=by_turn.get(position, []),
                        answer=str(row["answer"]),
                        reasoning=str(row["reasoning"]),
                        status=status,
                    ),
                    reasoning_s=row["reasoning_s"],
                    stats=row["stats"],
                    model=row["model"],
                    options=json.loads(row["options"] or "{}"),
                    stored_status=stored,
                    created_at=str(row["created_at"]),
                )
            )
        return records

    async def mark_interrupted(self, thread_id: str) -> list[int]:
        """Mark the turns of ``thread_id`` still ``pending`` as interrupted; their positions."""
        async with self.engine.begin() as db:
            rows = (
                await db.execute(
                    text(
                        'SELECT "position" FROM kimi_turns WHERE thread_id = :t '
                        "AND status = 'pending'"
                    ),
                    {"t": thread_id},
                )
            ).all()
            await db.execute(
                text(
                    "UPDATE kimi_turns SET status = :s WHERE thread_id = :t AND status = 'pending'"
                ),
                {"t": thread_id, "s": INTERRUPTED},
            )
        return [int(row[0]) for row in rows]

    async def delete_thread(self, thread_id: str) -> None:
        """Remove the turns, image rows and image files of ``thread_id``."""
        async with self.engine.begin() as db:
            await db.execute(text("DELETE FROM kimi_images WHERE thread_id = :t"), {"t": thread_id})
            await db.execute(text("DELETE FROM kimi_turns WHERE thread_id = :t"), {"t": thread_id})
        await asyncio.to_thread(self.files.delete_tree, f"prepared/{thread_id}")


def _status(stored: str) -> TurnStatus:
    known: tuple[TurnStatus, ...] = ("pending", "done", "stopped", "cut_off", "failed")
    for status in known:
        if stored == status:
            return status
    return "done"
