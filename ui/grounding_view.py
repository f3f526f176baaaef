"""The grounding overlay in Chainlit: annotated copies of images under the answer.

For each image that the finished answer points at (:func:`backend.grounding.overlays`;
the turn's images, or the chat's image a follow-up question refers to), a caption naming
the image and the annotated copy as an inline ``cl.Image``, in the message under the
answer, above its buttons (:meth:`ui.answer_view.AnswerView.add_under`); the person's
upload and the image sent to the model stay as they were. Coordinates given in an explicit
format but not drawn (several images and no name, outside the image) get one note, which
also counts the marks beyond :data:`backend.grounding.MAX_MARKS` (drawing is bounded: an
answer with 10,000 boxes draws 50 of them and says so); a follow-up question that names an
image the chat does not have gets, if its answer gives coordinates, one sentence saying so.
"""

from __future__ import annotations

import logging
import re

import chainlit as cl

from backend.grounding import caption, not_drawn_note, overlays
from backend.i18n import ENGLISH, Translator
from backend.logs import LOGGER_NAME
from backend.render import Marks
from backend.uploads import MediaWorkers
from ui.answer_view import AnswerView
from ui.compare_view import CompareColumn

log = logging.getLogger(LOGGER_NAME)

_DIGIT = re.compile(r"\d")


async def show_marks(
    view: AnswerView | CompareColumn,
    marks: Marks,
    workers: MediaWorkers,
    tr: Translator = ENGLISH,
) -> None:
    """Add the annotated copies for ``marks.answer`` on ``marks.images`` under the answer
    of ``view``.

    Nothing is sent when the answer holds no coordinates. Without images (the question
    names one the chat does not have), coordinates get the one sentence why
    (``marks.missing``). Decoding and drawing run in the app's media pool (up to a few
    hundred milliseconds for a large PNG would stall every session's websocket on the
    event loop). The overlay is an extra under an answer already shown: if drawing fails,
    it is logged and nothing more is said.

    Args:
        view: the finished answer's view.
        marks: the finished answer (reasoning excluded; markers are ignored anyway) and
            the prepared images it refers to, in upload order, or why there are none.
        workers: the app's media-decoding pool (borrowed, not closed).
        tr: the chat's language, for the captions and the note.
    """
    images, answer = marks.images, marks.answer
    if not (images or marks.missing) or _DIGIT.search(answer) is None:  # one C scan: 1 MB
        return
    try:
        drawn, grounding = await workers.run(overlays, answer, images, marks.missing)
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
        await view.add_under(text, [picture])
    if grounding.has_note:
        await view.add_under(not_drawn_note(grounding, tr))
