"""What an upload is (image, PDF or video) and the budget its pictures must fit.

A PDF becomes page images (:mod:`backend.documents`) and a video becomes frames
(:mod:`backend.video`); both share the budget of one message: the image slots the
server has left (vLLM ``--limit-mm-per-prompt``, minus the images already in the
message) and a token budget, :data:`MEDIA_CONTEXT_SHARE` of the max model length
minus what the message's images take. Both return a :class:`MediaResult`.

Which kind an upload is, and who prepares it, is :mod:`backend.upload_kinds`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from backend.conversation import IMAGE_OVERHEAD_TOKENS
from backend.images import PreparedImage

MEDIA_CONTEXT_SHARE: Final = 0.5
"""Share of the max model length the pictures of one message may take (tokens). The
rest is left for the typed text, the history and the answer: e.g. 16,384 of 32,768
tokens, four letter pages at Thinking-2506's full 16,384-patch budget (about 4,100
tokens each) or sixteen video frames of 1,024 tokens."""


@dataclass(frozen=True, slots=True)
class MediaBudget:
    """What the pictures of one PDF or video may take.

    Attributes:
        images: image slots left in the request (>= 0).
        tokens: prompt tokens left for pictures, chat-template overhead included
            (may be <= 0: nothing fits).
        in_token_limit: the served model's budget per image in 14x14 patches.
        max_bytes: largest accepted upload in bytes; None: no limit.
    """

    images: int
    tokens: int
    in_token_limit: int
    max_bytes: int | None = None

    def after(self, images: list[PreparedImage]) -> MediaBudget:
        """The budget left once ``images`` are in the message."""
        used = sum(image.tokens + IMAGE_OVERHEAD_TOKENS for image in images)
        return MediaBudget(
            images=max(0, self.images - len(images)),
            tokens=self.tokens - used,
            in_token_limit=self.in_token_limit,
            max_bytes=self.max_bytes,
        )


@dataclass(frozen=True, slots=True)
class MediaResult:
    """Pictures made from one PDF or video, and what to say about them.

    Attributes:
        images: pages or frames, in order, each within the budget it was made for.
        notices: one-line remarks for the person (pages left out, frames taken).
        text: what the model reads, placed before the person's text, e.g.
            ``"Frames of clip.mp4 at 00:00.0, 00:03.2"``, or a PDF's pages' text.
    """

    images: list[PreparedImage]
    text: str
    notices: list[str] = field(default_factory=list)
