"""Tests of backend.images on real photos (tests/data, from scikit-image) and made files."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image, ImageChops, ImageStat

from backend.errors import ImageError
from backend.images import (
    MAX_SIDE,
    PreparedImage,
    fit_to_budget,
    image_tokens,
    prepare_image,
)

DATA = Path(__file__).parent / "data"
PHOTOS = ["astronaut.png", "chelsea.png", "rocket.jpg", "page.png", "coffee.png"]
LIMITS = [4096, 16384]  # Kimi-VL-A3B-Instruct, Kimi-VL-A3B-Thinking-2506


def decode(prepared: PreparedImage) -> Image.Image:
    """The image inside a data URL, loaded."""
    header, encoded = prepared.data_url.split(",", 1)
    assert header in {"data:image/png;base64", "data:image/jpeg;base64"}
    image = Image.open(io.BytesIO(base64.b64decode(encoded, validate=True)))
    image.load()
    return image


def mean_difference(first: Image.Image, second: Image.Image) -> float:
    """Mean absolute per-channel difference of two same-size images, 0-255."""
    difference = ImageChops.difference(first.convert("RGB"), second.convert("RGB"))
    return sum(ImageStat.Stat(difference).mean) / 3


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


@pytest.mark.parametrize(
    ("width", "height", "limit", "tokens"),
    [
        (1, 1, 4096, 1),  # padded to one 28x28 token
        (28, 28, 4096, 1),
        (29, 28, 4096, 2),  # one pixel more pads a second token column
        (896, 896, 4096, 32 * 32),  # exactly 64x64 patches: no scaling
        (1792, 1792, 16384, 64 * 64),  # Thinking-2506's "about 1792x1792"
        (1920, 1080, 16384, 69 * 39),  # fits 16384 patches as is: 2691
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


@pytest.mark.parametrize("bad", [(0, 10, 4096), (10, 0, 4096), (10, 10, 0)])
def test_budget_functions_refuse_nonsense(bad: tuple[int, int, int]) -> None:
    with pytest.raises(ValueError):
        image_tokens(*bad)
    with pytest.raises(ValueError):
        fit_to_budget(*bad)


# --- prepare_image on real photos ---------------------------------------------------


@pytest.mark.parametrize("name", PHOTOS)
@pytest.mark.parametrize("limit", LIMITS)
def test_data_url_decodes_to_the_stated_size(name: str, limit: int) -> None:
    prepared = prepare_image(DATA / name, limit)
    image = decode(prepared)
    source = photo(name)
    assert prepared.name == name
    assert image.size == (prepared.width, prepared.height) == source.size  # all fit already
    assert prepared.tokens == image_tokens(prepared.width, prepared.height, limit)
    assert prepared.source_bytes == (DATA / name).stat().st_size
    assert prepared.payload_bytes == len(base64.b64decode(prepared.data_url.split(",")[1]))
    assert prepared.as_content_part() == {
        "type": "image_url",
        "image_url": {"url": prepared.data_url},
    }
    # The content is the photo, not something else of the same size.
    assert mean_difference(image, source) < 3


def test_photos_become_jpeg_and_the_scanned_page_stays_lossless_grayscale() -> None:
    assert prepare_image(DATA / "astronaut.png", 4096).mime_type == "image/jpeg"
    assert prepare_image(DATA / "rocket.jpg", 4096).mime_type == "image/jpeg"
    page = prepare_image(DATA / "page.png", 4096)
    assert page.mime_type == "image/png"
    decoded = decode(page)
    assert decoded.mode == "L"
    assert ImageChops.difference(decoded, photo("page.png")).getbbox() is None  # lossless
    assert page.tokens == 7 * 14  # 191x384 px -> ceil(191/28) * ceil(384/28)


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
    assert (prepared.width, prepared.height) == fit_to_budget(4800, 3200, limit)
    assert (prepared.width // 14) * (prepared.height // 14) <= limit
    image = decode(prepared)
    assert image.size == (prepared.width, prepared.height)
    reference = photo("coffee.png").resize(image.size, Image.Resampling.LANCZOS)
    assert mean_difference(image, reference) < 4
    assert prepared.payload_bytes < prepared.source_bytes


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
    transparent_index = palette_image.getpixel((0, 0))
    path = save("icon.png", palette_image, transparency=transparent_index)
    source = Image.open(path)
    assert source.mode == "P" and "transparency" in source.info
    image = decode(prepare_image(path, 4096)).convert("RGB")
    # The output may be JPEG (the cat is a photo): white to within JPEG rounding.
    assert min(image.getpixel((0, 0))) >= 245  # type: ignore[arg-type]
    opaque = palette_image.convert("RGB")
    assert mean_difference(image, opaque) < 6  # the rest is still the cat


def test_grayscale_stays_one_channel(save: Callable[..., Path]) -> None:
    gray = photo("astronaut.png").convert("L")
    prepared = prepare_image(save("gray.png", gray), 4096)
    image = decode(prepared)
    assert image.mode == "L"
    assert mean_difference(image, gray) < 1


# --- broken files -------------------------------------------------------------------


def assert_one_line_naming(error: pytest.ExceptionInfo[ImageError], name: str) -> str:
    message = str(error.value)
    assert message.startswith(f"{name}: ")
    assert "\n" not in message and "Traceback" not in message
    return message


def test_zero_byte_file_is_refused(save: Callable[..., Path]) -> None:
    with pytest.raises(ImageError) as error:
        prepare_image(save("empty.jpg", b""), 4096)
    assert "empty" in assert_one_line_naming(error, "empty.jpg")


def test_truncated_jpeg_is_refused(save: Callable[..., Path]) -> None:
    data = (DATA / "rocket.jpg").read_bytes()
    with pytest.raises(ImageError) as error:
        prepare_image(save("half.jpg", data[: len(data) // 2]), 4096)
    assert "truncated" in assert_one_line_naming(error, "half.jpg")


def test_text_named_jpg_is_refused(save: Callable[..., Path]) -> None:
    path = save("notes.jpg", b"shopping list: milk, eggs, coffee\n" * 10)
    with pytest.raises(ImageError) as error:
        prepare_image(path, 4096, name="cat.jpg")
    message = assert_one_line_naming(error, "cat.jpg")
    assert "not an image" in message


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ImageError) as error:
        prepare_image(tmp_path / "gone.png", 4096)
    assert_one_line_naming(error, "gone.png")
