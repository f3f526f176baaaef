"""Tests of backend.images on real photos (tests/data, from scikit-image) and made files."""

from __future__ import annotations

import base64
import binascii
import io
import math
import os
import random
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import ExifTags, Image, ImageChops, ImageFilter, ImageStat

from backend.errors import ImageError
from backend.images import (
    FREED_BLOCKS_KEPT,
    MAX_SIDE,
    PreparedImage,
    decode_data_url,
    fit_to_budget,
    image_tokens,
    jpeg_quality,
    prepare_image,
    shown_as_is,
)
from tests.media import one_line_naming

DATA = Path(__file__).parent / "data"
PHOTOS = ["astronaut.png", "chelsea.png", "rocket.jpg", "page.png", "coffee.png"]
PHOTO_TOKENS = {  # ceil(W/28) * ceil(H/28): every photo fits both budgets (<= 36*36 patches)
    "astronaut.png": 19 * 19,  # 512x512: 28*18 = 504 < 512
    "chelsea.png": 17 * 11,  # 451x300: 28*16 = 448 < 451, 28*10 = 280 < 300
    "rocket.jpg": 23 * 16,  # 640x427: 28*22 = 616 < 640, 28*15 = 420 < 427
    "page.png": 14 * 7,  # 384x191: 28*13 = 364 < 384, 28*6 = 168 < 191
    "coffee.png": 22 * 15,  # 600x400: 28*21 = 588 < 600, 28*14 = 392 < 400
}
LIMITS = [4096, 16384]  # Kimi-VL-A3B-Instruct, Kimi-VL-A3B-Thinking-2506


def mime(prepared: PreparedImage) -> str:
    """The media type its data URL names (``image/jpeg`` ...)."""
    return decode_data_url(prepared.data_url)[0]


def decode(prepared: PreparedImage) -> Image.Image:
    """The image inside a data URL, loaded."""
    header, encoded = prepared.data_url.split(",", 1)
    assert header in {"data:image/png;base64", "data:image/jpeg;base64", "data:image/webp;base64"}
    image = Image.open(io.BytesIO(base64.b64decode(encoded, validate=True)))
    image.load()
    return image


def mean_difference(first: Image.Image, second: Image.Image) -> float:
    """Mean absolute per-channel difference of two same-size images, 0-255."""
    difference = ImageChops.difference(first.convert("RGB"), second.convert("RGB"))
    return sum(ImageStat.Stat(difference).mean) / 3


JPEG_ERROR = 5
"""Bound on mean_difference after the app's JPEG round trip at JPEG_QUALITY (measured
2.3-3.7 on the scikit-image photos at quality 80); a mirrored photo differs by 24-86."""


def photo(name: str) -> Image.Image:
    image = Image.open(DATA / name)
    image.load()
    return image


@pytest.fixture
def save(tmp_path: Path) -> Callable[..., Path]:
    """Save a Pillow image (or raw bytes) under tmp_path and return the path."""

    def _save(name: str, content: Image.Image | bytes, **params: Any) -> Path:
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            content.save(path, **params)
        return path

    return _save


# --- token formula and budget -------------------------------------------------------


# Expected values are vLLM's arithmetic (KimiVLProcessingInfo.get_num_image_tokens in
# vllm/model_executor/models/kimi_vl.py) worked by hand: if (W//14)*(H//14) > limit, both
# sides become int(side * sqrt(limit / patches)); then tokens = ceil(H/28) * ceil(W/28).
@pytest.mark.parametrize(
    ("width", "height", "limit", "tokens"),
    [
        (1, 1, 4096, 1),  # padded to one 28x28 token
        (28, 28, 4096, 1),
        (29, 28, 4096, 2),  # one pixel more pads a second token column
        (896, 896, 4096, 32 * 32),  # exactly 64x64 patches: no scaling
        (1792, 1792, 16384, 64 * 64),  # Thinking-2506's "about 1792x1792"
        # 137*77 = 10549 patches <= 16384; 28*68 = 1904 < 1920, 28*38 = 1064 < 1080
        (1920, 1080, 16384, 69 * 39),
        # 10549 > 4096: sqrt(4096/10549) = 0.62312; 1920*0.62312 = 1196.4 -> 1196,
        # 1080*0.62312 = 672.97 -> 672; ceil(1196/28) = 43 (28*42 = 1176), 672 = 28*24
        (1920, 1080, 4096, 43 * 24),
        # 45*30 = 1350 patches fit both budgets; 28*22 = 616 < 640, 28*15 = 420 < 427
        (640, 427, 16384, 23 * 16),
        (640, 427, 4096, 23 * 16),
        # 142*107 = 15194 patches <= 16384; 28*71 = 1988 < 2000, 28*53 = 1484 < 1500
        (2000, 1500, 16384, 72 * 54),
        # 15194 > 4096: sqrt(4096/15194) = 0.51921; 2000*0.51921 = 1038.4 -> 1038,
        # 1500*0.51921 = 778.8 -> 778; ceil(1038/28) = 38 (28*37 = 1036), ceil(778/28) = 28
        (2000, 1500, 4096, 38 * 28),
        # A 1-pixel strip: 0 * 357 = 0 patches, never scaled; ceil(5000/28) = 179 (28*178 = 4984)
        (1, 5000, 4096, 1 * 179),
        (1, 5000, 16384, 1 * 179),
        # 73*73 patches > 4096: scaled by sqrt(4096/5329) to 897x897, ceil(897/28)=33
        (1024, 1024, 4096, 33 * 33),
        # 285*214 patches: vLLM's single sqrt step gives 2073x1554 -> 75*56
        (4000, 3000, 16384, 75 * 56),
    ],
)
def test_image_tokens_matches_vllm_formula(
    width: int, height: int, limit: int, tokens: int
) -> None:
    assert image_tokens(width, height, limit) == tokens


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize(
    ("width", "height"),
    [
        (4000, 3000),
        (3000, 4000),
        (12000, 9000),
        (1920, 1080),
        (5000, 5000),
        (8000, 600),
        (641, 6411),
        (1, 5000),
        (30, 100_000),
        (1000, 1000),
        (512, 512),
    ],
)
def test_fit_to_budget_is_the_largest_fitting_size_with_the_same_aspect(
    width: int, height: int, limit: int
) -> None:
    fitted_width, fitted_height = fit_to_budget(width, height, limit)
    # Fits: the server will neither rescale nor refuse it.
    assert (fitted_width // 14) * (fitted_height // 14) <= limit
    assert max(fitted_width, fitted_height) <= MAX_SIDE
    # Never upscaled; unchanged when it already fits.
    assert fitted_width <= width and fitted_height <= height
    if (width // 14) * (height // 14) <= limit and max(width, height) <= MAX_SIDE:
        assert (fitted_width, fitted_height) == (width, height)
    # Aspect kept to within the rounding of the shorter side.
    if width >= height:
        assert abs(fitted_height - height * fitted_width / width) <= 0.5 or fitted_height == 1
    else:
        assert abs(fitted_width - width * fitted_height / height) <= 0.5 or fitted_width == 1
    # Largest: one pixel more on the longer side no longer fits (or would upscale).
    longer = max(fitted_width, fitted_height)
    if longer < max(width, height):
        scale = (longer + 1) / max(width, height)
        grown = (
            (longer + 1, max(1, round(height * scale)))
            if width >= height
            else (max(1, round(width * scale)), longer + 1)
        )
        assert (grown[0] // 14) * (grown[1] // 14) > limit or max(grown) > MAX_SIDE
    # Tokens: a quarter of the patches plus at most one padded row and column.
    tokens = image_tokens(fitted_width, fitted_height, limit)
    assert tokens <= limit // 4 + math.ceil(fitted_width / 28) + math.ceil(fitted_height / 28)


# Worked by hand: the longer side L is the largest for which the shorter side
# S = round(short * L / long) gives (W//14)*(H//14) <= limit; the next L does not.
# Tokens: ceil(W/28) * ceil(H/28) (no further scaling, the size fits).
FITTED = [
    # 3:2. L = 1105: S = round(736.67) = 737; 78*52 = 4056 <= 4096. L = 1106: S = 737,
    # 79*52 = 4108 > 4096. Tokens ceil(1105/28) = 40 (28*39 = 1092), ceil(737/28) = 27.
    (4800, 3200, 4096, (1105, 737), 40 * 27),
    # L = 2204: S = round(1469.33) = 1469; 157*104 = 16328. L = 2205: S = 1470, 157*105 =
    # 16485 > 16384. Tokens ceil(2204/28) = 79 (28*78 = 2184), ceil(1469/28) = 53.
    (4800, 3200, 16384, (2204, 1469), 79 * 53),
    # L = 960: S = round(853.33) = 853; 68*60 = 4080. L = 961: S = 854, 68*61 = 4148.
    # Tokens ceil(960/28) = 35 (28*34 = 952), ceil(853/28) = 31 (28*30 = 840).
    (9000, 8000, 4096, (960, 853), 35 * 31),
    # US letter at 300 dpi, portrait. L = 2046: S = round(1581.0) = 1581; 112*146 = 16352.
    # L = 2047: S = 1582, 113*146 = 16498. Tokens ceil(1581/28) = 57, ceil(2046/28) = 74.
    (2550, 3300, 16384, (1581, 2046), 57 * 74),
    # L = 1032: S = round(797.45) = 797; 56*73 = 4088. L = 1033: S = 798, 57*73 = 4161.
    # Tokens ceil(797/28) = 29 (28*28 = 784), ceil(1032/28) = 37 (28*36 = 1008).
    (2550, 3300, 4096, (797, 1032), 29 * 37),
    # 16:9 at the smallest video frame budget. L = 601: S = round(338.06) = 338; 42*24 =
    # 1008 <= 1024. L = 602: S = 339, 43*24 = 1032. Tokens ceil(601/28) = 22, ceil(338/28) = 13.
    (1920, 1080, 1024, (601, 338), 22 * 13),
    # 1:10 strip: L = 5734: S = round(573.4) = 573; 40*409 = 16360. L = 5735: S = round(573.5)
    # = 574, 41*409 = 16769. Tokens ceil(573/28) = 21, ceil(5734/28) = 205 (28*204 = 5712).
    (1800, 18000, 16384, (573, 5734), 21 * 205),
    # Already fits (45*30 = 1350 patches): unchanged.
    (640, 427, 4096, (640, 427), 23 * 16),
]


@pytest.mark.parametrize(("width", "height", "limit", "fitted", "tokens"), FITTED)
def test_fit_to_budget_gives_the_sizes_worked_by_hand(
    width: int, height: int, limit: int, fitted: tuple[int, int], tokens: int
) -> None:
    assert fit_to_budget(width, height, limit) == fitted
    assert image_tokens(*fitted, limit) == tokens


@pytest.mark.parametrize("bad", [(0, 10, 4096), (10, 0, 4096), (10, 10, 0)])
def test_budget_functions_refuse_nonsense(bad: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError):
        image_tokens(*bad)
    with pytest.raises(ValueError):
        fit_to_budget(*bad)


def test_decode_data_url_gives_the_type_and_bytes_back() -> None:
    payload = bytes(range(256)) * 3
    url = "data:image/webp;base64," + base64.b64encode(payload).decode()
    assert decode_data_url(url) == ("image/webp", payload)


@pytest.mark.parametrize("payload", ["aGk$", "aGk=\n", "aGk", "a GkK"])
def test_decode_data_url_refuses_what_is_not_base64(payload: str) -> None:
    with pytest.raises(binascii.Error):
        decode_data_url("data:image/png;base64," + payload)


# --- prepare_image on real photos ---------------------------------------------------


@pytest.mark.parametrize("name", PHOTOS)
@pytest.mark.parametrize("limit", LIMITS)
def test_data_url_decodes_to_the_stated_size(name: str, limit: int) -> None:
    prepared = prepare_image(DATA / name, limit)
    image = decode(prepared)
    source = photo(name)
    assert prepared.name == name
    assert image.size == (prepared.width, prepared.height) == source.size  # all fit already
    assert prepared.tokens == PHOTO_TOKENS[name]
    assert prepared.source_bytes == (DATA / name).stat().st_size
    assert prepared.as_content_part() == {
        "type": "image_url",
        "image_url": {"url": prepared.data_url},
    }
    # The content is the photo, not something else of the same size.
    assert mean_difference(image, source) < JPEG_ERROR


def test_photos_become_jpeg_and_the_scanned_page_stays_lossless_grayscale() -> None:
    assert mime(prepare_image(DATA / "astronaut.png", 4096)) == "image/jpeg"
    assert mime(prepare_image(DATA / "rocket.jpg", 4096)) == "image/jpeg"
    page = prepare_image(DATA / "page.png", 4096)
    assert mime(page) == "image/png"
    decoded = decode(page)
    assert decoded.mode == "L"
    assert ImageChops.difference(decoded, photo("page.png")).getbbox() is None  # lossless
    assert page.tokens == 14 * 7  # 384x191 px -> ceil(384/28) * ceil(191/28)


def test_custom_name_is_used(save: Callable[..., Path]) -> None:
    path = save("upload-1234", photo("chelsea.png"), format="PNG")
    assert prepare_image(path, 4096, name="my cat.png").name == "my cat.png"


@pytest.mark.parametrize("limit", LIMITS)
def test_image_larger_than_the_budget_is_scaled_to_it(
    save: Callable[..., Path], limit: int
) -> None:
    big = photo("coffee.png").resize((4800, 3200), Image.Resampling.BICUBIC)
    path = save("big.jpg", big, format="JPEG", quality=92)
    prepared = prepare_image(path, limit)
    # Worked by hand in FITTED: 1105x737 (78*52 = 4056 patches), 2204x1469 (157*104 = 16328).
    size, tokens = {4096: ((1105, 737), 40 * 27), 16384: ((2204, 1469), 79 * 53)}[limit]
    assert (prepared.width, prepared.height) == size
    assert prepared.tokens == tokens
    image = decode(prepared)
    assert image.size == (prepared.width, prepared.height)
    reference = photo("coffee.png").resize(image.size, Image.Resampling.LANCZOS)
    assert mean_difference(image, reference) < 4
    assert len(decode_data_url(prepared.data_url)[1]) < prepared.source_bytes


@pytest.mark.parametrize(("setting", "kept"), [(None, FREED_BLOCKS_KEPT), ("0", 0), ("2", 2)])
def test_freed_image_memory_is_kept_for_reuse_unless_configured(
    setting: str | None, kept: int
) -> None:
    environment = {key: value for key, value in os.environ.items() if key != "PILLOW_BLOCKS_MAX"}
    if setting is not None:
        environment["PILLOW_BLOCKS_MAX"] = setting
    script = "import backend.images; from PIL import Image; print(Image.core.get_blocks_max())"
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=DATA.parent.parent,
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(result.stdout) == kept


@pytest.mark.parametrize(
    ("orientation", "transpose"),
    [
        (3, Image.Transpose.ROTATE_180),
        (6, Image.Transpose.ROTATE_270),
        (8, Image.Transpose.ROTATE_90),
    ],
)
def test_exif_orientation_is_applied(
    save: Callable[..., Path], orientation: int, transpose: Image.Transpose
) -> None:
    rocket = photo("rocket.jpg")
    exif = Image.Exif()
    exif[0x0112] = orientation  # Orientation
    path = save("phone.jpg", rocket, format="JPEG", quality=95, exif=exif)
    image = decode(prepare_image(path, 4096))
    upright = rocket.transpose(transpose)
    assert image.size == upright.size
    assert mean_difference(image, upright) < 4
    if orientation != 3:
        assert image.size == (rocket.height, rocket.width)


def test_rgba_transparent_areas_become_white(save: Callable[..., Path]) -> None:
    cat = photo("chelsea.png").convert("RGBA")
    alpha = Image.new("L", cat.size, 255)
    alpha.paste(0, (0, 0, cat.width // 2, cat.height))  # left half fully transparent
    cat.putalpha(alpha)
    image = decode(prepare_image(save("cut.png", cat), 4096)).convert("RGB")
    assert image.getpixel((10, 10)) == (255, 255, 255)
    opaque = image.crop((cat.width // 2 + 1, 0, cat.width, cat.height))
    expected = photo("chelsea.png").crop((cat.width // 2 + 1, 0, cat.width, cat.height))
    assert mean_difference(opaque, expected) < 3


def test_half_transparent_pixels_are_blended_onto_white(save: Callable[..., Path]) -> None:
    square = Image.new("RGBA", (64, 64), (0, 0, 0, 128))  # half-transparent black
    image = decode(prepare_image(save("shade.png", square), 4096)).convert("RGB")
    red, green, blue = image.getpixel((32, 32))  # type: ignore[misc]
    assert 120 <= red <= 135 and red == green == blue


def test_palette_with_transparency_becomes_white(save: Callable[..., Path]) -> None:
    palette_image = photo("chelsea.png").convert("P", palette=Image.Palette.ADAPTIVE, colors=64)
    palette = palette_image.getpalette() or []
    palette_image.putpalette([*palette[: 64 * 3], 0, 0, 0])  # index 64: black
    palette_image.paste(64, (0, 0, 96, 96))  # a black square, marked transparent below
    path = save("icon.png", palette_image, transparency=64)
    source = Image.open(path)
    assert source.mode == "P" and source.info["transparency"] == 64
    image = decode(prepare_image(path, 4096)).convert("RGB")
    # The output may be JPEG (the cat is a photo): white to within JPEG rounding.
    assert min(image.getpixel((40, 40))) >= 250  # type: ignore[arg-type]
    expected = palette_image.convert("RGB")
    expected.paste((255, 255, 255), (0, 0, 96, 96))
    assert mean_difference(image, expected) < JPEG_ERROR  # the rest is still the cat


def test_grayscale_stays_one_channel(save: Callable[..., Path]) -> None:
    gray = photo("astronaut.png").convert("L")
    prepared = prepare_image(save("gray.png", gray), 4096)
    image = decode(prepared)
    assert image.mode == "L"
    assert mean_difference(image, gray) < 1


# --- broken files -------------------------------------------------------------------


def test_zero_byte_file_is_refused(save: Callable[..., Path]) -> None:
    with pytest.raises(ImageError) as error:
        prepare_image(save("empty.jpg", b""), 4096)
    assert "empty" in one_line_naming(error.value, "empty.jpg")


def test_truncated_jpeg_is_refused(save: Callable[..., Path]) -> None:
    data = (DATA / "rocket.jpg").read_bytes()
    with pytest.raises(ImageError) as error:
        prepare_image(save("half.jpg", data[: len(data) // 2]), 4096)
    said = one_line_naming(error.value, "half.jpg")
    assert "damaged" in said and "truncated" not in said.lower()  # ours; Pillow's: app.log


def test_text_named_jpg_is_refused(save: Callable[..., Path]) -> None:
    path = save("notes.jpg", b"shopping list: milk, eggs, coffee\n" * 10)
    with pytest.raises(ImageError) as error:
        prepare_image(path, 4096, name="cat.jpg")
    message = one_line_naming(error.value, "cat.jpg")
    assert "not a picture, PDF or video" in message


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ImageError) as error:
        prepare_image(tmp_path / "gone.png", 4096)
    one_line_naming(error.value, "gone.png")


# --- formats -----------------------------------------------------------------------


def encoded(image: Image.Image, image_format: str, **params: Any) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, image_format, **params)
    return buffer.getvalue()


def frames(image_format: str, **params: Any) -> bytes:
    """Three frames: the cat, then the cat flipped twice (so frame 1 is identifiable)."""
    cat = photo("chelsea.png")
    others = [
        cat.transpose(Image.Transpose.FLIP_LEFT_RIGHT),
        cat.transpose(Image.Transpose.ROTATE_180),
    ]
    return encoded(cat, image_format, save_all=True, append_images=others, **params)


ROCKET = photo("rocket.jpg")
CAT = photo("chelsea.png")

FORMATS: dict[str, tuple[bytes, Image.Image, float, str | None]] = {
    # name: (file bytes, expected upright content, max mean difference, notice part);
    # the cat is a photo, so it is sent as JPEG whatever the source format.
    "baseline.jpg": (encoded(ROCKET, "JPEG", quality=95), ROCKET, JPEG_ERROR, None),
    "progressive.jpg": (
        encoded(ROCKET, "JPEG", quality=95, progressive=True),
        ROCKET,
        JPEG_ERROR,
        None,
    ),
    "cmyk.jpg": (encoded(ROCKET.convert("CMYK"), "JPEG", quality=95), ROCKET, 6, None),
    "gray16.png": (
        encoded(CAT.convert("L").point(lambda value: value * 257, "I").convert("I;16"), "PNG"),
        CAT.convert("L"),
        1,
        None,
    ),
    "lossy.webp": (encoded(CAT, "WEBP", quality=90), CAT, 4, None),
    "lossless.webp": (encoded(CAT, "WEBP", lossless=True), CAT, 3, None),
    "still.gif": (encoded(CAT, "GIF"), CAT, 12, None),  # 256-colour palette
    "animated.gif": (frames("GIF"), CAT, 12, "only the first frame"),
    "animated.webp": (frames("WEBP", quality=90), CAT, 4, "only the first frame"),
    "picture.bmp": (encoded(CAT, "BMP"), CAT, 3, None),
    "scan.tiff": (encoded(CAT, "TIFF", compression="tiff_lzw"), CAT, 3, None),
    "pages.tiff": (frames("TIFF"), CAT, 3, "only the first page"),
    "phone.heic": (encoded(ROCKET, "HEIF", quality=90), ROCKET, 4, None),
    "modern.avif": (encoded(ROCKET, "AVIF", quality=90), ROCKET, 5, None),
}


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_formats_are_read_first_frame_only(save: Callable[..., Path], name: str) -> None:
    data, expected, tolerance, notice = FORMATS[name]
    prepared = prepare_image(save(name, data), 4096)
    image = decode(prepared)
    assert image.size == expected.size
    assert mean_difference(image, expected) < tolerance
    if notice is None:
        assert prepared.notices == ()
    else:
        assert len(prepared.notices) == 1
        assert prepared.notices[0].startswith(f"{name}: ") and notice in prepared.notices[0]


def test_sixteen_bit_png_is_scaled_not_clipped(save: Callable[..., Path]) -> None:
    ramp = Image.new("I", (256, 32))
    ramp.putdata([x * 257 for _ in range(32) for x in range(256)])  # 0..65535 left to right
    path = save("ramp16.png", ramp.convert("I;16"))
    assert Image.open(path).mode.startswith("I;16")
    prepared = prepare_image(path, 4096)
    image = decode(prepared)
    assert mime(prepared) == "image/png" and image.mode == "L"
    assert [image.getpixel((x, 16)) for x in range(256)] == list(range(256))


# --- bad inputs --------------------------------------------------------------------


def png_declaring(width: int, height: int) -> bytes:
    """A tiny PNG whose header declares width x height 1-bit gray pixels."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * 64))
        + chunk(b"IEND", b"")
    )


def jpeg_declaring(width: int, height: int) -> bytes:
    """rocket.jpg with its frame header (SOF0) rewritten to declare width x height."""
    data = bytearray((DATA / "rocket.jpg").read_bytes())
    start = data.index(b"\xff\xc0")
    data[start + 5 : start + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def gif_declaring(width: int, height: int) -> bytes:
    """A real GIF whose logical screen is rewritten to width x height."""
    data = bytearray(encoded(CAT, "GIF"))
    data[6:10] = struct.pack("<HH", width, height)
    return bytes(data)


def flipped_byte(data: bytes, position: int) -> bytes:
    return data[:position] + bytes([data[position] ^ 0xFF]) + data[position + 1 :]


def with_exif(image: Image.Image, exif: Image.Exif | bytes) -> bytes:
    return encoded(image, "JPEG", quality=90, exif=exif)


def orientation(value: int) -> Image.Exif:
    exif = Image.Exif()
    exif[0x0112] = value
    return exif


@dataclass(frozen=True)
class BadInput:
    """One input of the corpus and what must happen to it.

    ``error``: a part of the ImageError message (after "name: "), or None when the file
    must be accepted; then ``notice`` (a part of the one notice) or None (no notice),
    and ``size`` the expected size and ``tokens`` its Kimi-VL token count (at the
    4096-patch budget, worked by hand) when given.
    """

    name: str
    data: bytes
    error: str | None = None
    notice: str | None = None
    size: tuple[int, int] | None = None
    max_bytes: int | None = None
    tokens: int | None = None


PNG_CAT = encoded(CAT, "PNG")
JPEG_ROCKET = (DATA / "rocket.jpg").read_bytes()
NOT_AN_IMAGE = "not a picture, PDF or video the app can read"
TOO_MANY = "megapixels accepted (a possible decompression bomb)"

BAD_INPUTS = [
    # Not images at all.
    BadInput("empty.jpg", b"", "the file is empty"),
    BadInput("one-byte.jpg", b"\xff", NOT_AN_IMAGE),
    BadInput("notes.jpg", b"milk, eggs, coffee\n" * 20, NOT_AN_IMAGE),
    BadInput("data.jpg", b'{"image": "cat.jpg", "width": 640}', NOT_AN_IMAGE),
    BadInput("page.jpg", b"<html><body><img src='cat.jpg'></body></html>", "an HTML page"),
    BadInput("saved.jpg", b"\n<!DOCTYPE html>\n<HTML lang='en'><head>", "an HTML page"),
    BadInput("logo.svg", b"<svg xmlns='http://www.w3.org/2000/svg'><rect/></svg>", "SVG"),
    BadInput("icon.svg", b"<?xml version='1.0'?>\n<svg width='10'><circle/></svg>", "SVG"),
    BadInput("drawing.png", b"\xef\xbb\xbf<svg viewBox='0 0 1 1'></svg>", "SVG"),
    BadInput(
        "report.png", b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n", "a PDF document"
    ),
    BadInput("archive.jpg", b"PK\x03\x04" + bytes(200), NOT_AN_IMAGE),
    BadInput("program.png", b"\x7fELF\x02\x01\x01" + bytes(200), NOT_AN_IMAGE),
    BadInput("noise.png", random.Random(4).randbytes(4096), NOT_AN_IMAGE),
    BadInput("signature.png", b"\x89PNG\r\n\x1a\n", NOT_AN_IMAGE),
    BadInput("gif-header.gif", b"GIF89a", NOT_AN_IMAGE),
    # Damaged images.
    BadInput("half.jpg", JPEG_ROCKET[: len(JPEG_ROCKET) // 2], "damaged"),
    BadInput("header-only.jpg", JPEG_ROCKET[:400], "damaged"),
    BadInput("half.png", PNG_CAT[: len(PNG_CAT) // 2], "damaged"),
    BadInput("garbled.png", flipped_byte(PNG_CAT, len(PNG_CAT) // 2), "damaged"),
    BadInput("half.gif", encoded(CAT, "GIF")[:3000], "damaged"),
    BadInput("half.webp", encoded(CAT, "WEBP")[:2000], "damaged"),
    BadInput("half.tiff", encoded(CAT, "TIFF")[:5000], "damaged"),
    BadInput("half.bmp", encoded(CAT, "BMP")[:5000], "damaged"),
    BadInput("half.heic", encoded(ROCKET, "HEIF")[:3000], "damaged"),
    # Too big: declared pixels (decompression bombs), decoded pixels, bytes.
    BadInput("bomb.png", png_declaring(20_000, 20_000), TOO_MANY),
    BadInput("bomb-300mp.png", png_declaring(17_320, 17_320), TOO_MANY),
    BadInput("bomb.jpg", jpeg_declaring(65_500, 65_500), TOO_MANY),
    BadInput("bomb.gif", gif_declaring(65_535, 65_535), TOO_MANY),
    BadInput("big.png", png_declaring(10_000, 10_000), "too large to decode"),
    BadInput("big.jpg", JPEG_ROCKET, "MB limit for one file", max_bytes=100_000),
    # Odd but usable: accepted, with a notice where the person should know.
    BadInput(
        "dot.png",
        encoded(Image.new("RGB", (1, 1), "red"), "PNG"),
        None,
        "only 1x1 pixels",
        (28, 28),
        tokens=1,
    ),
    BadInput(
        "line.png",
        encoded(Image.new("L", (1, 5000), 0), "PNG"),
        None,
        "only 1x5000",
        (28, 5000),
        tokens=1 * 179,  # ceil(5000/28) = 179 (28*178 = 4984)
    ),
    BadInput(
        "rule.png",
        encoded(Image.new("L", (5000, 1), 0), "PNG"),
        None,
        "only 5000x1",
        (5000, 28),
        tokens=179 * 1,
    ),
    BadInput(
        "thread.png",
        encoded(Image.new("L", (2, 20_000), 0), "PNG"),
        None,
        "only 1x7140",
        (28, 7140),
        tokens=1 * 255,  # 7140 = 28*255
    ),
    BadInput(
        "banner.png",
        encoded(Image.new("RGB", (9000, 40), "navy"), "PNG"),
        None,
        None,
        (7140, 32),  # the widest side taken; 32 = round(40 * 7140 / 9000) = round(31.73)
        tokens=255 * 2,  # ceil(32/28) = 2
    ),
    BadInput(
        "huge-photo.jpg",
        encoded(Image.new("L", (9000, 8000), 90), "JPEG"),
        None,
        None,
        (960, 853),  # worked by hand in FITTED
        tokens=35 * 31,
    ),
    BadInput(
        "orientation-9.jpg", with_exif(ROCKET, orientation(9)), None, None, (640, 427), tokens=368
    ),
    BadInput(
        "orientation-0.jpg", with_exif(ROCKET, orientation(0)), None, None, (640, 427), tokens=368
    ),
    BadInput(
        "junk-exif.jpg",
        with_exif(ROCKET, b"Exif\x00\x00" + bytes(range(64))),
        None,
        None,
        (640, 427),
        tokens=23 * 16,
    ),
]


def test_corpus_is_large_and_names_are_unique() -> None:
    assert len(BAD_INPUTS) >= 30
    assert len({case.name for case in BAD_INPUTS}) == len(BAD_INPUTS)


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
@pytest.mark.parametrize("case", BAD_INPUTS, ids=[case.name for case in BAD_INPUTS])
def test_bad_inputs_give_one_line_or_a_usable_image(
    save: Callable[..., Path], case: BadInput
) -> None:
    path = save(case.name, case.data)
    if case.error is not None:
        with pytest.raises(ImageError) as error:
            prepare_image(path, 4096, max_bytes=case.max_bytes)
        assert case.error in one_line_naming(error.value, case.name)
        return
    prepared = prepare_image(path, 4096, max_bytes=case.max_bytes)
    image = decode(prepared)
    assert image.size == (prepared.width, prepared.height)
    if case.size is not None:
        assert image.size == case.size
    assert prepared.tokens == case.tokens
    if case.notice is None:
        assert prepared.notices == ()
    else:
        assert len(prepared.notices) == 1 and case.notice in prepared.notices[0]
        assert prepared.notices[0].startswith(f"{case.name}: ")


def test_directory_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "photos.jpg"
    folder.mkdir()
    with pytest.raises(ImageError) as error:
        prepare_image(folder, 4096)
    assert "cannot read" in one_line_naming(error.value, "photos.jpg")


# --- uploads sent as they are --------------------------------------------------------


def payload(prepared: PreparedImage) -> bytes:
    """The bytes inside a data URL."""
    return base64.b64decode(prepared.data_url.split(",", 1)[1], validate=True)


def test_an_upload_that_already_fits_is_sent_byte_for_byte(save: Callable[..., Path]) -> None:
    """A baseline JPEG at quality 75 within the budget (640x427 = 1,395 patches of 4,096),
    0.11 bytes a pixel: re-encoding could only lose quality."""
    photo = Image.open(DATA / "rocket.jpg").convert("RGB")
    path = save("small.jpg", encoded(photo, "JPEG", quality=75))
    prepared = prepare_image(path, 4096)
    assert payload(prepared) == path.read_bytes() and mime(prepared) == "image/jpeg"
    assert (prepared.width, prepared.height, prepared.tokens) == (640, 427, 368)
    screenshot = save("shot.png", encoded(Image.open(DATA / "page.png").convert("L"), "PNG"))
    assert payload(prepare_image(screenshot, 4096)) == screenshot.read_bytes()


def test_a_closed_chats_image_sent_as_uploaded_is_linked_not_written_again(
    save: Callable[..., Path], tmp_path: Path
) -> None:
    """Spilling (a closed tab's images leave memory) links the upload itself when the
    image went as it came: the same file, no bytes decoded or written; an image made
    anew (EXIF-rotated) is written, and both read back as the data URL they were."""
    rocket = Image.open(DATA / "rocket.jpg").convert("RGB")
    upload = save("small.jpg", encoded(rocket, "JPEG", quality=75))
    exif = Image.Exif()
    exif[ExifTags.Base.Orientation] = 6
    turned = save("turned.jpg", encoded(rocket, "JPEG", quality=75, exif=exif))
    as_came, made = prepare_image(upload, 4096), prepare_image(turned, 4096)
    assert (made.width, made.height) == (427, 640)  # upright: decoded and encoded anew

    spilled = as_came.spilled(tmp_path / "image-1")
    assert isinstance(spilled.data, Path) and spilled.data.samefile(upload)
    assert spilled.data_url == as_came.data_url and spilled.encoded()[0] == "image/jpeg"
    rewritten = made.spilled(tmp_path / "image-2")
    assert isinstance(rewritten.data, Path) and not rewritten.data.samefile(turned)
    assert rewritten.data_url == made.data_url


def noisy_photo(width: int = 800, height: int = 600) -> Image.Image:
    """Softened colour noise: a JPEG of it takes 0.4-0.5 bytes a pixel at quality 85-89,
    as a detailed photo does (4:2:0, Pillow's default)."""
    bands = [
        Image.effect_noise((width, height), 40 + 5 * band).filter(ImageFilter.GaussianBlur(0.6))
        for band in range(3)
    ]
    return Image.merge("RGB", bands)


@pytest.mark.parametrize("quality", [85, 89])
def test_a_dense_jpeg_saved_at_most_at_quality_89_is_sent_byte_for_byte(
    save: Callable[..., Path], quality: int
) -> None:
    """Over 0.35 bytes a pixel, but re-encoding at quality 80 would save at most about
    a fifth of it and lose detail again: the upload goes as it is."""
    path = save("dense.jpg", encoded(noisy_photo(), "JPEG", quality=quality))
    assert path.stat().st_size > 0.35 * 800 * 600  # the byte rule alone would re-encode it
    assert payload(prepare_image(path, 4096)) == path.read_bytes()


@pytest.mark.parametrize(
    "why", ["quality 95", "full-resolution colour", "bytes after its end", "large metadata"]
)
def test_a_dense_jpeg_that_re_encodes_much_smaller_is_made_smaller(
    save: Callable[..., Path], why: str
) -> None:
    photo = noisy_photo()
    data = {
        "quality 95": lambda: encoded(photo, "JPEG", quality=95),
        "full-resolution colour": lambda: encoded(photo, "JPEG", quality=89, subsampling=0),
        "bytes after its end": lambda: encoded(photo, "JPEG", quality=89) + bytes(2_000_000),
        "large metadata": lambda: encoded(photo, "JPEG", quality=89, icc_profile=bytes(500_000)),
    }[why]()
    path = save("dense.jpg", data)
    prepared = prepare_image(path, 4096)
    assert (prepared.width, prepared.height) == (800, 600)
    assert len(payload(prepared)) < 0.8 * path.stat().st_size


@pytest.mark.parametrize("quality", [20, 30, 50, 75, 80, 89, 90, 95])
def test_the_quality_a_jpeg_was_saved_at_is_read_back(quality: int) -> None:
    image = Image.open(io.BytesIO(encoded(photo("rocket.jpg"), "JPEG", quality=quality)))
    estimate = jpeg_quality(image)
    assert estimate is not None and abs(estimate - quality) <= 1


def test_an_image_without_jpeg_tables_has_no_quality() -> None:
    assert jpeg_quality(photo("page.png")) is None


def test_a_jpeg_with_a_trailer_after_its_end_is_sent_byte_for_byte(
    save: Callable[..., Path],
) -> None:
    """Some cameras write their own bytes after the end-of-image marker; decoders stop
    at the marker, and so does the app's check of the file."""
    photo = Image.open(DATA / "rocket.jpg").convert("RGB")
    data = encoded(photo, "JPEG", quality=75) + b"maker notes after the image"
    path = save("trailer.jpg", data)
    assert payload(prepare_image(path, 4096)) == data


@pytest.mark.parametrize(
    "why",
    [
        "progressive",
        "dense",
        "rotated",
        "over the budget",
        "alpha",
        "damaged",
        "its end marker cut off",
        "another photo spliced into it",
        "a broken Huffman table",
        "a hierarchical frame",
    ],
)
def test_an_upload_that_does_not_fit_is_prepared(save: Callable[..., Path], why: str) -> None:
    photo = Image.open(DATA / "rocket.jpg").convert("RGB")
    data = {
        "progressive": lambda: encoded(photo, "JPEG", quality=75, progressive=True),
        "dense": lambda: encoded(photo, "JPEG", quality=100, subsampling=0),  # ~0.5 B/px
        "rotated": lambda: encoded(photo, "JPEG", quality=75, exif=rotated_exif()),
        "over the budget": lambda: encoded(photo.resize((2560, 1708)), "JPEG", quality=60),
        "alpha": lambda: encoded(photo.convert("RGBA"), "PNG"),
        "damaged": lambda: encoded(photo, "JPEG", quality=75)[:20_000],
        "its end marker cut off": lambda: encoded(photo, "JPEG", quality=75)[:-2],
        "another photo spliced into it": lambda: (
            encoded(photo, "JPEG", quality=75)[:20_000]
            + encoded(photo.transpose(Image.Transpose.FLIP_LEFT_RIGHT), "JPEG", quality=75)
        ),
        "a broken Huffman table": lambda: patched(
            encoded(photo, "JPEG", quality=75), b"\xff\xc4", 5, b"\xff" * 16
        ),
        "a hierarchical frame": lambda: patched(
            encoded(photo, "JPEG", quality=75), b"\xff\xc0", 0, b"\xff\xc5"
        ),
    }[why]()
    path = save(f"{why}.jpg", data)
    if why not in ("progressive", "dense", "rotated", "over the budget", "alpha"):
        with pytest.raises(ImageError):
            prepare_image(path, 4096)
        return
    prepared = prepare_image(path, 4096)
    assert payload(prepared) != path.read_bytes()
    assert prepared.tokens <= 4096 // 4 + 64 + 64  # within the budget either way


def patched(data: bytes, marker: bytes, offset: int, replacement: bytes) -> bytes:
    """``data`` with ``replacement`` written over its bytes ``offset`` after its first
    ``marker`` (e.g. a DHT's 16 code counts, 5 bytes after ``FF C4``: ITU T.81, B.2.4.2)."""
    at = data.index(marker) + offset
    return data[:at] + replacement + data[at + len(replacement) :]


def rotated_exif() -> bytes:
    """EXIF with Orientation 6 (rotate 90 degrees clockwise to view)."""
    exif = Image.Exif()
    exif[0x0112] = 6
    return exif.tobytes()


@pytest.mark.parametrize(
    ("name", "image_format", "mode", "shown"),
    [
        ("photo.jpg", "JPEG", "RGB", True),
        ("shot.png", "PNG", "RGBA", True),
        ("anim.gif", "GIF", "P", True),
        ("web.webp", "WEBP", "RGB", True),
        ("phone.heic", "HEIF", "RGB", False),
        ("modern.avif", "AVIF", "RGB", False),
        ("scan.tiff", "TIFF", "RGB", False),
        ("paint.bmp", "BMP", "RGB", False),
        ("print.jpg", "JPEG", "CMYK", False),
    ],
)
def test_only_formats_every_browser_decodes_are_shown_as_they_are(
    tmp_path: Path, name: str, image_format: str, mode: str, shown: bool
) -> None:
    """HEIC, AVIF, TIFF, BMP and CMYK JPEG uploads get a copy to show (ui/previews.py)."""
    path = tmp_path / name
    path.write_bytes(encoded(ROCKET.convert(mode), image_format))
    assert shown_as_is(path) is shown
    assert shown_as_is(tmp_path / "missing.png") is False
