"""The database schema and its versioned, idempotent migrations.

Chainlit's ``SQLAlchemyDataLayer`` creates no tables; its documentation gives a
PostgreSQL DDL for ``users``, ``threads``, ``steps``, ``elements`` and
``feedbacks``. That DDL lacks columns Chainlit 2.12 writes on every step
(``steps."autoCollapse"`` since 2.10, ``command`` since 2.1, ``defaultOpen``
since 2.3, ``modes`` since 2.9.4, per Chainlit's release notes; without them every step
insert fails, and Chainlit only logs a warning). Migration 2 adds them, so a
database made from the documented DDL is brought up to date as well.

One DDL serves SQLite and PostgreSQL: ids, timestamps (ISO 8601 text, as
Chainlit writes them) and JSON (``metadata``, ``tags``, ``props``, ...) are
TEXT on both; the store's tables (:mod:`backend.store.pages`) encode JSON on write and
decode it on read, which Chainlit 2.12's SQL layer does not do for SQLite.

Our own tables: ``kimi_schema`` (the version applied), ``kimi_users`` (sign-in
names, password hashes and token generations, :mod:`backend.auth`), ``kimi_turns`` and
``kimi_images`` (the conversation as the model saw it, :mod:`backend.store.turns`);
migration 5 gives ``kimi_turns`` the measured numbers of each answer; migration 6 makes
a turn's message id unique in its chat (turns are written by message id, positions
only order them); migration 7 gives each turn the turn it follows and when it was chosen,
so a regenerated answer or an edited question is a version beside the earlier one
(:mod:`backend.versions`); migration 8 renames Chainlit's tables to the store's own
(:data:`PAGE_TABLES`, :mod:`backend.store.pages`): the page's rows are the store's, read
and written only through Chainlit's public ``BaseDataLayer`` in ``ui/datalayer.py``;
migration 9 leaves an answer's text in its turn only (the step of its message, named by
the turn's ``answer_id``, had a copy); migration 10 names a turn's reasoning step, whose
blocks then keep no copy; migration 11 leaves a question asked as typed in its turn only;
migration 12 stores other models' answers to a turn (Compare, ``kimi_compared``).

:func:`migrate` applies what is missing, each migration in one transaction that
also records its version; running it again does nothing. Two processes starting
at once wait for each other: SQLite's transactions take the write lock at BEGIN
(:mod:`backend.store.db`), PostgreSQL takes an advisory lock.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from sqlalchemy import Connection, inspect, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from backend.store.db import StoreError
from backend.versions import TURN_KEY

MIGRATION_LOCK: Final = 8_640_012
"""PostgreSQL advisory lock key held while migrating (any constant unique to this app)."""

_CHAINLIT_TABLES: Final = (
    """CREATE TABLE IF NOT EXISTS users (
        "id" TEXT PRIMARY KEY,
        "identifier" TEXT NOT NULL UNIQUE,
        "metadata" TEXT NOT NULL,
        "createdAt" TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS threads (
        "id" TEXT PRIMARY KEY,
        "createdAt" TEXT,
        "name" TEXT,
        "userId" TEXT,
        "userIdentifier" TEXT,
        "tags" TEXT,
        "metadata" TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS steps (
        "id" TEXT PRIMARY KEY,
        "name" TEXT NOT NULL,
        "type" TEXT NOT NULL,
        "threadId" TEXT NOT NULL,
        "parentId" TEXT,
        "streaming" BOOLEAN NOT NULL,
        "waitForAnswer" BOOLEAN,
        "isError" BOOLEAN,
        "metadata" TEXT,
        "tags" TEXT,
        "input" TEXT,
        "output" TEXT,
        "createdAt" TEXT,
        "start" TEXT,
        "end" TEXT,
        "generation" TEXT,
        "showInput" TEXT,
        "language" TEXT,
        "indent" INTEGER
    )""",
    """CREATE TABLE IF NOT EXISTS elements (
        "id" TEXT PRIMARY KEY,
        "threadId" TEXT,
        "type" TEXT,
        "url" TEXT,
        "chainlitKey" TEXT,
        "name" TEXT NOT NULL,
        "display" TEXT,
        "objectKey" TEXT,
        "size" TEXT,
        "page" INTEGER,
        "language" TEXT,
        "forId" TEXT,
        "mime" TEXT,
        "props" TEXT
    )""",
    """CREATE TABLE IF NOT EXISTS feedbacks (
        "id" TEXT PRIMARY KEY,
        "forId" TEXT NOT NULL,
        "threadId" TEXT NOT NULL,
        "value" INTEGER NOT NULL,
        "comment" TEXT
    )""",
)

_TIMING_COLUMNS: Final = (
    ("kimi_turns", "ttft_s", "DOUBLE PRECISION"),
    ("kimi_turns", "elapsed_s", "DOUBLE PRECISION"),
    ("kimi_turns", "completion_tokens", "INTEGER"),
)
"""What was measured of an answer (:class:`backend.timings.Timings`), beside the older
``reasoning_s``; older rows keep their stats line as text in ``stats`` (read as is)."""

_LATER_COLUMNS: Final = (
    ("steps", "command", "TEXT"),
    ("steps", "defaultOpen", "BOOLEAN"),
    ("steps", "autoCollapse", "BOOLEAN"),
    ("steps", "modes", "TEXT"),
    ("elements", "autoPlay", "BOOLEAN"),
    ("elements", "playerConfig", "TEXT"),
)
"""Columns Chainlit 2.12 writes that its documented DDL lacks: (table, column, type)."""

_OUR_TABLES: Final = (
    """CREATE TABLE IF NOT EXISTS kimi_users (
        "name" TEXT PRIMARY KEY,
        "password_hash" TEXT NOT NULL,
        "created_at" TEXT NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS kimi_turns (
        "thread_id" TEXT NOT NULL,
        "position" INTEGER NOT NULL,
        "message_id" TEXT NOT NULL,
        "answer_id" TEXT,
        "text" TEXT NOT NULL,
        "answer" TEXT NOT NULL,
        "reasoning" TEXT NOT NULL,
        "reasoning_s" REAL,
        "stats" TEXT,
        "status" TEXT NOT NULL,
        "model" TEXT,
        "options" TEXT,
        "created_at" TEXT NOT NULL,
        "updated_at" TEXT NOT NULL,
        PRIMARY KEY ("thread_id", "position")
    )""",
    """CREATE TABLE IF NOT EXISTS kimi_images (
        "thread_id" TEXT NOT NULL,
        "turn" INTEGER NOT NULL,
        "position" INTEGER NOT NULL,
        "name" TEXT NOT NULL,
        "object_key" TEXT NOT NULL,
        "width" INTEGER NOT NULL,
        "height" INTEGER NOT NULL,
        "tokens" INTEGER NOT NULL,
        "source_bytes" INTEGER NOT NULL,
        PRIMARY KEY ("thread_id", "turn", "position")
    )""",
    'CREATE INDEX IF NOT EXISTS steps_thread ON steps ("threadId", "createdAt")',
    'CREATE INDEX IF NOT EXISTS elements_thread ON elements ("threadId")',
    'CREATE INDEX IF NOT EXISTS elements_object_key ON elements ("objectKey")',
    'CREATE INDEX IF NOT EXISTS threads_user ON threads ("userId")',
    'CREATE INDEX IF NOT EXISTS feedbacks_for ON feedbacks ("forId")',
)


_TOKEN_GENERATION: Final = (
    "ALTER TABLE kimi_users ADD COLUMN token_generation INTEGER NOT NULL DEFAULT 0",
)
"""The generation a user's sign-in tokens must carry (:mod:`backend.auth`)."""

_TURNS_BY_MESSAGE: Final = (
    # A turn is its person's message: one row per message id (the latest position wins
    # where a chat open in two tabs wrote one message twice before this migration).
    """DELETE FROM kimi_turns WHERE EXISTS (SELECT 1 FROM kimi_turns later
        WHERE later.thread_id = kimi_turns.thread_id AND later.message_id = kimi_turns.message_id
        AND later."position" > kimi_turns."position")""",
    "CREATE UNIQUE INDEX IF NOT EXISTS kimi_turns_message ON kimi_turns (thread_id, message_id)",
)
"""Turns are found by their message id; ``position`` is only their order in the chat
(:mod:`backend.store.turns`), so two tabs of one chat never write over each other's turn."""


_VERSION_COLUMNS: Final = (
    ("kimi_turns", "parent_id", "TEXT"),
    ("kimi_turns", "chosen", "INTEGER"),
)
"""A turn's place among versions (:mod:`backend.versions`): the message id of the turn it
follows (NULL: a first turn) and when it was last chosen (the highest of a place's
versions is shown)."""

_VERSIONS_OF_EARLIER_TURNS: Final = (
    # An earlier chat is one branch: each turn follows the turn stored before it.
    """UPDATE kimi_turns SET parent_id = (SELECT earlier.message_id FROM kimi_turns earlier
        WHERE earlier.thread_id = kimi_turns.thread_id
        AND earlier."position" < kimi_turns."position"
        ORDER BY earlier."position" DESC LIMIT 1), chosen = "position" WHERE chosen IS NULL""",
)


PAGE_TABLES: Final = (
    ("threads", "kimi_threads"),
    ("steps", "kimi_steps"),
    ("elements", "kimi_elements"),
    ("feedbacks", "kimi_feedback"),
    ("users", "kimi_page_users"),
)
"""(Chainlit's documented name, the store's name) of each table of what a page shows:
since migration 8 the rows are the store's own (:mod:`backend.store.pages`), read and
written only through ``ui/datalayer.py``; nothing named after Chainlit's schema is left."""

_PAGE_ROWS_ARE_OURS: Final = tuple(f"ALTER TABLE {old} RENAME TO {new}" for old, new in PAGE_TABLES)


_ANSWERS_IN_THEIR_TURNS: Final = (
    """UPDATE kimi_steps SET output = '' WHERE EXISTS (SELECT 1 FROM kimi_turns
        WHERE kimi_turns.thread_id = kimi_steps."threadId" AND kimi_turns.answer_id = kimi_steps.id
        AND kimi_turns.answer <> '')""",
)


_REASONING_STEP_COLUMN: Final = (("kimi_turns", "reasoning_id", "TEXT"),)
"""The reasoning step of a turn's answer on the page (Chainlit's step id): its blocks, the
step's children, keep no copy of the turn's reasoning (:mod:`backend.store.pages`). Rows
of earlier releases have none: their blocks keep their text, and are read as they were."""


_COMPARED_ANSWERS: Final = (
    """CREATE TABLE IF NOT EXISTS kimi_compared (
        "thread_id" TEXT NOT NULL,
        "message_id" TEXT NOT NULL,
        "position" INTEGER NOT NULL,
        "label" TEXT NOT NULL,
        "answer" TEXT NOT NULL,
        "reasoning" TEXT NOT NULL,
        "status" TEXT NOT NULL,
        "ttft_s" DOUBLE PRECISION,
        "reasoning_s" DOUBLE PRECISION,
        "elapsed_s" DOUBLE PRECISION,
        "completion_tokens" INTEGER,
        "created_at" TEXT NOT NULL,
        PRIMARY KEY ("thread_id", "message_id", "position")
    )""",
)
"""Other models' answers to a turn (Compare), by the turn's message id, oldest first
(:mod:`backend.store.turns`): an export, and a version drawn again, show them after a
resume and on any UI worker, as the page does."""


def _questions_in_their_turns(connection: Connection) -> None:
    """A person's message asked as typed keeps no copy of its turn's text (NULL: the page
    reads it from the turn, :mod:`backend.store.pages`); a message drawn again for a
    version, whose metadata names it, keeps its text."""
    columns = {c["name"] for c in inspect(connection).get_columns("kimi_steps")}
    metadata = "kimi_steps.metadata" if "metadata" in columns else "NULL"  # docs' first DDL
    found = connection.exec_driver_sql(
        f"""SELECT kimi_steps.id, {metadata} FROM kimi_steps JOIN kimi_turns
        ON kimi_turns.thread_id = kimi_steps."threadId" AND kimi_turns.message_id = kimi_steps.id
        AND kimi_turns.text = kimi_steps.output
        WHERE kimi_steps.type = 'user_message' AND kimi_steps.output <> ''"""
    )
    for step_id, metadata in found.all():
        with suppress(ValueError, TypeError):
            named = json.loads(metadata or "{}")
            if isinstance(named, dict) and named.get(TURN_KEY) not in (None, "", step_id):
                continue
        connection.execute(
            text("UPDATE kimi_steps SET output = NULL WHERE id = :id"), {"id": step_id}
        )


def _run(statements: tuple[str, ...]) -> Callable[[Connection], None]:
    def apply(connection: Connection) -> None:
        for statement in statements:
            connection.exec_driver_sql(statement)

    return apply


def _add_columns(columns: tuple[tuple[str, str, str], ...]) -> Callable[[Connection], None]:
    """A migration adding ``(table, column, type)`` columns that are not there yet."""

    def apply(connection: Connection) -> None:
        for table, column, kind in columns:
            present = {c["name"] for c in inspect(connection).get_columns(table)}
            if column not in present:
                connection.exec_driver_sql(f'ALTER TABLE {table} ADD COLUMN "{column}" {kind}')

    return apply


def _versions(connection: Connection) -> None:
    _add_columns(_VERSION_COLUMNS)(connection)
    _run(_VERSIONS_OF_EARLIER_TURNS)(connection)


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step: its version and a function applying it on a sync connection."""

    version: int
    description: str
    apply: Callable[[Connection], None]


MIGRATIONS: Final = (
    Migration(1, "Chainlit's documented tables", _run(_CHAINLIT_TABLES)),
    Migration(2, "columns Chainlit 2.12 writes that its DDL lacks", _add_columns(_LATER_COLUMNS)),
    Migration(3, "users, turns and prepared images of Kimi-VL Chat", _run(_OUR_TABLES)),
    Migration(4, "a token generation per user (sign-out revokes tokens)", _run(_TOKEN_GENERATION)),
    Migration(
        5, "a turn's measured numbers instead of its stats line", _add_columns(_TIMING_COLUMNS)
    ),
    Migration(6, "one turn per message id (positions only order them)", _run(_TURNS_BY_MESSAGE)),
    Migration(7, "versions of a turn (Regenerate, Edit) beside each other", _versions),
    Migration(8, "the page's rows in the store's own tables", _run(_PAGE_ROWS_ARE_OURS)),
    Migration(9, "an answer's text only in its turn", _run(_ANSWERS_IN_THEIR_TURNS)),
    Migration(10, "a reasoning's text only in its turn", _add_columns(_REASONING_STEP_COLUMN)),
    Migration(11, "a question's text only in its turn", _questions_in_their_turns),
    Migration(12, "other models' answers to a turn (Compare)", _run(_COMPARED_ANSWERS)),
)
"""Every migration, oldest first; versions are 1, 2, ... without gaps."""

LATEST: Final = MIGRATIONS[-1].version


async def schema_version(connection: AsyncConnection) -> int:
    """The version applied so far (0 for an empty database)."""

    def read(sync: Connection) -> int:
        if not inspect(sync).has_table("kimi_schema"):
            return 0
        value = sync.exec_driver_sql("SELECT MAX(version) FROM kimi_schema").scalar()
        return int(value or 0)

    return await connection.run_sync(read)


async def migrate(engine: AsyncEngine) -> list[int]:
    """Bring the database to :data:`LATEST`; returns the versions applied now.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database refused a statement; nothing
            of the failing migration stays (it runs in one transaction).
        StoreError: the database is newer than this code.
    """
    applied: list[int] = []
    for migration in MIGRATIONS:
        async with engine.begin() as connection:
            if connection.dialect.name == "postgresql":
                await connection.execute(
                    text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK}
                )
            await connection.exec_driver_sql(
                "CREATE TABLE IF NOT EXISTS kimi_schema (version INTEGER PRIMARY KEY, "
                "applied_at TEXT NOT NULL)"
            )
            current = await schema_version(connection)
            if current > LATEST:
                raise StoreError(
                    f"The database has schema version {current}, newer than this app "
                    f"knows ({LATEST}); update the app."
                )
            if current >= migration.version:
                continue
            await connection.run_sync(migration.apply)
            await connection.execute(
                text("INSERT INTO kimi_schema (version, applied_at) VALUES (:v, :at)"),
                {"v": migration.version, "at": datetime.now(UTC).isoformat()},
            )
            applied.append(migration.version)
    return applied
