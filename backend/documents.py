"""A PDF upload as page images, rendered with pypdfium2 (PDFium) at the model's budget.

Each page is rendered directly at the size the model takes as is (:func:`page_pixels`:
the page at :data:`MAX_RENDER_DPI` scaled by :func:`backend.images.fit_to_budget`
for the profile's ``in_token_limit``), not rendered large and shrunk. Pages are
taken from the first on, as many as the message's budget allows
(:class:`backend.media.MediaBudget`: image slots and tokens left); a notice says
which pages were sent and which were left out, and the line ``Pages 1-4 of
report.pdf (12 pages in all)`` tells the model what it sees.

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
from pathlib import Path
from typing import Final

import pypdfium2 as pdfium
from PIL import Image, ImageChops

from backend.conversation import IMAGE_OVERHEAD_TOKENS
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
    reason = str(error).rstrip(".")
    return ImageError(
        msg("{name}: the PDF is damaged or unsupported ({error})", name=label, error=reason)
    )


def _page_range(first: int, last: int) -> str:
    """English, for the line the model reads (``"page 1"``, ``"pages 1-3"``)."""
    return f"page {first}" if first == last else f"pages {first}-{last}"


def _pages(first: int, last: int) -> str:
    """The same range, for people (translated where it is shown)."""
    if first == last:
        return msg("page {first}", first=first)
    return msg("pages {first}-{last}", first=first, last=last)


def prepare_pdf(path: str | Path, budget: MediaBudget, name: str | None = None) -> MediaResult:
    """Render the first pages of a PDF upload that fit ``budget`` as images.

    Pages are taken in order while an image slot is left and the page's tokens
    (plus the chat template's per-image overhead) fit the tokens left; the first
    page that does not fit ends the run. Each page is named ``"NAME page N"``.

    Synchronous and CPU-bound (about 0.1-0.3 s a page at the 16,384-patch budget,
    most of it PNG encoding), and serialised across threads by the PDFium lock:
    run it in a worker thread.

    Args:
        path: the uploaded file.
        budget: image slots, tokens and the model's per-image budget left for it.
        name: the name the person gave the file (defaults to the path's name).

    Returns:
        The page images, the ``Pages ... of NAME`` line and a notice saying which
        pages were sent and which were left out.

    Raises:
        ImageError: too big, damaged or not a PDF, cut short, password-protected,
            no pages, a page within the budget PDFium cannot load, or not even the
            first page fits the budget; one line naming the file.
    """
    path = Path(path)
    label = name or path.name
    source_bytes = upload_size(path, label, budget.max_bytes)
    rendered, pages, cost = _render_pages(path, label, budget)
    # Encoding (most of the time) needs no PDFium: outside the lock.
    images = [
        encode_image(
            page_image,
            choose_format(page_image, "PNG"),
            f"{label} page {number}",
            budget.in_token_limit,
            source_bytes,
        )
        for number, page_image in enumerate(map(_without_colour, rendered), start=1)
    ]
    if pages == 0:
        raise ImageError(msg("{name}: the PDF has no pages", name=label))
    if not images:
        raise ImageError(
            msg(
                "{name}: not used: no image slot is left in this message for even its first page",
                name=label,
            )
            if budget.images < 1
            else msg(
                "{name}: not used: too few tokens are left in this message for even its first page",
                name=label,
            )
        )
    return _sent(images, label, pages, budget, cost)


def _render_pages(
    path: Path, label: str, budget: MediaBudget
) -> tuple[list[Image.Image], int, int]:
    """Render the first pages of the PDF that fit ``budget``, under the PDFium lock.

    Returns the rendered pages, the document's page count, and the tokens of the
    last page weighed (the first that did not fit, if one did not).

    Raises:
        ImageError: the PDF cannot be opened, or a page within the budget not loaded.
    """
    rendered: list[Image.Image] = []
    cost = 0
    with _PDFIUM_LOCK:
        try:
            document = pdfium.PdfDocument(path)
        except pdfium.PdfiumError as error:
            raise _open_failure(path, label, error) from error
        try:
            pages = len(document)
            tokens_left = budget.tokens
            for index in range(min(pages, budget.images)):
                page_image, cost = _render_page(document, index, label, budget, tokens_left)
                if page_image is None:
                    break
                rendered.append(page_image)
                tokens_left -= cost
        except pdfium.PdfiumError as error:
            reason = str(error).rstrip(".")
            raise ImageError(
                msg("{name}: the PDF is damaged ({error})", name=label, error=reason)
            ) from error
        finally:
            document.close()
    return rendered, pages, cost


def _render_page(
    document: pdfium.PdfDocument, index: int, label: str, budget: MediaBudget, tokens_left: int
) -> tuple[Image.Image | None, int]:
    """Page ``index`` rendered at the budget and its tokens, or None (and its tokens) when
    it does not fit in ``tokens_left``. Hold the PDFium lock.

    Raises:
        ImageError: PDFium cannot load the page, or it has no size.
    """
    try:
        page = document[index]
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
    try:
        width_pt, height_pt = page.get_size()
        if width_pt <= 0 or height_pt <= 0:
            raise ImageError(msg("{name}: page {page} has no size", name=label, page=index + 1))
        size = page_pixels(width_pt, height_pt, budget.in_token_limit)
        cost = image_tokens(*size, budget.in_token_limit) + IMAGE_OVERHEAD_TOKENS
        return (_render(page, size) if cost <= tokens_left else None), cost
    finally:
        page.close()


def _sent(
    images: list[PreparedImage], label: str, pages: int, budget: MediaBudget, cost: int
) -> MediaResult:
    """The pages sent, the line the model reads about them, and the notice for people
    (with why the others were left out: image slots, or tokens at ``cost`` a page)."""
    sent = len(images)
    text = f"{_page_range(1, sent).capitalize()} of {label}"
    notice: str = msg(
        "{name}: {sent} of {pages} sent as images", name=label, sent=_pages(1, sent), pages=pages
    )
    if sent < pages:
        limit = (
            msg("at most {count} more images fit in this message", count=budget.images)
            if sent == budget.images
            else msg(
                "{tokens} tokens were left for pictures in this message, about {cost} per page",
                tokens=budget.tokens,
                cost=cost,
            )
        )
        text += f" ({pages} pages in all)"
        notice = msg(
            "{name}: {sent} of {pages} sent as images; {left} left out ({limit})",
            name=label,
            sent=_pages(1, sent),
            pages=pages,
            left=_pages(sent + 1, pages),
            limit=limit,
        )
    return MediaResult(images, text, [notice])
