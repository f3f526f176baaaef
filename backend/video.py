"""A video upload (MP4, WebM, MOV) as evenly spaced frames, decoded with PyAV.

Kimi-VL takes a video as a series of images. :func:`prepare_video` picks how many
frames and how large (:func:`plan_frames`), seeks to evenly spaced times, decodes
one frame at each with PyAV (FFmpeg), scales it while converting to RGB (FFmpeg's
swscale, area filter) and encodes it as JPEG (the source is lossy already). Each
frame is a :class:`backend.images.PreparedImage` named like ``clip.mp4 @ 00:03.2``,
and the line ``Frames of clip.mp4 at 00:00.0, 00:03.2, ...`` goes to the model so
it knows when each frame was taken.

The budget, per video: at most :data:`MAX_FRAMES` frames and
:data:`FRAMES_PER_SECOND` frames per second of video, no more than the image
slots left in the message, and all frames together within the message's token
budget for pictures (:class:`backend.media.MediaBudget`). To fit, frames are
scaled to a smaller ``in_token_limit`` than a photo gets (the largest that fits,
never below :data:`MIN_FRAME_PATCHES`); only when even that is too much are fewer
frames taken.

An MP4 or MOV cut short (an interrupted upload or download) is refused, never sent
in part: what FFmpeg makes of one depends on where the cut falls (no video stream,
invalid data, end of file, or all frames when only the index's last bytes are
lost), so :func:`prepare_video` first walks the file's top-level boxes
(:func:`iso_box_problem`) and refuses a file that ends inside a box or has no
``moov`` index, with one sentence.

FFmpeg contexts are per container, so several videos may be decoded in parallel
threads.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Final

import av
from PIL import Image

from backend.conversation import IMAGE_OVERHEAD_TOKENS
from backend.errors import ImageError
from backend.i18n import msg
from backend.images import (
    MAX_DECODED_PIXELS,
    PreparedImage,
    encode_image,
    fit_to_budget,
    image_tokens,
    upload_size,
)
from backend.media import MediaBudget, MediaResult

MAX_FRAMES: Final = 16
"""Most frames taken from one video: enough to follow a short clip's action while
each frame keeps about 1,000 tokens in a 32K context (see
:data:`backend.media.MEDIA_CONTEXT_SHARE`)."""

FRAMES_PER_SECOND: Final = 2.0
"""Most frames per second of video: a 3-second clip gives 6 frames, not 16 copies
of nearly the same picture."""

MIN_FRAME_PATCHES: Final = 1024
"""Smallest per-frame budget in 14x14 patches (448x448 px, 256 tokens, for a
square frame; 602x338 for 16:9). Below this, frames are dropped instead of shrunk."""

_BOX_HEADER: Final = 8
"""Bytes of an ISO base media box header: 32-bit size, then the 4-character type
(ISO/IEC 14496-12, 4.2); size 1 means a 64-bit size follows, 0 "to the end of the file"."""

_ROTATE: Final = {
    90: Image.Transpose.ROTATE_90,
    -90: Image.Transpose.ROTATE_270,
    180: Image.Transpose.ROTATE_180,
    -180: Image.Transpose.ROTATE_180,
}
"""PyAV's ``VideoFrame.rotation`` (degrees counterclockwise from the display matrix,
as phones record portrait video) and the transposition that shows the frame upright."""


def format_timestamp(seconds: float) -> str:
    """``MM:SS.s`` (``H:MM:SS.s`` from one hour), e.g. ``00:03.2``; tenths truncated."""
    tenths = int(seconds * 10 + 1e-6)
    minutes, tenth_seconds = divmod(tenths, 600)
    hours, minutes = divmod(minutes, 60)
    clock = f"{minutes:02d}:{tenth_seconds // 10:02d}.{tenth_seconds % 10}"
    return f"{hours}:{clock}" if hours else clock


@dataclass(frozen=True, slots=True)
class FramePlan:
    """How many frames to take and the per-frame budget.

    Attributes:
        count: frames to take (>= 1).
        in_token_limit: per-frame budget in 14x14 patches.
        width: pixels of each frame as sent (before a display rotation).
        height: pixels of each frame as sent.
        tokens: Kimi-VL tokens of each frame.
    """

    count: int
    in_token_limit: int
    width: int
    height: int
    tokens: int


def plan_frames(duration_s: float, width: int, height: int, budget: MediaBudget) -> FramePlan:
    """Frame count and size for a ``width`` x ``height`` video of ``duration_s`` seconds.

    Count: ``min(MAX_FRAMES, ceil(duration_s * FRAMES_PER_SECOND), budget.images)``
    (at least 1). Size: the largest per-frame ``in_token_limit`` (at most the
    model's) for which ``count * (tokens + IMAGE_OVERHEAD_TOKENS) <= budget.tokens``;
    if none at or above :data:`MIN_FRAME_PATCHES` fits, the count is cut to what
    fits at that floor.

    Raises:
        ImageError: not even one frame fits (no image slot or too few tokens left);
            the message lacks the file name, which the caller puts in front.
    """
    if budget.images < 1:
        raise ImageError(msg("no image slot is left in this message for its frames"))
    wanted = max(1, math.ceil(duration_s * FRAMES_PER_SECOND))
    count = min(MAX_FRAMES, wanted, budget.images)
    floor = min(MIN_FRAME_PATCHES, budget.in_token_limit)

    def cost(limit: int) -> int:
        return image_tokens(*fit_to_budget(width, height, limit), limit) + IMAGE_OVERHEAD_TOKENS

    count = min(count, budget.tokens // cost(floor))
    if count < 1:
        raise ImageError(
            msg(
                "even one frame ({cost} tokens) is more than the "
                "{tokens} tokens left for pictures in this message",
                cost=cost(floor),
                tokens=max(0, budget.tokens),
            )
        )
    low, high = floor, budget.in_token_limit  # cost grows with the limit: binary search
    while low < high:
        middle = (low + high + 1) // 2
        if count * cost(middle) <= budget.tokens:
            low = middle
        else:
            high = middle - 1
    size = fit_to_budget(width, height, low)
    return FramePlan(count, low, *size, image_tokens(*size, low))


def iso_box_problem(path: Path) -> str | None:
    """Why an ISO base media file (MP4, MOV, M4V, 3GP) is incomplete, or None.

    Only files with ``ftyp`` at byte 4 are checked (others: None). Walks the
    top-level boxes by their declared sizes (reading 16 bytes a box, not the
    content) and returns e.g. ``"the file ends inside its 'mdat' box"`` when a box
    runs past the end of the file, ``"the file ends inside a box header"``, or
    ``"it has no 'moov' box, the index of its frames"`` when the boxes end cleanly
    but none is the index. A box of size 0 runs to the end of the file (complete).

    Raises:
        OSError: the file cannot be read.
    """
    size = path.stat().st_size
    found_index = False
    with path.open("rb") as file:
        head = file.read(_BOX_HEADER)
        if head[4:8] != b"ftyp":
            return None
        offset = 0
        while offset < size:
            file.seek(offset)
            header = file.read(16)
            if len(header) < _BOX_HEADER:
                return msg("the file ends inside a box header")
            declared = int.from_bytes(header[:4], "big")
            kind = header[4:8].decode("latin-1")
            if declared == 1:
                if len(header) < 16:
                    return msg("the file ends inside a box header")
                declared = int.from_bytes(header[8:16], "big")
            elif declared == 0:
                declared = size - offset
            found_index = found_index or kind == "moov"
            if declared < _BOX_HEADER:
                return msg(
                    "its {kind} box has an impossible size ({size} bytes)",
                    kind=repr(kind),
                    size=declared,
                )
            if offset + declared > size:
                return msg("the file ends inside its {kind} box", kind=repr(kind))
            offset += declared
    return None if found_index else msg("it has no 'moov' box, the index of its frames")


def _duration_s(container: av.container.InputContainer, stream: av.VideoStream) -> float:
    """The video's length in seconds: the stream's, else the container's (0 if unknown)."""
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    return container.duration / av.time_base if container.duration else 0.0


class _FrameReader:
    """Frames of one stream by time, decoding forward and seeking only when it saves work.

    Keyframe timestamps come from one pass over the packets (demuxing only, no
    decoding: a few milliseconds for a 20 MB file). For each time, the reader
    seeks only when the last keyframe at or before it lies beyond the frame
    decoded last; otherwise it goes on decoding from where it is. (Seeking for
    every frame re-decodes whole groups of pictures: 1.4 s instead of 0.2 s for
    16 frames of a 10-second 720p clip with x264's default 250-frame keyframe
    interval.)
    """

    def __init__(self, container: av.container.InputContainer, stream: av.VideoStream) -> None:
        self.container, self.stream = container, stream
        self.time_base = stream.time_base or Fraction(1, av.time_base)
        self.start = stream.start_time or 0
        self.keyframes = sorted(
            packet.pts
            for packet in container.demux(stream)
            if packet.is_keyframe and packet.pts is not None
        )
        self.current: av.VideoFrame | None = None
        self.frames: Iterator[av.VideoFrame] = iter(())

    def frame_at(self, seconds: float) -> tuple[av.VideoFrame, float] | None:
        """The first frame shown at or after ``seconds`` (else the last one) and its time.

        ``seconds`` count from the stream's start and must not decrease between
        calls. Returns None when no frame with a timestamp follows.
        """
        target = self.start + int(seconds / self.time_base)
        key = max((pts for pts in self.keyframes if pts <= target), default=self.start)
        if self.current is None or self.current.pts is None or key > self.current.pts:
            self.container.seek(key, stream=self.stream, backward=True, any_frame=False)
            self.frames = self.container.decode(self.stream)
        elif self.current.pts >= target:  # targets closer than two frames
            return self.current, float((self.current.pts - self.start) * self.time_base)
        for frame in self.frames:
            if frame.pts is not None:
                self.current = frame
                if frame.pts >= target:
                    break
        if self.current is None or self.current.pts is None:
            return None
        return self.current, float((self.current.pts - self.start) * self.time_base)


def prepare_video(path: str | Path, budget: MediaBudget, name: str | None = None) -> MediaResult:
    """Decode evenly spaced frames of a video upload, within ``budget``.

    Frames are taken at ``i * duration / count`` seconds for ``i`` in
    ``0 .. count - 1`` (:func:`plan_frames`), each the first frame shown at or
    after that time; the timestamps said are those of the decoded frames. A
    display rotation (portrait phone video) is applied.

    Synchronous and CPU-bound (about 0.4 s for 16 frames of a 10-second 720p H.264
    clip on one core, most of it decoding): run it in a worker thread.

    Args:
        path: the uploaded file.
        budget: image slots, tokens and the model's per-image budget left for it.
        name: the name the person gave the file (defaults to the path's name).

    Returns:
        The frames, the ``Frames of NAME at ...`` line and a notice of how many
        frames were taken.

    Raises:
        ImageError: too big, an MP4/MOV cut short or without its index
            (:func:`iso_box_problem`), not a video FFmpeg can decode, no video
            stream, unknown length, frames too large, or no room left in the
            message; one line naming the file.
    """
    path = Path(path)
    label = name or path.name
    source_bytes = upload_size(path, label, budget.max_bytes)
    _check_complete(path, label)
    try:
        with av.open(str(path)) as container:
            stream, duration, plan = _planned(container, label, budget)
            reader = _FrameReader(container, stream)
            frames: list[PreparedImage] = []
            times: list[str] = []
            for index in range(plan.count):
                found = reader.frame_at(index * duration / plan.count)
                if found is None:
                    break
                frame, seconds = found
                times.append(format_timestamp(max(0.0, seconds)))
                name_at = f"{label} @ {times[-1]}"
                image = _upright(frame, plan)
                frames.append(
                    encode_image(image, "JPEG", name_at, budget.in_token_limit, source_bytes)
                )
    except ImageError:
        raise
    except (av.FFmpegError, ValueError) as error:
        raise ImageError(msg("{name}: not a video that can be decoded", name=label)) from error
    if not frames:
        raise ImageError(msg("{name}: no frame could be decoded", name=label))
    return MediaResult(
        frames, f"Frames of {label} at {', '.join(times)}", [_sent(label, frames, duration)]
    )


def _sent(label: str, frames: list[PreparedImage], duration: float) -> str:
    """The notice for people: how many frames of how long a video went, at what size."""
    return msg(
        "{name}: {count} frames of the {duration} video sent "
        "({width}x{height} px, {tokens} tokens each)",
        name=label,
        count=len(frames),
        duration=format_timestamp(duration),
        width=frames[0].width,
        height=frames[0].height,
        tokens=frames[0].tokens,
    )


def _check_complete(path: Path, label: str) -> None:
    """Refuse an MP4/MOV cut short or without its index (:func:`iso_box_problem`).

    Raises:
        ImageError: it is, or the file cannot be read.
    """
    try:
        problem = iso_box_problem(path)
    except OSError as error:
        raise ImageError(
            msg("{name}: cannot read the file ({error})", name=label, error=error.strerror)
        ) from error
    if problem is not None:
        raise ImageError(
            msg(
                "{name}: the video is incomplete ({problem}), probably cut short "
                "while uploading; upload the whole file again",
                name=label,
                problem=problem,
            )
        )


def _planned(
    container: av.container.InputContainer, label: str, budget: MediaBudget
) -> tuple[av.VideoStream, float, FramePlan]:
    """The video stream of ``container``, its length in seconds and the frames to take.

    Raises:
        ImageError: no video stream, unknown size or length, frames too large to
            decode, or no room for a frame in ``budget``.
    """
    if not container.streams.video:
        raise ImageError(msg("{name}: the file has no video stream", name=label))
    stream = container.streams.video[0]
    width, height = stream.codec_context.width, stream.codec_context.height
    duration = _duration_s(container, stream)
    if width < 1 or height < 1 or duration <= 0:
        raise ImageError(msg("{name}: cannot tell the video's size or length", name=label))
    if width * height > MAX_DECODED_PIXELS:
        raise ImageError(
            msg(
                "{name}: {width}x{height} frames are too large to decode",
                name=label,
                width=width,
                height=height,
            )
        )
    try:
        return stream, duration, plan_frames(duration, width, height, budget)
    except ImageError as error:
        raise ImageError(msg("{name}: not used: {why}", name=label, why=error.message)) from error


def _upright(frame: av.VideoFrame, plan: FramePlan) -> Image.Image:
    """``frame`` at the planned size, its display rotation (a portrait phone video) applied."""
    image: Image.Image = frame.to_image(  # type: ignore[no-untyped-call]
        width=plan.width, height=plan.height, interpolation="AREA"
    )
    transpose = _ROTATE.get(frame.rotation)
    return image.transpose(transpose) if transpose is not None else image
