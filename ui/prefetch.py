"""Start preparing an uploaded image the moment Chainlit stores it, before Enter.

Chainlit 2.12 has no upload hook: ``POST /project/file`` (which the browser calls
as soon as a file is attached) stores the file with
``WebsocketSession.persist_file``. :func:`install` wraps that method so that,
once the file is on disk, the chat of that session starts preparing it in the
media workers (:meth:`backend.chat.ChatSession.prefetch`). When the message is
sent, :meth:`~backend.chat.ChatSession.prepare_uploads` finds the work done, so a
photo adds no decoding to the time to first token.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from chainlit.session import WebsocketSession
from chainlit.user_session import user_sessions

from backend.chat import ChatSession
from backend.logs import LOGGER_NAME
from backend.uploads import Upload

log = logging.getLogger(LOGGER_NAME)


def install() -> None:
    """Wrap ``WebsocketSession.persist_file`` once (idempotent)."""
    original = WebsocketSession.persist_file
    if getattr(original, "_kimi_prefetch", False):
        return

    async def persist_file(self: WebsocketSession, *args: Any, **kwargs: Any) -> Any:
        reference = await original(self, *args, **kwargs)
        stored = self.files.get(reference["id"]) if isinstance(reference, dict) else None
        chat = user_sessions.get(self.id, {}).get("chat")
        if stored is not None and isinstance(chat, ChatSession):
            try:
                chat.prefetch(Upload(name=str(stored["name"]), path=Path(stored["path"])))
            except Exception:  # preparing on send still works; never fail the upload
                log.exception("could not start preparing %s early", stored["name"])
        return reference

    persist_file._kimi_prefetch = True  # type: ignore[attr-defined]
    WebsocketSession.persist_file = persist_file  # type: ignore[method-assign,assignment]
