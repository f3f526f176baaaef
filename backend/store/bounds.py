"""Bounds that must hold across UI workers and hosts, kept in the shared store.

Every worker (``--ui-workers``) and every host that shares the database counts in the
same rows, so two workers allow exactly what one does. Each decision is one transaction
whose writes are conditional statements (``INSERT ... ON CONFLICT ... DO UPDATE ...
WHERE``, ``RETURNING``): concurrent attempts on PostgreSQL wait for the row's lock and
see each other's counts; on SQLite every transaction takes the write lock at ``BEGIN``
(:mod:`backend.store.db`). Nothing is read, decided in Python and written back.

Tables (made by :func:`create_tables`, idempotent, at :meth:`backend.store.core.Store.check`):

* ``kimi_signin_attempts``: sign-in attempts per user name and per client address
  (:class:`SignInThrottle`);
* ``kimi_leases``: the answers running or waiting (``kind`` "answer", ``amount`` 1) and the
  bytes of uploads held (``kind`` "upload"), per chat and per person (:class:`Leases`): a
  lease is renewed by the process that holds it, and one whose process died
  (``kill -9``) expires within :data:`LEASE_S`, so nobody is locked out for good.

What one user's stored chats hold is counted from the chats' own rows (:class:`StoredChats`):
no count is kept beside them that could drift from what is stored.

Every method raises ``sqlalchemy.exc.SQLAlchemyError`` or ``OSError`` when the database
cannot be asked; the caller refuses what it cannot check.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from backend.auth import FIRST_DELAY_S, FORGET_AFTER_S, FREE_FAILURES, KEY_CHARS, MAX_DELAY_S
from backend.fair_use import AnswerQueues, check_stored
from backend.logs import LOGGER_NAME

log = logging.getLogger(LOGGER_NAME)

_TABLES: Final = (
    """CREATE TABLE IF NOT EXISTS kimi_signin_attempts (
        "key" TEXT PRIMARY KEY,
        failures INTEGER NOT NULL,
        last_at DOUBLE PRECISION NOT NULL,
        until_at DOUBLE PRECISION NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS kimi_leases (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        chat TEXT NOT NULL,
        person TEXT NOT NULL,
        amount BIGINT NOT NULL,
        expires_at DOUBLE PRECISION NOT NULL
    )""",
    "CREATE INDEX IF NOT EXISTS kimi_leases_person ON kimi_leases (person, kind)",
)

LEASE_S: Final = 30.0
"""Seconds a lease lasts unless its process renews it (every third of that)."""
PERSON_LOCK: Final = 8_640_013
"""PostgreSQL advisory lock class held while one person's leases are counted and one is
added (with the person's hash as the second key), so two workers cannot both see room."""

PRUNE_EVERY_S: Final = 60.0
"""How often (seconds, per process) rows that are forgotten are deleted."""


async def create_tables(engine: AsyncEngine) -> None:
    """Make this module's tables where they are missing (safe to run from every worker)."""
    async with engine.begin() as db:
        for statement in _TABLES:
            await db.exec_driver_sql(statement)


@dataclass(frozen=True, slots=True)
class Admission:
    """The throttle's answer to one sign-in attempt.

    Attributes:
        wait_s: seconds before the attempt may be checked; 0 when admitted.
        run: failures in a row counted so far, this attempt included (the longer of the
            name's and the client's); 0 when refused.
    """

    wait_s: float
    run: int

    @property
    def admitted(self) -> bool:
        """True if the password may be checked now."""
        return self.wait_s <= 0


class _MustWait(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


class SignInThrottle:
    """Sign-in attempts per user name and per client address, counted in the store.

    Rule: an attempt is counted as a failure *before* its password is checked, so a burst
    of concurrent attempts meets the same limit as a sequence; a success takes its count
    back (the name's run is cleared). Once a name or a client has ``free`` failures in a
    row, the next attempt must wait ``first_delay_s``, doubling with each further failure
    up to ``max_delay_s``; an attempt made while it must wait is refused unchecked and not
    counted. Runs are forgotten ``forget_after_s`` after their last failure.

    Args:
        engine: the shared store's engine (borrowed).
        clock: wall-clock seconds (``time.time``: shared by every host); tests pass their own.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        free: int = FREE_FAILURES,
        first_delay_s: float = FIRST_DELAY_S,
        max_delay_s: float = MAX_DELAY_S,
        forget_after_s: float = FORGET_AFTER_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine = engine
        self.free, self.first_delay_s, self.max_delay_s = free, first_delay_s, max_delay_s
        self.forget_after_s, self.clock = forget_after_s, clock
        self._pruned_at = -PRUNE_EVERY_S

    def delay_s(self, failures: int) -> float:
        """Seconds the next attempt waits after ``failures`` failures in a row."""
        if failures < self.free:
            return 0.0
        return min(self.first_delay_s * 2.0 ** (failures - self.free), self.max_delay_s)

    @staticmethod
    def keys(name: str, client: str) -> tuple[str, str]:
        """The rows' keys: a name's and a client's, cut to :data:`~backend.auth.KEY_CHARS`."""
        return "name:" + name[:KEY_CHARS], "client:" + client[:KEY_CHARS]

    async def admit(self, name: str, client: str) -> Admission:
        """Count an attempt for ``name`` from ``client`` if it may be checked now."""
        now = self.clock()
        if now - self._pruned_at >= PRUNE_EVERY_S:
            self._pruned_at = now
            async with self.engine.begin() as db:
                await db.execute(
                    text(
                        "DELETE FROM kimi_signin_attempts WHERE last_at < :stale "
                        "AND until_at <= :now"
                    ),
                    {"stale": now - self.forget_after_s, "now": now},
                )
        try:
            async with self.engine.begin() as db:
                runs = [await self._count(db, key, now) for key in self.keys(name, client)]
        except _MustWait as waiting:  # nothing of this attempt is counted
            return Admission(await self._wait_s(waiting.key, now), 0)
        return Admission(0.0, max(runs))

    async def _count(self, db: AsyncConnection, key: str, now: float) -> int:
        """One more failure for ``key``; its run.

        Raises:
            _MustWait: ``key`` must wait (the transaction is then rolled back).
        """
        counted = (
            await db.execute(
                text(
                    'INSERT INTO kimi_signin_attempts AS a ("key", failures, last_at, until_at) '
                    'VALUES (:key, 1, :now, 0) ON CONFLICT ("key") DO UPDATE SET '
                    "failures = CASE WHEN a.last_at < :stale THEN 1 ELSE a.failures + 1 END, "
                    "last_at = :now WHERE a.until_at <= :now RETURNING failures"
                ),
                {"key": key, "now": now, "stale": now - self.forget_after_s},
            )
        ).first()
        if counted is None:
            raise _MustWait(key)
        run = int(counted[0])
        if self.delay_s(run) > 0:
            await db.execute(
                text('UPDATE kimi_signin_attempts SET until_at = :until WHERE "key" = :key'),
                {"key": key, "until": now + self.delay_s(run)},
            )
        return run

    async def _wait_s(self, key: str, now: float) -> float:
        async with self.engine.connect() as db:
            until = (
                await db.execute(
                    text('SELECT until_at FROM kimi_signin_attempts WHERE "key" = :key'),
                    {"key": key},
                )
            ).scalar()
        return max(float(until or 0) - now, 0.001)

    async def succeeded(self, name: str, client: str) -> None:
        """The attempt admitted for ``name`` from ``client`` was right: the name's run is
        cleared, and the client's loses the failure counted for it."""
        name_key, client_key = self.keys(name, client)
        async with self.engine.begin() as db:
            await db.execute(
                text('DELETE FROM kimi_signin_attempts WHERE "key" = :key'), {"key": name_key}
            )
            await db.execute(
                text(
                    "UPDATE kimi_signin_attempts SET failures = failures - 1, until_at = "
                    "CASE WHEN failures - 1 < :free THEN 0 ELSE until_at END "
                    'WHERE "key" = :key AND failures > 0'
                ),
                {"key": client_key, "free": self.free},
            )


class Leases:
    """Answers running or waiting and uploads held, counted in the store for every worker
    and host.

    :meth:`confirm` adds a lease for one answer of ``chat`` by ``person`` if both are under
    their bounds (those of an :class:`~backend.fair_use.AnswerQueues`, which also words
    the refusal); :meth:`hold` one for an upload's bytes if the person's uploads in every
    process stay within its bound. Each is one transaction that first takes the
    person's lock (PostgreSQL:
    ``pg_advisory_xact_lock``; SQLite: ``BEGIN IMMEDIATE``), so two workers never both
    see the last place free. The process renews its leases every ``lease_s / 3`` while
    :meth:`run` runs; a lease not renewed (its process was killed) stops counting after
    ``lease_s``.

    Args:
        engine: the shared store's engine (borrowed).
        bounds: the bounds and sentences (``KIMI_CHAT_QUEUE``, ``KIMI_USER_ANSWERS``).
        clock: wall-clock seconds (shared by every host); tests pass their own.
    """

    def __init__(
        self,
        engine: AsyncEngine,
        bounds: AnswerQueues,
        *,
        lease_s: float = LEASE_S,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine, self.bounds, self.lease_s, self.clock = engine, bounds, lease_s, clock
        self.held: set[str] = set()
        """Ids of the leases this process holds (renewed while :meth:`start` runs)."""
        self._leaving: set[asyncio.Task[None]] = set()
        self._renewing: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Renew this process's leases from now on (in the running loop) until :meth:`close`."""
        if self._renewing is None:
            self._renewing = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        """Stop renewing, and give back what is being given back."""
        if self._renewing is not None:
            self._renewing.cancel()
            await asyncio.gather(self._renewing, return_exceptions=True)
            self._renewing = None
        await asyncio.gather(*self._leaving, return_exceptions=True)

    async def confirm(
        self, chat: str, person: str, released: Callable[[], None] = lambda: None
    ) -> Lease | None:
        """A lease for one more answer of ``chat`` asked by ``person``, counted with every
        process's; None while the store cannot be asked (the caller's count in this
        process stands alone: :meth:`backend.fair_use.AnswerQueues.take`). ``released``
        is called once the lease, left, no longer counts (deleted, or its deletion failed
        and it expires).

        Raises:
            Busy: ``chat`` or ``person`` has as many answers running or waiting as allowed.
        """
        try:
            lease_id = await self._add("answer", chat, person, 1, self.bounds.check)
            return Lease(self, lease_id, released)
        except (SQLAlchemyError, OSError) as exc:
            log.warning("answers counted in this process for now: %s", exc)
            return None

    async def hold(
        self, chat: str, person: str, size: int, fits: Callable[[int, int], None]
    ) -> Callable[[], None]:
        """Hold ``size`` bytes of an upload into ``chat`` by ``person`` once
        ``fits(chat's bytes, person's bytes)`` (held in every process, before this one)
        has not raised; returns what gives them back. While the store cannot be asked,
        this process's count alone decides.
        """
        try:
            lease_id = await self._add("upload", chat, person, size, fits)
        except (SQLAlchemyError, OSError) as exc:
            log.warning("uploads counted in this process for now: %s", exc)
            return lambda: None
        return lambda: self.release(lease_id)

    async def _add(
        self, kind: str, chat: str, person: str, amount: int, fits: Callable[[int, int], None]
    ) -> str:
        """Add a ``kind`` lease of ``amount`` once ``fits(chat's, person's)`` (the live
        amounts of that kind) has not raised; its id."""
        now, lease_id = self.clock(), uuid.uuid4().hex
        async with self.engine.begin() as db:
            if db.dialect.name == "postgresql":
                await db.execute(
                    text("SELECT pg_advisory_xact_lock(:lock, hashtext(:person))"),
                    {"lock": PERSON_LOCK, "person": person},
                )
            counts = (
                await db.execute(
                    text(
                        "SELECT COALESCE(SUM(amount), 0), COALESCE(SUM(CASE WHEN chat = :chat "
                        "THEN amount ELSE 0 END), 0) FROM kimi_leases WHERE kind = :kind "
                        "AND person = :person AND expires_at > :now"
                    ),
                    {"kind": kind, "chat": chat, "person": person, "now": now},
                )
            ).one()
            fits(int(counts[1]), int(counts[0]))
            await db.execute(
                text(
                    "INSERT INTO kimi_leases (id, kind, chat, person, amount, expires_at) "
                    "VALUES (:id, :kind, :chat, :person, :amount, :expires)"
                ),
                {"id": lease_id, "kind": kind, "chat": chat, "person": person,
                 "amount": amount, "expires": now + self.lease_s},
            )  # fmt: skip
        self.held.add(lease_id)
        return lease_id

    def release(self, lease_id: str, released: Callable[[], None] = lambda: None) -> None:
        """Delete lease ``lease_id`` (in a task: :meth:`Lease.leave` is called from
        ``finally`` blocks), then call ``released``; if the store cannot take it, the
        lease expires."""
        self.held.discard(lease_id)
        task = asyncio.get_running_loop().create_task(self._delete(lease_id))
        self._leaving.add(task)
        task.add_done_callback(self._leaving.discard)
        task.add_done_callback(lambda _: released())

    async def _delete(self, lease_id: str) -> None:
        try:
            async with self.engine.begin() as db:
                await db.execute(text("DELETE FROM kimi_leases WHERE id = :id"), {"id": lease_id})
        except (SQLAlchemyError, OSError) as exc:  # it expires by itself within lease_s
            log.warning("a lease was not given back (%s); it expires by itself", exc)

    async def renew(self) -> None:
        """Renew every lease this process holds, and delete the expired ones."""
        now = self.clock()
        async with self.engine.begin() as db:
            for lease_id in list(self.held):
                await db.execute(
                    text("UPDATE kimi_leases SET expires_at = :expires WHERE id = :id"),
                    {"id": lease_id, "expires": now + self.lease_s},
                )
            await db.execute(text("DELETE FROM kimi_leases WHERE expires_at <= :now"), {"now": now})

    async def _run(self) -> None:
        """Renew this process's leases every third of ``lease_s``, until cancelled."""
        while True:
            await asyncio.sleep(self.lease_s / 3)
            try:
                await self.renew()
            except (SQLAlchemyError, OSError) as exc:  # the store is away: answers go on
                log.warning("leases not renewed: %s", exc)


@dataclass
class Lease:
    """One answer's lease (from :meth:`Leases.confirm`); :meth:`leave` once."""

    leases: Leases
    lease_id: str
    released: Callable[[], None] = lambda: None
    """Called once the lease no longer counts in the store."""
    left: bool = False

    def leave(self) -> None:
        """Give the place back (the answer ended, was stopped, or never started)."""
        if not self.left:
            self.left = True
            self.leases.release(self.lease_id, self.released)


class StoredChats:
    """What one user's stored chats hold, in bytes, and the bound on it
    (``KIMI_USER_STORE_MB``), read from the store so that every worker and host sees the
    same: the UTF-8 bytes of their turns' text, answer and reasoning (``kimi_turns``), of
    the other models' answers and reasoning beside them (Compare, ``kimi_compared``) and
    the source bytes of their images (``kimi_images``), over the chats the user owns
    (``kimi_threads."userIdentifier"``). What Chainlit keeps beside a turn (its steps, the
    uploaded files) follows the turn's size.

    Args:
        engine: the shared store's engine (borrowed).
        limit: bytes one user's chats may hold.
    """

    def __init__(self, engine: AsyncEngine, limit: int) -> None:
        self.engine, self.limit = engine, limit

    async def held(self, user: str) -> int:
        """Bytes the chats of ``user`` (a user's identifier) hold now."""
        length = "octet_length({})"
        if self.engine.dialect.name == "sqlite":  # SQLite 3.40 has no octet_length
            length = "length(CAST({} AS BLOB))"
        text_bytes = " + ".join(length.format(f"t.{c}") for c in ("text", "answer", "reasoning"))
        compared_bytes = " + ".join(length.format(f"c.{c}") for c in ("answer", "reasoning"))
        owned = 'JOIN kimi_threads h ON h.id = {}.thread_id WHERE h."userIdentifier" = :user'
        async with self.engine.connect() as db:
            found = await db.execute(
                text(
                    f"SELECT (SELECT COALESCE(SUM({text_bytes}), 0) FROM kimi_turns t "
                    f"{owned.format('t')}) + (SELECT COALESCE(SUM({compared_bytes}), 0) "
                    f"FROM kimi_compared c {owned.format('c')}) + "
                    f"(SELECT COALESCE(SUM(i.source_bytes), 0) FROM kimi_images i "
                    f"{owned.format('i')})"
                ),
                {"user": user},
            )
            return int(found.scalar() or 0)

    async def check(self, user: str, adding: int) -> None:
        """Refuse a message of ``adding`` bytes from ``user`` if their chats would hold
        more than :attr:`limit` with it.

        While the store cannot be asked, the message goes through (what it adds is held
        in memory, at most ``KIMI_UNSAVED_MB``).

        Raises:
            backend.fair_use.StoreFull: they would; the sentence says what to do.
        """
        try:
            held = await self.held(user)
        except (SQLAlchemyError, OSError) as exc:
            log.warning("stored chats not counted for now: %s", exc)
            return
        check_stored(held, adding, self.limit)
