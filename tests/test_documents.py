"""Tests of backend.documents (PDF pages as images) and PDF sniffing, on PDFs made here."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.documents import MAX_RENDER_DPI, page_pixels, prepare_pdf
from backend.errors import ImageError
from backend.images import fit_to_budget, image_tokens
from backend.media import MediaBudget, UploadKind, sniff_kind
from tests.media import (
    ONE_PAGE,
    PAGE_COLOURS,
    budget,
    cut_keeping_a_trailer,
    encrypted_pdf,
    make_pdf,
    one_line_naming,
    raw_pdf,
)
from tests.test_images import LIMITS, decode


def test_pages_up_to_the_image_limit_with_a_notice_of_those_left_out(tmp_path: Path) -> None:
    pdf = make_pdf(tmp_path / "report.pdf", pages=12)
    result = prepare_pdf(pdf, budget(images=5, limit=4096))
    assert [image.name for image in result.images] == [f"report.pdf page {n}" for n in range(1, 6)]
    assert result.text == "Pages 1-5 of report.pdf (12 pages in all)"
    assert result.notices == [
        "report.pdf: pages 1-5 of 12 sent as images; pages 6-12 left out "
        "(at most 5 more images fit in this message)"
    ]
    for index, image in enumerate(result.images):  # in order: each page's own colour
        pixels = decode(image).convert("RGB")
        centre = pixels.getpixel((pixels.width // 2, pixels.height // 2))
        assert isinstance(centre, tuple)  # Pillow stores PDF pages as JPEG: off by a few levels
        assert all(abs(a - b) <= 3 for a, b in zip(centre, PAGE_COLOURS[index], strict=True))


def test_pages_up_to_the_token_budget(tmp_path: Path) -> None:
    pdf = make_pdf(tmp_path / "report.pdf", pages=4)
    page_tokens = image_tokens(*page_pixels(612, 792, 16384), 16384)
    result = prepare_pdf(pdf, budget(tokens=2 * page_tokens + 100))
    assert len(result.images) == 2
    assert sum(image.tokens + 4 for image in result.images) <= 2 * page_tokens + 100
    assert result.notices[0].startswith("report.pdf: pages 1-2 of 4 sent as images; pages 3-4")
    assert f"{2 * page_tokens + 100} tokens were left" in result.notices[0]


def test_all_pages_fit_and_a_single_page_is_named_so(tmp_path: Path) -> None:
    result = prepare_pdf(make_pdf(tmp_path / "a.pdf", pages=3), budget())
    assert result.text == "Pages 1-3 of a.pdf"
    assert result.notices == ["a.pdf: pages 1-3 of 3 sent as images"]
    single = prepare_pdf(make_pdf(tmp_path / "b.pdf", pages=1), budget())
    assert single.text == "Page 1 of b.pdf"


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize(
    ("size_px", "resolution"),
    [((850, 1100), 100), ((1100, 850), 100), ((827, 1169), 100), ((300, 3000), 50)],
    ids=["letter", "landscape", "a4", "long-strip"],  # the strip: 573.4 px rounded to 573
)
def test_render_size_is_fit_to_budget_and_tokens_are_known(
    tmp_path: Path, limit: int, size_px: tuple[int, int], resolution: float
) -> None:
    pdf = make_pdf(tmp_path / "page.pdf", pages=1, size_px=size_px, resolution=resolution)
    (page,) = prepare_pdf(pdf, budget(limit=limit)).images
    width_in, height_in = (side / resolution for side in size_px)
    expected = fit_to_budget(
        round(width_in * MAX_RENDER_DPI), round(height_in * MAX_RENDER_DPI), limit
    )
    assert (page.width, page.height) == expected
    assert decode(page).size == expected  # the pixels sent, not only the claim
    assert (page.width // 14) * (page.height // 14) <= limit
    assert page.tokens == image_tokens(page.width, page.height, limit)
    assert page.mime_type == "image/png"  # a flat text page: lossless


def test_small_page_is_rendered_at_most_at_300_dpi(tmp_path: Path) -> None:
    card = make_pdf(tmp_path / "card.pdf", pages=1, size_px=(350, 200), resolution=100)
    (page,) = prepare_pdf(card, budget()).images
    assert (page.width, page.height) == (1050, 600)  # 3.5 x 2 inches at 300 dpi


def test_a_page_without_colour_is_sent_as_one_gray_channel(tmp_path: Path) -> None:
    blank = tmp_path / "blank.pdf"
    blank.write_bytes(raw_pdf(ONE_PAGE))  # an empty page: white
    (page,) = prepare_pdf(blank, budget()).images
    image = decode(page)
    assert image.mode == "L" and image.getextrema() == (255, 255)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"%PDF-1.7\nthis is not a PDF body\n", "the PDF is damaged or unsupported"),
        (encrypted_pdf(), "the PDF is password-protected"),
    ],
    ids=["garbage", "encrypted"],
)
def test_broken_or_locked_pdf_is_one_line_naming_the_file(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    path = tmp_path / "upload.bin"
    path.write_bytes(content)
    with pytest.raises(ImageError) as error:
        prepare_pdf(path, budget(), name="contract.pdf")
    assert one_line_naming(error.value, "contract.pdf").startswith(f"contract.pdf: {reason}")


CUT_SHORT = (
    "the PDF is cut short (the file ends before its %%EOF marker); upload the whole file again"
)


def test_a_pdf_cut_anywhere_before_its_trailer_is_refused_in_one_sentence(tmp_path: Path) -> None:
    whole = make_pdf(tmp_path / "whole.pdf", pages=3).read_bytes()
    # Pillow writes the objects, then the cross-reference table, the trailer, startxref.
    first_object = whole.index(b" 0 obj") + len(b" 0 obj")
    trailer_end = whole.index(b">>", whole.index(b"trailer")) + len(b">>")  # its dictionary
    cuts = [*range(first_object, trailer_end, 997), whole.index(b"xref"), trailer_end - 1]
    assert len(cuts) > 40
    cut = tmp_path / "upload.bin"
    for length in cuts:
        cut.write_bytes(whole[:length])
        with pytest.raises(ImageError) as error:
            prepare_pdf(cut, budget(), name="report.pdf")
        assert str(error.value) == f"report.pdf: {CUT_SHORT}", length


def test_a_pdf_cut_after_its_trailer_loses_nothing_and_is_sent_whole(tmp_path: Path) -> None:
    whole = make_pdf(tmp_path / "whole.pdf", pages=3).read_bytes()
    trailer_end = whole.index(b">>", whole.index(b"trailer")) + len(b">>")  # its dictionary
    cut = tmp_path / "cut.pdf"
    for length in (trailer_end, len(whole) - 3):  # without startxref; "%%EOF" cut to "%%"
        cut.write_bytes(whole[:length])
        result = prepare_pdf(cut, budget(limit=4096))
        assert result.notices == ["cut.pdf: pages 1-3 of 3 sent as images"]
        for index, image in enumerate(result.images):
            pixels = decode(image).convert("RGB")
            centre = pixels.getpixel((pixels.width // 2, pixels.height // 2))
            assert isinstance(centre, tuple)
            assert all(abs(a - b) <= 3 for a, b in zip(centre, PAGE_COLOURS[index], strict=True))


@pytest.mark.parametrize("page", [2, 3])
def test_a_cut_pdf_whose_trailer_survives_is_refused_naming_the_first_lost_page(
    tmp_path: Path, page: int
) -> None:
    whole = make_pdf(tmp_path / "whole.pdf", pages=3).read_bytes()
    # Pillow writes page n's picture, then its page object: cut just before the page object.
    page_object = b"%d 0 obj<<\n/Resources" % (2 * page - 1)
    cut = tmp_path / "upload.bin"
    cut.write_bytes(cut_keeping_a_trailer(whole, whole.index(page_object)))
    with pytest.raises(ImageError) as error:
        prepare_pdf(cut, budget(), name="report.pdf")
    assert str(error.value) == (
        f"report.pdf: page {page} of 3 cannot be read (the PDF is damaged or cut short); "
        "upload the whole file again"
    )


def test_no_room_left_is_a_problem_naming_the_file(tmp_path: Path) -> None:
    pdf = make_pdf(tmp_path / "report.pdf", pages=2)
    with pytest.raises(ImageError, match=r"^report.pdf: not used: no image slot is left"):
        prepare_pdf(pdf, budget(images=0))
    with pytest.raises(ImageError, match=r"^report.pdf: not used: too few tokens are left"):
        prepare_pdf(pdf, budget(tokens=500))


def test_empty_and_too_big_files_are_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.pdf"
    empty.write_bytes(b"")
    with pytest.raises(ImageError, match=r"^empty.pdf: the file is empty"):
        prepare_pdf(empty, budget())
    pdf = make_pdf(tmp_path / "big.pdf", pages=1)
    with pytest.raises(ImageError, match=r"^big.pdf: .* MB is over the"):
        prepare_pdf(pdf, MediaBudget(images=8, tokens=10**6, in_token_limit=4096, max_bytes=10))


def test_sniffing_finds_pdfs_by_content_not_name(tmp_path: Path) -> None:
    disguised = tmp_path / "scan.jpg"
    make_pdf(disguised.with_suffix(".pdf"), pages=1).rename(disguised)
    assert sniff_kind(disguised) is UploadKind.PDF
    fake = tmp_path / "fake.pdf"
    fake.write_text("<html>not a pdf</html>")
    assert sniff_kind(fake) is UploadKind.IMAGE  # the image decoder then says what it is
    assert sniff_kind(tmp_path / "missing.pdf") is UploadKind.IMAGE
