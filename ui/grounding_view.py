"""The grounding overlay in Chainlit: annotated copies of the turn's images under the answer.

For each image of the turn that the finished answer points at
(:func:`backend.grounding.overlays`), one message from the app with a caption naming
the image and the annotated copy as an inline ``cl.Image``; the person's upload and
the image sent to the model stay as they were. Coordinates given in an explicit
format but not drawn (several images and no name, outside the image) get one note, which
also counts the marks beyond :data:`backend.grounding.MAX_MARKS` (drawing is bounded: an
answer with 10,000 boxes draws 50 of them and says so).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence

import chainlit as cl

from backend.grounding import caption, not_drawn_note, overlays
from backend.i18n import ENGLISH, Translator
from backend.images import PreparedImage
from backend.logs import LOGGER_NAME
from backend.uploads import MediaWorkers
from ui.notes import AUTHOR, note_id

log = logging.getLogger(LOGGER_NAME)

_DIGIT = re.compile(r"\d")


async def show_marks(
    answer: str,
    images: Sequence[PreparedImage],
    workers: MediaWorkers,
    tr: Translator = ENGLISH,
) -> None:
    """Send the annotated copies for ``answer`` on the turn's ``images``, if any.

    Nothing is sent when the turn has no images or the answer holds no coordinates.
    Decoding and drawing run in the app's media pool (up to a few hundred milliseconds for
    a large PNG would stall every session's websocket on the event loop). The overlay
    is an extra under an answer already shown: if drawing fails, it is logged and
    nothing more is said.

    Args:
        answer: the finished answer (reasoning excluded; markers are ignored anyway).
        images: the turn's prepared images, in upload order (``Turn.images``).
        workers: the app's media-decoding pool (borrowed, not closed).
        tr: the chat's language, for the captions and the note.
    """
    if not images or _DIGIT.search(answer) is None:  # one C scan: answers may be 1 MB
        return
    try:
        drawn, grounding = await workers.run(overlays, answer, images)
    except Exception:
        log.exception("grounding overlay failed")
        return
    for overlay in drawn:
        picture = cl.Image(
            name=overlay.name,
            content=overlay.content,
            mime=overlay.mime,
            display="inline",
            size="large",
        )
        text = caption(images[overlay.image].name, overlay.marks, tr)  # in the chat's language
        await cl.Message(content=text, author=AUTHOR, elements=[picture]).send()
    if grounding.has_note:
        note = not_drawn_note(grounding, tr)
        await cl.Message(content=note, author=AUTHOR, id=note_id("info")).send()
