"""Test helpers for uploads: PDFs and videos made here (no downloads) with Pillow, PyAV and
raw PDF syntax, a media budget, and the check on the one-line messages for bad files."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import av
from PIL import Image, ImageDraw

from backend.media import MediaBudget


def budget(images: int = 64, tokens: int = 1_000_000, limit: int = 16384) -> MediaBudget:
    """Room for one message's pictures: image slots, tokens, and the patch budget of one."""
    return MediaBudget(images=images, tokens=tokens, in_token_limit=limit)


def one_line_naming(error: BaseException, name: str) -> str:
    """The message of ``error``, asserted to be one line starting with ``"<name>: "``."""
    message = str(error)
    assert message.startswith(f"{name}: ")
    assert "\n" not in message and "Traceback" not in message
    return message


PAGE_COLOURS = [(30 * i % 256, 90, 200 - 10 * i) for i in range(20)]
"""Background colour of page ``i`` (0-based) in :func:`make_pdf`: tells pages apart."""


def make_pdf(
    path: Path, pages: int, size_px: tuple[int, int] = (850, 1100), resolution: float = 100
) -> Path:
    """A PDF of ``pages`` raster pages (Pillow), each a flat colour with a line of text.

    Page ``i`` is :data:`PAGE_COLOURS` ``[i]`` with "Page i+1" in black; its size in
    points is ``size_px / resolution * 72`` (8.5x11 in, US letter, by default).
    """
    images = []
    for index in range(pages):
        image = Image.new("RGB", size_px, PAGE_COLOURS[index])
        ImageDraw.Draw(image).text((40, 40), f"Page {index + 1}", fill="black")
        images.append(image)
    images[0].save(path, "PDF", save_all=True, append_images=images[1:], resolution=resolution)
    return path


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


ONE_PAGE = [
    b"<< /Type /Catalog /Pages 2 0 R >>",
    b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
    b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 100] >>",
]
"""Objects of a one-page, 200x100-point empty PDF for :func:`raw_pdf`."""


def cut_keeping_a_trailer(whole: bytes, length: int) -> bytes:
    """The first ``length`` bytes of a :func:`make_pdf` file, then a trailer naming its catalog.

    What is left of a cut PDF whose trailer PDFium still finds: as a linearized
    ("fast web view") PDF keeps a first-page trailer near its start (ISO 32000-1,
    annex F). The objects after the cut are missing, the ones before are whole.
    """
    catalog = re.search(rb"(\d+) 0 obj<<\s*/Type /Catalog", whole)
    assert catalog is not None
    size = whole.count(b" 0 obj") + 1
    return whole[:length] + b"\ntrailer\n<< /Root %s 0 R /Size %d >>\n" % (catalog[1], size)


def encrypted_pdf() -> bytes:
    """A PDF under the standard security handler whose user password is not empty.

    The ``/U`` entry (RC4, revision 2) matches no key derived from the empty
    password, so a reader must ask for one (PDFium: "Incorrect password error").
    """
    encrypt = b"<< /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P -4 >>" % (b"11" * 32, b"22" * 32)
    ids = b"/Encrypt 4 0 R /ID [<%s> <%s>] " % (b"33" * 16, b"33" * 16)
    return raw_pdf([*ONE_PAGE, encrypt], ids)


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
            frame = av.VideoFrame.from_image(image)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
