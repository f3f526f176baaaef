"""Chainlit's data layer over our store: Chainlit's public ``BaseDataLayer``, registered
with ``@cl.data_layer`` (ui/history.py).

The rows are our store's (:mod:`backend.store.pages`: SQLAlchemy Core tables on the app's
one engine, :class:`backend.store.core.Store`); this module is the view Chainlit calls,
with what only a Chainlit session knows:

* a write or delete by id touches only rows of the writing session's own thread
  (Chainlit's ``context.session.thread_id``); anything else is refused and logged, and
  nothing of another chat changes (a client can send a message under another chat's
  step id over socket.io, or a custom element under another's element id);
* a thread's owner is never changed once set, and is written from the session (while the
  database cannot be read, the chat still gets its owner: issue 52);
* thread titles are cut to :data:`TITLE_MAX_CHARS`; the sidebar's pages carry no steps;
* an answer's text is drawn from its stored turn (its one record: the step of its message
  keeps none, :mod:`backend.store.pages`), and so are an ended answer's reasoning (its
  blocks, cut again as they streamed) and a question its turn was asked with as typed;
* writes of one step run one after the other in the order they were started (a FIFO lock
  per step id; Chainlit runs a step's ``send()`` and later ``update()`` as two tasks, and
  the empty first write must never land last), and so do the element writes of one thread
  (uploads come back in upload order);
* every write goes through the store's :class:`backend.store.pending.PendingWrites`: while
  the database or the file store cannot take it, it is held (with an upload's bytes) and
  written, in order, once it can; a newer write of a step or element replaces the held one;
* a chat's writes wait for its answer's first words (``ui/first_words.py``);
* deleting a thread also deletes its stored turns and prepared images.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Concatenate, Final, ParamSpec, TypeVar, cast

from chainlit.context import ChainlitContextException, context
from chainlit.data.base import BaseDataLayer
from chainlit.data.storage_clients.base import BaseStorageClient
from chainlit.data.utils import queue_until_user_message
from chainlit.element import Element, ElementDict
from chainlit.session import WebsocketSession
from chainlit.step import StepDict
from chainlit.types import (
    Feedback,
    FeedbackDict,
    PageInfo,
    PaginatedResponse,
    Pagination,
    ThreadDict,
    ThreadFilter,
)
from chainlit.user import PersistedUser, User
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection

from backend.i18n import msg
from backend.logs import LOGGER_NAME
from backend.safety import link_remote_images_off_loop
from backend.starters import label_for
from backend.store import pages
from backend.store.core import Store
from backend.store.pending import Write, cause
from ui import compare_view
from ui.first_words import FIRST_WORDS, FirstWordsGate

log = logging.getLogger(LOGGER_NAME)

TITLE_MAX_CHARS: Final = 100
"""Longest thread title stored: about what the sidebar shows on one line, and far
below the megabytes a pasted first message can hold."""

USER_THREAD_LIMIT: Final = 1000
"""Most threads the sidebar lists for one person (Chainlit's SQL layer's default)."""

PAGE_WRITE: Final = msg("part of what the page shows of this chat")

T = TypeVar("T")
P = ParamSpec("P")
R = TypeVar("R")


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


def _session_user(user_id: str | None = None) -> PersistedUser | None:
    """The writing session's signed-in user (Chainlit's ``PersistedUser``, read at sign-in)
    if her id is ``user_id`` (any id when None); else None."""
    try:
        user = context.session.user
    except ChainlitContextException:
        return None
    if not isinstance(user, PersistedUser) or user_id not in (None, user.id):
        return None
    return user


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


@dataclass(frozen=True, slots=True)
class _TurnTexts:
    """What the stored turns of some chats hold for their page, whose one record they are
    (:mod:`backend.store.pages`): questions and answers by their message's step id."""

    questions: dict[str, str]
    answers: dict[str, str]

    @classmethod
    async def read(cls, connection: AsyncConnection, thread_ids: Iterable[str]) -> _TurnTexts:
        """Those of the turns of ``thread_ids``."""
        ids = list(thread_ids)
        return cls(await pages.questions(connection, ids), await pages.answers(connection, ids))

    async def step(self, row: dict[str, Any]) -> StepDict:
        """Stored step ``row`` as Chainlit's ``StepDict``, with the text its turn holds: a
        question stored without one, an answer as the answer's end drew it, with remote
        images made links (backend/turn_runner.py)."""
        step = _step_dict(row)
        if row.get("output") is None and step["type"] == "user_message":
            step["output"] = self.questions.get(str(step["id"]), "")
        answer = self.answers.get(str(step["id"]))
        if answer is not None:  # over a block's text stored before its turn named it
            step["output"] = await link_remote_images_off_loop(answer)
        return step


async def _reasoned(steps: list[StepDict], reasonings: dict[str, str]) -> None:
    """Give the blocks of each reasoning step in ``reasonings`` (by step id:
    :func:`backend.store.pages.reasonings`) their text again, as the stream drew them: the
    turn's reasoning cut into blocks (:func:`backend.blocks.block_texts`), remote images
    made links. Blocks that do not match the cut (a block's write lost) show the whole
    reasoning in the first."""
    blocks: dict[str, list[StepDict]] = {}
    for step in steps:  # in the order they were made
        parent = step.get("parentId")
        if parent in reasonings:
            blocks.setdefault(str(parent), []).append(step)
    for parent, run in blocks.items():
        drawn = await pages.drawn_blocks(reasonings[parent], len(run))
        for block, text in zip(run, drawn, strict=True):
            block["output"] = text


def _step_dict(row: dict[str, Any]) -> StepDict:
    """A stored step (with its ``feedback_*`` columns) as Chainlit's ``StepDict``."""
    step = {key: row.get(key) for key in pages.STEP_READ}
    step["metadata"] = step["metadata"] or {}
    step["streaming"] = bool(step["streaming"])
    step["output"] = step["output"] or ""
    if step["showInput"] in (None, "false"):
        step["input"] = ""
    feedback = None
    if row.get("feedback_value") is not None:
        feedback = FeedbackDict(
            forId=str(row["id"]),
            id=row.get("feedback_id"),
            value=row["feedback_value"],
            comment=row.get("feedback_comment"),
        )
    return cast(StepDict, {**step, "feedback": feedback})


class KimiDataLayer(BaseDataLayer):
    """Chainlit's data layer on the app's store (see the module docstring).

    Args:
        store: owns the engine and the held writes; this layer borrows them.
        storage: where element files go (``ui/files.py``).
        first_words: what a chat's writes wait for (``ui/first_words.py``).

    Attributes:
        failed_statements: reads that failed and writes that were held or lost, counted.
    """

    def __init__(
        self, store: Store, storage: BaseStorageClient, first_words: FirstWordsGate = FIRST_WORDS
    ) -> None:
        self.store = store
        self.storage_provider = storage
        self.first_words = first_words
        self.failed_statements = 0
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}

    # --- reading and writing through the store -------------------------------------------

    async def _read(self, read: Callable[[AsyncConnection], Awaitable[T]], default: T) -> T:
        """``read`` on a connection of the store; ``default`` (logged) when the database
        cannot be read."""
        try:
            async with self.store.engine.connect() as connection:
                return await read(connection)
        except (SQLAlchemyError, OSError) as exc:
            self.failed_statements += 1
            log.error("reading the database failed: %s", cause(exc, self.store.where))
            return default

    async def _write(
        self,
        change: Callable[[AsyncConnection], Awaitable[T]],
        *,
        chat: str | None,
        size: int,
        key: tuple[str, str] | None = None,
        what: str = PAGE_WRITE,
    ) -> T | None:
        """``change`` in one transaction, through the store's held writes: its value, or
        None while it is held (it is written later) or lost (logged)."""

        async def run() -> T:
            async with self.store.engine.begin() as connection:
                return await change(connection)

        outcome = await self.store.pending.write(
            Write(run=run, chat=chat, what=what, size=size, key=key)
        )
        if outcome.held or outcome.lost:
            self.failed_statements += 1
        return cast(T | None, outcome.value)

    async def _delete_files(self, keys: list[str]) -> None:
        for key in keys:
            await self.storage_provider.delete_file(key)

    @asynccontextmanager
    async def _in_order(self, name: str) -> AsyncIterator[None]:
        """One at a time per ``name``, in the order they came (asyncio's locks are FIFO)."""
        lock, users = self._locks.get(name) or (asyncio.Lock(), 0)
        self._locks[name] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[name]
            if users == 1:
                del self._locks[name]
            else:
                self._locks[name] = (lock, users - 1)

    # --- users ---------------------------------------------------------------------------

    async def get_user(self, identifier: str) -> PersistedUser | None:
        """Chainlit's user ``identifier``, or None (none, or the database cannot be read)."""
        row = await self._read(lambda c: pages.user(c, identifier), None)
        if row is None:
            return None
        return PersistedUser(
            id=str(row["id"]),
            identifier=str(row["identifier"]),
            createdAt=str(row["createdAt"]),
            metadata=row["metadata"] if isinstance(row["metadata"], dict) else {},
        )

    async def create_user(self, user: User) -> PersistedUser | None:
        """Make Chainlit's row of ``user`` at sign-in (or update its metadata); not held: it
        is made again at the next sign-in."""
        identifier, metadata = str(user.identifier), dict(user.metadata or {})
        try:
            async with self.store.engine.begin() as connection:
                await pages.write_user(connection, identifier, metadata, str(uuid.uuid4()))
        except (SQLAlchemyError, OSError) as exc:
            self.failed_statements += 1
            log.error("writing a user failed: %s", cause(exc, self.store.where))
        return await self.get_user(identifier)

    # --- threads -------------------------------------------------------------------------

    async def get_thread_author(self, thread_id: str) -> str:
        """The identifier of the owner of ``thread_id``.

        Raises:
            ValueError: no such thread, it has no owner, or it cannot be read (Chainlit's
                routes refuse then).
        """
        threads = await self.get_all_user_threads(thread_id=thread_id, with_steps=False)
        author = threads[0].get("userIdentifier") if threads else None
        if not author:
            raise ValueError(f"Author not found for thread_id {thread_id}")
        return str(author)

    async def get_thread(self, thread_id: str) -> ThreadDict | None:
        """Thread ``thread_id`` with its steps (oldest first) and elements, or None."""
        threads = await self.get_all_user_threads(thread_id=thread_id)
        return threads[0] if threads else None

    @_after_first_words
    async def update_thread(
        self,
        thread_id: str,
        name: str | None = None,
        user_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        tags: list[str] | None = None,
    ) -> None:
        """Chainlit's upsert of a thread: ``name`` cut to a title (a starter's message is
        titled by the starter's label, backend/starters.py), ``metadata`` merged; refused
        (logged) when ``user_id`` would take over a thread of another user.

        The owner's identifier comes from the writing session (Chainlit reads it from the
        database first: while it cannot be read, the thread was never given its owner and
        the chat missed from her sidebar, issue 52).
        """
        changes: dict[str, Any] = {}
        if name is not None:
            changes["name"] = readable_title(label_for(name) or name)
        if tags is not None:
            changes["tags"] = tags
        if user_id is not None:
            session_user = _session_user(user_id)
            identifier = session_user.identifier if session_user is not None else None
            changes.update(userId=user_id, userIdentifier=identifier)

        async def change(connection: AsyncConnection) -> bool:
            if user_id is not None and changes["userIdentifier"] is None:
                changes["userIdentifier"] = await pages.identifier(connection, user_id)
            return await pages.update_thread(connection, thread_id, changes, metadata)

        size = len(str(changes)) + len(str(metadata or ""))
        if await self._write(change, chat=thread_id, size=size) is False:
            log.warning("refused to give chat %s to another user", thread_id)
        if name is not None:  # Chainlit's first write of the thread names it
            await _flush_queued_writes()

    async def delete_thread(self, thread_id: str) -> None:
        """The thread with its steps, elements (rows and files), feedback, turns and
        prepared images."""
        keys = await self._write(
            lambda c: pages.delete_thread(c, thread_id),
            chat=thread_id,
            size=len(thread_id),
            what=msg("the removal of this chat"),
        )
        await self._delete_files(keys or [])
        await self.store.turns.delete_thread(thread_id)

    async def list_threads(
        self, pagination: Pagination, filters: ThreadFilter
    ) -> PaginatedResponse[ThreadDict]:
        """A page of the sidebar's threads of ``filters.userId``, newest first, without their
        steps and elements (the sidebar shows names and dates); ``filters.search`` looks in
        what the steps say.

        Raises:
            ValueError: ``filters.userId`` is not given (as Chainlit's layers).
        """
        if not filters.userId:
            raise ValueError("userId is required")

        async def read(connection: AsyncConnection) -> list[dict[str, Any]]:
            return await pages.listed_threads(
                connection,
                user_id=filters.userId,
                search=filters.search,
                feedback=int(filters.feedback) if filters.feedback is not None else None,
                limit=USER_THREAD_LIMIT,
            )

        none: list[dict[str, Any]] = []
        found = [_thread_dict(row) for row in await self._read(read, none)]
        ids = [thread["id"] for thread in found]
        start = ids.index(pagination.cursor) + 1 if pagination.cursor in ids else 0
        page = found[start : start + pagination.first]
        return PaginatedResponse(
            pageInfo=PageInfo(
                hasNextPage=len(found) > start + pagination.first,
                startCursor=page[0]["id"] if page else None,
                endCursor=page[-1]["id"] if page else None,
            ),
            data=page,
        )

    async def get_all_user_threads(
        self, user_id: str | None = None, thread_id: str | None = None, *, with_steps: bool = True
    ) -> list[ThreadDict] | None:
        """The threads of ``user_id`` (or the one ``thread_id``) with their steps and
        elements (none when not ``with_steps``); None when the database cannot be read."""

        async def read(connection: AsyncConnection) -> list[ThreadDict]:
            rows = await pages.listed_threads(
                connection, user_id=user_id, thread_id=thread_id, limit=USER_THREAD_LIMIT
            )
            threads = {str(row["id"]): _thread_dict(row) for row in rows}
            if not with_steps or not threads:
                return list(threads.values())
            step_rows, element_rows = await pages.thread_rows(connection, list(threads))
            texts = await _TurnTexts.read(connection, threads)
            for row in step_rows:
                threads[str(row["threadId"])]["steps"].append(await texts.step(row))
            reasonings = await pages.reasonings(connection, list(threads))
            for thread in threads.values():
                await _reasoned(thread["steps"], reasonings)
            for row in element_rows:
                listed = threads[str(row["threadId"])]["elements"]
                assert listed is not None  # made empty by _thread_dict
                listed.append(await self._element_dict(row))
            return list(threads.values())

        threads = await self._read(read, None)
        for thread in threads or []:
            compare_view.opened(cast(list[dict[str, Any]], thread["steps"]))  # open, as drawn
        return threads

    # --- steps ---------------------------------------------------------------------------

    @queue_until_user_message()  # type: ignore[untyped-decorator]
    @_after_first_words
    async def create_step(self, step_dict: StepDict) -> None:
        """Store a step (made or updated), never over a step of another thread: a client
        that sends a message under the id of another chat's step has its write refused
        and logged. Writes of one step run one at a time, in order."""
        step = dict(step_dict)
        step_id, thread_id = str(step.get("id")), str(step["threadId"])
        async with self._in_order(step_id):
            written = await self._write(
                lambda c: pages.write_step(c, step),
                chat=thread_id,
                size=len(str(step.get("output") or "")) + len(str(step.get("input") or "")),
                key=("steps", step_id),
            )
        if written is False:
            log.warning("refused a write to step %s: it is in another chat", step_id)

    @queue_until_user_message()  # type: ignore[untyped-decorator]
    @_after_first_words
    async def update_step(self, step_dict: StepDict) -> None:
        """Chainlit's update of a step: its upsert (:meth:`create_step`)."""
        await self.create_step(step_dict)

    @queue_until_user_message()  # type: ignore[untyped-decorator]
    @_after_first_words
    async def delete_step(self, step_id: str) -> None:
        """Delete a step with its feedback and elements, only in the writing session's
        thread (a step of another chat stays, and the refusal is logged)."""
        writer = _writer_thread()

        async def change(connection: AsyncConnection) -> list[str] | None:
            if await pages.thread_of(connection, pages.steps, step_id) != writer:
                return None
            return await pages.delete_steps(connection, [step_id])

        keys = await self._write(change, chat=writer, size=len(step_id))
        if keys is None:
            log.warning("refused to delete step %s: it is not in this chat", step_id)
        await self._delete_files(keys or [])

    async def delete_steps_after(self, thread_id: str, created_at: str, keep: set[str]) -> int:
        """Delete the steps of ``thread_id`` created after ``created_at``, except ``keep``.

        For an edit of an earlier message: Chainlit removes the later messages
        from the page and the database, but not the reasoning and run steps
        between them, which a resumed chat would show again. Their elements
        (rows and files) and feedback go too. Returns how many steps were deleted.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the database failed (the caller holds it:
                ui/history.py).
        """
        async with self.store.engine.begin() as connection:
            later = await pages.steps_after(connection, thread_id, created_at)
            doomed = [step_id for step_id in later if step_id not in keep]
            keys = await pages.delete_steps(connection, doomed)
        await self._delete_files(keys)
        return len(doomed)

    async def get_favorite_steps(self, user_id: str) -> list[StepDict]:
        """The steps ``user_id`` marked favorite, newest first."""

        async def read(connection: AsyncConnection) -> list[StepDict]:
            rows = await pages.favorite_steps(connection, user_id)
            texts = await _TurnTexts.read(connection, {str(row["threadId"]) for row in rows})
            return [await texts.step(row) for row in rows]

        none: list[StepDict] = []
        return await self._read(read, none)

    # --- elements ------------------------------------------------------------------------

    @queue_until_user_message()  # type: ignore[untyped-decorator]
    @_after_first_words
    async def create_element(self, element: Element) -> None:
        """Store an element's file and row, one at a time per thread in the order they were
        sent, for the writing session's thread only, never over another thread's element.

        Chainlit sends a message's uploads as one task each; unordered, they would come
        back in whatever order the writes finished. A custom element from the client
        (``PUT /project/element``) names its own thread and id; one naming another thread,
        or the id of another thread's element, is refused and logged before its file is
        written. An element of no message (no ``for_id``) is not stored (as Chainlit's
        SQL layer).
        """
        async with self._in_order(f"elements:{element.thread_id}"):
            found = await self._read(lambda c: pages.thread_of(c, pages.elements, element.id), None)
            if element.thread_id != _writer_thread() or found not in (None, element.thread_id):
                log.warning("refused a write to element %s: it is in another chat", element.id)
                return
            if not element.for_id:
                return
            try:
                content = await _content(element)
            except OSError:
                log.error("an upload's file is gone before it could be stored: %s", element.name)
                return
            await self._store_element(element, content)

    async def _store_element(self, element: Element, content: bytes) -> None:
        """Write the file, then the row; a file that cannot be written now is held with its
        bytes (the session's upload folder goes with the session) and written later."""
        owner = _session_user()
        key = f"{owner.id if owner else 'unknown'}/{element.id}/{element.name}"
        mime = element.mime or "application/octet-stream"
        try:
            uploaded = await self.storage_provider.upload_file(key, content, mime, True)
        except OSError as exc:  # a read-only or full disk, the bucket away
            await self._hold_element(element, content, exc)
            return
        row = dict(element.to_dict())
        row.update(url=uploaded.get("url"), objectKey=uploaded.get("object_key"), mime=mime)
        await self._write(
            lambda c: pages.write_element(c, row),
            chat=element.thread_id,
            size=len(str(row)),
            key=("elements", element.id),
        )

    async def _hold_element(self, element: Element, content: bytes, error: OSError) -> None:
        element.content, element.path = content, None

        async def again() -> None:
            await self._store_element(element, content)

        job = Write(
            run=again,
            chat=element.thread_id,
            what=msg("the file {name}", name=element.name),
            size=len(content),
            key=("elements", element.id),
        )
        self.failed_statements += 1
        await self.store.pending.hold(job, error)

    @queue_until_user_message()  # type: ignore[untyped-decorator]
    @_after_first_words
    async def delete_element(self, element_id: str, thread_id: str | None = None) -> None:
        """Delete an element and its file, only in the writing session's thread
        (``thread_id`` comes from the client for custom elements and is not trusted)."""
        writer = _writer_thread()

        async def change(connection: AsyncConnection) -> list[str] | None:
            if await pages.thread_of(connection, pages.elements, element_id) != writer:
                return None
            key = await pages.delete_element(connection, element_id)
            return [key] if key else []

        keys = await self._write(change, chat=writer, size=len(element_id))
        if keys is None:
            log.warning("refused to delete element %s: it is not in this chat", element_id)
        await self._delete_files(keys or [])

    async def get_element(self, thread_id: str, element_id: str) -> ElementDict | None:
        """Element ``element_id`` of thread ``thread_id``, or None."""
        row = await self._read(lambda c: pages.element(c, thread_id, element_id), None)
        return None if row is None else await self._element_dict(row)

    async def _element_dict(self, row: dict[str, Any]) -> ElementDict:
        key = row.get("objectKey")
        url = await self.storage_provider.get_read_url(key) if key else row.get("url")
        return cast(ElementDict, {**row, "url": url, "props": row.get("props") or {}})

    # --- feedback ------------------------------------------------------------------------

    async def upsert_feedback(self, feedback: Feedback) -> str:
        """Store a feedback (its owner was checked by ui/security.py); returns its id."""
        feedback.id = feedback.id or str(uuid.uuid4())
        row = asdict(feedback)
        await self._write(
            lambda c: pages.write_feedback(c, row),
            chat=feedback.threadId,
            size=len(str(row)),
            key=("feedbacks", feedback.id),
            what=msg("your feedback"),
        )
        return feedback.id

    async def delete_feedback(self, feedback_id: str) -> bool:
        """Delete a feedback (its owner was checked by ui/security.py)."""
        await self._write(
            lambda c: pages.delete_feedback(c, feedback_id),
            chat=None,
            size=len(feedback_id),
            key=("feedbacks", feedback_id),
            what=msg("your feedback"),
        )
        return True

    # --- the rest of Chainlit's contract ---------------------------------------------------

    async def build_debug_url(self) -> str:
        """No debug URL (Chainlit's Literal AI layer has one)."""
        return ""

    async def close(self) -> None:
        """Nothing to close: the store owns the engine and the files."""


async def _content(element: Element) -> bytes:
    """An element's bytes: its file, or its content.

    Raises:
        OSError: its file cannot be read.
    """
    if element.path:
        return await asyncio.to_thread(Path(element.path).read_bytes)
    content = element.content or b""
    return content.encode("utf-8") if isinstance(content, str) else content


def _thread_dict(row: dict[str, Any]) -> ThreadDict:
    return ThreadDict(
        id=str(row["id"]),
        createdAt=str(row["createdAt"] or ""),
        name=row["name"],
        userId=row["userId"],
        userIdentifier=row["userIdentifier"],
        tags=row["tags"],
        metadata=row["metadata"] if isinstance(row["metadata"], dict) else {},
        steps=[],
        elements=[],
    )
