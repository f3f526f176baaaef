"""Writes the store cannot take right now, held in order and written once it can again.

Every write of the store goes through one :class:`PendingWrites` (the app's
:class:`backend.store.core.Store` owns it): the turns (:mod:`backend.store.turns`) and what
Chainlit's data layer writes for the page (``ui/datalayer.py``: threads, steps,
elements). While the database answers, a write runs at once. When one fails because the
database cannot be reached or written (PostgreSQL stopped, a read-only or full disk under
SQLite: :func:`retryable`), it is held, and so is every write after it, in the order
they came: a later write never lands before an earlier one. A background task tries the
oldest held write again every few seconds (:data:`RETRY_S`); once one goes through, the
rest follow at once.

What is held is bounded (``limit_bytes``, ``KIMI_UNSAVED_MB``): a write that would pass the
bound is not kept, and what it was is remembered for its chat (:meth:`take_lost`), so the
chat can say exactly what will not be saved. A newer write of the same row replaces the
one held for it in place (``Write.key``: a turn saved as it streams, a step updated), so
a long outage holds each row once. A write that fails for any other reason (a constraint,
a bug) is not retried: it is logged and counted as lost for its chat.

Held writes live in the process's memory only: if the process ends before the database
is back, they are gone, and the log names them (:meth:`PendingWrites.close`).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy.exc import DataError, IntegrityError, ProgrammingError, SQLAlchemyError

from backend.logs import LOGGER_NAME
from backend.store.files import StorageUnavailable

log = logging.getLogger(LOGGER_NAME)

RETRY_S: Final = (1.0, 2.0, 4.0, 5.0)
"""Waits before each new try of the oldest held write, in seconds; the last repeats."""

REPLAYING: Final[ContextVar[bool]] = ContextVar("kimi_replaying", default=False)
"""True inside a held write being tried again: what it writes runs directly (and raises)."""


def retryable(error: BaseException) -> bool:
    """True if ``error`` says the database cannot be reached or written for now.

    Connection failures (asyncpg raises the socket's ``OSError``, e.g. ``[Errno 2]`` when
    PostgreSQL's socket is gone, unwrapped), SQLite's "attempt to write a readonly
    database" and "database or disk is full" (``OperationalError``), a file that cannot be
    written (``OSError``: read-only or full disk). Not: a constraint or a malformed
    statement (``IntegrityError``, ``ProgrammingError``, ``DataError``), which no retry mends.
    """
    if isinstance(error, IntegrityError | ProgrammingError | DataError):
        return False
    return isinstance(error, SQLAlchemyError | OSError | TimeoutError)


SERVER_AWAY_SQLSTATES: Final = ("08", "57P01", "57P02", "57P03")
"""SQLSTATEs (or their class) of a PostgreSQL server that is not there to answer: class 08
connection exception; 57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot connect now
("the database system is shutting down" / "starting up"). PostgreSQL's manual, appendix A,
"PostgreSQL Error Codes"; SQLAlchemy's asyncpg dialect copies the code to ``orig.sqlstate``."""


def cause(error: BaseException, where: str) -> str:
    """``error`` in one line that names what is wrong with the store at ``where``.

    E.g. ``"PostgreSQL at postgresql+asyncpg://kimi@/chat?host=/run/pg does not answer
    (FileNotFoundError: [Errno 2] No such file or directory)"``, ``"the disk is full
    (OSError: [Errno 28] No space left on device)"``.
    """
    found: BaseException = getattr(error, "orig", None) or error
    detail = str(found).strip().splitlines()[0] if str(found).strip() else ""
    named = f"{type(found).__name__}: {detail}" if detail else type(found).__name__
    number = getattr(found, "errno", None)
    if number == errno.ENOSPC or "disk is full" in detail:
        return f"the disk is full ({named})"
    if number == errno.EROFS or "readonly database" in detail:
        return f"the database or its folder is read-only ({named})"
    if number == errno.EACCES:
        return f"the app may not write there ({named})"
    if isinstance(found, StorageUnavailable):
        return f"the file store cannot be written ({named})"
    gone = (
        getattr(error, "connection_invalidated", False)
        or "connection" in detail.lower()
        or str(getattr(found, "sqlstate", "")).startswith(SERVER_AWAY_SQLSTATES)
    )
    if where.startswith("postgresql") and (isinstance(found, OSError) or gone):
        return f"PostgreSQL at {where} does not answer ({named})"
    return f"the database {where} failed ({named})"


@dataclass(frozen=True, slots=True)
class Write:
    """One write of the store.

    Attributes:
        run: does the write (raises on failure); its return value is the write's result.
        chat: the chat (thread id) it belongs to, or None.
        what: what it keeps, for the person, e.g. ``'your message "Hello" and its answer'``.
        size: bytes it holds in memory while held (text, images).
        key: the row it writes: a newer held write of the same key replaces it; None: none.
        supersedes: the key of a held write that this one makes needless (it writes all
            that one would): that write is dropped when this one is held; None: none.
    """

    run: Callable[[], Awaitable[Any]]
    chat: str | None
    what: str
    size: int
    key: Hashable | None = None
    supersedes: Hashable | None = None


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one write: ``held`` (it waits for the store), ``lost`` (it will not be
    written), or neither (written; ``value`` is what :attr:`Write.run` returned)."""

    held: bool = False
    lost: bool = False
    value: Any = None


@dataclass
class _Lost:
    what: list[str] = field(default_factory=list)


class PendingWrites:
    """The store's writes, in order, held while the store cannot take them (module docstring).

    Args:
        where: the database, for the log (no password), e.g. ``Store.where``.
        limit_bytes: the most held writes may take in memory.
        retry_s: waits between tries of the oldest held write (:data:`RETRY_S`).

    After :meth:`close`, :meth:`write` runs writes directly (nothing is held any more).
    """

    def __init__(self, where: str, limit_bytes: int, retry_s: tuple[float, ...] = RETRY_S) -> None:
        self.where = where
        self.limit_bytes = limit_bytes
        self.retry_s = retry_s
        self._held: OrderedDict[object, Write] = OrderedDict()
        self._bytes = 0
        self._lost: dict[str, _Lost] = {}
        self._retrying: asyncio.Task[None] | None = None
        self._since = 0.0
        self._closed = False
        self._progress = asyncio.Event()

    @property
    def holding(self) -> bool:
        """True while some writes wait for the store."""
        return bool(self._held)

    def holds(self, chat: str) -> int:
        """How many writes of ``chat`` wait for the store."""
        return sum(1 for job in self._held.values() if job.chat == chat)

    def holds_key(self, key: Hashable) -> bool:
        """Whether a write of ``key`` (:attr:`Write.key`) waits for the store."""
        return key in self._held

    async def written(self, chat: str) -> None:
        """Return once no write of ``chat`` is held any more (at once if none is): all
        of them written, or given up (:meth:`take_lost` says which)."""
        while self.holds(chat):
            progress = self._progress
            await progress.wait()

    def take_lost(self, chat: str) -> list[str]:
        """What of ``chat`` could not be kept and will not be written, since the last call."""
        lost = self._lost.pop(chat, None)
        return list(dict.fromkeys(lost.what)) if lost else []

    async def write(self, job: Write) -> Outcome:
        """Run ``job`` now, or hold it behind earlier held writes or when the store cannot
        take it (see the module docstring). Never raises for the store's failures.

        Raises:
            Exception: only inside a held write being tried again (:data:`REPLAYING`),
                where the caller's failure must reach the retry.
        """
        if REPLAYING.get() or self._closed:
            return Outcome(value=await job.run())
        if self._held:
            return self._hold(job)
        try:
            return Outcome(value=await job.run())
        except Exception as error:
            if not retryable(error):
                self._give_up(job, error)
                return Outcome(lost=True)
            return await self.hold(job, error)

    async def hold(self, job: Write, error: BaseException | None = None) -> Outcome:
        """Hold ``job``, which failed with ``error`` because the store cannot take it now
        (the caller found out), to write it once the store can."""
        if not self._held:
            reason = cause(error, self.where) if error is not None else "a write failed"
            log.error(
                "the store cannot take writes: %s; holding them in memory (at most %d MB) and "
                "trying again every few seconds",
                reason,
                self.limit_bytes // 1_000_000,
            )
            self._since = time.monotonic()
        return self._hold(job)

    def _hold(self, job: Write) -> Outcome:
        key: object = job.key if job.key is not None else object()
        replaced = self._held.get(key)
        superseded = self._held.get(job.supersedes) if job.supersedes is not None else None
        freed = sum(held.size for held in (replaced, superseded) if held is not None)
        if self._bytes - freed + job.size > self.limit_bytes:
            log.error("not kept (no room for more unsaved writes): %s", job.what)
            if job.chat is not None:
                self._lost.setdefault(job.chat, _Lost()).what.append(job.what)
            return Outcome(lost=True)
        if superseded is not None:
            del self._held[job.supersedes]
        self._held[key] = job  # a replaced write keeps its place in the order
        self._bytes += job.size - freed
        if self._retrying is None or self._retrying.done():
            self._retrying = asyncio.create_task(self._retry())
        return Outcome(held=True)

    def _give_up(self, job: Write, error: BaseException) -> None:
        log.error("a write failed and is not retried (%s): %s", cause(error, self.where), job.what)
        if job.chat is not None:
            self._lost.setdefault(job.chat, _Lost()).what.append(job.what)

    async def _retry(self) -> None:
        """Write the held writes, oldest first, waiting between tries while they fail."""
        tries = 0
        while self._held:
            await asyncio.sleep(self.retry_s[min(tries, len(self.retry_s) - 1)])
            tries += 1
            while self._held:
                key, job = next(iter(self._held.items()))
                if not await self._replay(job):
                    break
                tries = 0
                if self._held.get(key) is job:  # not replaced while it was written
                    del self._held[key]
                    self._bytes -= job.size
                    self._progress.set()  # wakes :meth:`written`
                    self._progress = asyncio.Event()
            if not self._held:
                log.info(
                    "the store takes writes again: what was held for %.0f s is written",
                    time.monotonic() - self._since,
                )

    async def _replay(self, job: Write) -> bool:
        """Try ``job`` again; True if it is done with (written, or failed for good)."""
        token = REPLAYING.set(True)
        try:
            await job.run()
        except Exception as error:
            if retryable(error):
                return False
            self._give_up(job, error)
        finally:
            REPLAYING.reset(token)
        return True

    async def close(self, timeout_s: float = 5.0) -> None:
        """Try to write what is held for at most ``timeout_s`` seconds, then log what is not
        (it is lost with the process) and stop the retries."""
        if self._held:
            deadline = time.monotonic() + timeout_s
            while self._held and time.monotonic() < deadline:
                key, job = next(iter(self._held.items()))
                if not await self._replay(job):
                    break
                if self._held.get(key) is job:  # not replaced or superseded meanwhile
                    del self._held[key]
        for job in self._held.values():
            log.error("never written (the app stopped before the store came back): %s", job.what)
        self._held.clear()
        self._bytes = 0
        self._closed = True
        if self._retrying is not None:
            self._retrying.cancel()
