"""Upload kinds as data: how each is recognised, prepared and named; the one place to add one.

An :class:`UploadKind` gives its sniffer (the file's first bytes, never its name or the
type the browser claims), its preparer (a PDF's pages, a video's frames; none for an
image, which is prepared as it is attached, :mod:`backend.images`), the media types it
accepts and the word people read for it. The judging of an attached file
(:mod:`backend.chat`), the preparation of a message's uploads (:mod:`backend.uploads`),
the drop zone's hint (``ui/bridge.py``) and docs/features.md read :data:`KINDS`;
``tests/test_layers.py`` fails when another module names a kind's media types. Adding a
kind is its module (the preparer), one entry here and its tests.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from babel.lists import format_list

from backend.i18n import Message, Translator, msg
from backend.media import MediaBudget, MediaResult

SNIFF_BYTES: Final = 1024
"""Bytes of a file its sniffers see (where PDF readers look for ``%PDF-``, ISO 32000-1
annex H)."""

Sniffer = Callable[[bytes], bool]
"""True if a file's first :data:`SNIFF_BYTES` bytes are of the kind."""


@dataclass(frozen=True, slots=True)
class UploadKind:
    """One kind of upload.

    Attributes:
        name: its name in logs and tests (``"image"``).
        label: what people call several of them, for the drop zone's hint.
        types: the media types it accepts (``application/pdf``), for the docs.
        sniff: tells the kind from a file's first bytes.
        preparer: ``"module:function"`` making its pictures, ``(path, budget, name) ->
            MediaResult``, imported on the first such upload (pypdfium2 and PyAV cost
            about 0.15 s of CPU the app's start does without,
            tests/test_startup_imports.py); None for an image, prepared one by one as it
            is attached.
    """

    name: str
    label: Message
    types: tuple[str, ...]
    sniff: Sniffer
    preparer: str | None = None

    @property
    def prepared_early(self) -> bool:
        """True if it is prepared as it is attached (its budget is the model's per image),
        not with its message (pages and frames share what the message leaves)."""
        return self.preparer is None

    def prepare(self, path: Path, budget: MediaBudget, name: str) -> MediaResult:
        """Its pictures within ``budget`` (for a media worker).

        Raises:
            ImageError: as its preparer does.
            TypeError: an image kind, prepared by :func:`backend.images.prepare_image`.
        """
        if self.preparer is None:
            raise TypeError(f"{self.name} uploads are prepared as images, one by one")
        module, function = self.preparer.split(":")
        prepared: Callable[[Path, MediaBudget, str], MediaResult] = getattr(
            importlib.import_module(module), function
        )
        return prepared(path, budget, name)


_ISO_IMAGE_BRANDS: Final = frozenset(
    {b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"mif1", b"msf1", b"avif", b"avis"}
)
"""ISO base media ``ftyp`` brands of still images (HEIF/HEIC and AVIF, ISO/IEC 23008-12
and the AV1 image format spec): these files share MP4's container and are images."""

_EBML_MAGIC: Final = b"\x1a\x45\xdf\xa3"
"""First bytes of a Matroska or WebM file (EBML header, RFC 9559)."""


def _is_pdf(head: bytes) -> bool:
    """``%PDF-`` within the first 1024 bytes (ISO 32000-1 annex H)."""
    return b"%PDF-" in head


def _is_video(head: bytes) -> bool:
    """An ISO base media file (MP4, M4V, MOV, 3GP: ``ftyp`` at byte 4) whose major brand
    is not a still-image one, or an EBML file (WebM, Matroska)."""
    iso_video = head[4:8] == b"ftyp" and head[8:12] not in _ISO_IMAGE_BRANDS
    return iso_video or head.startswith(_EBML_MAGIC)


def _anything(head: bytes) -> bool:
    """Everything else, unreadable files included: the image decoder says what is wrong."""
    return True


PDF = UploadKind("pdf", msg("PDFs"), ("application/pdf",), _is_pdf, "backend.documents:prepare_pdf")
VIDEO = UploadKind(
    "video",
    msg("videos"),
    ("video/mp4", "video/quicktime", "video/webm", "video/x-matroska"),
    _is_video,
    "backend.video:prepare_video",
)
IMAGE = UploadKind("image", msg("images"), ("image/*",), _anything)

KINDS: Final = (IMAGE, PDF, VIDEO)
"""Every kind, in the order people read them; sniffed in :data:`SNIFF_ORDER`."""
SNIFF_ORDER: Final = (PDF, VIDEO, IMAGE)
"""The catch-all last."""


def sniff_kind(path: Path) -> UploadKind:
    """The kind of the file at ``path``, from its first :data:`SNIFF_BYTES` bytes; an
    unreadable file is :data:`IMAGE` (the image decoder then says what is wrong)."""
    try:
        with path.open("rb") as file:
            head = file.read(SNIFF_BYTES)
    except OSError:
        return IMAGE
    return next(kind for kind in SNIFF_ORDER if kind.sniff(head))


def kinds_phrase(tr: Translator) -> str:
    """Every kind's label in ``tr``'s language, as a list joined with "or" (CLDR's list
    patterns through Babel: "images, PDFs, or videos", "图片、PDF或视频")."""
    labels = [tr(kind.label) for kind in KINDS]
    return format_list(labels, style="or", locale=tr.locale.replace("-", "_"))


def drop_hint(tr: Translator) -> str:
    """The drop zone's hint in ``tr``'s language, naming every kind."""
    return tr(msg("Drop {kinds} here to attach them", kinds=kinds_phrase(tr)))
