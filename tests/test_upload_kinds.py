"""Upload kinds as data (backend/upload_kinds.py): one entry each, read by the judging of
an attached file, the preparation of a message's uploads, the drop zone and the docs
(issue 51). The files are real: PDFs with a text layer (tests/media.py), a bundled photo."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend import upload_kinds
from backend.i18n import ENGLISH, msg, translator
from backend.media import MediaBudget, MediaResult
from backend.upload_kinds import IMAGE, KINDS, PDF, VIDEO, UploadKind, drop_hint, sniff_kind
from backend.uploads import MediaWorkers, Upload, UploadLimits, prepare_uploads
from tests.media import budget, paragraph, text_pdf

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data"


def test_each_kind_has_a_name_a_label_and_its_media_types() -> None:
    assert [kind.name for kind in KINDS] == ["image", "pdf", "video"]
    assert all(kind.types and str(kind.label) for kind in KINDS)
    assert IMAGE.prepared_early and not PDF.prepared_early and not VIDEO.prepared_early


def test_the_kind_comes_from_the_first_bytes_not_the_name(tmp_path: Path) -> None:
    pdf = text_pdf(tmp_path / "photo.jpg", [paragraph(1)])
    webm = tmp_path / "notes.pdf"
    webm.write_bytes(b"\x1a\x45\xdf\xa3" + bytes(60))
    assert sniff_kind(pdf) is PDF
    assert sniff_kind(webm) is VIDEO
    assert sniff_kind(DATA / "rocket.jpg") is IMAGE
    assert sniff_kind(tmp_path / "missing") is IMAGE  # the image decoder says what is wrong


def test_a_kind_prepares_its_own_files(tmp_path: Path) -> None:
    pdf = text_pdf(tmp_path / "report.pdf", [paragraph(1)])
    result = PDF.prepare(pdf, budget(images=3, limit=16384), "report.pdf")
    assert result.images == [] and "Section 1.1: revenue" in result.text
    with pytest.raises(TypeError, match="one by one"):
        IMAGE.prepare(DATA / "rocket.jpg", MediaBudget(8, 8000, 4096), "rocket.jpg")


def test_the_drop_zone_names_every_kind_in_the_chats_language() -> None:
    assert drop_hint(ENGLISH) == "Drop images, PDFs, or videos here to attach them"
    assert drop_hint(translator("zh-CN")) == "将图片、PDF或视频拖放到这里即可附加"


def test_the_docs_name_every_kinds_media_types() -> None:
    features = (ROOT / "docs" / "features.md").read_text(encoding="utf-8")
    assert [t for kind in KINDS for t in kind.types if f"`{t}`" not in features] == []


def prepare_toy(path: Path, budget: MediaBudget, name: str) -> MediaResult:
    """The toy kind's preparer: its file's text for the model, no pictures."""
    return MediaResult(images=[], text=f"{name}: {path.read_bytes()[4:].decode()}")


TOY = UploadKind("toy", msg("toys"), ("application/x-toy",), lambda head: head[:4] == b"TOY!",
                 f"{__name__}:prepare_toy")  # fmt: skip
"""A kind this test adds: its sniffer, preparer and types are all it brings."""


async def test_a_new_kind_is_one_entry_in_the_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adding a kind touches only its preparer, the registry and its tests: with one
    entry more, a message's toy file is prepared by its preparer (in a media worker), the
    photo beside it as an image, and the drop zone names toys."""
    monkeypatch.setattr(upload_kinds, "KINDS", (*upload_kinds.KINDS, TOY))
    monkeypatch.setattr(upload_kinds, "SNIFF_ORDER", (TOY, *upload_kinds.SNIFF_ORDER))
    toy = tmp_path / "blocks.bin"
    toy.write_bytes(b"TOY!three red blocks")
    limits = UploadLimits(in_token_limit=1024, images_per_prompt=8, max_model_len=8192,
                          max_bytes=10**7)  # fmt: skip
    workers = MediaWorkers(1)
    try:
        uploads = [Upload("blocks.bin", toy), Upload("rocket.jpg", DATA / "rocket.jpg")]
        result = await prepare_uploads(uploads, limits, workers)
    finally:
        workers.close()
    assert result.problems == []
    assert result.texts == ["blocks.bin: three red blocks"]
    assert [image.name for image in result.images] == ["rocket.jpg"]
    assert drop_hint(ENGLISH) == "Drop images, PDFs, videos, or toys here to attach them"
