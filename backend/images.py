"""Turn an uploaded file into an image Kimi-VL sees exactly as sent.

Kimi-VL's vision tower (MoonViT) cuts an image into 14x14-pixel patches and merges
2x2 patches into one language-model token. Its image processor (``rescale`` in the
model repo's ``image_processing_kimi_vl.py``) first scales an image down, keeping
the aspect ratio, when ``(W // 14) * (H // 14) > in_token_limit``, with
``scale = sqrt(in_token_limit / ((W // 14) * (H // 14)))`` and ``int()`` of the
scaled sides; then, with ``pad_input`` (true in the published configs), pads the
bottom and right with black to multiples of 28 px; a padded side of 512 patches or
more (7168 px) is an error ("Exceed pos emb"). vLLM counts the prompt tokens the
same way (``KimiVLProcessingInfo.get_num_image_tokens`` in
``vllm/model_executor/models/kimi_vl.py``): ``ceil(H / 28) * ceil(W / 28)`` after
that scaling. See :func:`image_tokens` and :func:`fit_to_budget`.

:func:`prepare_image` does the whole job for one upload: it refuses what is not a
usable image with :class:`backend.errors.ImageError` (one line, naming the file),
applies the EXIF orientation, puts transparent areas on white, scales the image to
the largest size the server will take as is (so the server never resamples it
again and the token count is known before sending), and encodes it as a base64
data URL: PNG for text-like content, JPEG for photos (see :func:`choose_format`).

Memory is bounded on purpose: Pillow's ``Image.MAX_IMAGE_PIXELS`` is set to
:data:`MAX_SOURCE_PIXELS` when this module is imported (a header claiming more
pixels is refused as a possible decompression bomb), and at most
:data:`MAX_DECODED_PIXELS` are ever decoded (JPEGs are decoded at a reduced DCT
scale when that is enough for the budget). Freed image memory is kept for reuse, up
to :data:`FREED_BLOCKS_KEPT` blocks of 16 MB.
"""

from __future__ import annotations

import io
import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import pillow_heif
import pybase64
from PIL import ExifTags, Image, JpegImagePlugin, UnidentifiedImageError, _imaging

from backend.errors import ImageError
from backend.i18n import msg

pillow_heif.register_heif_opener()  # HEIC/HEIF from phones; AVIF is built into Pillow

PATCH_SIZE: Final = 14
"""MoonViT patch side in pixels (``patch_size`` in Kimi-VL's preprocessor_config.json)."""

MERGE_KERNEL: Final = (2, 2)
"""Patches merged into one token, (height, width) (``merge_kernel_size``)."""

TOKEN_SIDE: Final = PATCH_SIZE * MERGE_KERNEL[0]
"""Pixels per token side (28): the processor pads each side up to a multiple of this."""

MAX_SIDE: Final = 7140
"""Largest side in pixels the processor accepts: it pads a side to a multiple of 28 and
refuses 512 patches (7168 px) or more, so the largest padded side is 255 * 28 = 7140."""

MIN_SIDE: Final = TOKEN_SIDE
"""Sides shorter than this are padded with white (not scaled) up to it: the token count
is the same (one token row or column), and 1-pixel-thin images crashed older vLLM."""

MAX_SOURCE_PIXELS: Final = 200_000_000
"""Largest width x height a file may declare (a 200-megapixel phone photo is the biggest
real one); more is refused as a possible decompression bomb. Set as Pillow's
``Image.MAX_IMAGE_PIXELS``."""

MAX_DECODED_PIXELS: Final = 64_000_000
"""Largest number of pixels decoded into memory (about 256 MB as RGBA). JPEGs bigger
than this are still accepted when a reduced DCT scale (1/2, 1/4, 1/8) fits under it."""

JPEG_QUALITY: Final = 80
"""JPEG quality for photos: the highest of the usual steps (95, 90, 85, 80) whose payload
is at most 1/8 of a large phone photo (the target we set for uploads). Measured by
``bench/bench_images.py`` on a 12-megapixel JPEG (quality 92, 3.0 MB) scaled to the
16384-patch budget: 1/9.6 at 80, 1/8.0 at 85 (just over), 1/6.0 at 90. Against 90,
quality 80 costs 1.5-2.4 dB PSNR (32.5-41.5 dB on the scikit-image photos and that
photo) for 33-37% fewer bytes, and reads the same: tesseract changes 19 of 209
characters of page.png at 80, 16-18 at 95 to 85, 31 at 50 (``--ocr``). Every turn
re-sends the conversation's images, so the bytes count on every request."""

PNG_COMPRESS_LEVEL: Final = 6
"""zlib level for PNG output (Pillow's default balance of size and speed)."""

PHOTO_RESAMPLE: Final = Image.Resampling.BILINEAR
"""Filter for images that will be sent as JPEG. Pillow's BILINEAR is antialiased (its
support grows with the reduction) and runs about 2.4x faster than LANCZOS (47 against
112 ms on one core); on a 12-megapixel photo scaled to 2071x1553 it differs from
LANCZOS by 49.9 dB PSNR, an error about seven times smaller (in mean square) than
JPEG quality 80 then adds (41.5 dB). BOX is faster still (34 ms) but differs by
44.4 dB and, keeping more aliasing, encodes 7% larger."""

TEXT_RESAMPLE: Final = Image.Resampling.LANCZOS
"""Filter for images that will be sent as PNG (text, lines): the sharpest of Pillow's."""

LOSSLESS_FORMATS: Final = frozenset({"PNG", "GIF", "BMP", "TIFF", "PPM", "ICO", "TGA"})
"""Source formats whose pixels are exact: candidates for PNG output."""

FLAT_TOP_COLOURS: Final = 16
FLAT_COVERAGE: Final = 0.5
"""An image is "flat" (screenshot, diagram, scanned text) when its 16 most frequent
colours cover at least half of its pixels; photos stay far below (measured on the
scikit-image photos: 0.01-0.13)."""

FREED_BLOCKS_KEPT: Final = 6
"""Freed 16 MB blocks Pillow keeps for reuse instead of returning them to the system
(Pillow's block allocator, ``PILLOW_BLOCKS_MAX``, which defaults to none). Preparing a
12-megapixel photo for the 16384-patch budget uses 6 (48 MB decoded, 38 MB resized);
keeping them spares every later large image about 21,000 page faults, a quarter of
its time (125 to 94 ms median on one core, ``bench/bench_images.py``), for up to
6 x 16 = 96 MB kept by the process (measured: about 80 MB more RSS after its first
large image). ``PILLOW_BLOCKS_MAX`` in the
environment, when set, wins."""

Image.MAX_IMAGE_PIXELS = MAX_SOURCE_PIXELS
if "PILLOW_BLOCKS_MAX" not in os.environ:
    # The call PIL.Image makes for the variable, which it reads only on first import.
    _imaging.set_blocks_max(FREED_BLOCKS_KEPT)


def release_kept_blocks() -> None:
    """Return the freed blocks Pillow keeps for reuse (:data:`FREED_BLOCKS_KEPT`) to the
    system; later images allocate anew (Pillow's ``clear_cache``)."""
    _imaging.clear_cache()


_TOO_MANY_PIXELS: Final = msg(
    "{megapixels} megapixels accepted (a possible decompression bomb)",
    megapixels=MAX_SOURCE_PIXELS // 1_000_000,
)

_EXIF_TRANSPOSE: Final = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_270,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_90,
}
"""EXIF Orientation values 2-8 and the transposition that makes the image upright (the
EXIF 2.3 table that ``ImageOps.exif_transpose`` also uses); 1 and invalid values: none."""


@dataclass(frozen=True, slots=True)
class PreparedImage:
    """An image ready to send to vLLM, with what the app shows and counts.

    Attributes:
        name: the uploaded file name (for messages).
        data: the data URL (``data:image/png;base64,...``, ``data:image/jpeg;base64,...``
            or, sent as uploaded, ``data:image/webp;base64,...``), or the file holding it
            once the chat's tab
            has closed (:meth:`spilled`); read it as :attr:`data_url`.
        width: pixels after scaling (what the server receives).
        height: pixels after scaling.
        tokens: Kimi-VL image tokens for ``width`` x ``height`` (:func:`image_tokens`).
        source_bytes: size of the uploaded file in bytes.
        notices: one-line remarks a person should see (e.g. only the first frame of an
            animation was used); empty when there is nothing to say.
        source: the uploaded file when the image goes as it came (:func:`_as_uploaded`):
            its bytes are the data URL's payload, so :meth:`spilled` links it rather than
            writing them again; None for an image made anew.
    """

    name: str
    data: str | Path
    width: int
    height: int
    tokens: int
    source_bytes: int
    notices: tuple[str, ...] = ()
    source: Path | None = None

    @property
    def data_url(self) -> str:
        """The data URL, from memory or from the file it was spilled to.

        Raises:
            OSError: a spilled file is gone (its chat's session has ended).
        """
        if isinstance(self.data, str):
            return self.data
        return data_url(*self.encoded())

    def encoded(self) -> tuple[str, bytes]:
        """(MIME type, the encoded image's bytes), from memory or from the spilled file.

        Raises:
            OSError: a spilled file is gone (its chat's session has ended).
        """
        if isinstance(self.data, str):
            return decode_data_url(self.data)
        return PREPARED_TYPES[self.data.suffix], self.data.read_bytes()

    def spilled(self, path: Path) -> PreparedImage:
        """This image no longer held in memory: its encoded bytes in the file ``path``
        with the suffix of its type (``.jpg``, ``.png``, ``.webp``), a hard link to
        :attr:`source` where it has one on the same file system (nothing decoded or
        written), else written (the same image if it already was spilled). Blocking
        file I/O: call it off the event loop.

        Raises:
            OSError: the file cannot be written.
        """
        if isinstance(self.data, Path):
            return self
        mime = self.data[len("data:") : self.data.index(";")]
        target = path.with_suffix(PREPARED_SUFFIXES[mime])
        if self.source is not None:
            try:
                os.link(self.source, target)
                return replace(self, data=target)
            except OSError:
                pass  # another file system, or the upload is gone: written below
        target.write_bytes(self.encoded()[1])
        return replace(self, data=target)

    def as_content_part(self) -> dict[str, Any]:
        """The OpenAI chat content part: ``{"type": "image_url", "image_url": {"url": ...}}``."""
        return {"type": "image_url", "image_url": {"url": self.data_url}}


PREPARED_SUFFIXES: Final = {"image/jpeg": ".jpg", "image/png": ".png", "image/webp": ".webp"}
"""The file suffix for each type a prepared image has (a spilled image's file, a stored
copy's object key); the suffix gives its type back (:data:`PREPARED_TYPES`)."""

PREPARED_TYPES: Final = {suffix: mime for mime, suffix in PREPARED_SUFFIXES.items()}


def data_url(mime: str, payload: bytes) -> str:
    """``data:<mime>;base64,...`` of ``payload``. pybase64's SIMD encoder straight to a
    ``str``: 1.0 ms of CPU for a 1.47 MB photo on the project's 2-core machine, against
    3.6 ms for ``base64.b64encode(...).decode()`` (docs/facts.md)."""
    return f"data:{mime};base64,{pybase64.b64encode_as_string(payload)}"


def decode_data_url(url: str) -> tuple[str, bytes]:
    """``data:image/png;base64,...`` -> (``"image/png"``, the encoded image's bytes).
    pybase64's SIMD decoder: 0.14 ms of CPU for a 1.47 MB photo's data URL on the
    project's 2-core machine, against 5.7 ms for ``base64.b64decode`` (docs/facts.md);
    a stored turn decodes its images' data URLs at each save.

    Raises:
        binascii.Error: the payload is not base64.
    """
    header, _, encoded = url.partition(",")
    payload = pybase64.b64decode(encoded, validate=True)
    return header.removeprefix("data:").split(";", 1)[0], payload


WEB_FORMATS: Final = frozenset({"JPEG", "PNG", "GIF", "WEBP"})
"""Image formats every current browser shows. Not among them: HEIC/HEIF (Chrome and
Firefox decode none), AVIF (Safari before 16, older Edge), TIFF (Safari only), BMP on
some phones' viewers, and CMYK JPEGs (decoded, but with wrong colours by some)."""


def shown_as_is(path: Path) -> bool:
    """Whether browsers show the image file at ``path`` as it is: a :data:`WEB_FORMATS`
    file that is not CMYK. Reads the header only (no pixels are decoded). False for a
    file Pillow cannot open (such an upload is refused before it is shown anyway)."""
    try:
        with Image.open(path) as image:
            return image.format in WEB_FORMATS and image.mode != "CMYK"
    except (OSError, ValueError, Image.DecompressionBombError):
        return False


def _patches(width: int, height: int) -> int:
    """Whole 14x14 patches, as the processor's budget test counts them."""
    return (width // PATCH_SIZE) * (height // PATCH_SIZE)


def _check_size(width: int, height: int, in_token_limit: int) -> None:
    if width < 1 or height < 1:
        raise ValueError(f"image size must be positive, got {width}x{height}")
    if in_token_limit < 1:
        raise ValueError(f"in_token_limit must be positive, got {in_token_limit}")


def image_tokens(width: int, height: int, in_token_limit: int) -> int:
    """Number of prompt tokens vLLM counts for a ``width`` x ``height`` image.

    Mirrors ``KimiVLProcessingInfo.get_num_image_tokens`` in vLLM's
    ``vllm/model_executor/models/kimi_vl.py``: if ``(W // 14) * (H // 14)`` exceeds
    ``in_token_limit`` both sides are multiplied by
    ``sqrt(in_token_limit / ((W // 14) * (H // 14)))`` and truncated to int; then
    ``tokens = ceil(H / 28) * ceil(W / 28)`` (the processor pads to multiples of 28).

    Args:
        width: image width in pixels (>= 1).
        height: image height in pixels (>= 1).
        in_token_limit: the served model's budget in 14x14 patches (4096 for
            Kimi-VL-A3B-Instruct, 16384 for Thinking-2506).

    Returns:
        The token count, >= 1. For sizes from :func:`fit_to_budget` it is at most
        about ``in_token_limit / 4`` plus one row and one column of padding.

    Raises:
        ValueError: a non-positive size or limit.
    """
    _check_size(width, height, in_token_limit)
    patches = _patches(width, height)
    if patches > in_token_limit:
        scale = math.sqrt(in_token_limit / patches)
        width, height = int(width * scale), int(height * scale)
    return math.ceil(height / TOKEN_SIDE) * math.ceil(width / TOKEN_SIDE)


def _fits(width: int, height: int, in_token_limit: int) -> bool:
    return max(width, height) <= MAX_SIDE and _patches(width, height) <= in_token_limit


def fit_to_budget(width: int, height: int, in_token_limit: int) -> tuple[int, int]:
    """The largest size with the same aspect ratio that the server takes as it is.

    "Takes as it is" means the processor will not rescale it, ``(W // 14) * (H // 14)
    <= in_token_limit``, and will not refuse it, no side above :data:`MAX_SIDE`. An
    image that already fits is returned unchanged (never upscaled). Otherwise the
    longer side is the largest integer for which the shorter side, rounded to
    keep the aspect ratio (at least 1 px), still fits: never smaller than needed.
    Unlike the processor's own single ``sqrt`` step, this never lands above the limit.

    Args:
        width: source width in pixels (>= 1).
        height: source height in pixels (>= 1).
        in_token_limit: budget in 14x14 patches.

    Returns:
        ``(width, height)`` in pixels, each between 1 and the source's.

    Raises:
        ValueError: a non-positive size or limit.
    """
    _check_size(width, height, in_token_limit)
    if _fits(width, height, in_token_limit):
        return width, height
    long_side, short_side = max(width, height), min(width, height)

    def sides(long_new: int) -> tuple[int, int]:
        short_new = max(1, round(short_side * long_new / long_side))
        return (long_new, short_new) if width >= height else (short_new, long_new)

    # Binary search: the shorter side grows with the longer, so fitting is monotonic.
    low, high = 1, min(long_side, MAX_SIDE)
    while low < high:
        middle = (low + high + 1) // 2
        if _fits(*sides(middle), in_token_limit):
            low = middle
        else:
            high = middle - 1
    return sides(low)


def choose_format(image: Image.Image, source_format: str | None) -> str:
    """``"PNG"`` for text-like content, ``"JPEG"`` for photos.

    PNG (lossless) when the source was lossless (:data:`LOSSLESS_FORMATS`) and the
    picture is grayscale (scans) or flat (:data:`FLAT_COVERAGE`: screenshots,
    diagrams); JPEG at :data:`JPEG_QUALITY` otherwise, including every lossy source
    (JPEG, WebP, HEIC, AVIF: their detail is already approximate, and PNG would be
    several times larger). Measured on page.png, a scan (``bench/bench_images.py
    --ocr``, tesseract 5.3): the PNG (43 KB) reads exactly as the original, while
    JPEG changes 16 to 19 of 209 recognised characters at qualities 95 to 75 (29 to
    16 KB), 31 at 50.

    Args:
        image: the flattened image, mode ``RGB`` or ``L``, any size.
        source_format: Pillow's format name of the upload (``Image.format``).
    """
    if source_format not in LOSSLESS_FORMATS:
        return "JPEG"
    if image.mode == "L":
        return "PNG"
    # Nearest-neighbour sampling keeps colours exact (other filters blend new ones).
    scale = min(1.0, 256 / max(image.size))
    sample = image.resize(
        (max(1, round(image.width * scale)), max(1, round(image.height * scale))),
        Image.Resampling.NEAREST,
    )
    pixels = sample.width * sample.height
    counts = sorted((count for count, _ in sample.getcolors(pixels) or []), reverse=True)
    return "PNG" if sum(counts[:FLAT_TOP_COLOURS]) >= FLAT_COVERAGE * pixels else "JPEG"


def _flatten(image: Image.Image) -> Image.Image:
    """Flatten to ``L`` (grayscale sources) or ``RGB``: transparency onto white.

    16-bit grayscale is scaled to 8 bits (Pillow's plain conversion clips at 255);
    CMYK and YCbCr become RGB. Returns ``image`` itself when nothing changes.
    """
    gray = image.mode in {"1", "L", "LA", "La", "I", "F"} or image.mode.startswith("I;16")
    if image.mode == "I" or image.mode.startswith("I;16"):
        image = image.convert("I").point(lambda value: value * (1 / 256)).convert("L")
    has_alpha = image.mode in {"RGBA", "LA", "PA", "RGBa", "La"} or "transparency" in image.info
    if has_alpha:
        canvas = Image.new("RGBA", image.size, (255, 255, 255, 255))
        canvas.alpha_composite(image.convert("RGBA"))
        image = canvas
    target = "L" if gray else "RGB"
    return image if image.mode == target else image.convert(target)


def _orientation(image: Image.Image) -> int | None:
    """The EXIF (or XMP) Orientation value; None when absent or unreadable."""
    try:
        value = image.getexif().get(ExifTags.Base.Orientation)
    except Exception:  # broken metadata must not cost the picture
        return None
    return value if isinstance(value, int) else None


def _pad_to_min_side(image: Image.Image) -> Image.Image:
    """Centre a too-thin image on a white canvas at least :data:`MIN_SIDE` px each way."""
    size = (max(image.width, MIN_SIDE), max(image.height, MIN_SIDE))
    canvas = Image.new(image.mode, size, "white")
    canvas.paste(image, ((size[0] - image.width) // 2, (size[1] - image.height) // 2))
    return canvas


def _encode(image: Image.Image, image_format: str) -> bytes:
    buffer = io.BytesIO()
    if image_format == "JPEG":
        image.save(buffer, "JPEG", quality=JPEG_QUALITY)
    else:
        image.save(buffer, "PNG", compress_level=PNG_COMPRESS_LEVEL)
    return buffer.getvalue()


def _unidentified_reason(path: Path) -> str:
    """Why Pillow could not identify a file, from its first bytes, for the message."""
    with path.open("rb") as file:
        head = file.read(1024).lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if head.startswith(b"%pdf-"):
        return msg("a PDF document, not an image (export the page as PNG or JPEG)")
    if head.startswith(b"<") and b"<svg" in head:
        return msg("an SVG drawing, which is not supported (export it as PNG)")
    if head.startswith(b"<") and b"<html" in head:
        return msg("an HTML page, not an image")
    return msg("not a picture, PDF or video the app can read (only those can be attached)")


def _first_frame_notice(image: Image.Image, label: str) -> tuple[str, ...]:
    """A notice when the file holds more frames or pages than the one sent."""
    if image.format == "MPO" or not getattr(image, "is_animated", False):
        return ()  # MPO: phone JPEGs whose extra pictures are previews or depth maps
    if image.format == "TIFF":
        return (msg("{name}: multi-page TIFF, only the first page is sent", name=label),)
    return (
        msg(
            "{name}: animated {format}, only the first frame is sent",
            name=label,
            format=image.format,
        ),
    )


def _decode(
    path: Path, label: str, in_token_limit: int
) -> tuple[Image.Image, str | None, int | None, tuple[str, ...]]:
    """Open, check and decode the first frame (JPEGs at a reduced scale when enough).

    Returns the loaded image (independent of the file, which is closed), Pillow's
    format name, the EXIF orientation and the notices.
    """
    with path.open("rb") as file:
        image = Image.open(file)
        width, height = image.size
        if width * height > MAX_SOURCE_PIXELS:
            raise ImageError(
                msg(
                    "{name}: {width}x{height} pixels is more than the {limit}",
                    name=label,
                    width=width,
                    height=height,
                    limit=_TOO_MANY_PIXELS,
                )
            )
        notices = _first_frame_notice(image, label)
        # JPEG only (a no-op elsewhere): decode at 1/2, 1/4 or 1/8 scale if still large enough.
        image.draft(None, fit_to_budget(width, height, in_token_limit))
        if image.width * image.height > MAX_DECODED_PIXELS:
            raise ImageError(
                msg(
                    "{name}: {width}x{height} pixels is too large to decode "
                    "(at most {megapixels} megapixels)",
                    name=label,
                    width=width,
                    height=height,
                    megapixels=MAX_DECODED_PIXELS // 1_000_000,
                )
            )
        image.load()
    return image, image.format, _orientation(image), notices


def prepare_image(
    path: str | Path,
    in_token_limit: int,
    name: str | None = None,
    *,
    max_bytes: int | None = None,
) -> PreparedImage:
    """Read an uploaded image file and make it model-ready.

    Pipeline: refuse files over ``max_bytes``; open with Pillow (HEIC through
    pillow-heif; declared size checked against :data:`MAX_SOURCE_PIXELS`; JPEGs
    decoded at a reduced DCT scale when enough); first frame or page only, with a
    notice; transparency composited onto white, 16-bit reduced to 8 bits, grayscale
    kept as one channel; format chosen (:func:`choose_format`); scaled to
    :func:`fit_to_budget` (:data:`TEXT_RESAMPLE` for PNG, :data:`PHOTO_RESAMPLE` for
    JPEG); EXIF orientation applied after scaling (the transposition
    ``ImageOps.exif_transpose`` would make, on fewer pixels); sides under 28 px
    padded with white, with a notice; encoded into a base64 data URL.

    This is synchronous, CPU-bound work (about 0.1 s for a 12-megapixel photo): call
    it off the event loop, e.g. ``await asyncio.to_thread(prepare_image, ...)``.

    Args:
        path: the uploaded file.
        in_token_limit: the served model's budget in 14x14 patches
            (``ModelFamily.in_token_limit``).
        name: the name the person gave the file (defaults to the path's name); used
            in every message.
        max_bytes: largest accepted file size in bytes; None: no limit here.

    Returns:
        The :class:`PreparedImage`; its ``tokens`` is what vLLM will count.

    Raises:
        ImageError: the file is missing, empty, too big, not an image Pillow can read
            (with the likely reason: PDF, SVG, HTML), truncated or corrupt, or has too
            many pixels. The message is one line starting with the file name, e.g.
            ``"cat.jpg: not a picture, PDF or video the app can read (only those can be
            attached)"``.
        ValueError: ``in_token_limit`` is not positive (a programming error).
    """
    if in_token_limit < 1:
        raise ValueError(f"in_token_limit must be positive, got {in_token_limit}")
    path = Path(path)
    label = name or path.name
    source_bytes = upload_size(path, label, max_bytes)
    unchanged = _as_uploaded(path, label, in_token_limit, source_bytes)
    if unchanged is not None:
        return unchanged
    image, source_format, orientation, notices = _flattened(path, label, in_token_limit)
    image_format = choose_format(image, source_format)
    size = fit_to_budget(image.width, image.height, in_token_limit)
    if size != image.size:
        resample = TEXT_RESAMPLE if image_format == "PNG" else PHOTO_RESAMPLE
        image = image.resize(size, resample, reducing_gap=3.0)
    transpose = _EXIF_TRANSPOSE.get(orientation or 1)
    if transpose is not None:
        image = image.transpose(transpose)
    return encode_image(image, image_format, label, in_token_limit, source_bytes, notices)


def _flattened(
    path: Path, label: str, in_token_limit: int
) -> tuple[Image.Image, str | None, int | None, tuple[str, ...]]:
    """:func:`_decode` then :func:`_flatten`, every failure said as an :class:`ImageError`
    naming the file: the decoded image, its source format, EXIF orientation and notices."""
    try:
        decoded, source_format, orientation, notices = _decode(path, label, in_token_limit)
        return _flatten(decoded), source_format, orientation, notices
    except ImageError:
        raise
    except UnidentifiedImageError as error:
        raise ImageError(
            msg("{name}: {reason}", name=label, reason=_unidentified_reason(path))
        ) from error
    except Image.DecompressionBombError as error:
        raise ImageError(
            msg("{name}: more than the {limit}", name=label, limit=_TOO_MANY_PIXELS)
        ) from error
    except OSError as error:
        if error.filename is not None:  # the file itself, not its content
            raise ImageError(
                msg("{name}: cannot read the file ({error})", name=label, error=error.strerror)
            ) from error
        raise ImageError(msg("{name}: the image is damaged", name=label)) from error
    except Exception as error:  # any decoder failure is the file's fault (app.log: its words)
        raise ImageError(msg("{name}: the image is damaged or unsupported", name=label)) from error


PASSTHROUGH_MAX_BYTES_PER_PIXEL: Final = {"JPEG": 0.35, "WEBP": 0.35, "PNG": 1.0}
"""Densest upload sent as it is, in bytes per pixel, whatever its quality. Our JPEG
at quality 80 of a photo takes about 0.2-0.3 (the scikit-image photos and the 12 MP
photo of bench/bench_images.py): a denser WebP, or a denser JPEG saved above
:data:`PASSTHROUGH_MAX_JPEG_QUALITY` (a phone's quality 95), is re-encoded smaller.
A PNG above 1 byte a pixel is a photo, which goes smaller as JPEG; screenshots and
scans take 0.1-0.6."""

PASSTHROUGH_MAX_JPEG_QUALITY: Final = 89
"""Highest estimated quality (:func:`jpeg_quality`) of a JPEG sent as uploaded though
denser than :data:`PASSTHROUGH_MAX_BYTES_PER_PIXEL` (up to
:data:`PASSTHROUGH_JPEG_CEILING`, and with its colour subsampled 4:2:0, as Pillow and
most cameras save it; full-resolution colour re-encodes to far fewer bytes).
Re-encoding at :data:`JPEG_QUALITY` saves little below 90 and adds a second
generation of loss, for about 40 ms of a core per 3 megapixels (decode and encode).
Bytes after re-encoding at 80, against the file (measured on ``tests/data/rocket.jpg``
and ``bench.media.make_photo``'s photo, each saved at the quality named): 91-92 % at
85, 80-84 % at 88, 77-81 % at 89; 67-70 % at 90, 57-63 % at 92, 47-53 % at 95, 32-40 %
at 98."""

PASSTHROUGH_JPEG_CEILING: Final = 0.6
"""Densest JPEG, in bytes per pixel, sent as uploaded on account of its quality. A
photo at quality 89 takes 0.18-0.50 (``tests/data/rocket.jpg``, the bench photo); more
is data beyond the picture (bytes appended after its end, large metadata segments),
which every later turn of the chat would send again."""

_STANDARD_LUMINANCE_TABLE_SUM: Final = 3688
"""The sum of the 64 entries of the JPEG standard's example luminance quantization
table (ITU-T T.81, Annex K, Table K.1), which libjpeg scales by its quality setting."""


def jpeg_quality(image: Image.Image) -> float | None:
    """The libjpeg quality (about 1-100) a JPEG was saved at, estimated from its
    luminance quantization table; None for any other image or a JPEG without one.

    libjpeg (``jpeg_quality_scaling`` in its ``jcparam.c``) scales the standard table
    by ``5000 / quality`` percent below quality 50 and ``200 - 2 * quality`` from 50
    up; the table's sum against :data:`_STANDARD_LUMINANCE_TABLE_SUM` gives that
    percentage back, within half a step for libjpeg's and Pillow's files; for encoders
    with their own tables (cameras, phones) an estimate of the same scale. Entries clamp at 1 and
    (baseline) at 255, so qualities from about 98 up read as 98-99 and those under
    about 20 read high (10 as 15).
    """
    tables = getattr(image, "quantization", None)
    if not tables or 0 not in tables:
        return None
    luminance: list[int] = list(tables[0])
    percent = 100 * sum(luminance) / _STANDARD_LUMINANCE_TABLE_SUM
    return (200 - percent) / 2 if percent <= 100 else 5000 / percent


def _too_dense(image: Image.Image, kind: str, source_bytes: int) -> bool:
    """Whether re-encoding would make this upload notably smaller
    (:data:`PASSTHROUGH_MAX_BYTES_PER_PIXEL`; for a JPEG, also
    :data:`PASSTHROUGH_MAX_JPEG_QUALITY` and :data:`PASSTHROUGH_JPEG_CEILING`)."""
    pixels = image.width * image.height
    if source_bytes <= PASSTHROUGH_MAX_BYTES_PER_PIXEL[kind] * pixels:
        return False
    if kind != "JPEG" or source_bytes > PASSTHROUGH_JPEG_CEILING * pixels:
        return True
    quality = jpeg_quality(image)
    subsampled = image.mode == "L" or JpegImagePlugin.get_sampling(image) == 2  # 4:2:0
    return quality is None or quality > PASSTHROUGH_MAX_JPEG_QUALITY or not subsampled


_MARKER_AFTER_SCAN: Final = re.compile(rb"\xff([^\x00\xd0-\xd7\xff])")
"""In a JPEG's entropy-coded data, a marker: 0xFF followed by a byte that is neither a
stuffed zero, a restart marker RST0-RST7 nor a fill byte 0xFF (ITU T.81, B.1.1.2 and
B.1.1.5). Written without a repeat, so ``re`` searches for its literal first byte (1 ms
over a 1.5 MB photo, against 18 ms with ``\xff+``)."""


def _jpeg_scan_start(data: bytes) -> int | None:
    """Where the entropy-coded data of ``data``'s first scan starts: the segments from
    SOI walked by their lengths (fill bytes skipped) to the end of the first SOS header
    (ITU T.81, B.2); None when they do not lead there."""
    if data[:2] != b"\xff\xd8":
        return None
    at = 2
    while at + 4 <= len(data) and data[at] == 0xFF:
        marker = data[at + 1]
        if marker == 0xFF:  # a fill byte before the marker
            at += 1
            continue
        at += 2 + int.from_bytes(data[at + 2 : at + 4], "big")
        if marker == 0xDA:
            return at if at <= len(data) else None
    return None


def _jpeg_whole(data: bytes) -> bool:
    """Whether ``data`` (a JPEG) is whole: libjpeg reads all of its headers, and its one
    scan runs to the end-of-image marker.

    The headers (tables, frame, scan header: everything before the first scan's data) are
    decoded by Pillow's libjpeg with an EOI right after them, at 1/8 scale: that refuses
    what libjpeg refuses in them (a broken Huffman or quantisation table, a hierarchical
    or lossless frame, a scan naming a missing component or table) in about 1 ms, without
    reading the scan. The scan itself must meet EOI as its first marker
    (:data:`_MARKER_AFTER_SCAN`): False for a truncated file, one spliced mid-scan, or a
    second scan (a baseline file with non-interleaved components: the full path decodes
    those). Not checked: the entropy-coded bytes themselves, which libjpeg decodes with
    warnings rather than errors anyway. Bytes after EOI (a camera's trailer) are left
    alone, as decoders do.
    """
    scan = _jpeg_scan_start(data)
    if scan is None:
        return False
    found = _MARKER_AFTER_SCAN.search(data, scan)
    if found is None or found.group(1) != b"\xd9":
        return False
    try:
        with Image.open(io.BytesIO(data[:scan] + b"\xff\xd9")) as headers:
            headers.draft(None, (max(1, headers.width // 8), max(1, headers.height // 8)))
            headers.load()
    except Exception:  # whatever libjpeg refuses: the full path names it
        return False
    return True


def _as_uploaded(
    path: Path, label: str, in_token_limit: int, source_bytes: int
) -> PreparedImage | None:
    """The upload itself, when it already is what the model should get; else None.

    That is a baseline JPEG, a PNG or a WebP, one frame, 8-bit RGB or grey with no
    alpha, no EXIF rotation, within the patch budget and at least
    :data:`MIN_SIDE` a side, and not one that re-encoding would make notably smaller
    (:func:`_too_dense`). A PNG or WebP is decoded once to prove the whole file is
    readable; a JPEG is checked by :func:`_jpeg_whole` (its headers decoded, its one scan
    running to the end-of-image marker), 2-3 ms of CPU for a 1.5 MB photo on the
    project's 2-core machine, where even a 1/8-scale decode of the whole file reads every
    entropy-coded byte (21 ms; docs/facts.md). Anything odd (a damaged file included)
    returns None and takes the full path, which decodes it and says what is wrong.
    """
    try:
        with Image.open(path) as image:
            kind = image.format or ""
            width, height = image.size
            if (
                kind not in PASSTHROUGH_MAX_BYTES_PER_PIXEL
                or image.mode not in ("RGB", "L")
                or getattr(image, "n_frames", 1) != 1
                or image.info.get("progressive")
                or image.info.get("progression")
                or "transparency" in image.info
                or _orientation(image) not in (None, 1)
                or min(width, height) < MIN_SIDE
                or fit_to_budget(width, height, in_token_limit) != (width, height)
                or _too_dense(image, kind, source_bytes)
            ):
                return None
            if kind != "JPEG":
                image.load()
            data = path.read_bytes()
    except Exception:  # the full path reads it again and names the problem
        return None
    if kind == "JPEG" and not _jpeg_whole(data):
        return None
    mime = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp"}[kind]
    return PreparedImage(
        name=label,
        data=data_url(mime, data),
        width=width,
        height=height,
        tokens=image_tokens(width, height, in_token_limit),
        source_bytes=source_bytes,
        source=path,
    )


def upload_size(path: Path, label: str, max_bytes: int | None) -> int:
    """The size of an uploaded file in bytes, refused when empty, too big or unreadable.

    Args:
        path: the uploaded file.
        label: the file's name for messages.
        max_bytes: largest accepted size in bytes; None: no limit.

    Raises:
        ImageError: the file is missing or unreadable, empty, or over ``max_bytes``.
    """
    try:
        source_bytes = path.stat().st_size
    except OSError as error:
        raise ImageError(
            msg("{name}: cannot read the file ({error})", name=label, error=error.strerror)
        ) from error
    if source_bytes == 0:
        raise ImageError(msg("{name}: the file is empty (0 bytes)", name=label))
    if max_bytes is not None and source_bytes > max_bytes:
        raise ImageError(
            msg(
                "{name}: {size:.1f} MB is over the {limit:g} MB limit for one file",
                name=label,
                size=source_bytes / 1e6,
                limit=max_bytes / 1e6,
            )
        )
    return source_bytes


def encode_image(
    image: Image.Image,
    image_format: str,
    name: str,
    in_token_limit: int,
    source_bytes: int,
    notices: tuple[str, ...] = (),
) -> PreparedImage:
    """Encode an image already scaled to the budget into a :class:`PreparedImage`.

    Sides under :data:`MIN_SIDE` are padded with white (with a notice); the image is
    encoded as ``image_format`` (PNG at :data:`PNG_COMPRESS_LEVEL` or JPEG at
    :data:`JPEG_QUALITY`) into a base64 data URL, and its tokens are counted.

    Args:
        image: mode ``RGB`` or ``L``, already at its final size (e.g. from
            :func:`fit_to_budget`; a larger one is counted as the server would scale it).
        image_format: ``"PNG"`` or ``"JPEG"`` (see :func:`choose_format`).
        name: what messages call it (a file name, or e.g. ``"clip.mp4 @ 00:03.2"``).
        in_token_limit: the served model's budget in 14x14 patches.
        source_bytes: bytes of the upload it came from (for statistics).
        notices: remarks to carry; the padding notice is added to them.
    """
    if min(image.size) < MIN_SIDE:
        notices += (
            msg(
                "{name}: only {width}x{height} pixels, "
                "padded with white to at least {min_side} px per side",
                name=name,
                width=image.width,
                height=image.height,
                min_side=MIN_SIDE,
            ),
        )
        image = _pad_to_min_side(image)
    payload = _encode(image, image_format)
    mime = "image/png" if image_format == "PNG" else "image/jpeg"
    return PreparedImage(
        name=name,
        data=data_url(mime, payload),
        width=image.width,
        height=image.height,
        tokens=image_tokens(image.width, image.height, in_token_limit),
        source_bytes=source_bytes,
        notices=notices,
    )
