"""A PDF upload as the model reads it: the text layer of text pages, page images of the
others, with pypdfium2 (PDFium), within the message's budget.

A page with text (:data:`MIN_TEXT_CHARS` or more characters in PDFium's text layer) is
sent as that text: exact, and a fraction of a page image's tokens (a page of text is
hundreds of tokens; a letter page is about 4,200 as an image at Thinking-2506's
budget). A page without (a scan, a photo, a chart) is rendered as an image.

Each page image is rendered directly at the size the model takes as is (:func:`page_pixels`:
the page at :data:`MAX_RENDER_DPI` scaled by :func:`backend.images.fit_to_budget`
for the profile's ``in_token_limit``), not rendered large and shrunk. Pages are
taken from the first on, as many as the message's budget allows
(:class:`backend.media.MediaBudget`: image slots and tokens left); a notice says
in words which pages were read, which sent as images and which were left out (and
how to have those read), and the model reads the pages' text under a heading, or,
when every page sent is an image, the line ``Pages 1-4 of report.pdf (12 pages in
all)``.

Encoding follows :func:`backend.images.choose_format` for a lossless source: PNG for
text pages (flat colours), JPEG for pages that are mostly photograph; a page with no
colour is sent as one grayscale channel (smaller PNG, same pixels).

PDFium is not thread-safe, not even across different documents ("It is not allowed
to call pdfium functions simultaneously across different threads, not even with
different documents": pypdfium2's Python API docs, "Incompatibility with
Threading"), so every PDFium call here holds :data:`_PDFIUM_LOCK`, and documents,
pages and bitmaps are closed explicitly under it (not left to the garbage
collector, which may run in any thread).

A PDF cut short (an interrupted upload or download) is refused rather than sent in
part. A PDF as most writers lay it out ends with its cross-reference table, trailer
and ``%%EOF``, and PDFium (pypdfium2 5.15) cannot open a file cut anywhere before
the end of the trailer dictionary (measured at 40+ cut points in
tests/test_documents.py), so :func:`prepare_pdf` says the file was cut short
(:func:`_open_failure`). A file PDFium does open but one of whose pages within the
budget it cannot load (a cut linearized PDF, whose first-page trailer sits near the
start) is refused naming that page. What PDFium cannot tell, a page whose picture
stream alone is cut, it renders as far as the data goes.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pypdfium2 as pdfium
from PIL import Image, ImageChops

from backend.conversation import IMAGE_OVERHEAD_TOKENS, estimate_text_tokens
from backend.errors import ImageError
from backend.i18n import msg
from backend.images import (
    PreparedImage,
    choose_format,
    encode_image,
    fit_to_budget,
    image_tokens,
    upload_size,
)
from backend.media import MediaBudget, MediaResult

MAX_RENDER_DPI: Final = 300
"""Highest resolution a page is rendered at, in dots per inch: print quality, beyond
which text gains nothing. A US letter or A4 page at 300 dpi (2550x3300 px) is
larger than either Kimi-VL budget, so in practice pages are rendered at the budget;
only small pages (receipts, cards) stop at 300 dpi."""

POINTS_PER_INCH: Final = 72
"""PDF canvas units (points) per inch (ISO 32000-1, 8.3.2.3; ignoring ``UserUnit``,
which PDFium does not report)."""

EOF_WINDOW: Final = 1024
"""Bytes at the end of a file in which a PDF reader looks for the ``%%EOF`` marker
(ISO 32000-1, 7.5.5 and annex H: it "should" be within the last 1024 bytes)."""

MIN_TEXT_CHARS: Final = 80
"""Characters of text (white space aside) from which a page is read as text rather than
sent as a picture: a few lines. A scan, a photo or a chart has none or a caption's worth."""

PAGE_HEADING_TOKENS: Final = 12
"""Tokens allowed for a text page's heading (``--- page 12 ---``) and the blank lines
around it, on top of :func:`backend.conversation.estimate_text_tokens` of its text."""

_BLANK: Final = re.compile(r"\s+")
_PDFIUM_LOCK: Final = threading.Lock()
_OBJECT: Final = re.compile(rb"\d+\s+\d+\s+obj\b")


def page_pixels(width_pt: float, height_pt: float, in_token_limit: int) -> tuple[int, int]:
    """Render size in pixels of a ``width_pt`` x ``height_pt`` page (PDF points).

    The page at :data:`MAX_RENDER_DPI` (each side rounded, at least 1 px), scaled
    by :func:`backend.images.fit_to_budget`: the largest size of that aspect ratio
    the model takes without rescaling.
    """
    dots = MAX_RENDER_DPI / POINTS_PER_INCH
    nominal = max(1, round(width_pt * dots)), max(1, round(height_pt * dots))
    return fit_to_budget(*nominal, in_token_limit)


def _without_colour(image: Image.Image) -> Image.Image:
    """``image`` as one grayscale channel when all its pixels are gray, else as it is."""
    red, green, blue = image.split()
    if ImageChops.difference(red, green).getbbox() or ImageChops.difference(green, blue).getbbox():
        return image
    return red


def _render(page: pdfium.PdfPage, size: tuple[int, int]) -> Image.Image:
    """Render ``page`` onto exactly ``size`` pixels, RGB on white (caller holds the lock).

    PDFium maps the page onto the whole bitmap (``FPDF_RenderPageBitmap`` with the
    bitmap's size), so the size is exact; since :func:`page_pixels` rounds the
    shorter side, the two axes' scales differ by at most half a pixel over that
    side. (pypdfium2's ``PdfPage.render`` takes one scale and makes
    ``ceil(side * scale)`` pixels, which cannot hit every rounded size.) Flags as
    ``render``'s defaults: annotations drawn, RGB byte order.
    """
    width, height = size
    bitmap = pdfium.PdfBitmap.new_native(
        width, height, pdfium.raw.FPDFBitmap_BGR, rev_byteorder=True
    )
    try:
        bitmap.fill_rect((255, 255, 255, 255), 0, 0, width, height)
        flags = pdfium.raw.FPDF_ANNOT | pdfium.raw.FPDF_REVERSE_BYTE_ORDER
        pdfium.raw.FPDF_RenderPageBitmap(bitmap, page, 0, 0, width, height, 0, flags)
        image: Image.Image = bitmap.to_pil().convert("RGB")  # a copy that outlives the bitmap
    finally:
        bitmap.close()
    return image


def _open_failure(path: Path, label: str, error: pdfium.PdfiumError) -> ImageError:
    """The one-line error for a PDF PDFium cannot open.

    Password-protected; else cut short when the file holds PDF objects (``N G obj``
    in its first MiB) but no ``%%EOF`` in its last :data:`EOF_WINDOW` bytes (the
    end, trailer and cross-reference table, is missing); else damaged or unsupported.
    """
    if error.err_code == pdfium.raw.FPDF_ERR_PASSWORD:
        return ImageError(msg("{name}: the PDF is password-protected", name=label))
    with path.open("rb") as file:
        head = file.read(1 << 20)
        file.seek(max(0, path.stat().st_size - EOF_WINDOW))
        tail = file.read()
    if b"%%EOF" not in tail and _OBJECT.search(head):
        return ImageError(
            msg(
                "{name}: the PDF is cut short (the file ends before its %%EOF marker); "
                "upload the whole file again",
                name=label,
            )
        )
    return ImageError(msg("{name}: the PDF is damaged or unsupported", name=label))


def _numbers(numbers: Sequence[int]) -> str:
    """Page numbers in runs, e.g. ``[1, 2, 3, 5]`` -> ``"1-3, 5"``."""
    runs: list[list[int]] = []
    for number in numbers:
        if runs and number == runs[-1][-1] + 1:
            runs[-1].append(number)
        else:
            runs.append([number])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def _page_list(numbers: Sequence[int]) -> str:
    """English, for the line the model reads (``"page 1"``, ``"pages 1-3, 5"``)."""
    return ("page " if len(numbers) == 1 else "pages ") + _numbers(numbers)


def _pages(numbers: Sequence[int]) -> str:
    """The same list, for people (translated where it is shown)."""
    if len(numbers) == 1:
        return msg("page {numbers}", numbers=_numbers(numbers))
    return msg("pages {numbers}", numbers=_numbers(numbers))


@dataclass
class _Reading:
    """What was taken of a PDF, page by page from the first, until one did not fit.

    Attributes:
        pages: the document's page count.
        texts: page number -> its text layer, for pages read as text.
        pictures: page number -> the page rendered, for pages with (almost) no text.
        left_out: page numbers not taken, from the first that did not fit.
        slots, tokens: image slots and tokens still left.
        no_slot: the page that did not fit was a picture and no image slot was left.
    """

    pages: int
    slots: int
    tokens: int
    texts: dict[int, str] = field(default_factory=dict)
    pictures: dict[int, Image.Image] = field(default_factory=dict)
    left_out: list[int] = field(default_factory=list)
    no_slot: bool = False


def prepare_pdf(path: str | Path, budget: MediaBudget, name: str | None = None) -> MediaResult:
    """Read a PDF upload within ``budget``: the text layer of text pages, pictures of the others.

    Pages are taken in order. A page with :data:`MIN_TEXT_CHARS` or more characters of
    text is sent as its text (PDFium's text layer, which costs a fraction of a page
    image's tokens and reads exactly); a page with less (a scan, a photo, a chart) is
    rendered as an image, while an image slot is left. Each page must fit the tokens
    left (a text page by :func:`backend.conversation.estimate_text_tokens`, an image by
    its patches plus the chat template's overhead); the first page that does not fit
    ends the run, and the notice names the pages left out and how to have them read.
    Page images are named ``"NAME page N"``.

    Synchronous and CPU-bound (about 0.1-0.3 s a rendered page at the 16,384-patch
    budget, most of it PNG encoding; a text page takes milliseconds), and serialised
    across threads by the PDFium lock: run it in a worker thread.

    Args:
        path: the uploaded file.
        budget: image slots, tokens and the model's per-image budget left for it.
        name: the name the person gave the file (defaults to the path's name).

    Returns:
        The page images, the text the model reads (the pages' text, or a line
        ``Pages 1-3 of NAME`` when every page sent is a picture) and one notice.

    Raises:
        ImageError: too big, damaged or not a PDF, cut short, password-protected,
            no pages, a page within the budget PDFium cannot load, or not even the
            first page fits the budget; one line naming the file.
    """
    path = Path(path)
    label = name or path.name
    source_bytes = upload_size(path, label, budget.max_bytes)
    reading = _read_pages(path, label, budget)
    # Encoding (most of the time) needs no PDFium: outside the lock.
    images = [
        encode_image(
            page_image,
            choose_format(page_image, "PNG"),
            f"{label} page {number}",
            budget.in_token_limit,
            source_bytes,
        )
        for number, page_image in ((n, _without_colour(p)) for n, p in reading.pictures.items())
    ]
    if reading.pages == 0:
        raise ImageError(msg("{name}: the PDF has no pages", name=label))
    if not images and not reading.texts:
        raise ImageError(
            msg(
                "{name}: not used: no image slot is left in this message for even its first page",
                name=label,
            )
            if reading.no_slot
            else msg(
                "{name}: not used: too few tokens are left in this message for even its first page",
                name=label,
            )
        )
    return _sent(images, label, reading)


def _read_pages(path: Path, label: str, budget: MediaBudget) -> _Reading:
    """Take the PDF's pages that fit ``budget`` in order (:func:`_take_page`), under the
    PDFium lock.

    Raises:
        ImageError: the PDF cannot be opened, or a page within the budget not loaded.
    """
    with _PDFIUM_LOCK:
        try:
            document = pdfium.PdfDocument(path)
        except pdfium.PdfiumError as error:
            raise _open_failure(path, label, error) from error
        try:
            reading = _Reading(len(document), budget.images, budget.tokens)
            for index in range(reading.pages):
                if not _take_page(document, index, label, budget.in_token_limit, reading):
                    reading.left_out = list(range(index + 1, reading.pages + 1))
                    break
        except pdfium.PdfiumError as error:
            raise ImageError(msg("{name}: the PDF is damaged", name=label)) from error
        finally:
            document.close()
    return reading


def _take_page(
    document: pdfium.PdfDocument, index: int, label: str, in_token_limit: int, reading: _Reading
) -> bool:
    """Add page ``index`` to ``reading`` as text or as a picture; False when it does not
    fit what is left. Hold the PDFium lock.

    Raises:
        ImageError: PDFium cannot load the page, or it has no size.
    """
    page = _load_page(document, index, label)
    try:
        text = _text_of(page)
        if len(_BLANK.sub("", text)) >= MIN_TEXT_CHARS:
            cost = estimate_text_tokens(text) + PAGE_HEADING_TOKENS
            if cost > reading.tokens:
                return False
            reading.texts[index + 1] = text
        else:
            if reading.slots < 1:
                reading.no_slot = True
                return False
            width_pt, height_pt = page.get_size()
            if width_pt <= 0 or height_pt <= 0:
                raise ImageError(msg("{name}: page {page} has no size", name=label, page=index + 1))
            size = page_pixels(width_pt, height_pt, in_token_limit)
            cost = image_tokens(*size, in_token_limit) + IMAGE_OVERHEAD_TOKENS
            if cost > reading.tokens:
                return False
            reading.pictures[index + 1] = _render(page, size)
            reading.slots -= 1
        reading.tokens -= cost
        return True
    finally:
        page.close()


def _load_page(document: pdfium.PdfDocument, index: int, label: str) -> pdfium.PdfPage:
    """Page ``index`` of ``document`` (hold the PDFium lock).

    Raises:
        ImageError: PDFium cannot load it (the PDF is damaged or cut short).
    """
    try:
        return document[index]
    except pdfium.PdfiumError as error:
        raise ImageError(
            msg(
                "{name}: page {page} of {pages} cannot be read "
                "(the PDF is damaged or cut short); upload the whole file again",
                name=label,
                page=index + 1,
                pages=len(document),
            )
        ) from error


def _text_of(page: pdfium.PdfPage) -> str:
    """The page's text layer as PDFium reads it (``FPDFText_GetBoundedText`` over the
    whole page), lines ending in ``\n``, trailing blanks removed (hold the lock)."""
    text_page = page.get_textpage()
    try:
        text = text_page.get_text_bounded()
    finally:
        text_page.close()
    lines = (line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"))
    return "\n".join(lines).strip()


def _sent(images: list[PreparedImage], label: str, reading: _Reading) -> MediaResult:
    """What the model reads of the pages taken, and the notice for people: which pages
    were read as text, which sent as pictures, which left out (and how to have them read)."""
    texts, pictures = sorted(reading.texts), sorted(reading.pictures)
    if texts and pictures:
        said = msg(
            "{name}: {text} of {pages} read as text, {pictures} sent as images (no text on them)",
            name=label,
            text=_pages(texts),
            pictures=_pages(pictures),
            pages=reading.pages,
        )
    elif texts:
        said = msg(
            "{name}: {text} of {pages} read as text",
            name=label,
            text=_pages(texts),
            pages=reading.pages,
        )
    else:
        said = msg(
            "{name}: {sent} of {pages} sent as images",
            name=label,
            sent=_pages(pictures),
            pages=reading.pages,
        )
    if reading.left_out:
        said = msg(
            "{sent}. Left out: {left}, for lack of room in this message; to have them read, "
            "send them as a PDF of their own.",
            sent=said,
            left=_pages(reading.left_out),
        )
    return MediaResult(images, _model_text(label, reading), [said])


def _model_text(label: str, reading: _Reading) -> str:
    """What the model reads about the PDF: a line ``Pages 1-3 of NAME`` when every page
    sent is a picture, else a heading and each page's text in order (a picture page
    named by its image)."""
    left = f" ({_page_list(reading.left_out)} not included)" if reading.left_out else ""
    if not reading.texts:
        whole = f" ({reading.pages} pages in all)" if reading.left_out else ""
        return f"{_page_list(sorted(reading.pictures)).capitalize()} of {label}{whole}"
    parts = [f"{label}, {reading.pages} pages{left}:"]
    for number in range(1, reading.pages + 1):
        if number in reading.texts:
            parts.append(f"--- page {number} ---\n{reading.texts[number]}")
        elif number in reading.pictures:
            parts.append(f"--- page {number}: the image {label} page {number} ---")
    return "\n\n".join(parts)
