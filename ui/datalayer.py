"""Chainlit's SQLAlchemy data layer on our engine, with its SQLite problems fixed.

Chainlit 2.12's ``SQLAlchemyDataLayer`` (as read in its chainlit/data/sql_alchemy.py):

* binds list-valued ``tags`` as is, which SQLite cannot (Chainlit #2528); with
  a chat profile and ``auto_tag_thread`` on, the failing write is the one that
  links a new thread to its user, so the chat never shows in the history;
* binds ``modes`` (a dict) as is (#2750);
* runs ``send()`` and the later ``update()`` of a step as two tasks that race;
  the empty first write can land last and blank the step (#2789);
* returns JSON columns as strings and booleans as 0/1 from SQLite;
* logs write errors as warnings and carries on;
* upserts steps and elements by id, and deletes them by id, whatever thread the
  row is in: a client that sends a message with the id of someone else's step
  (socket.io ``client_message``), or a custom element with someone else's
  element id (``PUT``/``DELETE /project/element``), moves or deletes it;
* names a thread after its whole first message (megabytes, if that is what was
  sent), and sends every step of every listed thread to the sidebar.

Here: a write or delete by id touches only rows of the writing session's own thread
(Chainlit's ``context.session.thread_id``); anything else is refused and logged, and
nothing of another chat changes. Thread titles are cut to :data:`TITLE_MAX_CHARS`; the
sidebar's pages carry no steps. Lists and dicts are JSON-encoded before binding; writes
of one step run one after the other in the order they were started (a FIFO lock per step
id; tasks start in creation order, so the last ``update()`` lands last), and so do the
element writes of one thread (uploads come back in upload order); JSON and booleans are
decoded on read; a failed statement is logged as an error. The engine is the app's
(:class:`backend.store.core.Store`), not a second one (:func:`ui.chainlit_patches.share_engine`),
and deleting a thread also deletes its stored turns and prepared images.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import re
from collections.abc import AsyncIterator, Callable, Coroutine, Hashable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Concatenate, Final, ParamSpec, TypeVar, cast

from chainlit.context import ChainlitContextException, context
from chainlit.data.sql_alchemy import SQLAlchemyDataLayer
from chainlit.data.storage_clients.base import BaseStorageClient
from chainlit.data.utils import queue_until_user_message
from chainlit.element import Element
from chainlit.session import WebsocketSession
from chainlit.step import StepDict
from chainlit.types import PaginatedResponse, Pagination, ThreadDict, ThreadFilter
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from backend.i18n import msg
from backend.logs import LOGGER_NAME
from backend.store.core import Store
from backend.store.pending import Write, cause
from ui.chainlit_patches import share_engine
from ui.first_words import FIRST_WORDS, FirstWordsGate

log = logging.getLogger(LOGGER_NAME)

_STEP_JSON = ("metadata", "tags", "generation", "modes")
_STEP_BOOLS = ("streaming", "waitForAnswer", "isError")

TITLE_MAX_CHARS: Final = 100
"""Longest thread title stored: about what the sidebar shows on one line, and far
below the megabytes a pasted first message can hold."""


def readable_title(text: str) -> str:
    """``text`` as a one-line title of at most :data:`TITLE_MAX_CHARS` characters.

    Runs of whitespace (newlines too) become one space; a longer text is cut at
    its last space in the limit (at the limit if there is none near) and ends
    with an ellipsis, e.g. ``"What is in this photo…"``.
    """
    line = " ".join(text[: TITLE_MAX_CHARS * 8].split())
    if len(line) <= TITLE_MAX_CHARS:
        return line
    cut = line[: TITLE_MAX_CHARS - 1]
    space = cut.rfind(" ")
    return (cut[:space] if space > TITLE_MAX_CHARS // 2 else cut).rstrip() + "…"


def _writer_thread() -> str | None:
    """The thread of the session making the current data-layer call."""
    return context.session.thread_id


def _writer_thread_or_none() -> str | None:
    """:func:`_writer_thread`, or None outside a session (an HTTP route's write)."""
    try:
        return _writer_thread()
    except ChainlitContextException:
        return None


def _answering_task() -> asyncio.Task[Any] | None:
    """The task answering a message in the session making the current call (Chainlit's
    ``WebsocketSession.current_task``), or None (an HTTP route, no such task)."""
    try:
        return getattr(context.session, "current_task", None)
    except ChainlitContextException:
        return None


async def _flush_queued_writes() -> None:
    """Run, now and in order, the writes Chainlit queued before the chat's first message
    (``queue_until_user_message``), once that message has come and its thread is written.

    Chainlit runs them itself only after its own first thread write returns (in a task of
    their own: Chainlit 2.12's ``ChainlitEmitter.flush_thread_queues``); that write waits
    for the answer's first words (``ui/first_words.py``), and the writes made meanwhile
    would then land first: a status note deleted before it is stored, and stored again.
    Called only from that write (it names the thread), never from inside a queued write:
    a queued update would otherwise land before the queued write it updates.
    """
    try:
        session = context.session
    except ChainlitContextException:
        return
    if (
        isinstance(session, WebsocketSession)
        and session.has_first_interaction
        and any(session.thread_queues.values())
    ):
        await session.flush_method_queue()


P = ParamSpec("P")
R = TypeVar("R")


def _after_first_words(
    method: Callable[Concatenate[KimiDataLayer, P], Coroutine[Any, Any, R]],
) -> Callable[Concatenate[KimiDataLayer, P], Coroutine[Any, Any, R]]:
    """A data-layer write that waits, in order, for its chat's first words
    (``ui/first_words.py``)."""

    @functools.wraps(method)
    async def run(layer: KimiDataLayer, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return await layer.first_words.run(
            _answering_task(), lambda: method(layer, *args, **kwargs)
        )

    return run


_WRITE: Final = re.compile(r"\s*(INSERT INTO|UPDATE|DELETE FROM)\s+\"?(\w+)", re.IGNORECASE)


def _held_write(query: str) -> bool:
    """True for a statement that writes a table other than Chainlit's ``users``."""
    found = _WRITE.match(query)
    return found is not None and found.group(2).lower() != "users"


_UPSERTED: Final = re.compile(r"\s*INSERT INTO (steps|elements) ", re.IGNORECASE)


def _row_key(query: str, parameters: dict[str, Any]) -> Hashable:
    """The row a write is about, for :class:`backend.store.pending.Write`: a step's or an
    element's upsert writes the whole row (a later one replaces a held one); any other
    statement is only the same as an identical one."""
    upserted = _UPSERTED.match(query)
    if upserted and "id" in parameters:
        return (upserted.group(1), str(parameters["id"]))
    return (query, json.dumps(parameters, sort_keys=True, default=str))


def _finite(number: str) -> float | None:
    value = float(number)
    return value if math.isfinite(value) else None


def _decoded(value: Any) -> Any:
    """A JSON string decoded; anything else (or text that is not JSON) as is.

    ``NaN``, ``Infinity`` and numbers too large for a float (``1e999``) come back as
    None: Python's ``json`` writes and reads them, but the answer they end up in
    (``POST /project/threads``) cannot hold them, and a stored one made the list fail.
    """
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value, parse_constant=lambda _: None, parse_float=_finite)
        except json.JSONDecodeError:
            return value
    return value


class KimiDataLayer(SQLAlchemyDataLayer):
    """``SQLAlchemyDataLayer`` on the app's store, fixed for SQLite (see the module docstring).

    Args:
        store: owns the engine; this layer borrows it and never disposes it.
        storage: where element files go (``ui/files.py``).
        first_words: what a chat's statements wait for (``ui/first_words.py``).
    """

    def __init__(
        self, store: Store, storage: BaseStorageClient, first_words: FirstWordsGate = FIRST_WORDS
    ) -> None:
        super().__init__(conninfo=store.url, storage_provider=storage)
        share_engine(self, store.engine)  # the store's engine, not a second one
        self.store = store
        self.first_words = first_words
        self.failed_statements = 0
        self._step_locks: dict[str, tuple[asyncio.Lock, int]] = {}

    async def execute_sql(
        self, query: str, parameters: dict[str, Any]
    ) -> list[dict[str, Any]] | int | None:
        """Chainlit's contract (rows, row count, or None on failure), failures logged as errors.

        A write (``INSERT``, ``UPDATE``, ``DELETE``) goes through the store's
        :class:`backend.store.pending.PendingWrites`: while the database cannot take it,
        it is held (None is returned) and written, in order, once it can. Chainlit's
        writes of ``users`` are not held: it makes its user row again at the next
        sign-in, and a held one would only fail then as a duplicate.
        """
        if not _held_write(query):
            try:
                return await self._run_sql(query, parameters)
            except (SQLAlchemyError, OSError) as exc:
                self.failed_statements += 1
                log.error("database statement failed: %s", cause(exc, self.store.where))
                return None
        thread = _writer_thread_or_none()
        job = Write(
            run=lambda: self._run_sql(query, parameters),
            chat=thread,
            what=msg("part of what the page shows of this chat"),
            size=len(query) + sum(len(str(v)) for v in parameters.values()),
            key=_row_key(query, parameters),
        )
        outcome = await self.store.pending.write(job)
        if outcome.held or outcome.lost:
            self.failed_statements += 1
        return cast(list[dict[str, Any]] | int | None, outcome.value)

    async def _run_sql(self, query: str, parameters: dict[str, Any]) -> list[dict[str, Any]] | int:
        """Run one statement in its own transaction; raises the database's failure."""
        async with self.async_session() as session, session.begin():
            result = await session.execute(text(query), parameters)
            if result.returns_rows:
                rows = [dict(row._mapping) for row in result.fetchall()]
                return cast(list[dict[str, Any]], self.clean_result(rows))
            return int(result.rowcount)

    @_after_first_words
    async def update_thread(
        self,
        thread_id: str,
        name: str | None = None,
        user_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        tags: list[str] | None = None,
    ) -> None:
        """Chainlit's upsert of a thread: ``tags`` JSON-encoded, ``name`` cut to a title;
        refused (logged) when ``user_id`` would take over a thread of another user."""
        if user_id is not None:
            rows = await self.execute_sql(
                'SELECT "userId" FROM threads WHERE "id" = :id', {"id": thread_id}
            )
            if isinstance(rows, list) and rows and rows[0]["userId"] not in (None, user_id):
                log.warning("refused to give chat %s to another user", thread_id)
                return
        encoded = json.dumps(tags) if tags is not None else None
        title = readable_title(name) if name is not None else None
        await super().update_thread(thread_id, title, user_id, metadata, cast(Any, encoded))
        if name is not None:  # Chainlit's first write of the thread names it
            await _flush_queued_writes()

    @asynccontextmanager
    async def _step_lock(self, step_id: str) -> AsyncIterator[None]:
        lock, users = self._step_locks.get(step_id) or (asyncio.Lock(), 0)
        self._step_locks[step_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._step_locks[step_id]
            if users == 1:
                del self._step_locks[step_id]
            else:
                self._step_locks[step_id] = (lock, users - 1)

    @queue_until_user_message()  # type: ignore[untyped-decorator]
    @_after_first_words
    async def create_step(self, step_dict: StepDict) -> None:
        """Chainlit's upsert of a step (``SQLAlchemyDataLayer.create_step`` of 2.12, the
        same columns and values), except that a step of another thread is never changed.

        Lists and dicts are JSON-encoded; writes of one step run one at a time. The
        update happens only ``WHERE steps."threadId" = excluded."threadId"`` (one
        statement, no race): a client that sends a message under the id of another
        chat's step has its write refused and logged.
        """
        step: dict[str, Any] = dict(step_dict)
        for key in ("tags", "modes"):
            if isinstance(step.get(key), list | dict):
                step[key] = json.dumps(step[key])
        step["showInput"] = str(step.get("showInput", "")).lower() if "showInput" in step else None
        parameters = {
            key: value
            for key, value in step.items()
            if value is not None and not (isinstance(value, dict) and not value)
        }
        parameters["metadata"] = json.dumps(step.get("metadata", {}))
        parameters["generation"] = json.dumps(step.get("generation", {}))
        columns = ", ".join(f'"{key}"' for key in parameters)
        values = ", ".join(f":{key}" for key in parameters)
        updates = ", ".join(f'"{key}" = :{key}' for key in parameters if key != "id")
        query = (
            f"INSERT INTO steps ({columns}) VALUES ({values}) ON CONFLICT (id) DO UPDATE "
            f'SET {updates} WHERE steps."threadId" = excluded."threadId"'
        )
        async with self._step_lock(str(step.get("id"))):
            await self.update_thread(str(step["threadId"]))
            if await self.execute_sql(query, parameters) == 0:
                log.warning("refused a write to step %s: it is in another chat", step.get("id"))

    @queue_until_user_message()  # type: ignore[untyped-decorator]
    @_after_first_words
    async def update_step(self, step_dict: StepDict) -> None:
        """Chainlit's update of a step: its upsert (:meth:`create_step`)."""
        await self.create_step(step_dict)

    @queue_until_user_message()  # type: ignore[untyped-decorator]
    @_after_first_words
    async def delete_step(self, step_id: str) -> None:
        """Chainlit's delete of a step with its feedback and elements, only in the
        writing session's thread (a step of another chat stays)."""
        if await self._in_this_chat("steps", step_id):
            await super().delete_step(step_id)

    @queue_until_user_message()  # type: ignore[untyped-decorator]
    @_after_first_words
    async def create_element(self, element: Element) -> None:
        """Chainlit's element write, one at a time per thread, in the order they were sent,
        for the writing session's thread only, and never over another thread's element.

        Chainlit sends a message's uploads as one task each; unordered, they would
        come back from the database in whatever order the writes finished. A custom
        element from the client (``PUT /project/element``) names its own thread and
        id; one naming another thread, or the id of another thread's element, is
        refused and logged before its file is written.
        """
        async with self._step_lock(f"elements:{element.thread_id}"):
            found = await self.execute_sql(
                'SELECT "threadId" FROM elements WHERE "id" = :id', {"id": element.id}
            )
            theirs = isinstance(found, list) and found and found[0]["threadId"] != element.thread_id
            if element.thread_id != _writer_thread() or theirs:
                log.warning("refused a write to element %s: it is in another chat", element.id)
                return
            try:
                await super().create_element(element)
            except OSError as exc:  # its file could not be written (a read-only or full disk)
                await self._hold_element(element, exc)

    async def _hold_element(self, element: Element, error: OSError) -> None:
        """Hold the write of an element whose file could not be stored, with its bytes
        (the session's upload folder goes with the session), to write it once the store
        takes writes again (:mod:`backend.store.pending`)."""
        if element.path and not element.content:
            try:
                element.content = await asyncio.to_thread(Path(element.path).read_bytes)
            except OSError:
                log.error("an upload's file is gone before it could be stored: %s", element.name)
                return
            element.path = None
        write = SQLAlchemyDataLayer.create_element.__wrapped__  # not queued: sent already

        async def again() -> None:
            await write(self, element)

        job = Write(
            run=again,
            chat=element.thread_id,
            what=msg("the file {name}", name=element.name),
            size=len(element.content or b""),
            key=("elements", element.id),
        )
        await self.store.pending.hold(job, error)

    @queue_until_user_message()  # type: ignore[untyped-decorator]
    @_after_first_words
    async def delete_element(self, element_id: str, thread_id: str | None = None) -> None:
        """Chainlit's delete of an element and its file, only in the writing session's thread
        (``thread_id`` comes from the client for custom elements and is not trusted)."""
        if await self._in_this_chat("elements", element_id):
            await super().delete_element(element_id, thread_id)

    async def _in_this_chat(self, table: str, row_id: str) -> bool:
        """True if row ``row_id`` of ``table`` (steps, elements) is in the writing session's
        thread; else False, and the refused delete is logged."""
        found = await self.execute_sql(
            f'SELECT 1 FROM {table} WHERE "id" = :id AND "threadId" = :thread',
            {"id": row_id, "thread": _writer_thread()},
        )
        if not found:
            log.warning("refused to delete %s %s: it is not in this chat", table, row_id)
        return bool(found)

    async def get_all_user_threads(
        self, user_id: str | None = None, thread_id: str | None = None
    ) -> list[ThreadDict] | None:
        """Chainlit's thread query with JSON columns decoded and booleans as booleans."""
        threads = await super().get_all_user_threads(user_id=user_id, thread_id=thread_id)
        for thread in threads or []:
            record = cast(dict[str, Any], thread)
            record["metadata"] = _decoded(record.get("metadata")) or {}
            record["tags"] = _decoded(record.get("tags"))
            for step in record.get("steps", []):
                for key in _STEP_JSON:
                    if key in step:
                        step[key] = _decoded(step[key])
                for key in _STEP_BOOLS:
                    if step.get(key) is not None:
                        step[key] = bool(step[key])
            for element in record.get("elements", []):
                element["props"] = _decoded(element.get("props")) or {}
        return threads

    async def list_threads(
        self, pagination: Pagination, filters: ThreadFilter
    ) -> PaginatedResponse[ThreadDict]:
        """Chainlit's page of the sidebar's threads, without their steps and elements.

        Chainlit reads every step to search them, then sends them all with the page
        (megabytes for one long pasted message); the sidebar shows names and dates.
        """
        page = await super().list_threads(pagination, filters)
        for thread in page.data:
            record = cast(dict[str, Any], thread)
            record["steps"], record["elements"] = [], []
        return page

    async def delete_steps_after(self, thread_id: str, created_at: str, keep: set[str]) -> int:
        """Delete the steps of ``thread_id`` created after ``created_at``, except ``keep``.

        For an edit of an earlier message: Chainlit removes the later messages
        from the page and the database, but not the reasoning and run steps
        between them, which a resumed chat would show again. Their elements
        (rows and files) and feedback go too. Returns how many steps were deleted.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database failed.
        """
        async with self.engine.begin() as db:
            found = await db.execute(
                text('SELECT "id" FROM steps WHERE "threadId" = :t AND "createdAt" > :c'),
                {"t": thread_id, "c": created_at},
            )
            doomed = [str(row[0]) for row in found if str(row[0]) not in keep]
            keys: list[str] = []
            for step_id in doomed:
                params = {"id": step_id}
                elements = await db.execute(
                    text('SELECT "objectKey" FROM elements WHERE "forId" = :id'), params
                )
                keys += [str(row[0]) for row in elements if row[0]]
                await db.execute(text('DELETE FROM feedbacks WHERE "forId" = :id'), params)
                await db.execute(text('DELETE FROM elements WHERE "forId" = :id'), params)
                await db.execute(text('DELETE FROM steps WHERE "id" = :id'), params)
        storage = self.storage_provider
        if storage is not None:
            for key in keys:
                await storage.delete_file(key)
        return len(doomed)

    async def delete_thread(self, thread_id: str) -> None:
        """Chainlit's delete, then our turns and prepared images of the thread."""
        await super().delete_thread(thread_id)
        await self.store.turns.delete_thread(thread_id)
