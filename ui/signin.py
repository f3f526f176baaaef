"""Sign-in on the Chainlit server: the password check, throttling, token revocation, and
what a request may do on behalf of the user its token names.

:func:`install` (from ``ui/history.py`` when sign-in is on) registers Chainlit's
password callback and ``on_logout`` hook, and puts :class:`SignInGuard` in front
of the app:

- **Tokens**: Chainlit's sign-in token (a JWT in the ``access_token`` cookie, or a
  ``Bearer`` header) carries the user's token generation from the moment of
  sign-in (:meth:`Accounts.sign_in`). A request whose token names a removed user
  or an older generation (the user signed out, or their password was changed
  with ``backend.cli user passwd``) reaches Chainlit without it: every route and
  the socket see a request that is not signed in. The token is read with
  Chainlit's own reader (``reuseable_oauth``: the cookie, then the header) and
  decoder (``decode_jwt``). If the database cannot be asked, a token cannot be told
  from one signed out, so a request that needs one (:data:`NEEDS_SIGN_IN`: the user,
  the project routes, the socket, stored files, feedback, sign-out) is refused, 503 with
  a sentence (:data:`UNCHECKED`; the socket: closed), and the log says so once, naming
  the cause; a socket already open goes on, so a chat open in a tab keeps answering
  through the outage. A sign-in attempt meanwhile is answered 503 with a sentence
  (:data:`NO_DATABASE`), not Chainlit's "Unable to sign in".
- **Throttling** (:class:`backend.store.bounds.SignInThrottle`, per user name and per
  client address, counted in the shared store before the password is checked, so a
  burst meets the limit a sequence does, on every worker): an attempt made while it
  must wait is answered 429 with
  ``Retry-After`` and a sentence, without checking the password (Chainlit's
  sign-in page shows the same sentence from ``.chainlit/translations``, keyed by
  the status text). Each failure is logged with the name and the address,
  never the password. The client address is uvicorn's (a trusted proxy's
  ``X-Forwarded-For``: loopback by default, ``FORWARDED_ALLOW_IPS``).
- **Feedback**: ``PUT /feedback`` and ``DELETE /feedback`` (Chainlit checks only
  that someone is signed in) are refused with 404 unless the step, and the
  feedback named by id, are in a chat of the signed-in user.
- **Shared chats**: ``GET /share/<thread id>`` without a valid sign-in is the
  chat's public read-only page (:mod:`ui.share`); signed in, it is Chainlit's
  own shared view.
"""

from __future__ import annotations

import logging
import math
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Final, cast

import chainlit as cl
from chainlit.auth import reuseable_oauth
from chainlit.auth.jwt import decode_jwt
from sqlalchemy.exc import SQLAlchemyError
from starlette.datastructures import Headers
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.auth import MAX_PASSWORD_CHARS, Ownership, Users
from backend.i18n import msg
from backend.logs import LOGGER_NAME
from backend.store.bounds import SignInThrottle
from backend.store.core import Store
from backend.store.pending import cause
from ui import share
from ui.language import header_translator
from ui.security import AUTH_COOKIE, json_field, read_body, refuse, replaying

log = logging.getLogger(LOGGER_NAME)

GENERATION: Final = "token_generation"
"""Key of the user's token generation in the token's ``metadata``."""
NOT_YOURS: Final = msg("This message is not in your chats.")
TOO_MANY: Final = msg(
    "Too many failed sign-ins: wait a little, then try again (each failure doubles the wait)."
)
"""The 429's ``detail``. Chainlit's sign-in page shows ``auth.login.errors.<status text>``
instead (``too many requests`` in .chainlit/translations, the same sentence)."""
NO_DATABASE: Final = msg(
    "Signing in is not possible right now: the app cannot reach its database. Try again in "
    "a minute; chats already open go on."
)
"""The 503's ``detail`` (``service unavailable`` in .chainlit/translations, the same)."""
UNCHECKED: Final = msg(
    "Your sign-in cannot be checked right now: the app cannot reach its database. Chats "
    "already open go on; try again in a minute."
)
"""The ``detail`` of a request refused because its token cannot be checked."""
NEEDS_SIGN_IN: Final = ("/user", "/project/", "/ws/", "/kimi/files/", "/feedback", "/logout")
"""Paths (prefixes) whose requests need a checked token; the rest (the page, its assets,
the sign-in form, a shared chat's public page) are answered as not signed in."""


class Unchecked(Exception):
    """A token that cannot be checked: the database cannot be asked."""


@dataclass
class LoginAttempt:
    """One ``POST /login`` as :class:`SignInGuard` saw it; the callback fills ``wait_s``
    (it had to wait) or ``unavailable`` (the database could not be asked)."""

    client: str
    wait_s: float = 0.0
    unavailable: bool = False

    @property
    def refused(self) -> bool:
        """True if the guard answers this attempt itself (429 or 503)."""
        return self.wait_s > 0 or self.unavailable


LOGIN: Final[ContextVar[LoginAttempt | None]] = ContextVar("kimi_login", default=None)
"""The sign-in request being answered (set by :class:`SignInGuard` around ``POST /login``)."""


class Accounts:
    """Sign-in, sign-out and token checks on the store's users. Borrows ``users``."""

    def __init__(self, users: Users, throttle: SignInThrottle, where: str = "the database") -> None:
        self.users = users
        self.throttle = throttle
        self.where = where
        self._outage_said = False

    async def sign_in(self, username: str, password: str) -> cl.User | None:
        """Chainlit's password callback: the user (with their token generation) or None.

        Refused without a check while this name or this client must wait (the
        guard then answers 429); each failure is counted and logged.
        """
        attempt = LOGIN.get() or LoginAttempt("unknown")
        shown = repr(username[:64])
        try:
            admission = await self.throttle.admit(username, attempt.client)
            if not admission.admitted:
                attempt.wait_s = admission.wait_s
                log.warning(
                    "sign-in refused for %s from %s: %.0f s to wait",
                    shown, attempt.client, admission.wait_s,
                )  # fmt: skip
                return None
            generation = await self.users.check(username, password[: MAX_PASSWORD_CHARS + 1])
            if generation is not None:
                await self.throttle.succeeded(username, attempt.client)
        except (SQLAlchemyError, OSError) as exc:  # the guard answers 503 with a sentence
            attempt.unavailable = True
            log.error("sign-in for %s cannot be checked: %s", shown, cause(exc, self.where))
            return None
        if generation is None:
            log.warning(
                "sign-in failed for %s from %s (%d in a row)", shown, attempt.client, admission.run
            )
            return None
        return cl.User(
            identifier=username, metadata={"provider": "credentials", GENERATION: generation}
        )

    async def sign_out(self, request: Request, response: Response) -> dict[str, bool]:
        """Chainlit's ``on_logout`` hook: every token of the signed-out user stops working."""
        name = await self.token_user(request)
        if name is not None:
            await self.users.revoke_tokens(name)
        return {"success": True}

    async def token_user(self, connection: HTTPConnection) -> str | None:
        """The user a request's token names, if the token is valid and not revoked.

        Raises:
            Unchecked: the database cannot be asked whether it was revoked.
        """
        token = await reuseable_oauth(cast(Request, connection))
        if not token:
            return None
        try:
            user = decode_jwt(token)
        except Exception:  # expired, forged, malformed: Chainlit refuses it too
            return None
        name, carried = str(user.identifier), (user.metadata or {}).get(GENERATION)
        try:
            current = await self.users.token_generation(name)
        except (SQLAlchemyError, OSError) as exc:
            if not self._outage_said:
                log.error(
                    "sign-in tokens are refused while the database cannot be asked: %s",
                    cause(exc, self.where),
                )
                self._outage_said = True
            raise Unchecked from exc
        self._outage_said = False
        return name if current is not None and carried == current else None


def without_token(scope: Scope) -> Scope:
    """``scope`` with Chainlit's sign-in cookies and any ``Authorization`` header removed.

    Cookie pairs are split on ``;`` and ``=`` as Starlette's ``cookie_parser`` splits them.
    """
    headers: list[tuple[bytes, bytes]] = []
    for name, value in scope["headers"]:
        if name == b"authorization":
            continue
        if name == b"cookie":
            kept = [
                pair
                for pair in value.decode("latin-1").split(";")
                if not _is_auth_cookie(pair.split("=", 1)[0].strip())
            ]
            value = ";".join(kept).encode("latin-1")
        headers.append((name, value))
    return {**scope, "headers": headers}


def _is_auth_cookie(name: str) -> bool:
    return name == AUTH_COOKIE or (
        name.startswith(AUTH_COOKIE + "_") and name[len(AUTH_COOKIE) + 1 :].isdigit()
    )


class SignInGuard:
    """The ASGI middleware described in the module docstring.

    Args:
        app: the application behind it (Chainlit's, with :class:`ui.security.Guard`).
        accounts: who is signed in.
        store: the chats (feedback owners, shared pages).
        root_path: Chainlit's ``--root-path``.
    """

    def __init__(self, app: ASGIApp, accounts: Accounts, store: Store, root_path: str = "") -> None:
        self.app = app
        self.accounts = accounts
        self.store = store
        self.ownership = Ownership(store.engine)
        self.root_path = root_path.rstrip("/")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in {"http", "websocket"}:
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if self.root_path and path.startswith(self.root_path):
            path = path[len(self.root_path) :] or "/"
        try:
            user = await self.accounts.token_user(HTTPConnection(scope))
        except Unchecked:
            if path.startswith(NEEDS_SIGN_IN):
                await refuse(scope, receive, send, 503, UNCHECKED)
                return
            user = None
        if user is None:
            scope = without_token(scope)
        method = scope.get("method", "GET")
        if path == "/login" and method == "POST":
            await self._login(scope, receive, send)
            return
        if path == "/feedback" and method in {"PUT", "DELETE"}:
            replay = await self._check_feedback(scope, receive, send, user)
            if replay is None:
                return
            receive = replay
        thread_id = share.shared_thread_id(path) if method in {"GET", "HEAD"} else None
        if thread_id is not None and user is None:
            tr = header_translator(Headers(scope=scope).get("accept-language"))
            page = await share.public_page(
                self.store, self.ownership, thread_id, tr, self.root_path
            )
            await page(scope, receive, send)
            return
        await self.app(scope, receive, send)

    async def _login(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Chainlit's sign-in, answered 429 instead when the attempt had to wait, 503 when
        the database could not be asked."""
        client = scope.get("client")
        attempt = LoginAttempt(str(client[0]) if client else "unknown")
        token = LOGIN.set(attempt)
        started: list[Message] = []

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                started.append(message)
                if attempt.refused:
                    return
            elif attempt.refused:
                return
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            LOGIN.reset(token)
        tr = header_translator(Headers(scope=scope).get("accept-language"))
        if attempt.wait_s > 0:
            wait = str(math.ceil(attempt.wait_s))
            refusal = JSONResponse({"detail": tr(TOO_MANY)}, 429, headers={"Retry-After": wait})
            await refusal(scope, receive, send)
        elif attempt.unavailable:
            await JSONResponse({"detail": tr(NO_DATABASE)}, 503, headers={"Retry-After": "30"})(
                scope, receive, send
            )

    async def _check_feedback(
        self, scope: Scope, receive: Receive, send: Send, user: str | None
    ) -> Receive | None:
        """Refuse feedback naming a step, a thread or a feedback outside the user's chats."""
        body = await read_body(scope, receive, send)
        if body is None:
            return None
        named: dict[str, Any] = {"feedback_id": json_field(body, "feedbackId")}
        if scope["method"] == "PUT":
            feedback = json_field(body, "feedback")
            feedback = feedback if isinstance(feedback, dict) else {}
            named = {"feedback_id": feedback.get("id"), "for_id": feedback.get("forId"),
                     "thread_id": feedback.get("threadId")}  # fmt: skip
        if user is not None and not await self._owns(user, **named):
            await refuse(scope, receive, send, 404, NOT_YOURS)
            return None
        return replaying(body, receive)  # not signed in: Chainlit answers 401

    async def _owns(
        self, user: str, *, feedback_id: Any, for_id: Any = None, thread_id: Any = None
    ) -> bool:
        """Whether each thing named is the user's: the feedback by id (or there is none
        and a step is named), the step it is for, the thread it names."""
        if feedback_id is not None:
            if not isinstance(feedback_id, str):
                return False
            existing = await self.ownership.feedback_step(feedback_id)
            if existing is None and for_id is None:
                return False  # deleting a feedback that is not there
            if existing is not None and await self.ownership.step_owner(existing) != user:
                return False
        if thread_id is not None:
            thread = await self.ownership.thread(thread_id) if isinstance(thread_id, str) else None
            if thread is None or thread.owner != user:
                return False
        return for_id is None or (
            isinstance(for_id, str) and await self.ownership.step_owner(for_id) == user
        )


def install(store: Store) -> Accounts:
    """Turn on sign-in for the running Chainlit server (once, at app start).

    Registers :meth:`Accounts.sign_in` as Chainlit's password callback and
    :meth:`Accounts.sign_out` as its ``on_logout`` hook, and adds
    :class:`SignInGuard` as the innermost middleware (behind :class:`ui.security.Guard`,
    whose headers and origin checks then cover the shared pages too).
    """
    from chainlit.config import config
    from chainlit.server import app
    from starlette.middleware import Middleware

    accounts = Accounts(store.users, store.throttle, where=store.where)
    cl.password_auth_callback(accounts.sign_in)
    cl.on_logout(accounts.sign_out)
    guard = Middleware(SignInGuard, accounts=accounts, store=store, root_path=config.run.root_path)
    app.user_middleware.append(guard)
    return accounts
