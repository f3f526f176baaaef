"""Who may sign in, and who may see what.

Users live in the ``kimi_users`` table (:mod:`backend.store.schema`): a name and
an Argon2id hash of the password (argon2-cffi's ``PasswordHasher`` with its
defaults, RFC 9106's second recommended profile: 3 passes over 64 MiB). The
plain password is never stored or logged. They are managed from the shell
(``python -m backend.cli user ...``) and checked by the app's sign-in.

Ownership: a chat (Chainlit thread) belongs to the user who started it
(``threads."userIdentifier"``); its files may be read by that user, and by
anyone once it is shared (:func:`may_read_thread`).
"""

from __future__ import annotations

import asyncio
import functools
import re
from datetime import UTC, datetime
from typing import Final

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

NAME_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
"""Accepted user names: 1-64 letters, digits, ``.``, ``_``, ``@``, ``-``; not starting
with punctuation (so a name never looks like a command-line option)."""

MIN_PASSWORD_CHARS: Final = 8

_HASHER: Final = PasswordHasher()


@functools.cache
def _dummy_hash() -> str:
    """Verified against when the name is unknown, so both cases take the same time."""
    return _HASHER.hash("not a password of anyone")


class AuthError(Exception):
    """A user command cannot be done; the message is one sentence for the person."""


def check_name(name: str) -> str:
    """``name`` if it is an acceptable user name.

    Raises:
        AuthError: it is not (see :data:`NAME_PATTERN`).
    """
    if not NAME_PATTERN.match(name):
        raise AuthError(
            f"'{name}' is not a usable user name: use 1-64 letters, digits, '.', '_', '@' "
            "or '-', starting with a letter or digit."
        )
    return name


def check_password(password: str) -> str:
    """``password`` if it is long enough.

    Raises:
        AuthError: shorter than :data:`MIN_PASSWORD_CHARS` characters.
    """
    if len(password) < MIN_PASSWORD_CHARS:
        raise AuthError(f"The password must have at least {MIN_PASSWORD_CHARS} characters.")
    return password


class Users:
    """The user table. Borrows ``engine``; hashing runs in a worker thread (about 50 ms)."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def add(self, name: str, password: str) -> None:
        """Create user ``name``.

        Raises:
            AuthError: bad name or password, or the name is taken.
        """
        check_name(name)
        hashed = await asyncio.to_thread(_HASHER.hash, check_password(password))
        async with self.engine.begin() as db:
            taken = await db.execute(text("SELECT 1 FROM kimi_users WHERE name = :n"), {"n": name})
            if taken.first() is not None:
                raise AuthError(f"User '{name}' already exists; use 'user passwd' to change it.")
            await db.execute(
                text(
                    "INSERT INTO kimi_users (name, password_hash, created_at) VALUES (:n, :h, :at)"
                ),
                {"n": name, "h": hashed, "at": datetime.now(UTC).isoformat()},
            )

    async def set_password(self, name: str, password: str) -> None:
        """Replace the password of ``name``.

        Raises:
            AuthError: bad password, or no such user.
        """
        hashed = await asyncio.to_thread(_HASHER.hash, check_password(password))
        async with self.engine.begin() as db:
            result = await db.execute(
                text("UPDATE kimi_users SET password_hash = :h WHERE name = :n"),
                {"n": name, "h": hashed},
            )
        if result.rowcount == 0:
            raise AuthError(f"There is no user '{name}'.")

    async def remove(self, name: str) -> None:
        """Delete user ``name`` (their chats stay in the database).

        Raises:
            AuthError: no such user.
        """
        async with self.engine.begin() as db:
            result = await db.execute(text("DELETE FROM kimi_users WHERE name = :n"), {"n": name})
        if result.rowcount == 0:
            raise AuthError(f"There is no user '{name}'.")

    async def names(self) -> list[str]:
        """Every user name, sorted."""
        async with self.engine.connect() as db:
            rows = await db.execute(text("SELECT name FROM kimi_users ORDER BY name"))
            return [str(row[0]) for row in rows]

    async def exists(self, name: str) -> bool:
        """True if user ``name`` exists."""
        async with self.engine.connect() as db:
            row = await db.execute(text("SELECT 1 FROM kimi_users WHERE name = :n"), {"n": name})
            return row.first() is not None

    async def count(self) -> int:
        """How many users exist."""
        async with self.engine.connect() as db:
            value = (await db.execute(text("SELECT COUNT(*) FROM kimi_users"))).scalar()
        return int(value or 0)

    async def verify(self, name: str, password: str) -> bool:
        """True if ``name`` exists and ``password`` is theirs; unknown names take as long."""
        async with self.engine.connect() as db:
            row = (
                await db.execute(
                    text("SELECT password_hash FROM kimi_users WHERE name = :n"), {"n": name}
                )
            ).first()
        hashed = str(row[0]) if row is not None else _dummy_hash()
        try:
            await asyncio.to_thread(_HASHER.verify, hashed, password)
        except (VerificationError, InvalidHashError):
            return False
        return row is not None


def may_read_thread(owner: str | None, viewer: str | None, *, shared: bool) -> bool:
    """True if ``viewer`` (a user name, None when not signed in) may read a chat and its files.

    The owner always may; anyone may read a shared chat; nobody else, and an
    ownerless chat (made while the app ran without sign-in) only without sign-in.
    """
    if shared:
        return True
    return owner == viewer
