"""Every place the app changes Chainlit 2.12's internals, why, and what would end it.

Chainlit has no public hook for any of these. Each patch is one function here,
called once from ``app.py`` or the module that needs it; its comment says why it
exists and what upstream change would remove it. tests/test_chainlit_patches.py
fails when the installed Chainlit is not :data:`CHAINLIT_VERSION` or a patched
object has changed shape, so an upgrade starts here: re-read each patch against
the new source, then move the pin.

Removed in favour of public API: the data layer is Chainlit's public ``BaseDataLayer``
over the store's own tables and engine (ui/datalayer.py, registered with
``@cl.data_layer``), no longer a subclass of ``SQLAlchemyDataLayer`` whose engine was
swapped for the app's (``share_engine``, gone with issue 48); stale sign-in cookies are
refused by an ASGI middleware (ui/signin.py) and Chainlit's ``on_logout`` hook,
not by wrapping ``chainlit.auth``.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import os
import time
import types
from collections.abc import Awaitable, Callable, MutableMapping
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

from chainlit.config import config
from fastapi import FastAPI, HTTPException

from backend.logs import LOGGER_NAME

logger = logging.getLogger(LOGGER_NAME)

CHAINLIT_VERSION: Final = "2.12.0"
"""The Chainlit these patches were written against (requirements.txt pins it)."""

# By name: the package's ``chainlit.step`` attribute is the ``@step`` decorator, not the module.
_STEP = importlib.import_module("chainlit.step")
_MESSAGE = importlib.import_module("chainlit.message")
_EMITTER = importlib.import_module("chainlit.emitter")


# --- 1. Steps and messages made without pausing the event loop ----------------------------
# Why: Chainlit 2.12's ``Step.__init__`` (chainlit/step.py) and ``Message.__init__``
# (chainlit/message.py) call ``time.sleep(0.001)`` so that two made back to back get
# different ``created_at`` times (ISO strings, which the browser reads at millisecond
# resolution and the data layer orders threads by). ``time.sleep`` blocks the whole event
# loop: 1.2 ms per step or message measured here, three of them before a person sees the
# answer begin, and the same for every other chat of the process meanwhile.
# Ends when: Chainlit orders steps without sleeping (its pull request 1374, closed
# unmerged, tried); then delete this section and its call in app.py.


class DistinctClock:
    """UTC timestamps in Chainlit's format, each at least one millisecond after the
    previous one (ahead of the wall clock by at most the burst that needed it).

    Args:
        now: the wall clock (UTC, naive); for tests.
    """

    def __init__(self, now: Callable[[], datetime] | None = None) -> None:
        self._now = now or (lambda: datetime.now(UTC).replace(tzinfo=None))
        self._last: datetime | None = None

    def __call__(self) -> str:
        """``2026-12-01T16:40:00.123456Z``: ISO 8601 with microseconds, always (Chainlit's
        format, which drops a zero fraction; with it the strings sort as the times do)."""
        now = self._now()
        if self._last is not None:
            now = max(now, self._last + timedelta(milliseconds=1))
        self._last = now
        return now.isoformat(timespec="microseconds") + "Z"


def _no_pause(_seconds: float) -> None:
    """``time.sleep`` for Chainlit's constructors: their ordering comes from the clock."""


def unpause_constructors() -> None:
    """Give Chainlit's step, message and emitter modules one :class:`DistinctClock` as
    ``utc_now``, and the first two a ``time`` whose ``sleep`` returns at once (idempotent)."""
    if isinstance(getattr(_STEP.utc_now, "__self__", None), DistinctClock):
        return
    clock = DistinctClock()
    unpaused = types.SimpleNamespace(**{**vars(time), "sleep": _no_pause})
    for module in (_STEP, _MESSAGE, _EMITTER):
        module.utc_now = clock.__call__  # type: ignore[attr-defined]
    for module in (_STEP, _MESSAGE):
        module.time = unpaused  # type: ignore[attr-defined]


# --- 2. An upload hook --------------------------------------------------------------------
# Why: an image is prepared for the model while the person types, so a photo adds no
# decoding to the time to first token, and a file the app cannot use is refused on attach
# (the page shows the sentence and drops the attachment) rather than after Send. Chainlit
# 2.12 has no upload callback: ``POST /project/file`` (chainlit/server.py, ``upload_file``)
# checks the file with ``validate_file_upload``, stores it with
# ``WebsocketSession.persist_file`` and tells the app nothing until the message is sent.
# The same ``persist_file`` stores every file the app itself sends (elements, exports), so
# the wrapped ``validate_file_upload`` marks the request as an upload (a context variable of
# its task) and only those are handed to the callback. The wrapper also reads Chainlit's
# user-session registry (``chainlit.user_session.user_sessions``): the upload request
# carries no websocket context.
# The wrapper also lets an empty file through to the callback: ``persist_file`` refuses
# ``content=b""`` (``ValueError``: HTTP 500, the browser's toast "Upload failed", the file
# dropped without a word). It is stored by copying ``os.devnull`` instead, so the callback
# judges it like any other file and refuses it with a sentence naming it.
# A kept upload may be shown as another file (:meth:`KeptUpload.show_as`: a copy every
# browser decodes of a HEIC photo): its entry in the session's files (``session.files``,
# which ``GET /project/file/{id}`` serves and from which ``process_message`` in
# chainlit/emitter.py builds the message's element) names that copy instead.
# Ends when: Chainlit calls back on upload (an ``on_file_upload`` hook that may refuse the
# file) and stores empty files; then register the callback there and delete this section.
# Showing another file ends when Chainlit lets an upload hook give the element to show.

FileStored = Callable[[dict[str, Any], str, Path], Awaitable[str | None]]
"""Told of a stored upload: the session's user-session values (``cl.user_session``), the
file's name and where it lies; returns a sentence that refuses it (shown to the person as
the upload's error), or None to keep it."""


@dataclass(frozen=True)
class KeptUpload:
    """An upload the :data:`FileStored` callback kept, as Chainlit stored it.

    Attributes:
        session: Chainlit's ``WebsocketSession`` it was uploaded to.
        values: that session's user-session values (``cl.user_session``).
        file_id: Chainlit's id of the stored file (the message's element id).
        name: the file's name as uploaded.
        path: where the uploaded bytes lie.
    """

    session: Any
    values: dict[str, Any]
    file_id: str
    name: str
    path: Path

    def show_as(self, path: Path, mime: str) -> str:
        """Show the file at ``path`` (of type ``mime``, in the session's files folder) for
        this upload from now on: the page's file route serves it and the message that
        carries the upload gets it as its element (stored with the chat), under the
        upload's own name. Returns its URL on the page (Chainlit's file route). The
        upload itself stays at :attr:`path` for the app."""
        self.session.files[self.file_id].update(path=path, type=mime)
        root = config.run.root_path.rstrip("/")
        return f"{root}/project/file/{quote(self.file_id)}?session_id={quote(self.session.id)}"

    async def tell_page(self, data: Any) -> None:
        """Send ``data`` to the session's page as a window message (the upload request
        has no websocket context for ``cl.context.emitter``)."""
        from chainlit.emitter import ChainlitEmitter

        await ChainlitEmitter(self.session).send_window_message(data)


FileKept = Callable[[KeptUpload], Awaitable[None]]
"""Told of an upload the :data:`FileStored` callback kept (after it, before the request
answers); its failures are logged, never the upload's."""

_UPLOADING: ContextVar[bool] = ContextVar("kimi_uploading", default=False)


def on_file_stored(callback: FileStored, kept: FileKept | None = None) -> None:
    """Call ``callback`` after Chainlit stores each upload (wraps
    ``WebsocketSession.persist_file`` and ``chainlit.server.validate_file_upload`` once; a
    second call replaces the callbacks). An empty upload is stored as an empty file (for the
    callback to judge), not refused with HTTP 500. A refused upload is forgotten and its file
    deleted, and the request answers 400 with the sentence as its ``detail``; a kept one is
    handed to ``kept``, if given."""
    from chainlit import server
    from chainlit.session import WebsocketSession
    from chainlit.user_session import user_sessions

    original = getattr(WebsocketSession.persist_file, "__wrapped__", WebsocketSession.persist_file)
    validate = getattr(server.validate_file_upload, "__wrapped__", server.validate_file_upload)

    def validate_file_upload(*args: Any, **kwargs: Any) -> None:
        validate(*args, **kwargs)
        _UPLOADING.set(True)  # this request's task stores an upload next

    async def persist_file(self: WebsocketSession, *args: Any, **kwargs: Any) -> Any:
        if not args and not kwargs.get("path") and kwargs.get("content") in (b"", ""):
            kwargs = {**kwargs, "content": None, "path": os.devnull}  # an empty file
        reference = await original(self, *args, **kwargs)
        stored = self.files.get(reference["id"]) if isinstance(reference, dict) else None
        if stored is None or not _UPLOADING.get():
            return reference
        path = Path(stored["path"])
        values = user_sessions.get(self.id, {})
        refusal = await callback(values, str(stored["name"]), path)
        if refusal is not None:
            self.files.pop(reference["id"], None)
            path.unlink(missing_ok=True)
            raise HTTPException(status_code=400, detail=refusal)
        if kept is not None:
            try:
                await kept(KeptUpload(self, values, reference["id"], str(stored["name"]), path))
            except Exception:
                logger.exception("after keeping the upload %s", stored["name"])
        return reference

    validate_file_upload.__wrapped__ = validate  # type: ignore[attr-defined]
    persist_file.__wrapped__ = original  # type: ignore[attr-defined]
    server.validate_file_upload = validate_file_upload
    WebsocketSession.persist_file = persist_file  # type: ignore[method-assign,assignment]


async def store_file(session: Any, **file: Any) -> Any:
    """Store a file the app made with the session's files (Chainlit's own
    ``persist_file``, never judged as an upload): ``name``, ``content``, ``mime``; returns
    Chainlit's ``{"id": ...}``."""
    from chainlit.session import WebsocketSession

    persist = getattr(WebsocketSession.persist_file, "__wrapped__", WebsocketSession.persist_file)
    return await persist(session, **file)


# --- 3. Routes of the app's own, ahead of Chainlit's page route ---------------------------
# Why: Chainlit's last route, ``GET /{full_path:path}`` (chainlit/server.py, ``serve``),
# answers every path with the page; routes added to its app after import come after it and
# are never reached. ``GET /kimi/status`` (ui/status.py) and ``GET /kimi/files/...``
# (ui/files.py) are moved in front of it.
# Ends when: Chainlit adds its catch-all at start-up, after the app's routes (or the app
# mounts Chainlit in an app of its own, ``chainlit.utils.mount_chainlit``).


def ahead_of_the_page(app: FastAPI, add: Callable[[], None]) -> None:
    """Run ``add`` (which adds routes to ``app``), then move what it added to the front."""
    before = len(app.router.routes)
    add()
    added = app.router.routes[before:]
    del app.router.routes[before:]
    app.router.routes[0:0] = added


# --- 4. The socket.io connect and message handlers, and the frame limit ------------------
# (Used by ui/security.py: the ownership check of a new socket; by ui/tasks.py: a message
# too long or beyond the queue refused before Chainlit stores it.)

ConnectHandler = Callable[[str, MutableMapping[str, Any], Any], Awaitable[Any]]
"""python-socketio's ``connect`` handler: ``(sid, environ, auth) -> accepted``."""


def wrap_socket_connect(wrap: Callable[[ConnectHandler], ConnectHandler]) -> None:
    """Replace Chainlit's socket.io ``connect`` handler by ``wrap(original)``.

    Why: whose chat a new socket may join is decided from its ``auth`` payload
    (``sessionId``), which travels inside socket.io's CONNECT packet, not in any
    HTTP header an ASGI middleware could read; Chainlit has no connect hook.
    Touches ``chainlit.server.sio.handlers["/"]["connect"]`` (registered by
    chainlit/socket.py with ``@sio.on("connect")``). Removed by a Chainlit hook
    that runs on socket connect with the ``auth`` payload and may refuse it.
    """
    from chainlit.server import sio

    sio.handlers["/"]["connect"] = wrap(sio.handlers["/"]["connect"])


MessageHandler = Callable[[str, Any], Awaitable[Any]]
"""python-socketio's handler of a client event: ``(sid, payload) -> None``."""


def wrap_socket_messages(wrap: Callable[[str, MessageHandler], MessageHandler]) -> None:
    """Replace Chainlit's socket.io ``client_message`` and ``edit_message`` handlers by
    ``wrap(event, original)``.

    Why: Chainlit stores a person's message (``Message._create``, chainlit/emitter.py
    ``process_message``; ``message.update()`` in chainlit/socket.py ``edit_message``)
    before it calls ``on_message``, so a message the app refuses (too long, or beyond
    the chat's queue) was stored in full and a 15 MiB one priced and drawn as well.
    Touches ``chainlit.server.sio.handlers["/"]["client_message"]`` and
    ``["edit_message"]`` (registered by chainlit/socket.py with ``@sio.on``). Removed by a
    Chainlit hook that may refuse a message before it is stored.
    """
    from chainlit.server import sio

    for event in ("client_message", "edit_message"):
        sio.handlers["/"][event] = wrap(event, sio.handlers["/"][event])


def raise_socket_message_limit(limit_bytes: int) -> None:
    """Let socket.io frames up to ``limit_bytes`` through.

    Why: python-engineio drops a frame over ``max_http_buffer_size`` (1 MB by
    default) without a word, so a long pasted message would vanish; Chainlit
    builds its ``AsyncServer`` without exposing the option. Touches
    ``chainlit.server.sio.eio.max_http_buffer_size``. Removed by a Chainlit
    setting for the socket's message size.
    """
    from chainlit.server import sio

    sio.eio.max_http_buffer_size = limit_bytes


# --- 5. Stop without Chainlit's own note -------------------------------------------------
# Why: Chainlit 2.12's socket.io ``stop`` handler (chainlit/socket.py) sends a message
# "Task manually stopped." (English whatever the chat's language, and stored with the chat)
# before it cancels the session's task and calls ``on_stop``; the app's turn says in the
# chat's language how the answer ended ("Stopped…", backend/presenter.py), so a Stop was
# said twice. The replacement does what Chainlit's does, without that message.
# Ends when: Chainlit lets an app turn that message off or word it itself.


def quiet_stop() -> None:
    """Replace Chainlit's socket.io ``stop`` handler by one that sends no message of its own.

    Touches ``chainlit.server.sio.handlers["/"]["stop"]`` (registered by chainlit/socket.py
    with ``@sio.on("stop")``).
    """
    from chainlit.config import config
    from chainlit.context import init_ws_context
    from chainlit.server import sio
    from chainlit.session import WebsocketSession

    async def stop(sid: str) -> None:
        if session := WebsocketSession.get(sid):
            init_ws_context(session)
            if session.current_task:
                session.current_task.cancel()
            if config.code.on_stop:
                await config.code.on_stop()

    installed = sio.handlers["/"]["stop"]
    stop.__wrapped__ = getattr(installed, "__wrapped__", installed)  # type: ignore[attr-defined]
    sio.handlers["/"]["stop"] = stop


# --- 6. A question handed to on_message without a 1 ms wait -------------------------------
# Why: Chainlit 2.12's ``process_message`` (chainlit/socket.py) starts the tasks that store
# the question and the thread, then ``await asyncio.sleep(0.001)`` before it calls
# ``on_message``: a millisecond (1.1-1.4 ms measured here) added to every question's first
# words, which with the app's own work before the request came to half of them
# (docs/benchmarks.md, "The turn stored while the request goes out"). Yielding to the loop
# once lets those tasks start just as well (they were scheduled before it). The module's
# other sleep (a session's timeout, minutes) is left as it is.
# Ends when: Chainlit calls ``on_message`` without the pause; then delete this section and
# its call in app.py.

SHORT_PAUSE_S: Final = 0.001
"""The longest ``asyncio.sleep`` in chainlit/socket.py that becomes one yield to the loop."""


async def _yield_for_a_short_pause(seconds: float, result: Any = None) -> Any:
    """``asyncio.sleep`` for chainlit/socket.py: a pause of :data:`SHORT_PAUSE_S` or less
    yields to the event loop once; a longer one sleeps as asked."""
    return await asyncio.sleep(0 if seconds <= SHORT_PAUSE_S else seconds, result)


def hand_questions_on_at_once() -> None:
    """Give chainlit/socket.py an ``asyncio`` whose ``sleep`` is
    :func:`_yield_for_a_short_pause` (idempotent)."""
    socket = importlib.import_module("chainlit.socket")
    if socket.asyncio.sleep is _yield_for_a_short_pause:
        return
    unpaused = types.SimpleNamespace(**{**vars(asyncio), "sleep": _yield_for_a_short_pause})
    socket.asyncio = unpaused  # type: ignore[attr-defined]


# --- 7. An upload parsed in memory, not through a temporary file ---------------------------
# Why: Chainlit 2.12's upload route (chainlit/server.py, ``upload_file``) takes the file as
# FastAPI's ``UploadFile``, which Starlette's ``MultiPartParser`` (starlette/formparsers.py)
# spools into a ``SpooledTemporaryFile`` of ``spool_max_size`` (1 MB) bytes: a 1.5 MB phone
# photo rolls over to disk, each later 64 KB chunk is written there in a worker thread, and
# the route reads the whole file back into memory (``await file.read()``) before it stores
# it. The body is already limited (``ui.security.Guard`` refuses an upload over Chainlit's
# ``max_size_mb`` before it is read), and the route holds it all in memory anyway, so a spool
# as large as that limit keeps the same bytes in memory without the disk round trip:
# 1.1 ms of CPU per 1.5 MB upload against 2.6-2.9 ms through the disk, parsed in one process
# (docs/facts.md, "Where a photo chat's extra CPU goes").
# Ends when: Chainlit (or FastAPI) lets an app read an upload as a stream or set the spool's
# size; then delete this section and its call in ui/security.py.


def parse_uploads_in_memory(limit_bytes: int) -> None:
    """Spool multipart files of up to ``limit_bytes`` in memory (Starlette's
    ``MultiPartParser.spool_max_size``, a class attribute, for every form the process
    parses); larger ones still roll over to a temporary file. Idempotent.

    Raises:
        ValueError: ``limit_bytes`` is not positive (a programming error).
    """
    from starlette.formparsers import MultiPartParser

    if limit_bytes < 1:
        raise ValueError(f"limit_bytes must be positive, got {limit_bytes}")
    MultiPartParser.spool_max_size = limit_bytes
