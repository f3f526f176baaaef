"""A shared chat's public page: ``GET /share/<thread id>`` for anyone not signed in.

A chat its owner shared (Chainlit's share dialog sets the thread's
``metadata.is_shared``) is a read-only page for anyone with the link, as in
other chat products: the messages, each answer's reasoning (collapsed) and the
photos the model saw, rendered like an export (:mod:`backend.store.export`:
everything escaped, no script, images inline), with a link to sign in that
returns to the chat (``public/links.js`` follows the ``next`` parameter after
Chainlit's sign-in). Unsharing ends it at once: every request reads the flag,
and the page is never cached. A chat that is not shared, or does not exist, is
404 with one sentence, the same for both. Signed-in people get Chainlit's own
shared view instead (``ui/signin.py`` decides which).
"""

from __future__ import annotations

import asyncio
import re
from typing import Final
from urllib.parse import quote

from starlette.responses import HTMLResponse

from backend.auth import Ownership
from backend.families import family_for
from backend.i18n import Translator, msg
from backend.store.core import Store
from backend.store.export import ChatExport, export_html
from backend.store.resume import shown_records

_SHARE_PATH: Final = re.compile(r"^/share/([A-Za-z0-9-]{1,64})/?$")
NOT_SHARED: Final = msg("This chat is not shared.")


def shared_thread_id(path: str) -> str | None:
    """The thread id of a share link's path (``"/share/<id>"``, below the root path), or None."""
    match = _SHARE_PATH.match(path)
    return match.group(1) if match else None


async def public_page(
    store: Store, ownership: Ownership, thread_id: str, tr: Translator, root: str = ""
) -> HTMLResponse:
    """The public page of shared chat ``thread_id`` in ``tr``'s language, or a 404 page.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database failed.
    """
    headers = {"Cache-Control": "no-store"}
    thread = await ownership.thread(thread_id)
    if thread is None or not thread.shared:
        text = tr(NOT_SHARED)
        body = f'<!DOCTYPE html><html lang="{tr.locale}"><meta charset="utf-8"><p>{text}</p></html>'
        return HTMLResponse(body, 404, headers=headers)
    records = shown_records(await store.turns.load(thread_id))  # the branch the chat shows
    last = records[-1] if records else None
    page = ChatExport(
        title=thread.name or "Kimi-VL chat",
        model=tr.text(family_for(last.model).label) if last and last.model else "",
        options=last.options if last else {},
        records=records,
        exported_at=thread.shared_at.replace("T", " ")[:16],
        sign_in_url=f"{root}/login?next={quote(f'{root}/share/{thread_id}')}",
    )
    # Rendering Markdown and math takes seconds for a long chat: off the event loop.
    return HTMLResponse(await asyncio.to_thread(export_html, page, tr), headers=headers)
