"""The store's files for Chainlit's data layer, and the route that serves them.

:class:`FilesStorageClient` is Chainlit's storage-client interface
(chainlit/data/storage_clients/base.py) over the store's :class:`backend.store.files.Files`
(a folder, or an S3 bucket: :mod:`backend.store.s3`): element files (uploads as shown on
the page) go there, and their URLs are :func:`mount_file_route`'s route,
``GET /kimi/files/{object key}``, whichever holds them. Chainlit's own S3 client would
hand the page signed bucket URLs instead, readable by anyone holding one until it
expires, unshared chat or not. The route
answers only for a key that belongs to an element of a thread the signed-in
user may read (:func:`backend.auth.may_read_thread`: the owner, or anyone once
the thread is shared), and 404 otherwise, the same for a missing file and a
foreign one, so it leaks nothing. Files are sent with ``nosniff`` and a
``sandbox`` content security policy; only common raster image types are sent
inline, anything else as a download.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, cast
from urllib.parse import quote

from chainlit.auth import get_current_user, reuseable_oauth
from chainlit.data.storage_clients.base import BaseStorageClient
from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.responses import Response
from sqlalchemy.ext.asyncio import AsyncEngine

from backend.auth import Ownership, may_read_thread
from backend.store.files import Files, safe_key
from ui.chainlit_patches import ahead_of_the_page

ROUTE_PREFIX: Final = "/kimi/files"

INLINE_TYPES: Final = frozenset(
    {"image/jpeg", "image/png", "image/gif", "image/webp", "image/avif", "image/bmp"}
)
"""Types a browser shows without running anything (SVG, HTML and PDF are not among them)."""


class FilesStorageClient(BaseStorageClient):
    """Chainlit's storage client interface on the store's :class:`Files`.

    Args:
        files: where the bytes go (borrowed).
        url_root: prefix of the app's URLs (Chainlit's ``--root-path``), "" by default.
    """

    def __init__(self, files: Files, url_root: str = "") -> None:
        self.files = files
        self.url_root = url_root.rstrip("/")

    async def upload_file(
        self,
        object_key: str,
        data: bytes | str,
        mime: str = "application/octet-stream",
        overwrite: bool = True,
        content_disposition: str | None = None,
    ) -> dict[str, Any]:
        """Write ``data`` under a safe form of ``object_key``; returns its key and URL."""
        key = safe_key(object_key)
        payload = data.encode("utf-8") if isinstance(data, str) else data

        def store() -> None:
            if overwrite or not self.files.exists(key):
                self.files.write(key, payload)

        await asyncio.to_thread(store)
        return {"object_key": key, "url": await self.get_read_url(key)}

    async def delete_file(self, object_key: str) -> bool:
        """Remove the file; False if there was none."""
        return await asyncio.to_thread(self.files.delete, safe_key(object_key))

    async def get_read_url(self, object_key: str) -> str:
        """The route URL of ``object_key`` (checked on each request, so it never expires)."""
        return f"{self.url_root}{ROUTE_PREFIX}/{quote(object_key)}"

    async def close(self) -> None:
        """Nothing to close: the store owns its files (:class:`backend.store.core.Store`)."""


async def _viewer(request: Request) -> str | None:
    """The signed-in user's identifier, or None (not signed in, or no sign-in at all)."""
    try:
        user = await get_current_user(cast(str, await reuseable_oauth(request)))
    except HTTPException:
        return None
    return None if user is None else str(user.identifier)


def mount_file_route(app: FastAPI, engine: AsyncEngine, files: Files, root: str = "") -> None:
    """Add ``GET {root}/kimi/files/{key}`` to Chainlit's app, ahead of its catch-all route.

    Chainlit's last route (``/{full_path:path}``) answers every path with the page,
    so a router included after it would never be reached: ours is moved in front
    (:func:`ui.chainlit_patches.ahead_of_the_page`).
    """
    router = APIRouter(prefix=root.rstrip("/"))
    ownership = Ownership(engine)

    @router.get(ROUTE_PREFIX + "/{key:path}")
    async def serve_file(key: str, request: Request) -> Response:
        not_found = HTTPException(status_code=404, detail="File not found")
        if safe_key(key) != key:
            raise not_found
        found = await ownership.file(key)
        if found is None:
            raise not_found
        thread, mime = found
        if not may_read_thread(thread.owner, await _viewer(request), shared=thread.shared):
            raise not_found
        try:
            data = await asyncio.to_thread(files.read, key)
        except FileNotFoundError:
            raise not_found from None
        inline = mime in INLINE_TYPES
        return Response(
            content=data,
            media_type=mime if inline else "application/octet-stream",
            headers={
                # A shared chat's files are asked for again each time: unsharing ends them.
                "Cache-Control": "private, no-cache" if thread.shared else "private, max-age=86400",
                "X-Content-Type-Options": "nosniff",
                "Content-Security-Policy": "default-src 'none'; sandbox",
                "Content-Disposition": "inline" if inline else "attachment",
            },
        )

    ahead_of_the_page(app, lambda: app.include_router(router))
