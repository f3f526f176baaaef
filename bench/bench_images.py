"""Benchmark of backend.images.prepare_image, and the OCR check behind its PNG choice.

Usage (from the repository root):
    .venv/bin/python -m bench.bench_images            # timing table
    .venv/bin/python -m bench.bench_images --ocr      # also: tesseract on page.png

The timing table lists, for each input and model budget (in_token_limit 4096 for
Kimi-VL-A3B-Instruct, 16384 for Thinking-2506): the input, bytes in, bytes out
(the encoded image inside the data URL), pixels out, Kimi-VL tokens, the output
format and the median wall time in milliseconds over 7 runs, pinned to one CPU
core. Inputs are the scikit-image photos in tests/data plus made ones: a
12-megapixel and a 48-megapixel "photo" (coffee.png upscaled with sensor-like
noise, JPEG quality 92, about the bytes a phone writes) and a 1920x1080 text
screenshot. Then a PDF and a video (backend.documents, backend.video) within the
budget one message gets on a 32,768-token server (64 images, half the context for
pictures): an 8-page US-letter PDF of vector text (Helvetica, 45 lines a page) and a
10-second 1280x720 H.264 clip at 30 frames per second (a pan across coffee.png);
their row gives the sum of the bytes out and tokens, and the size of one picture.

Then the time of the first image a fresh process prepares, which has no freed memory
to reuse yet.

The OCR check (needs the ``tesseract`` command, Debian package tesseract-ocr) reads
page.png as prepared (PNG, lossless) and re-encoded as JPEG at several qualities,
and prints bytes and how much of the original's OCR text each keeps (difflib ratio).
"""

from __future__ import annotations

import argparse
import difflib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw, ImageFont

from backend.documents import prepare_pdf
from backend.images import PreparedImage, decode_data_url, prepare_image
from backend.media import MEDIA_CONTEXT_SHARE, MediaBudget, MediaResult
from backend.video import prepare_video
from bench.harness import Report, table
from bench.media import make_video, raw_pdf

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
LIMITS = (4096, 16384)
RUNS = 7
CONTEXT = 32768  # KIMI_MAX_MODEL_LEN's default


def _save(image: Image.Image, path: Path, image_format: str, **params: Any) -> Path:
    image.save(path, image_format, **params)
    return path


def _photo(size: tuple[int, int], path: Path) -> Path:
    """coffee.png scaled to ``size`` with a little noise, as a phone JPEG (quality 92)."""
    base = Image.open(DATA / "coffee.png").convert("RGB").resize(size, Image.Resampling.LANCZOS)
    noise = Image.effect_noise(size, 24).convert("RGB")
    return _save(Image.blend(base, noise, 0.15), path, "JPEG", quality=92)


def _screenshot(path: Path) -> Path:
    """A 1920x1080 text-heavy screenshot (black 16 px text on white, a grey side bar)."""
    image = Image.new("RGB", (1920, 1080), "white")
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, 300, 1080), fill=(238, 238, 242))
    font = ImageFont.load_default(16)
    for row in range(45):
        text = f"{row:02d}  def prepare(path, limit): tokens = ceil(h / 28) * ceil(w / 28)"
        draw.text((320, 12 + row * 23), text, fill=(20, 20, 20), font=font)
    return _save(image, path, "PNG")


def _text_pdf(path: Path, pages: int = 8) -> Path:
    """A US-letter PDF of ``pages`` pages, each 45 lines of 11-point Helvetica text."""
    line = "The vision tower cuts each page into 14x14 patches; 2x2 patches make a token."
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"", b"<< /Type /Font /Subtype /Type1 "
               b"/BaseFont /Helvetica >>"]  # fmt: skip
    kids = []
    for page in range(pages):
        text = " ".join(f"0 -15 Td ({page + 1}.{row:02d} {line}) Tj" for row in range(45))
        stream = f"BT /F1 11 Tf 54 750 Td {text} ET".encode()
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R >> >> >>" % len(objects)
        )
        kids.append(b"%d 0 R" % len(objects))
    objects[1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(kids), pages)
    path.write_bytes(raw_pdf(objects))
    return path


def _clip(path: Path, seconds: int = 10, fps: int = 30) -> Path:
    """A 1280x720 H.264 MP4 panning across coffee.png (scaled up), ``seconds`` long."""
    width, height = 1280, 720
    scene = Image.open(DATA / "coffee.png").convert("RGB")
    scene = scene.resize((width * 2, height), Image.Resampling.BILINEAR)
    frames = seconds * fps

    def picture(index: int) -> Image.Image:
        left = index * width // frames
        return scene.crop((left, 0, left + width, height))

    return make_video(path, seconds, fps, (width, height), picture=picture)


def _inputs(folder: Path) -> list[Path]:
    made = [
        _photo((4000, 3000), folder / "photo-12mp.jpg"),
        _photo((8000, 6000), folder / "photo-48mp.jpg"),
        _screenshot(folder / "screenshot-1080p.png"),
    ]
    return [DATA / name for name in sorted(os.listdir(DATA)) if name != "README.md"] + made


def _median_ms(prepare: Callable[[], object]) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        prepare()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


Row = list[str]


def _row(name: str, limit: int, size_in: int, images: list[PreparedImage], ms: float) -> Row:
    """A table row: input, budget, bytes in and out, the first picture's pixels, tokens,
    its format, the median time."""
    first = images[0]
    return [
        name, str(limit), f"{size_in:,}", f"{sum(_payload_bytes(i) for i in images):,}",
        f"{first.width}x{first.height}", str(sum(i.tokens for i in images)), _format(first),
        f"{ms:.1f}",
    ]  # fmt: skip


def _media_rows(folder: Path) -> list[Row]:
    """Rows for a PDF and a video, with one message's budget on a 32K server."""
    preparers: list[tuple[Path, Callable[[Path, MediaBudget], MediaResult]]] = [
        (_text_pdf(folder / "text-8-pages.pdf"), prepare_pdf),
        (_clip(folder / "clip-10s-720p.mp4"), prepare_video),
    ]
    rows = []
    for path, prepare in preparers:
        for limit in LIMITS:
            budget = MediaBudget(64, int(MEDIA_CONTEXT_SHARE * CONTEXT), limit)
            images = prepare(path, budget).images
            ms = _median_ms(partial(prepare, path, budget))
            name = f"{path.name} ({len(images)})"
            rows.append(_row(name, limit, path.stat().st_size, images, ms))
    return rows


def _payload_bytes(image: PreparedImage) -> int:
    """Bytes of the encoded image its data URL carries (before base64)."""
    return len(decode_data_url(image.data_url)[1])


def _format(image: PreparedImage) -> str:
    """``jpeg``, ``png`` or ``webp``: the encoding its data URL names."""
    return decode_data_url(image.data_url)[0].removeprefix("image/")


def timing_table(folder: Path) -> str:
    """The table: input, budget, size in, size out, pixels out, tokens, format, ms."""
    rows = [
        _row(path.name, limit, path.stat().st_size, [prepare_image(path, limit)],
             _median_ms(partial(prepare_image, path, limit)))
        for path in _inputs(folder)
        for limit in LIMITS
    ]  # fmt: skip
    head = ["input", "limit", "size in", "size out", "pixels out", "tokens", "format", "ms"]
    return table(head, rows + _media_rows(folder))


_FIRST_IMAGE = (
    "import sys, time; from backend.images import prepare_image; "
    "start = time.perf_counter(); prepare_image(sys.argv[1], int(sys.argv[2])); "
    "print((time.perf_counter() - start) * 1000)"
)


def first_image_line(folder: Path, name: str = "photo-12mp.jpg", limit: int = 16384) -> str:
    """The time of the first image a fresh process prepares (median of RUNS processes).

    The table's times are a running process's: Pillow's freed memory is kept for reuse
    (``backend.images.FREED_BLOCKS_KEPT``), so only the first large image pays the
    page faults of fresh memory.
    """
    command = [sys.executable, "-c", _FIRST_IMAGE, str(folder / name), str(limit)]
    times = [
        float(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
        for _ in range(RUNS)
    ]
    return (
        f"First image of a fresh process, {name} at {limit}: "
        f"{statistics.median(times):.1f} ms (median of {RUNS} processes)."
    )


def _ocr(image_bytes: bytes, folder: Path) -> str:
    path = folder / "ocr-input"
    path.write_bytes(image_bytes)
    result = subprocess.run(
        ["tesseract", str(path), "-", "--psm", "6"], capture_output=True, text=True, check=True
    )
    return " ".join(result.stdout.split())


def ocr_check(folder: Path) -> list[str]:
    """Bytes and OCR agreement with the original for page.png in several encodings."""
    if shutil.which("tesseract") is None:
        return ["tesseract not found (apt-get install tesseract-ocr): OCR check skipped"]
    source = DATA / "page.png"
    prepared = prepare_image(source, 16384)
    page = Image.open(source)
    reference = _ocr(source.read_bytes(), folder)
    mime, data = decode_data_url(prepared.data_url)
    variants: list[tuple[str, bytes]] = [(f"prepared ({mime})", data)]
    for quality in (95, 90, 85, 80, 75, 50):
        buffer = io.BytesIO()
        page.save(buffer, "JPEG", quality=quality)
        variants.append((f"JPEG quality {quality}", buffer.getvalue()))
    rows = []
    for label, data in variants:
        text = _ocr(data, folder)
        matcher = difflib.SequenceMatcher(None, reference, text, autojunk=False)
        changed = sum(
            max(end1 - start1, end2 - start2)
            for tag, start1, end1, start2, end2 in matcher.get_opcodes()
            if tag != "equal"
        )
        rows.append([label, f"{len(data):,}", f"{matcher.ratio():.4f}", str(changed)])
    return [
        f"page.png ({page.width}x{page.height}, {source.stat().st_size:,} bytes): tesseract "
        f"reads {len(reference)} characters from the original.",
        table(["encoding", "bytes", "OCR agreement", "chars changed"], rows),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ocr", action="store_true", help="also run the OCR check")
    arguments = parser.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    report = Report("Preparing pictures (one core)", "images")
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        report.add(timing_table(folder), first_image_line(folder))
        if arguments.ocr:
            report.add(*ocr_check(folder))
    report.finish({"args": vars(arguments), "tables": report.parts})


if __name__ == "__main__":
    main()
