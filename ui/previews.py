"""Photos every browser shows: a decodable copy of a HEIC, AVIF, TIFF, BMP or CMYK upload.

Chrome decodes no HEIC (and other browsers miss other formats: :data:`backend.images.
WEB_FORMATS`), so such an upload would be a broken picture in the message box and a
file chip in the sent message and the resumed chat. When such an upload is kept
(:func:`show_as_picture`, on upload), the copy the model gets (already prepared in the
media pool, upright and bounded: :meth:`backend.chat.ChatSession.picture_of`) is
written beside it in the session's files folder and shown in its place:

- the message box: the page is told the copy's URL (a window message
  ``{kimi: {kind: "picture", name, url}}``) and public/pictures.js shows it in the
  attachment's preview, which Chainlit draws from the browser's own decoding;
- the sent message and the stored chat: Chainlit builds the message's element from the
  session's file entry, which names the copy (:meth:`ui.chainlit_patches.KeptUpload.
  show_as`), so the element and the stored file are the copy, under the upload's name;
- the model: :func:`originals` maps the message's elements back to the uploads.
"""

from __future__ import annotations

import asyncio
import mimetypes
from pathlib import Path
from typing import Final

from backend.chat import Upload
from backend.turn_runner import TurnRunner
from ui.chainlit_patches import KeptUpload
from ui.session import RUNNER_KEY

SHOWN_KEY: Final = "kimi_shown_copies"
"""User-session key: path of each shown copy -> path of its upload (both ``str``)."""


async def show_as_picture(upload: KeptUpload) -> None:
    """Show a browser-decodable copy for ``upload`` if browsers may not show it as it is
    (nothing for other uploads, nor outside a chat). Writes the copy next to the upload
    (``<file id>.shown.jpg`` or ``.png``), off the event loop."""
    turns = upload.values.get(RUNNER_KEY)
    if not isinstance(turns, TurnRunner):
        return
    picture = await turns.chat.picture_of(Upload(upload.name, upload.path))
    if picture is None:
        return
    mime, data = picture
    copy = upload.path.with_name(f"{upload.file_id}.shown{mimetypes.guess_extension(mime)}")
    await asyncio.to_thread(copy.write_bytes, data)
    upload.values.setdefault(SHOWN_KEY, {})[str(copy)] = str(upload.path)
    url = upload.show_as(copy, mime)
    await upload.tell_page({"kimi": {"kind": "picture", "name": upload.name, "url": url}})


def originals(shown: object, uploads: list[Upload]) -> list[Upload]:
    """``uploads`` (a message's elements) with each shown copy replaced by its upload
    (``shown``: the user session's :data:`SHOWN_KEY` value, None if there is none)."""
    if not isinstance(shown, dict):
        return uploads
    return [Upload(u.name, Path(shown.get(str(u.path), u.path))) for u in uploads]
