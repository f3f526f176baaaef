"""The database engine: which database, and how SQLite is made safe for several writers.

SQLite (the default, a file ``chat.db`` in the data folder) is opened through
aiosqlite with:

* ``journal_mode=WAL``: readers never wait for the writer (sqlite.org/wal.html);
* a busy timeout of :data:`BUSY_TIMEOUT_S`: a writer that finds the database
  locked waits for it instead of failing with "database is locked";
* a connection opened while the data folder is read-only closed when it is given
  back, never reused: SQLite opens such a connection read-only for good, and shares one
  WAL index per database file and process, so every connection opened while it lives
  inherits "attempt to write a readonly database", even once the folder is writable
  again (tests/test_outage.py). One that meets that error is dropped as well;
* every transaction opened with ``BEGIN IMMEDIATE``: Python's ``sqlite3`` module
  begins transactions only before DML and never for DDL, and a deferred
  transaction that reads and then writes fails at once with SQLITE_BUSY, busy
  timeout or not, when another connection wrote in between (sqlite.org/lang_transaction.html).
  Taking the write lock at BEGIN makes every transaction wait its turn instead.
  This is SQLAlchemy's documented recipe for aiosqlite (``isolation_level = None``
  plus a ``begin`` listener), with IMMEDIATE instead of plain BEGIN.

The database file and its ``-wal``/``-shm`` companions are made ``0600`` on every
connection, before WAL mode creates the companions (SQLite gives them the
database file's mode): the database holds every chat and the password hashes.

PostgreSQL (``postgresql+asyncpg://...``) needs none of this.

On both, a NUL character (U+0000) in a text written becomes :data:`NUL_STANDIN`:
PostgreSQL's text types cannot hold it ("invalid byte sequence for encoding UTF8: 0x00",
an error that no retry mends), and a chat reads the same whichever database holds it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from sqlalchemy import event
from sqlalchemy.engine import Connection, ExceptionContext, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from backend.store.files import DATABASE_FILE, FILE_MODE

BUSY_TIMEOUT_S: Final = 30.0
"""Seconds a SQLite writer waits for the lock before giving up."""

CONNECT_TIMEOUT_S: Final = 5.0
"""Seconds a PostgreSQL connection may take before the write is held
(:mod:`backend.store.pending`) and the chat goes on."""


NUL_STANDIN: Final = "\ufffd"
"""What a NUL character in stored text becomes (Unicode's replacement character). Model
answers can hold one: a random-weights answer did (tests/test_three_hosts.py)."""


class StoreError(Exception):
    """The store cannot be used; the message is one sentence a person can act on."""


def database_url(data_dir: Path, configured: str) -> str:
    """The SQLAlchemy async URL to use: ``configured``, else SQLite in ``data_dir``.

    Raises:
        StoreError: ``configured`` is neither an aiosqlite nor an asyncpg URL.
    """
    if not configured:
        return f"sqlite+aiosqlite:///{(data_dir / DATABASE_FILE).resolve()}"
    try:
        driver = make_url(configured).drivername
    except Exception as exc:
        raise StoreError(f"KIMI_DATABASE_URL is not a database URL ({exc}).") from None
    if driver not in ("sqlite+aiosqlite", "postgresql+asyncpg"):
        raise StoreError(
            f"KIMI_DATABASE_URL uses '{driver}'; use postgresql+asyncpg://... "
            "or sqlite+aiosqlite:///FILE."
        )
    return configured


def make_private(database: Path) -> None:
    """Make a SQLite ``database`` file and its ``-wal``, ``-shm`` and ``-journal``
    companions (those that exist) :data:`~backend.store.files.FILE_MODE`.

    Raises:
        OSError: a mode cannot be set.
    """
    for path in (database, *(database.with_name(database.name + s) for s in _COMPANIONS)):
        try:
            if path.stat().st_mode & 0o777 != FILE_MODE:
                path.chmod(FILE_MODE)
        except FileNotFoundError:
            continue


_COMPANIONS: Final = ("-wal", "-shm", "-journal")

_OPENED_READ_ONLY: Final = "kimi_opened_read_only"
"""Key of a pool entry's ``info``: the connection was opened while its folder was read-only."""


def writable(database: Path) -> bool:
    """True if SQLite opens ``database`` for writing now: the file may be written (a
    read-only mount says no too), or, before it exists, its folder."""
    return os.access(database if database.exists() else database.parent, os.W_OK)


def is_sqlite(engine: AsyncEngine) -> bool:
    """True if ``engine`` talks to SQLite."""
    return engine.dialect.name == "sqlite"


def create_engine(url: str) -> AsyncEngine:
    """An async engine for ``url``; SQLite gets WAL, a busy timeout and BEGIN IMMEDIATE.

    Nothing is connected yet: the first use connects, in the event loop that uses it.
    """
    if not url.startswith("sqlite"):
        # A server that does not answer fails a connection in seconds, not asyncpg's 60.
        connect = {"timeout": CONNECT_TIMEOUT_S}
        return _without_nul(create_async_engine(url, pool_pre_ping=True, connect_args=connect))
    engine = _without_nul(create_async_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S}))
    database = make_url(url).database

    @event.listens_for(engine.sync_engine, "connect")
    def on_connect(dbapi_connection: Any, entry: ConnectionPoolEntry) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        if database and database != ":memory:":
            entry.info[_OPENED_READ_ONLY] = not writable(Path(database))
            make_private(Path(database))  # connecting created it; WAL files follow its mode
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        cursor.execute("PRAGMA journal_mode = WAL")
        cursor.execute("PRAGMA synchronous = NORMAL")  # WAL: durable except on power loss
        cursor.close()

    @event.listens_for(engine.sync_engine, "checkin")
    def on_checkin(_dbapi_connection: Any, entry: ConnectionPoolEntry) -> None:
        if entry.info.get(_OPENED_READ_ONLY):
            entry.invalidate()  # closed now; the entry connects afresh when next taken

    @event.listens_for(engine.sync_engine, "begin")
    def on_begin(connection: Connection) -> None:
        # BEGIN IMMEDIATE asks for the WAL write lock, which fails ("attempt to write a
        # readonly database") where the process's WAL index is read-only, even before a
        # read. A connection opened while the folder is read-only cannot write anyway: it
        # reads in a plain BEGIN.
        read_only = connection.info.get(_OPENED_READ_ONLY)
        connection.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    @event.listens_for(engine.sync_engine, "handle_error")
    def on_error(context: ExceptionContext) -> None:
        # A connection opened read-only, or one that inherited a read-only WAL index (see
        # the module docstring), is dropped, and the pool's older ones are renewed when
        # next taken (SQLAlchemy's documented use of is_disconnect).
        if "readonly database" in str(context.original_exception):
            context.is_disconnect = True

    return engine


def _without_nul(engine: AsyncEngine) -> AsyncEngine:
    """``engine``, its statements' text parameters with :data:`NUL_STANDIN` for NUL
    (SQLAlchemy's ``before_cursor_execute`` with ``retval``: one place for every write)."""

    @event.listens_for(engine.sync_engine, "before_cursor_execute", retval=True)
    def clean(
        _conn: Connection, _cursor: Any, statement: str, parameters: Any, *_: Any
    ) -> tuple[str, Any]:
        return statement, _cleaned(parameters)

    return engine


def _cleaned(value: Any) -> Any:
    """``value`` (a parameter, or a sequence or mapping of them) with NUL replaced."""
    if isinstance(value, str):
        return value.replace("\x00", NUL_STANDIN) if "\x00" in value else value
    if isinstance(value, dict):
        return {key: _cleaned(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_cleaned(item) for item in value)
    return value
