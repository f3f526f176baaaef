"""What a chat's page shows, as stored rows: threads, steps, elements, feedback, page users.

The tables keep the columns of Chainlit's documented schema, under the store's own names
since schema version 8 (``kimi_page_users``, ``kimi_threads``, ``kimi_steps``,
``kimi_elements``, ``kimi_feedback``; :mod:`backend.store.schema` makes them and moves an
earlier release's ``users``, ``threads``, ``steps``, ``elements`` and ``feedbacks`` there),
so a database of an earlier release reads back as it was. An answer's text is not among
them: its turn (``kimi_turns``, :mod:`backend.store.turns`) is its one record, and the
step of the answer's message (the step a turn names as its ``answer_id``) keeps no output
while the turn has an answer (:func:`write_step`; :func:`answers` gives them back to the
page). Nor is an ended answer's reasoning: the blocks of its reasoning step (the children
of the step a turn names as its ``reasoning_id``) keep none, and :func:`reasonings` gives
the page the text to cut into those blocks again. Nor is a question: the person's message
keeps a NULL output where its turn was asked with exactly its text, and :func:`questions`
gives it back (a question sent with PDF pages or video frames was asked with more than
was typed, an edited message shows its edit, and a message drawn again for a version names
that version in its metadata: those keep their own text). Here they
are SQLAlchemy Core tables: every statement is built, typed and bound by SQLAlchemy on
SQLite and PostgreSQL alike. JSON columns (``metadata``, ``tags``, ``props``, ...) are
TEXT holding JSON, encoded on write and decoded on read (:class:`JSONText`); booleans
are booleans on both.

Rows are plain dicts with Chainlit's key names (``threadId``, ``createdAt`` ...); nothing
here imports Chainlit (``ui/datalayer.py`` is Chainlit's view over these functions). Every
function runs on a connection the caller opened (``engine.begin()``), so a caller can
make several of them one transaction, and raises SQLAlchemy's errors.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Final

from sqlalchemy import (
    Boolean,
    Column,
    ColumnElement,
    Dialect,
    Integer,
    MetaData,
    Table,
    Text,
    TypeDecorator,
    delete,
    exists,
    func,
    nulls_last,
    or_,
    select,
    table,
    type_coerce,
    update,
)
from sqlalchemy import column as named
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.blocks import blocks_for
from backend.safety import link_remote_images_off_loop
from backend.versions import TURN_KEY


def _finite(number: str) -> float | None:
    value = float(number)
    return value if math.isfinite(value) else None


def decoded(value: Any) -> Any:
    """Stored JSON text decoded; text that is not JSON as is.

    ``NaN``, ``Infinity`` and numbers too large for a float (``1e999``) come back as None:
    Python's ``json`` writes and reads them, but the answer they end up in (``POST
    /project/threads``) cannot hold them, and a stored one made the chat list fail.
    """
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value, parse_constant=lambda _: None, parse_float=_finite)
    except json.JSONDecodeError:
        return value


class JSONText(TypeDecorator[Any]):
    """A JSON value kept as TEXT (as every release of this app wrote it)."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: Any, dialect: Dialect) -> str | None:
        return None if value is None else json.dumps(value)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        return decoded(value)


PAGE: Final = MetaData()

users = Table(
    "kimi_page_users",
    PAGE,
    Column("id", Text, primary_key=True),
    Column("identifier", Text, nullable=False, unique=True),
    Column("metadata", JSONText, nullable=False),
    Column("createdAt", Text),
)
threads = Table(
    "kimi_threads",
    PAGE,
    Column("id", Text, primary_key=True),
    Column("createdAt", Text),
    Column("name", Text),
    Column("userId", Text),
    Column("userIdentifier", Text),
    Column("tags", JSONText),
    Column("metadata", JSONText),
)
steps = Table(
    "kimi_steps",
    PAGE,
    Column("id", Text, primary_key=True),
    Column("name", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("threadId", Text, nullable=False),
    Column("parentId", Text),
    Column("streaming", Boolean, nullable=False),
    Column("waitForAnswer", Boolean),
    Column("isError", Boolean),
    Column("metadata", JSONText),
    Column("tags", JSONText),
    Column("input", Text),
    Column("output", Text),
    Column("createdAt", Text),
    Column("start", Text),
    Column("end", Text),
    Column("generation", JSONText),
    Column("showInput", Text),
    Column("language", Text),
    Column("indent", Integer),
    Column("command", Text),
    Column("defaultOpen", Boolean),
    Column("autoCollapse", Boolean),
    Column("modes", JSONText),
)
elements = Table(
    "kimi_elements",
    PAGE,
    Column("id", Text, primary_key=True),
    Column("threadId", Text),
    Column("type", Text),
    Column("url", Text),
    Column("chainlitKey", Text),
    Column("name", Text, nullable=False),
    Column("display", Text),
    Column("objectKey", Text),
    Column("size", Text),
    Column("page", Integer),
    Column("language", Text),
    Column("forId", Text),
    Column("mime", Text),
    Column("props", JSONText),
    Column("autoPlay", Boolean),
    Column("playerConfig", JSONText),
)
feedbacks = Table(
    "kimi_feedback",
    PAGE,
    Column("id", Text, primary_key=True),
    Column("forId", Text, nullable=False),
    Column("threadId", Text, nullable=False),
    Column("value", Integer, nullable=False),
    Column("comment", Text),
)

turns = table(
    "kimi_turns",
    named("thread_id"),
    named("message_id"),
    named("text"),
    named("answer_id"),
    named("answer"),
    named("reasoning_id"),
    named("reasoning"),
    named("status"),
)
"""What the page reads of the turns (:mod:`backend.store.turns` writes them): the
questions, the answers and the reasonings."""

_HAS_ANSWER: Final = turns.c.answer != ""
"""A turn whose answer its row holds (the answer's message keeps no copy)."""

_ENDED_REASONING: Final = (turns.c.reasoning != "") & (turns.c.status != "pending")
"""A turn whose reasoning its row holds whole (the reasoning step's blocks keep no copy)."""

STEP_READ: Final = (
    "id", "name", "type", "threadId", "parentId", "streaming", "waitForAnswer", "isError",
    "metadata", "tags", "input", "output", "createdAt", "start", "end", "generation",
    "showInput", "language",
)  # fmt: skip
"""The step keys a page is drawn from: those Chainlit 2.12's own SQL layer reads back."""


def now() -> str:
    """This moment as Chainlit writes its timestamps, e.g. ``2026-12-06T07:30:00.123456Z``."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _columns(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    """``row``'s keys that are columns of ``table``."""
    return {key: value for key, value in row.items() if key in table.c}


def _insert(connection: AsyncConnection) -> Any:
    """The dialect's ``insert`` (the one with ``ON CONFLICT``)."""
    return (postgresql if connection.dialect.name == "postgresql" else sqlite).insert


def _upsert(
    connection: AsyncConnection,
    table: Table,
    row: dict[str, Any],
    where: Callable[[Any], ColumnElement[bool]] | None = None,
) -> Any:
    """``INSERT ... ON CONFLICT (id) DO UPDATE`` of ``row``'s columns in the connection's
    dialect; ``where(excluded)``: update only where it holds. Returns the statement."""
    statement = _insert(connection)(table).values(row)
    changed = {key: statement.excluded[key] for key in row if key != "id"}
    if not changed:
        return statement.on_conflict_do_nothing(index_elements=["id"])
    condition = where(statement.excluded) if where is not None else None
    return statement.on_conflict_do_update(index_elements=["id"], set_=changed, where=condition)


async def ensure_thread(connection: AsyncConnection, thread_id: str) -> None:
    """Make thread ``thread_id`` if there is none yet (no name, no owner)."""
    row = {"id": thread_id, "createdAt": now(), "metadata": {}}
    statement = _insert(connection)(threads).values(row)
    await connection.execute(statement.on_conflict_do_nothing(index_elements=["id"]))


async def update_thread(
    connection: AsyncConnection,
    thread_id: str,
    changes: dict[str, Any],
    metadata: dict[str, Any] | None,
) -> bool:
    """Write ``changes`` (columns of ``threads``: name, userId, userIdentifier, tags) to
    thread ``thread_id``, made if missing; ``metadata`` is merged into the stored one (a
    None value removes its key). An owner (``changes["userId"]``) is given only to a thread
    without one or already hers. Returns False when the thread is another user's (nothing
    is written)."""
    found = (
        await connection.execute(
            select(threads.c.userId, threads.c.metadata).where(threads.c.id == thread_id)
        )
    ).first()
    owner = changes.get("userId")
    if owner is not None and found is not None and found.userId not in (None, owner):
        return False
    if found is not None and not changes and metadata is None:
        return True
    stored = found.metadata if found is not None and isinstance(found.metadata, dict) else {}
    merged = {k: v for k, v in stored.items() if k not in (metadata or {})}
    merged.update({k: v for k, v in (metadata or {}).items() if v is not None})
    row = {"id": thread_id, **changes, "metadata": merged}
    if found is None:
        row["createdAt"] = now()
    if row.get("name") is None and isinstance(merged.get("name"), str):
        row["name"] = merged["name"]
    row = {key: value for key, value in row.items() if value is not None}

    def mine(_excluded: Any) -> ColumnElement[bool]:
        return or_(threads.c.userId.is_(None), threads.c.userId == owner)

    await connection.execute(_upsert(connection, threads, row, mine if owner else None))
    return True


async def write_step(connection: AsyncConnection, step: dict[str, Any]) -> bool:
    """Upsert ``step`` (Chainlit's step dict) into its thread (made if missing); an existing
    step is changed only if it is in the same thread. Returns False when it is not."""
    await ensure_thread(connection, str(step["threadId"]))
    row = {
        key: value
        for key, value in _columns(steps, step).items()
        if value is not None and not (isinstance(value, dict) and not value)
    }
    row["metadata"] = step.get("metadata") or {}
    row["generation"] = step.get("generation") or {}
    if "showInput" in step:
        row["showInput"] = str(step["showInput"]).lower()
    if row.get("output") and await _held_by_a_turn(connection, str(step["threadId"]), row):
        row["output"] = ""  # the turn holds it (backend/store/turns.py)
    elif row.get("output") and await _asked_in_a_turn(connection, str(step["threadId"]), step):
        row["output"] = None  # NULL: the turn holds it (:func:`questions`)
    statement = _upsert(connection, steps, row, lambda new: steps.c.threadId == new.threadId)
    result = await connection.execute(statement)
    return bool(result.rowcount)


async def _held_by_a_turn(
    connection: AsyncConnection, thread_id: str, step: dict[str, Any]
) -> bool:
    """True if a turn of ``thread_id`` holds ``step``'s text: its answer's message, or a
    block of its reasoning step (a child step) once its answer has ended."""
    answer = (turns.c.answer_id == step["id"]) & _HAS_ANSWER
    held = answer
    if step.get("parentId"):
        held = or_(answer, (turns.c.reasoning_id == step["parentId"]) & _ENDED_REASONING)
    found = await connection.execute(
        select(turns.c.thread_id).where(turns.c.thread_id == thread_id, held)
    )
    return found.first() is not None


def asked_as_its_own(step: dict[str, Any]) -> bool:
    """True if ``step`` (Chainlit's step dict) is a person's message that is its turn's by
    its own id. Not one drawn again for a version (ui/versions_view.py): its metadata names
    that version (:data:`backend.versions.TURN_KEY`), and it keeps its text."""
    named = (step.get("metadata") or {}).get(TURN_KEY)
    return step.get("type") == "user_message" and named in (None, "", step["id"])


async def _asked_in_a_turn(
    connection: AsyncConnection, thread_id: str, step: dict[str, Any]
) -> bool:
    """True if ``step`` is a person's message (:func:`asked_as_its_own`) whose turn in
    ``thread_id`` was asked with exactly its text (a question sent with PDF pages or video
    frames was asked with more; an edited one keeps its own)."""
    if not asked_as_its_own(step):
        return False
    found = await connection.execute(
        select(turns.c.thread_id).where(
            turns.c.thread_id == thread_id,
            turns.c.message_id == step["id"],
            turns.c.text == step["output"],
        )
    )
    return found.first() is not None


async def questions(connection: AsyncConnection, thread_ids: Iterable[str]) -> dict[str, str]:
    """The questions of the turns of ``thread_ids``, by their message's step id: the text of
    each person's message stored without one (NULL output: :func:`write_step`)."""
    found = await connection.execute(
        select(turns.c.message_id, turns.c.text).where(turns.c.thread_id.in_(list(thread_ids)))
    )
    return {str(key): str(question) for key, question in found}


async def answers(connection: AsyncConnection, thread_ids: Iterable[str]) -> dict[str, str]:
    """The answers of the turns of ``thread_ids`` that have one, by their answer's step id
    (the text as the model gave it: the page shows it with remote images made links)."""
    found = await connection.execute(
        select(turns.c.answer_id, turns.c.answer).where(
            turns.c.thread_id.in_(list(thread_ids)),
            turns.c.answer_id.is_not(None),
            _HAS_ANSWER,
        )
    )
    return {str(step_id): str(answer) for step_id, answer in found}


async def reasonings(connection: AsyncConnection, thread_ids: Iterable[str]) -> dict[str, str]:
    """The reasonings of the turns of ``thread_ids`` whose answer has ended, by the id of
    their reasoning step on the page (whose blocks keep no copy: :func:`write_step`)."""
    found = await connection.execute(
        select(turns.c.reasoning_id, turns.c.reasoning).where(
            turns.c.thread_id.in_(list(thread_ids)),
            turns.c.reasoning_id.is_not(None),
            _ENDED_REASONING,
        )
    )
    return {str(step_id): str(reasoning) for step_id, reasoning in found}


async def drawn_blocks(reasoning: str, count: int) -> list[str]:
    """The texts of ``count`` blocks of ``reasoning`` as the stream drew them
    (:func:`backend.blocks.blocks_for`), remote images made links."""
    return [await link_remote_images_off_loop(text) for text in blocks_for(reasoning, count)]


async def give_reasoning_back(
    connection: AsyncConnection, thread_id: str, step_id: str, reasoning: str
) -> None:
    """Give the blocks of reasoning step ``step_id`` their text again (:func:`drawn_blocks`),
    when no turn holds it any more (a Retry in place answered its message again:
    :mod:`backend.store.turns`)."""
    found = await connection.execute(
        select(steps.c.id)
        .where(steps.c.threadId == thread_id, steps.c.parentId == step_id)
        .order_by(steps.c.createdAt)
    )
    ids = [str(row[0]) for row in found]
    for block_id, output in zip(ids, await drawn_blocks(reasoning, len(ids)), strict=True):
        await connection.execute(update(steps).where(steps.c.id == block_id).values(output=output))


async def empty_copies(
    connection: AsyncConnection,
    thread_id: str,
    question: tuple[str, str],
    answer_id: str | None,
    reasoning_id: str | None,
) -> None:
    """Empty the steps of ``thread_id`` whose text a turn now holds: the person's message
    (``question``: its id and the text the turn was asked with; only if its step holds
    exactly that), its answer's message (``answer_id``) and the blocks of its ended
    reasoning's step (``reasoning_id``); None: not that one."""
    message_id, text = question
    found = await connection.execute(
        select(steps.c.id, steps.c.type, steps.c.metadata).where(
            steps.c.threadId == thread_id,
            steps.c.id == message_id,
            steps.c.output == text,
            steps.c.output != "",
        )
    )
    step = found.mappings().first()
    if step is not None and asked_as_its_own(dict(step)):
        await connection.execute(update(steps).where(steps.c.id == message_id).values(output=None))
    if answer_id is not None:
        await connection.execute(
            update(steps)
            .where(steps.c.threadId == thread_id, steps.c.id == answer_id)
            .values(output="")
        )
    if reasoning_id is not None:
        await connection.execute(
            update(steps)
            .where(steps.c.threadId == thread_id, steps.c.parentId == reasoning_id)
            .values(output="")
        )


async def delete_steps(connection: AsyncConnection, step_ids: Iterable[str]) -> list[str]:
    """Delete steps ``step_ids`` with their feedback and elements; returns the object keys of
    the element files to delete once the transaction is done."""
    ids = list(step_ids)
    if not ids:
        return []
    found = await connection.execute(
        select(elements.c.objectKey).where(
            elements.c.forId.in_(ids), elements.c.objectKey.is_not(None)
        )
    )
    keys = [str(key) for (key,) in found]
    await connection.execute(delete(feedbacks).where(feedbacks.c.forId.in_(ids)))
    await connection.execute(delete(elements).where(elements.c.forId.in_(ids)))
    await connection.execute(delete(steps).where(steps.c.id.in_(ids)))
    return keys


async def steps_after(connection: AsyncConnection, thread_id: str, created_at: str) -> list[str]:
    """The ids of the steps of ``thread_id`` made after ``created_at`` (ISO 8601 text)."""
    found = await connection.execute(
        select(steps.c.id).where(steps.c.threadId == thread_id, steps.c.createdAt > created_at)
    )
    return [str(step_id) for (step_id,) in found]


async def thread_of(connection: AsyncConnection, table: Table, row_id: str) -> str | None:
    """The thread the step or element ``row_id`` is in (None: there is none)."""
    found = (await connection.execute(select(table.c.threadId).where(table.c.id == row_id))).first()
    return None if found is None else found[0]


async def write_element(connection: AsyncConnection, element: dict[str, Any]) -> None:
    """Upsert ``element`` (Chainlit's element dict, file already stored)."""
    row = {key: value for key, value in _columns(elements, element).items() if value is not None}
    await connection.execute(_upsert(connection, elements, row))


async def delete_element(connection: AsyncConnection, element_id: str) -> str | None:
    """Delete element ``element_id``; returns its file's object key (None: none)."""
    found = (
        await connection.execute(select(elements.c.objectKey).where(elements.c.id == element_id))
    ).first()
    await connection.execute(delete(elements).where(elements.c.id == element_id))
    return None if found is None else found[0]


async def delete_thread(connection: AsyncConnection, thread_id: str) -> list[str]:
    """Delete thread ``thread_id`` with its steps, elements and feedback; returns the object
    keys of its element files."""
    found = await connection.execute(
        select(elements.c.objectKey).where(
            elements.c.threadId == thread_id, elements.c.objectKey.is_not(None)
        )
    )
    keys = [str(key) for (key,) in found]
    await connection.execute(delete(feedbacks).where(feedbacks.c.threadId == thread_id))
    in_thread = select(steps.c.id).where(steps.c.threadId == thread_id)
    await connection.execute(delete(feedbacks).where(feedbacks.c.forId.in_(in_thread)))
    await connection.execute(delete(elements).where(elements.c.threadId == thread_id))
    await connection.execute(delete(steps).where(steps.c.threadId == thread_id))
    await connection.execute(delete(threads).where(threads.c.id == thread_id))
    return keys


async def write_feedback(connection: AsyncConnection, feedback: dict[str, Any]) -> None:
    """Upsert one feedback row (``id``, ``forId``, ``threadId``, ``value``, ``comment``)."""
    row = {key: value for key, value in _columns(feedbacks, feedback).items() if value is not None}
    await connection.execute(_upsert(connection, feedbacks, row))


async def delete_feedback(connection: AsyncConnection, feedback_id: str) -> None:
    """Delete feedback ``feedback_id`` (nothing if there is none)."""
    await connection.execute(delete(feedbacks).where(feedbacks.c.id == feedback_id))


async def user(connection: AsyncConnection, identifier: str) -> dict[str, Any] | None:
    """The page user named ``identifier`` (id, identifier, metadata, createdAt), or None."""
    found = (
        await connection.execute(select(users).where(users.c.identifier == identifier))
    ).first()
    return None if found is None else dict(found._mapping)


async def write_user(
    connection: AsyncConnection, identifier: str, metadata: dict[str, Any], new_id: str
) -> None:
    """Make the page user ``identifier`` with id ``new_id``, or update her metadata."""
    if await user(connection, identifier) is None:
        row = {"id": new_id, "identifier": identifier, "metadata": metadata, "createdAt": now()}
        await connection.execute(users.insert().values(row))
    else:
        await connection.execute(
            users.update().where(users.c.identifier == identifier).values(metadata=metadata)
        )


async def identifier(connection: AsyncConnection, user_id: str) -> str | None:
    """The identifier of the page user with id ``user_id``, or None."""
    found = await connection.execute(select(users.c.identifier).where(users.c.id == user_id))
    return found.scalar()


async def listed_threads(
    connection: AsyncConnection,
    *,
    user_id: str | None = None,
    thread_id: str | None = None,
    search: str | None = None,
    feedback: int | None = None,
    limit: int = 1000,
) -> list[dict[str, Any]]:
    """Threads of ``user_id`` (or the one ``thread_id``), most recently written first (the
    time of their last step), without steps: the thread's columns and ``updatedAt``.

    ``search``: only threads whose page shows it (any case): in a step, or in a question,
    an answer or a reasoning its turn holds for the page (not another version's, nor a
    reasoning the chat's settings hid); ``feedback``: only threads with a feedback of that
    value.
    """
    last = select(func.max(steps.c.createdAt)).where(steps.c.threadId == threads.c.id)
    query = select(threads, last.scalar_subquery().label("updatedAt"))
    if thread_id is not None:
        query = query.where(threads.c.id == thread_id)
    else:
        query = query.where(threads.c.userId == user_id)
    if search:
        pattern = f"%{search.lower()}%"
        query = query.where(
            or_(
                exists().where(
                    steps.c.threadId == threads.c.id, func.lower(steps.c.output).like(pattern)
                ),
                exists().where(  # a question its turn holds: the page shows the turn's text
                    steps.c.threadId == threads.c.id,
                    steps.c.output.is_(None),
                    steps.c.type == "user_message",
                    turns.c.thread_id == threads.c.id,
                    turns.c.message_id == steps.c.id,
                    func.lower(turns.c.text).like(pattern),
                ),
                exists().where(  # an answer or a reasoning its turn holds, on the page
                    steps.c.threadId == threads.c.id,
                    turns.c.thread_id == threads.c.id,
                    or_(
                        (steps.c.id == turns.c.answer_id)
                        & func.lower(turns.c.answer).like(pattern),
                        (steps.c.id == turns.c.reasoning_id)
                        & func.lower(turns.c.reasoning).like(pattern),
                    ),
                ),
            )
        )
    if feedback is not None:
        query = query.where(
            exists().where(feedbacks.c.threadId == threads.c.id, feedbacks.c.value == feedback)
        )
    query = query.order_by(nulls_last(last.scalar_subquery().desc())).limit(limit)
    return [dict(row._mapping) for row in await connection.execute(query)]


async def thread_rows(
    connection: AsyncConnection, thread_ids: list[str]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The steps (oldest first, each with its feedback row's ``feedback_*`` columns) and the
    elements of the threads ``thread_ids``."""
    read = [steps.c[key] for key in STEP_READ]
    found = await connection.execute(
        select(
            *read,
            feedbacks.c.id.label("feedback_id"),
            feedbacks.c.value.label("feedback_value"),
            feedbacks.c.comment.label("feedback_comment"),
        )
        .select_from(steps.outerjoin(feedbacks, feedbacks.c.forId == steps.c.id))
        .where(steps.c.threadId.in_(thread_ids))
        .order_by(steps.c.createdAt)
    )
    step_rows = [dict(row._mapping) for row in found]
    found = await connection.execute(select(elements).where(elements.c.threadId.in_(thread_ids)))
    return step_rows, [dict(row._mapping) for row in found]


async def element(
    connection: AsyncConnection, thread_id: str, element_id: str
) -> dict[str, Any] | None:
    """Element ``element_id`` of thread ``thread_id``, or None."""
    found = (
        await connection.execute(
            select(elements).where(elements.c.threadId == thread_id, elements.c.id == element_id)
        )
    ).first()
    return None if found is None else dict(found._mapping)


async def favorite_steps(connection: AsyncConnection, user_id: str) -> list[dict[str, Any]]:
    """The steps of ``user_id``'s threads marked favorite (``metadata.favorite``), newest first."""
    found = await connection.execute(
        select(*[steps.c[key] for key in STEP_READ])
        .select_from(steps.join(threads, threads.c.id == steps.c.threadId))
        .where(
            threads.c.userId == user_id,
            type_coerce(steps.c.metadata, Text).like('%"favorite": true%'),
        )
        .order_by(steps.c.createdAt.desc())
    )
    return [dict(row._mapping) for row in found if (row.metadata or {}).get("favorite")]
