"""Test helpers for uploads: PDFs and videos made here (no downloads) with Pillow, PyAV and
raw PDF syntax (the last two from :mod:`bench.media`, shared with the benchmarks), a media
budget, and the check on the one-line messages for bad files."""

from __future__ import annotations

import re
from pathlib import Path

from PIL import Image, ImageDraw

from backend.media import MediaBudget
from bench.media import frame_colour as frame_colour
from bench.media import make_video as make_video
from bench.media import raw_pdf as raw_pdf


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


def text_pdf(path: Path, pages: list[str | None]) -> Path:
    """A US letter PDF whose page ``n`` shows ``pages[n]`` as real text (Helvetica, a line
    per ``\\n``: a text layer PDFium reads back), or, for None, a picture: a blue
    rectangle and no text at all (as a scanned page has none)."""
    font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"", font]
    kids = []
    for text in pages:
        if text is None:
            content = b"0.1 0.3 0.8 rg 72 200 468 400 re f"
        else:
            lines = [line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")
                     for line in text.split("\n")]  # fmt: skip
            shown = b" T* ".join(b"(%s) Tj" % line.encode("latin-1") for line in lines)
            content = b"BT /F1 11 Tf 14 TL 72 720 Td " + shown + b" ET"
        page_number = len(objects) + 1
        kids.append(b"%d 0 R" % page_number)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (page_number + 1)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), len(pages))
    path.write_bytes(raw_pdf(objects))
    return path


def paragraph(page: int) -> str:
    """A page of a report: a dozen lines (about 700 characters) that name their page."""
    return "\n".join(f"Section {page}.{line}: revenue grew in region {line} of {page}."
                     for line in range(1, 13))  # fmt: skip
