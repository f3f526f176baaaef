"""Who may sign in, how often they may try, and who may see what.

Users live in the ``kimi_users`` table (:mod:`backend.store.schema`): a name, an
Argon2id hash of the password (argon2-cffi's ``PasswordHasher`` with its
defaults, RFC 9106's second recommended profile: 3 passes over 64 MiB) and a
token generation. The plain password is never stored or logged. They are
managed from the shell (``python -m backend.cli user ...``) and checked by the
app's sign-in.

Tokens: a sign-in token (Chainlit's JWT cookie) carries the user's token
generation at sign-in; :meth:`Users.revoke_tokens` (sign-out) and
:meth:`Users.set_password` add one to it, so every token issued before stops
working at once (``ui/signin.py`` checks it on each request).

Throttling (the numbers here; the counts live in the shared store,
:class:`backend.store.bounds.SignInThrottle`): sign-in attempts are counted per user name
and per client address before their password is checked; after :data:`FREE_FAILURES`
in a row, the next attempt must wait :data:`FIRST_DELAY_S`, doubling with each further
failure up to :data:`MAX_DELAY_S`. An attempt made while waiting is refused without
checking the password. Unknown names are counted like real ones, so the answer and its
timing never tell whether a name exists.

Ownership: a chat (Chainlit thread) belongs to the user who started it
(``kimi_threads."userIdentifier"``); it and its files may be read by that user, and by
anyone once it is shared (:func:`may_read_thread`); :class:`Ownership` answers
whose a step, a feedback, a file or a thread is.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

NAME_PATTERN: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
"""Accepted user names: 1-64 letters, digits, ``.``, ``_``, ``@``, ``-``; not starting
with punctuation (so a name never looks like a command-line option)."""

MIN_PASSWORD_CHARS: Final = 8
MAX_PASSWORD_CHARS: Final = 1024
"""Longest password accepted, and tried at sign-in. The sign-in form is parsed by
Starlette, whose multipart parser refuses a field over 1 MiB (``max_part_size``,
starlette/formparsers.py); 1024 characters (at most 4 KiB of UTF-8) always fit."""
TRIVIAL_PASSWORDS: Final = frozenset(
    {"password", "password1", "passw0rd", "12345678", "123456789", "1234567890",
     "87654321", "qwertyui", "qwerty123", "iloveyou", "abcdefgh", "letmein1",
     "changeme", "welcome1", "admin123", "kimi-vl-chat"}
)  # fmt: skip
"""Passwords refused whatever their length: the first ones any guesser tries."""

FREE_FAILURES: Final = 5
"""Failed sign-ins in a row (per name, and per client) before attempts must wait."""
FIRST_DELAY_S: Final = 1.0
"""The first wait; each further failure doubles it."""
MAX_DELAY_S: Final = 300.0
"""The longest wait between two attempts (5 minutes)."""
FORGET_AFTER_S: Final = 900.0
"""Failures are forgotten this long (15 minutes) after the last one."""
KEY_CHARS: Final = 128
"""Characters of a name or address kept as its key (a real name has at most 64), so a
megabyte of typed name costs no more room than a short one."""

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


def check_password(password: str, name: str = "") -> str:
    """``password`` if it can sign in and is not trivial to guess.

    Raises:
        AuthError: shorter than :data:`MIN_PASSWORD_CHARS` or longer than
            :data:`MAX_PASSWORD_CHARS` characters; only spaces, one character
            repeated, one of :data:`TRIVIAL_PASSWORDS`, or the user's name.
    """
    if len(password) < MIN_PASSWORD_CHARS:
        raise AuthError(f"The password must have at least {MIN_PASSWORD_CHARS} characters.")
    if len(password) > MAX_PASSWORD_CHARS:
        raise AuthError(
            f"The password has {len(password)} characters; the sign-in takes at most "
            f"{MAX_PASSWORD_CHARS}, so it could never be used."
        )
    folded = password.strip().casefold()
    if not folded or len(set(folded)) == 1:
        raise AuthError("The password is one character repeated; choose one that is hard to guess.")
    if folded in TRIVIAL_PASSWORDS or (name and folded == name.casefold()):
        raise AuthError("The password is among the first ones guessed; choose another.")
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
        hashed = await asyncio.to_thread(_HASHER.hash, check_password(password, name))
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
        """Replace the password of ``name``; its existing sign-in tokens stop working.

        Raises:
            AuthError: bad password, or no such user.
        """
        hashed = await asyncio.to_thread(_HASHER.hash, check_password(password, name))
        async with self.engine.begin() as db:
            result = await db.execute(
                text(
                    "UPDATE kimi_users SET password_hash = :h, "
                    "token_generation = token_generation + 1 WHERE name = :n"
                ),
                {"n": name, "h": hashed},
            )
        if result.rowcount == 0:
            raise AuthError(f"There is no user '{name}'.")

    async def revoke_tokens(self, name: str) -> None:
        """Make every sign-in token of ``name`` issued so far worthless (sign-out)."""
        async with self.engine.begin() as db:
            await db.execute(
                text(
                    "UPDATE kimi_users SET token_generation = token_generation + 1 WHERE name = :n"
                ),
                {"n": name},
            )

    async def token_generation(self, name: str) -> int | None:
        """The generation a valid token of ``name`` carries; None if there is no such user."""
        async with self.engine.connect() as db:
            row = (
                await db.execute(
                    text("SELECT token_generation FROM kimi_users WHERE name = :n"), {"n": name}
                )
            ).first()
        return None if row is None else int(row[0])

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

    async def check(self, name: str, password: str) -> int | None:
        """The token generation of ``name`` if ``password`` is theirs, else None.

        An unknown name, or a password over :data:`MAX_PASSWORD_CHARS` (which no
        user can have), is verified against a dummy hash: every answer takes as long.
        """
        async with self.engine.connect() as db:
            row = (
                await db.execute(
                    text("SELECT password_hash, token_generation FROM kimi_users WHERE name = :n"),
                    {"n": name},
                )
            ).first()
        usable = row is not None and len(password) <= MAX_PASSWORD_CHARS
        hashed = str(row[0]) if row is not None and usable else _dummy_hash()
        try:
            await asyncio.to_thread(_HASHER.verify, hashed, password[:MAX_PASSWORD_CHARS])
        except (VerificationError, InvalidHashError):
            return None
        return int(row[1]) if row is not None and usable else None

    async def verify(self, name: str, password: str) -> bool:
        """True if ``name`` exists and ``password`` is theirs; unknown names take as long."""
        return await self.check(name, password) is not None


def may_read_thread(owner: str | None, viewer: str | None, *, shared: bool) -> bool:
    """True if ``viewer`` (a user name, None when not signed in) may read a chat and its files.

    Anyone may read a shared chat; otherwise only its owner, and nobody reads a
    chat without an owner (None is never anyone's name).
    """
    if shared:
        return True
    return owner is not None and viewer is not None and owner == viewer


def _metadata(value: Any) -> dict[str, Any]:
    """A thread's ``metadata`` column (a dict, its JSON text, or None) as a dict."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return {}
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class ThreadAccess:
    """Whose a thread is and whether it is shared (Chainlit's ``metadata.is_shared``).

    Attributes:
        owner: the owner's user name; None for a chat without one.
        shared: its owner shared it (Chainlit's share dialog).
        name: its title.
        shared_at: when it was shared (ISO 8601, Chainlit's ``shared_at``), or "".
    """

    owner: str | None
    shared: bool
    name: str
    shared_at: str = ""

    @classmethod
    def of(cls, owner: str | None, metadata: Any, name: Any) -> ThreadAccess:
        """From a ``kimi_threads`` row's ``userIdentifier``, ``metadata`` and ``name``."""
        found = _metadata(metadata)
        shared = bool(found.get("is_shared"))
        return cls(owner, shared, str(name or ""), str(found.get("shared_at") or ""))


class Ownership:
    """Whose rows are in the page's tables (:mod:`backend.store.pages`: threads, steps,
    elements, feedback). Borrows ``engine``; every method raises
    ``sqlalchemy.exc.SQLAlchemyError`` when the database fails.
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def _one(self, sql: str, **params: Any) -> Any:
        async with self.engine.connect() as db:
            return (await db.execute(text(sql), params)).first()

    async def thread(self, thread_id: str) -> ThreadAccess | None:
        """The thread ``thread_id``, or None if there is none."""
        row = await self._one(
            'SELECT "userIdentifier", "metadata", "name" FROM kimi_threads WHERE "id" = :id',
            id=thread_id,
        )
        return None if row is None else ThreadAccess.of(row[0], row[1], row[2])

    async def step_owner(self, step_id: str) -> str | None:
        """The owner of the thread that step ``step_id`` is in (None: no step, or no owner)."""
        row = await self._one(
            'SELECT t."userIdentifier" FROM kimi_steps s '
            'JOIN kimi_threads t ON t."id" = s."threadId" WHERE s."id" = :id',
            id=step_id,
        )
        return None if row is None else row[0]

    async def feedback_step(self, feedback_id: str) -> str | None:
        """The step id feedback ``feedback_id`` is for, or None if there is no such feedback."""
        row = await self._one('SELECT "forId" FROM kimi_feedback WHERE "id" = :id', id=feedback_id)
        return None if row is None else str(row[0])

    async def file(self, key: str) -> tuple[ThreadAccess, str] | None:
        """The thread of the element stored under object key ``key``, and its mime type;
        None if no element has that key."""
        row = await self._one(
            'SELECT t."userIdentifier", t."metadata", t."name", e."mime" FROM kimi_elements e '
            'JOIN kimi_threads t ON t."id" = e."threadId" WHERE e."objectKey" = :key LIMIT 1',
            key=key,
        )
        if row is None:
            return None
        return ThreadAccess.of(row[0], row[1], row[2]), str(row[3] or "application/octet-stream")
