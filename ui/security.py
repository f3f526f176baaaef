"""What protects the Chainlit server when a browser, or another web page, talks to it.

:func:`install` (called once from ``app.py``) puts :class:`Guard`, an ASGI
middleware, in front of everything Chainlit serves, and a check in front of
Chainlit's socket.io ``connect`` handler:

- **Origin** (a web page the person visits must not drive the app): the
  websocket, socket.io's HTTP transport and every state-changing request
  (anything but GET, HEAD, OPTIONS) are refused with 403 when the browser's
  ``Origin`` is neither the app's own (the ``Host`` it was reached under) nor one
  of ``KIMI_ALLOWED_ORIGINS``. Requests without an ``Origin`` (curl, scripts) are
  not a browser driven by another page and pass. Chainlit builds its socket.io
  server with origin checks off (``cors_allowed_origins=[]``, chainlit/server.py).
- **Whose chat** (the session id is in every upload URL, so it is no secret):
  each browser gets a random HttpOnly cookie (:data:`BROWSER_COOKIE`) on its first
  request; a chat session belongs to the browser that opened it. Its files
  (``/project/file``), its actions and elements (``/project/action``,
  ``/project/element``) and a new socket for it are refused to any other browser.
  A session opened without the cookie (a script that never loaded the page) is
  bound to no browser, but no second socket may join it while its socket is
  connected. Chainlit itself checks the signed-in user when sign-in is on.
  Requests are read with the parsers Chainlit's routes use, on the same scope
  (Starlette's ``QueryParams`` and ``cookie_parser``, ``json.loads`` for bodies),
  so the guard and Chainlit always agree on which session a request names; a
  request naming ``session_id`` more than once is refused as ambiguous.
- **Upload size**: ``POST /project/file`` over Chainlit's ``max_size_mb`` (plus
  form overhead) is refused from its ``Content-Length``, before a byte is read
  (Chainlit reads a whole upload into memory before it checks its size); one
  without ``Content-Length`` is refused too (browsers always send it).
- **Upload quota** (:class:`backend.fair_use.UploadRoom`): an upload that would take its
  chat session past ``KIMI_UPLOAD_SESSION_MB`` or its person (:func:`person_of`) past
  ``KIMI_UPLOAD_USER_MB``, counting the uploads their live sessions hold and those still
  arriving, is refused (413, one sentence) before a byte is read.
- **Message size**: socket.io's frame limit (python-engineio
  ``max_http_buffer_size``, 1 MB) silently drops a longer message; it is raised
  to uvicorn's websocket limit (16 MiB), far above any text the model can take,
  so the app sees the message and says how many tokens it is.
- **Content-Security-Policy** on the app's pages: images only from the app
  itself, ``data:`` and ``blob:`` (a markdown image in model output fetches
  nothing elsewhere); scripts only from the app and the page's own inline
  scripts (by hash, taken from the HTML as it is sent); no framing by other
  sites. ``Referrer-Policy: no-referrer`` so a link the person follows does not
  tell the site where they came from.
  Files served from ``/project/file`` get a policy that runs nothing.
- **Secure cookies behind TLS**: when the request came over https (uvicorn sets
  the scheme from a trusted proxy's ``X-Forwarded-Proto``), Chainlit's sign-in
  cookie gets ``Secure`` like the browser cookie (Chainlit sets it only with
  ``CHAINLIT_COOKIE_SAMESITE=none``).
- **Private files**: Chainlit's folder of session uploads (``.files``) is made
  ``0700`` at start, so no other account on the machine reads them.
- **Open mode stays on loopback**: :func:`refuse_open_beyond_loopback` stops the
  app at start when it would listen beyond loopback with no user to sign in.

Chainlit objects used: ``chainlit.server.app`` (its documented place for custom
routes and middleware), ``WebsocketSession.get_by_id``, and through
:mod:`ui.chainlit_patches` the socket.io ``connect`` handler and frame limit.
tests/browser/test_security.py checks each protection.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import math
import os
import re
import secrets
import weakref
from collections.abc import Callable, Iterable, MutableMapping
from typing import Any, Final
from urllib.parse import urlsplit

from starlette.datastructures import Headers, MutableHeaders, QueryParams
from starlette.requests import cookie_parser
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from backend.errors import ChatError
from backend.exposure import ADD_USER, is_loopback
from backend.fair_use import Place, UploadRoom
from backend.i18n import msg
from backend.store.files import private_folder
from ui import chainlit_patches
from ui.chainlit_patches import ConnectHandler
from ui.language import header_translator

BROWSER_COOKIE: Final = "kimi_browser"
"""Name of the cookie that ties chat sessions to the browser that opened them."""
SAFE_METHODS: Final = frozenset({"GET", "HEAD", "OPTIONS"})
SOCKET_PATH: Final = "/ws/socket.io"
"""Where Chainlit mounts socket.io (chainlit/server.py ``SOCKET_IO_PATH``)."""
FORM_OVERHEAD_BYTES: Final = 64 * 1024
"""Room for the multipart headers around one uploaded file."""
MESSAGE_LIMIT_BYTES: Final = 16 * 1024 * 1024
"""Longest socket.io frame accepted: uvicorn's default ``ws_max_size`` (16 MiB), which
drops longer frames itself. Kimi-VL's longest context, 131,072 tokens, is 128 bytes a
token at this size: no text the model could take is longer."""
JSON_BODY_LIMIT: Final = 1024 * 1024
"""Largest JSON body read to find the session it names (actions, elements)."""
BODY_SESSION_ROUTES: Final = frozenset({"/project/action", "/project/element"})
"""Routes that name their session in the JSON body (``sessionId``)."""

STYLE_SOURCES: Final = "https://fonts.googleapis.com https://cdn.jsdelivr.net"
"""Chainlit's index.html loads the Inter font's CSS and KaTeX's CSS from these."""
FONT_SOURCES: Final = "https://fonts.gstatic.com https://cdn.jsdelivr.net"
FILE_POLICY: Final = "default-src 'none'; img-src 'self' data:; media-src 'self'; sandbox"
"""Content-Security-Policy of uploaded files opened on their own (nothing runs)."""

_HOST: Final = re.compile(r"[A-Za-z0-9.\-]+(:\d+)?|\[[0-9A-Fa-f:.]+\](:\d+)?")
"""A ``Host`` header fit to put in the policy: a name or an IP address, and a port."""
_SCRIPT: Final = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>(.*?)</script>", re.S | re.I)


def page_policy(html: str, host: str | None = None) -> str:
    """The Content-Security-Policy of a page whose HTML is ``html``.

    Inline ``<script>`` blocks of ``html`` are allowed by their SHA-256 hash (CSP
    level 2), so no other inline script runs. Styles may be inline (React and
    KaTeX set ``style`` attributes). ``host`` (the request's ``Host``, e.g.
    ``"127.0.0.1:8300"``) names the chat socket's ``ws:``/``wss:`` address for
    browsers whose ``'self'`` does not cover websockets (CSP level 2).
    """
    sockets = f" ws://{host} wss://{host}" if host and _HOST.fullmatch(host) else ""
    hashes = " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()}'"
        for body in _SCRIPT.findall(html)
    )
    return "; ".join(
        [
            "default-src 'self'",
            f"script-src 'self' {hashes}".rstrip(),
            f"style-src 'self' 'unsafe-inline' {STYLE_SOURCES}",
            f"font-src 'self' data: {FONT_SOURCES}",
            "img-src 'self' data: blob:",
            "media-src 'self' blob:",
            f"connect-src 'self'{sockets}",
            "worker-src 'self' blob:",
            "object-src 'none'",
            "base-uri 'self'",
            "form-action 'self'",
            "frame-ancestors 'none'",
        ]
    )


def origin_allowed(origin: str | None, host: str | None, extra: Iterable[str] = ()) -> bool:
    """Whether a request with this ``Origin`` header may act on the app.

    Args:
        origin: the ``Origin`` header, e.g. ``"http://127.0.0.1:8300"``; None when
            absent (not a browser acting for another page: allowed).
        host: the ``Host`` header the request was sent to, e.g. ``"127.0.0.1:8300"``.
        extra: more allowed origins (``KIMI_ALLOWED_ORIGINS``), e.g.
            ``"https://chat.example.com"``; compared without case or trailing ``/``.

    Returns:
        True when ``origin`` is absent, names the same host and port as ``host``
        (any scheme: behind a TLS proxy the app sees http), or is in ``extra``.
        ``"null"`` (sandboxed frames, ``file:``) is refused.
    """
    if origin is None:
        return True
    origin = origin.strip().lower().rstrip("/")
    if origin in {o.strip().lower().rstrip("/") for o in extra}:
        return True
    parts = urlsplit(origin)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        return False
    return host is not None and parts.netloc == host.strip().lower()


class Owners:
    """Which browser (its :data:`BROWSER_COOKIE` value) opened each chat session.

    Keyed weakly by Chainlit's ``WebsocketSession``, so an entry goes when
    Chainlit drops the session. ``None`` is a client without the cookie.
    """

    def __init__(self) -> None:
        self._owner: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()

    def claim(self, session: Any, key: str | None) -> None:
        """Record ``key`` as the owner of ``session`` unless it has one."""
        if session not in self._owner:
            self._owner[session] = key

    def owns(self, session: Any, key: str | None) -> bool:
        """Whether the browser with ``key`` may use ``session``.

        Yes if that browser opened it, or if it was opened without the cookie (a
        script, which never loaded the page, is not bound to a browser); no for a
        session this registry never saw.
        """
        if session not in self._owner:
            return False
        owner = self._owner[session]
        return owner is None or owner == key

    def bound(self, session: Any) -> bool:
        """Whether ``session`` belongs to one browser (it was opened with the cookie)."""
        return self._owner.get(session) is not None

    def key_of(self, session: Any) -> str | None:
        """The cookie value of the browser that opened ``session``; None: none known."""
        return self._owner.get(session)


OWNERS: Final = Owners()


def person_of(session: Any) -> str:
    """Whose a Chainlit session is, for the bounds of :mod:`backend.fair_use`: its
    signed-in user; else its browser (the :data:`BROWSER_COOKIE` it was opened with);
    else (a client without the cookie) the address it connects from."""
    user = getattr(session, "user", None)
    if user is not None:
        return f"user:{user.identifier}"
    browser = OWNERS.key_of(session)
    if browser is not None:
        return f"browser:{browser}"
    environ = getattr(session, "environ", None) or {}
    return f"address:{environ.get('REMOTE_ADDR', session.id)}"


def browser_key(cookie_header: str | None) -> str | None:
    """The :data:`BROWSER_COOKIE` value in a ``Cookie`` header, or None.

    Parsed by Starlette's ``cookie_parser``, which Chainlit's routes and socket use:
    another site's cookie that is not RFC 6265 (``prefs={"a": 1}``, set by any app
    on this host: cookies ignore ports) costs only that cookie, never this one.
    """
    if not cookie_header:
        return None
    return cookie_parser(cookie_header).get(BROWSER_COOKIE) or None


def named_session(scope: Scope) -> tuple[str | None, bool]:
    """The ``session_id`` a request's query names, and whether it names just one.

    Read with Starlette's ``QueryParams`` on the request's own query string, as
    Chainlit's routes read it (FastAPI takes the last value of a repeated
    parameter); a repeated ``session_id`` is ambiguous: ``(last value, False)``.
    """
    values = QueryParams(scope.get("query_string", b"")).getlist("session_id")
    return (values[-1] if values else None), len(values) <= 1


def _session(session_id: str | None) -> Any:
    """Chainlit's live session with this id, or None."""
    from chainlit.session import WebsocketSession

    return WebsocketSession.get_by_id(session_id) if session_id else None


NOT_OPEN_HERE: Final = msg("This chat is not open here.")
AMBIGUOUS: Final = msg("This request names more than one chat; it is refused.")


async def refuse(scope: Scope, receive: Receive, send: Send, status: int, text: str) -> None:
    """Answer with ``status`` and a one-sentence ``detail`` (a websocket: close, 403),
    in the language of the request's ``Accept-Language``."""
    text = header_translator(Headers(scope=scope).get("accept-language")).text(text)
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008, "reason": text})
        return
    await JSONResponse({"detail": text}, status_code=status)(scope, receive, send)


async def read_body(scope: Scope, receive: Receive, send: Send) -> bytes | None:
    """A request's whole body, up to :data:`JSON_BODY_LIMIT` bytes; None once a longer
    one was refused (413, said in one sentence)."""
    chunks: list[bytes] = []
    size = 0
    more = True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > JSON_BODY_LIMIT:
            await refuse(scope, receive, send, 413, msg("This request is too large."))
            return None
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


def json_field(body: bytes, name: str) -> Any:
    """Field ``name`` of a JSON object ``body``, read with ``json.loads`` as FastAPI reads
    bodies (a repeated key: the last); None when absent or ``body`` is not a JSON object."""
    try:
        return json.loads(body or b"{}").get(name)
    except (ValueError, AttributeError):
        return None


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives ``body`` first (as one message), then what ``receive`` gives."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def leaving(uploads: UploadRoom, place: Place, send: Send) -> Send:
    """``send`` that settles ``place`` as the answer starts (kept if the upload was stored,
    given back if not): the client may send the next upload at once, before the request's
    task goes on."""

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            if message["status"] == 200:
                uploads.keep(place)
            else:
                place.leave()
        await send(message)

    return sending


class Guard:
    """The ASGI middleware described in the module docstring.

    Args:
        app: Chainlit's FastAPI application.
        allowed_origins: origins accepted besides the app's own.
        upload_limit_mb: Chainlit's ``max_size_mb`` for one upload, a callable
            so a changed config is read per request.
        root_path: Chainlit's ``--root-path`` (its routes live under it).
        uploads: the upload quota; None: none.
    """

    def __init__(
        self,
        app: ASGIApp,
        allowed_origins: Iterable[str],
        upload_limit_mb: Callable[[], float],
        root_path: str = "",
        uploads: UploadRoom | None = None,
    ) -> None:
        self.app = app
        self.allowed_origins = tuple(allowed_origins)
        self.upload_limit_mb = upload_limit_mb
        self.root_path = root_path.rstrip("/")
        self.uploads = uploads

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in {"http", "websocket"}:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        path = scope["path"]
        if self.root_path and path.startswith(self.root_path):
            path = path[len(self.root_path) :] or "/"
        method = scope.get("method", "GET")
        acts = scope["type"] == "websocket" or path.startswith(SOCKET_PATH)
        if (acts or method not in SAFE_METHODS) and not origin_allowed(
            headers.get("origin"), headers.get("host"), self.allowed_origins
        ):
            await refuse(
                scope, receive, send, 403, msg("Requests from other web sites are refused.")
            )
            return
        if scope["type"] == "websocket":
            await self.app(scope, receive, send)
            return
        key = browser_key(headers.get("cookie"))
        if (
            path == "/project/file"
            and method == "POST"
            and not await self._upload_fits(scope, receive, send, headers)
        ):
            return
        if path == "/project/file" or path.startswith("/project/file/"):
            session_id, unambiguous = named_session(scope)
            if not unambiguous:
                await refuse(scope, receive, send, 400, AMBIGUOUS)
                return
            session = _session(session_id)
            if session is None or not OWNERS.owns(session, key):
                text = msg("File not found.") if method == "GET" else NOT_OPEN_HERE
                await refuse(scope, receive, send, 404, text)
                return
            if path == "/project/file" and method == "POST" and self.uploads is not None:
                await self._upload(scope, receive, self._sender(send, scope, path, key), session)
                return
        elif path in BODY_SESSION_ROUTES and method not in SAFE_METHODS:
            replay = await self._check_body_session(scope, receive, send, key)
            if replay is None:
                return
            receive = replay
        await self.app(scope, receive, self._sender(send, scope, path, key))

    async def _upload_fits(
        self, scope: Scope, receive: Receive, send: Send, headers: Headers
    ) -> bool:
        """Refuse (and say so) an upload without a size or over the limit; True if it fits."""
        limit_mb = self.upload_limit_mb()
        declared = headers.get("content-length")
        if declared is None or not declared.isdigit():
            await refuse(scope, receive, send, 411, msg("An upload must say its size."))
            return False
        if int(declared) > limit_mb * 1024 * 1024 + FORM_OVERHEAD_BYTES:
            text = msg("This file is larger than the {limit:g} MB the app accepts.", limit=limit_mb)
            await refuse(scope, receive, send, 413, text)
            return False
        return True

    async def _upload(self, scope: Scope, receive: Receive, send: Send, session: Any) -> None:
        """Let Chainlit store an upload into ``session`` if the quota has room for it."""
        assert self.uploads is not None
        place = await self._upload_place(scope, receive, send, session)
        if place is None:
            return
        try:
            await self.app(scope, receive, leaving(self.uploads, place, send))
        finally:
            place.leave()

    async def _upload_place(
        self, scope: Scope, receive: Receive, send: Send, session: Any
    ) -> Place | None:
        """A place in the upload quota for this request's declared size, or None once
        refused (413, the quota's sentence).

        A refused body (at most Chainlit's ``max_size_mb``, checked before) is read and
        dropped, never kept, before the answer: a browser still sending when the server
        answers and closes gets a reset, and shows "Upload error" instead of the sentence.
        """
        from chainlit.session import ws_sessions_id

        assert self.uploads is not None
        size = int(Headers(scope=scope).get("content-length", "0"))
        try:
            return await self.uploads.take(session.id, person_of(session), size, ws_sessions_id)
        except ChatError as refused:
            while (await receive()).get("more_body", False):
                pass
            await refuse(scope, receive, send, 413, refused.message)
            return None

    async def _check_body_session(
        self, scope: Scope, receive: Receive, send: Send, key: str | None
    ) -> Receive | None:
        """Read a small JSON body, refuse it if its ``sessionId`` is another browser's.

        Returns a ``receive`` that replays the body, or None once refused.
        """
        body = await read_body(scope, receive, send)
        if body is None:
            return None
        session_id = json_field(body, "sessionId")
        session = _session(session_id if isinstance(session_id, str) else None)
        if session is None or not OWNERS.owns(session, key):
            await refuse(scope, receive, send, 404, NOT_OPEN_HERE)
            return None
        return replaying(body, receive)

    def _sender(self, send: Send, scope: Scope, path: str, key: str | None) -> Send:
        """``send`` that adds the security headers and, if missing, the browser cookie.

        An HTML page's start is held back until its body is complete, so that its
        policy names the hashes of the inline scripts it really holds.
        """
        https = scope.get("scheme") == "https"
        held: list[Message] = []

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                headers["Referrer-Policy"] = "no-referrer"
                headers["X-Content-Type-Options"] = "nosniff"
                if https:
                    secure_auth_cookies(message)
                if key is None:
                    headers.append(
                        "Set-Cookie",
                        f"{BROWSER_COOKIE}={secrets.token_urlsafe(32)}; Path=/; "
                        f"HttpOnly; SameSite=Lax{'; Secure' if https else ''}",
                    )
                if path.startswith("/project/file/"):
                    headers["Content-Security-Policy"] = FILE_POLICY
                elif headers.get("content-type", "").startswith("text/html"):
                    held.append(message)
                    return
            elif held and message["type"] == "http.response.body":
                held.append(message)
                if message.get("more_body", False):
                    return
                start = MutableHeaders(scope=held[0])
                raw = b"".join(m.get("body", b"") for m in held[1:])
                if start.get("content-encoding") == "gzip":  # Chainlit's GZipMiddleware
                    raw = gzip.decompress(raw)
                html, host = raw.decode("utf-8", "replace"), Headers(scope=scope).get("host")
                start["Content-Security-Policy"] = page_policy(html, host)
                for part in held:
                    await send(part)
                held.clear()
                return
            await send(message)

        return sending


AUTH_COOKIE: Final = os.environ.get("CHAINLIT_AUTH_COOKIE_NAME", "access_token")
"""Chainlit's sign-in cookie (chainlit/auth/cookie.py reads the same variable); a long
token is split over ``<name>_0``, ``<name>_1``, ..."""


def secure_auth_cookies(start: Message) -> None:
    """Add ``Secure`` to each of Chainlit's sign-in cookies set by this response start."""
    headers: list[tuple[bytes, bytes]] = start["headers"]
    prefix = AUTH_COOKIE.encode("latin-1")
    for index, (name, value) in enumerate(headers):
        if name.lower() != b"set-cookie" or not value.startswith(prefix):
            continue
        attributes = {part.strip().lower() for part in value.split(b";")[1:]}
        if b"secure" not in attributes:
            headers[index] = (name, value + b"; Secure")


def guarded_connect(original: ConnectHandler) -> ConnectHandler:
    """Chainlit's socket.io ``connect`` handler with the ownership check in front.

    Refuses (socket.io's ``ConnectionRefusedError``: a ``connect_error`` with the
    sentence; no socket is opened) a socket that names a live session opened by
    another browser, and any second socket for a session bound to no browser while
    its socket is connected; records the owner of each new session.
    """
    from chainlit.server import sio
    from chainlit.session import WebsocketSession
    from socketio.exceptions import ConnectionRefusedError as Refused

    async def connect(sid: str, environ: MutableMapping[str, Any], auth: Any) -> Any:
        session_id = auth.get("sessionId") if isinstance(auth, dict) else None
        key = browser_key(environ.get("HTTP_COOKIE"))
        existing = WebsocketSession.get_by_id(session_id) if session_id else None
        if existing is not None:
            connected = sio.manager.is_connected(existing.socket_id, "/")
            if not OWNERS.owns(existing, key) or (not OWNERS.bound(existing) and connected):
                tr = header_translator(environ.get("HTTP_ACCEPT_LANGUAGE"))
                raise Refused(tr("This chat is open in another browser."))
        accepted = await original(sid, environ, auth)
        if accepted and existing is None and (created := _session(session_id)) is not None:
            OWNERS.claim(created, key)
        return accepted

    return connect


def refuse_open_beyond_loopback(
    *, sign_in: bool, allow_anonymous: bool, host: str | None = None
) -> None:
    """Stop the app at start if it would listen on ``host`` beyond loopback, open to all.

    launch.sh refuses the same before it starts anything
    (:func:`serving.preflight.check_ui_exposure`); this catches a
    ``chainlit run app.py --host 0.0.0.0`` that never went through it.

    Args:
        sign_in: a user exists, so everyone must sign in.
        allow_anonymous: ``KIMI_ALLOW_ANONYMOUS``: open anyway.
        host: where Chainlit listens, e.g. ``"0.0.0.0"``; by default
            ``config.run.host`` (``--host`` or ``CHAINLIT_HOST``, set by
            ``chainlit run`` before it imports the app).

    Raises:
        SystemExit: one sentence naming the command that adds a user.
    """
    if host is None:
        from chainlit.config import config

        host = config.run.host
    if sign_in or allow_anonymous or is_loopback(host):
        return
    raise SystemExit(
        f"Kimi-VL Chat cannot start: it would listen on {host} with no user to sign in; "
        f"add one with `{ADD_USER}`, or listen on 127.0.0.1."
    )


def install(allowed_origins: str = "", uploads: UploadRoom | None = None) -> None:
    """Protect the running Chainlit server (call once, from ``app.py``, at import).

    Args:
        allowed_origins: origins accepted besides the app's own, separated by
            commas (``Settings.allowed_origins``), e.g. ``"https://chat.example.com"``.
        uploads: the upload quota (``KIMI_UPLOAD_SESSION_MB``, ``KIMI_UPLOAD_USER_MB``).
    """
    from chainlit.config import FILES_DIRECTORY, config
    from chainlit.server import app

    def upload_limit_mb() -> float:
        spec = config.features.spontaneous_file_upload
        return float(spec.max_size_mb) if spec and spec.max_size_mb else float("inf")

    private_folder(FILES_DIRECTORY)  # Chainlit's session uploads: nobody else enters
    chainlit_patches.raise_socket_message_limit(MESSAGE_LIMIT_BYTES)
    if math.isfinite(upload_limit_mb()):  # else Starlette's 1 MB spool, as any size may come
        limit = int(upload_limit_mb() * 1024 * 1024) + FORM_OVERHEAD_BYTES
        chainlit_patches.parse_uploads_in_memory(limit)
    chainlit_patches.wrap_socket_connect(guarded_connect)
    app.add_middleware(
        Guard,
        allowed_origins=tuple(o for o in allowed_origins.split(",") if o.strip()),
        upload_limit_mb=upload_limit_mb,
        root_path=config.run.root_path,
        uploads=uploads,
    )
