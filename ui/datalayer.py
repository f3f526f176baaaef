"""Chainlit's SQLAlchemy data layer on our engine, with its SQLite problems fixed.

Chainlit 2.12's ``SQLAlchemyDataLayer`` (research-turn2.md, read in its source):

* binds list-valued ``tags`` as is, which SQLite cannot (Chainlit #2528); with
  a chat profile and ``auto_tag_thread`` on, the failing write is the one that
  links a new thread to its user, so the chat never shows in the history;
* binds ``modes`` (a dict) as is (#2750);
* runs ``send()`` and the later ``update()`` of a step as two tasks that race;
  the empty first write can land last and blank the step (#2789);
* returns JSON columns as strings and booleans as 0/1 from SQLite;
* logs write errors as warnings and carries on.

Here: lists and dicts are JSON-encoded before binding; writes of one step run
one after the other in the order they were started (a FIFO lock per step id;
tasks start in creation order, so the last ``update()`` lands last), and so do
the element writes of one thread (uploads come back in upload order); JSON and
booleans are decoded on read; a failed statement is logged as an error. The
engine is the app's (:class:`backend.store.Store`), not a second one, and
deleting a thread also deletes its stored turns and prepared images.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

from chainlit.data.sql_alchemy import SQLAlchemyDataLayer
from chainlit.data.storage_clients.base import BaseStorageClient
from chainlit.data.utils import queue_until_user_message
from chainlit.element import Element
from chainlit.step import StepDict
from chainlit.types import ThreadDict
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from backend.logs import LOGGER_NAME
from backend.store import Store

log = logging.getLogger(LOGGER_NAME)

_STEP_JSON = ("metadata", "tags", "generation", "modes")
_STEP_BOOLS = ("streaming", "waitForAnswer", "isError")


def _decoded(value: Any) -> Any:
    """A JSON string decoded; anything else (or text that is not JSON) as is."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


class KimiDataLayer(SQLAlchemyDataLayer):
    """``SQLAlchemyDataLayer`` on the app's store, fixed for SQLite (see the module docstring).

    Args:
        store: owns the engine; this layer borrows it and never disposes it.
        storage: where element files go (``ui/files.py``).
    """

    def __init__(self, store: Store, storage: BaseStorageClient) -> None:
        # Not SQLAlchemyDataLayer.__init__: it would create a second engine.
        self._conninfo = store.url
        self.user_thread_limit = 1000
        self.show_logger = False
        self.engine = store.engine
        self.async_session = async_sessionmaker(
            bind=store.engine, expire_on_commit=False, class_=AsyncSession
        )
        self.storage_provider = storage
        self.store = store
        self.failed_statements = 0
        self._step_locks: dict[str, tuple[asyncio.Lock, int]] = {}

    async def execute_sql(
        self, query: str, parameters: dict[str, Any]
    ) -> list[dict[str, Any]] | int | None:
        """Chainlit's contract (rows, row count, or None on failure), failures logged as errors."""
        async with self.async_session() as session:
            try:
                async with session.begin():
                    result = await session.execute(text(query), parameters)
                    if result.returns_rows:
                        rows = [dict(row._mapping) for row in result.fetchall()]
                        return cast(list[dict[str, Any]], self.clean_result(rows))
                    return int(result.rowcount)
            except SQLAlchemyError as exc:
                self.failed_statements += 1
                log.error("database statement failed: %s", str(exc).splitlines()[0])
                return None

    async def update_thread(
        self,
        thread_id: str,
        name: str | None = None,
        user_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        tags: list[str] | None = None,
    ) -> None:
        """Chainlit's upsert of a thread, with ``tags`` JSON-encoded."""
        encoded = json.dumps(tags) if tags is not None else None
        await super().update_thread(thread_id, name, user_id, metadata, cast(Any, encoded))

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
    async def create_step(self, step_dict: StepDict) -> None:
        """Chainlit's upsert of a step: lists and dicts encoded, one write per step at a time."""
        step: dict[str, Any] = dict(step_dict)
        for key in ("tags", "modes"):
            if isinstance(step.get(key), list | dict):
                step[key] = json.dumps(step[key])
        async with self._step_lock(str(step.get("id"))):
            await super().create_step(cast(StepDict, step))

    @queue_until_user_message()  # type: ignore[untyped-decorator]
    async def create_element(self, element: Element) -> None:
        """Chainlit's element write, one at a time per thread, in the order they were sent.

        Chainlit sends a message's uploads as one task each; unordered, they would
        come back from the database in whatever order the writes finished.
        """
        async with self._step_lock(f"elements:{element.thread_id}"):
            await super().create_element(element)

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
