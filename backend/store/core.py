"""The store: :class:`Store` owns the engine, the file store and the writes held while the
database cannot take them (:mod:`backend.store.pending`); everything else borrows them.
:func:`open_store` checks and migrates it at start. What lies where: :mod:`backend.store`.
"""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.auth import Users
from backend.fair_use import AnswerQueues
from backend.settings import Settings
from backend.store.bounds import Leases, SignInThrottle, StoredChats, create_tables
from backend.store.db import StoreError, create_engine, database_url, is_sqlite
from backend.store.files import Files, FileStore, StorageUnavailable, private_folder
from backend.store.pending import PendingWrites
from backend.store.schema import migrate
from backend.store.turns import TurnStore

__all__ = ["Store", "StoreError", "open_store"]


def open_files(settings: Settings) -> Files:
    """Where files go: the S3 bucket ``KIMI_FILES_S3_BUCKET`` names, else the folder
    ``KIMI_DATA_DIR/files`` (local, or a shared volume)."""
    if settings.files_s3_bucket:
        from backend.store.s3 import S3Files

        return S3Files(
            settings.files_s3_bucket, settings.files_s3_endpoint_url, settings.files_s3_region
        )
    return FileStore(Path(settings.data_dir) / "files")


class Store:
    """The app's database engine and file store, with the tables built on them.

    Create with :func:`open_store` (checks and migrates first) or directly (no
    check; nothing connects until first use). Close with :meth:`close`.
    """

    def __init__(self, settings: Settings) -> None:
        self.data_dir = Path(settings.data_dir)
        self.url = database_url(self.data_dir, settings.database_url)
        self.engine: AsyncEngine = create_engine(self.url)
        self.files = open_files(settings)
        self.turns = TurnStore(self.engine, self.files)
        self.users = Users(self.engine)
        self.throttle = SignInThrottle(self.engine)
        bounds = AnswerQueues(1 + settings.chat_queue, settings.user_answers)
        self.leases = Leases(self.engine, bounds)
        """Answers running or waiting and uploads held, counted for every process sharing
        the store."""
        self.stored_chats = StoredChats(self.engine, settings.user_store_mb * 1_000_000)
        """What each user's stored chats hold, and the bound on it."""
        self.pending = PendingWrites(self.where, settings.unsaved_mb * 1_000_000)
        """Every write of the store, held while the store cannot take it."""

    @property
    def where(self) -> str:
        """The database, for messages: the SQLite file, or the URL without its password."""
        url = make_url(self.url)
        if url.drivername.startswith("sqlite"):
            return str(url.database)
        return url.render_as_string(hide_password=True)

    async def check(self) -> None:
        """Make sure the data folder is writable and the schema is current.

        Raises:
            StoreError: one sentence naming the folder or database and what is wrong.
        """
        try:
            if is_sqlite(self.engine):
                private_folder(self.data_dir)
            self.files.check()
        except StorageUnavailable as exc:
            raise StoreError(
                f"The file store cannot be used ({exc}); check KIMI_FILES_S3_BUCKET, "
                "KIMI_FILES_S3_ENDPOINT_URL and the AWS credentials."
            ) from None
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            if exc.errno in (errno.EEXIST, errno.ENOTDIR):
                reason = "a file is in the way of the folder"
            raise StoreError(
                f"The data folder {self.data_dir.resolve()} cannot be written ({reason}); "
                "set KIMI_DATA_DIR to a writable folder."
            ) from None
        try:
            await migrate(self.engine)
            await create_tables(self.engine)
        except StoreError:
            raise
        except (SQLAlchemyError, OSError) as exc:
            cause = getattr(exc, "orig", None) or exc
            detail = str(cause).strip().splitlines()[0] if str(cause).strip() else repr(cause)
            if is_sqlite(self.engine):
                raise StoreError(
                    f"The database {self.where} cannot be used ({detail}); move it away to "
                    "start with an empty one, or restore a backup."
                ) from None
            raise StoreError(
                f"The database {self.where} cannot be used ({detail}); check "
                "KIMI_DATABASE_URL and that the server runs."
            ) from None

    async def close(self) -> None:
        """Write what is held if the store takes it within seconds (else the log names it),
        then close every database connection."""
        await self.leases.close()
        await self.pending.close()
        await self.engine.dispose()


def open_store(settings: Settings) -> tuple[Store, int]:
    """Check and migrate the store, outside any event loop; returns it and the user count.

    For start-up code that runs before the server's event loop (``app.py`` at
    import, the CLI). The check uses its own engine, disposed before returning:
    connections belong to the event loop that made them, so the returned store
    connects afresh in the loop that uses it.

    Raises:
        StoreError: see :meth:`Store.check`.
    """

    async def check() -> int:
        probe = Store(settings)
        try:
            await probe.check()
            return await probe.users.count()
        finally:
            await probe.close()

    users = asyncio.run(check())
    return Store(settings), users
