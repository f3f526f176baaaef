"""A file attached in the message box, as the app takes it (Chainlit's upload route, through
:func:`ui.chainlit_patches.on_file_stored`): judged for its chat at once, so an image is
prepared before the message is sent and one the chat cannot use is refused with a
sentence the page shows, and the attachment dropped; in a format browsers cannot decode,
shown as a picture (:func:`ui.previews.show_as_picture`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from backend.chat import Upload
from backend.logs import LOGGER_NAME
from backend.presenter import upload_refusal
from backend.turn_runner import TurnRunner
from ui import chainlit_patches, previews
from ui.session import RUNNER_KEY

log = logging.getLogger(LOGGER_NAME)


async def judge_upload(values: dict[str, Any], name: str, path: Path) -> str | None:
    """An upload was stored: judge it for its chat now (an image is prepared, before the
    message is sent) and return, in one plain sentence of the chat's language, why it
    cannot be used; the page shows it at once and drops the attachment. None keeps it
    (``values``: the session's user-session values). Never fails the upload itself."""
    turns = values.get(RUNNER_KEY)
    if not isinstance(turns, TurnRunner):
        return None
    try:
        problem = await turns.chat.judge_upload(Upload(name=name, path=path))
    except Exception:  # judged again when the message is sent
        log.exception("could not judge %s on upload", name)
        return None
    return None if problem is None else upload_refusal(problem, name, turns.chat.tr)


def install() -> None:
    """Judge every upload on attach, and show a HEIC (and the like) as a picture."""
    chainlit_patches.on_file_stored(judge_upload, previews.show_as_picture)
