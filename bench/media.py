"""Media made on the spot for benchmarks and tests: a photo, raw PDF syntax, videos.

Nothing is downloaded: Pillow draws, PyAV encodes, PDFs are written byte by
byte. ``tests/media.py`` re-exports :func:`raw_pdf`, :func:`frame_colour` and
:func:`make_video` for the tests (bench never imports ``tests/``).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import av
from PIL import Image, ImageFilter


def make_photo(width: int = 2000, height: int = 1500, target_bytes: int = 1_500_000) -> bytes:
    """A baseline JPEG of ``width`` x ``height`` pixels, about ``target_bytes`` long.

    Smooth colour gradients with blurred noise on top, like a photo's mix of
    flat and detailed areas; the JPEG quality is chosen by bisection so the file
    is within 10% of ``target_bytes`` (about 1.5 MB for a 3 MP photo, as a
    phone's would be).
    """
    gradient = Image.linear_gradient("L").resize((width, height))
    noise = Image.effect_noise((width, height), 64).filter(ImageFilter.GaussianBlur(0.6))
    image = Image.merge("RGB", (gradient, noise, gradient.transpose(Image.Transpose.ROTATE_180)))
    low, high = 10, 98
    best = b""
    while low <= high:
        quality = (low + high) // 2
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=quality)
        best = buffer.getvalue()
        if abs(len(best) - target_bytes) <= target_bytes * 0.1:
            break
        if len(best) < target_bytes:
            low = quality + 1
        else:
            high = quality - 1
    return best


def raw_pdf(objects: list[bytes], trailer: bytes = b"") -> bytes:
    """A PDF file from object bodies (numbered from 1; object 1 is the catalog).

    Writes the header, the objects, a correct cross-reference table and a trailer
    with ``/Size``, ``/Root 1 0 R`` and ``trailer`` (ISO 32000-1, 7.5).
    """
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R %s>>\n" % (len(objects) + 1, trailer)
    out += b"startxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


def frame_colour(index: int) -> tuple[int, int, int]:
    """Colour of frame ``index`` in :func:`make_video`: its red level counts frames."""
    return (8 * index % 256, 128, 64)


def make_video(
    path: Path,
    seconds: float,
    fps: int = 10,
    size: tuple[int, int] = (320, 240),
    codec: str = "libx264",
    picture: Callable[[int], Image.Image] | None = None,
    keyframe_interval: int | None = None,
) -> Path:
    """An H.264 MP4 (or, with ``codec="libvpx-vp9"``, a WebM) of ``seconds * fps`` frames.

    Frame ``i`` (shown at ``i / fps`` s) is ``picture(i)`` (``size`` pixels), by
    default flat :func:`frame_colour` ``(i)``, so a test can tell which frame it
    got from its pixels. ``keyframe_interval``: frames between keyframes (the
    encoder's default when None: 250 for x264).
    """
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=fps)
        assert isinstance(stream, av.VideoStream)
        stream.width, stream.height = size
        stream.pix_fmt = "yuv420p"
        if keyframe_interval is not None:
            stream.codec_context.gop_size = keyframe_interval
        for index in range(round(seconds * fps)):
            image = picture(index) if picture else Image.new("RGB", size, frame_colour(index))
            frame = av.VideoFrame.from_image(image)  # type: ignore[no-untyped-call]  # PyAV stub
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
