"""Tests of backend.documents (PDF pages as images) and PDF sniffing, on PDFs made here."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.conversation import estimate_text_tokens
from backend.documents import PAGE_HEADING_TOKENS, page_pixels, prepare_pdf
from backend.errors import ImageError
from backend.media import MediaBudget
from backend.upload_kinds import IMAGE, PDF, sniff_kind
from tests.media import (
    ONE_PAGE,
    PAGE_COLOURS,
    budget,
    cut_keeping_a_trailer,
    encrypted_pdf,
    make_pdf,
    one_line_naming,
    paragraph,
    raw_pdf,
    text_pdf,
)
from tests.test_images import LIMITS, decode, mime


def test_pages_up_to_the_image_limit_with_a_notice_of_those_left_out(tmp_path: Path) -> None:
    pdf = make_pdf(tmp_path / "report.pdf", pages=12)
    result = prepare_pdf(pdf, budget(images=5, limit=4096))
    assert [image.name for image in result.images] == [f"report.pdf page {n}" for n in range(1, 6)]
    assert result.text == "Pages 1-5 of report.pdf (12 pages in all)"
    assert result.notices == [
        "report.pdf: pages 1-5 of 12 sent as images. Left out: pages 6-12, for lack of room "
        "in this message; to have them read, send them as a PDF of their own."
    ]
    for index, image in enumerate(result.images):  # in order: each page's own colour
        pixels = decode(image).convert("RGB")
        centre = pixels.getpixel((pixels.width // 2, pixels.height // 2))
        assert isinstance(centre, tuple)  # Pillow stores PDF pages as JPEG: off by a few levels
        assert all(abs(a - b) <= 3 for a, b in zip(centre, PAGE_COLOURS[index], strict=True))


LETTER_TOKENS = 57 * 74
"""A US letter page (612x792 pt, 2550x3300 px at 300 dpi) at the 16384-patch budget:
1581x2046 px, worked by hand in tests/test_images.py ``FITTED``."""


def test_pages_up_to_the_token_budget(tmp_path: Path) -> None:
    pdf = make_pdf(tmp_path / "report.pdf", pages=4)
    assert page_pixels(612, 792, 16384) == (1581, 2046)
    left = 2 * (LETTER_TOKENS + 4) + 100  # two pages and their chat-template overhead, + 100
    result = prepare_pdf(pdf, budget(tokens=left))
    assert [image.tokens for image in result.images] == [LETTER_TOKENS, LETTER_TOKENS]
    assert result.notices == [
        "report.pdf: pages 1-2 of 4 sent as images. Left out: pages 3-4, for lack of room "
        "in this message; to have them read, send them as a PDF of their own."
    ]


def test_all_pages_fit_and_a_single_page_is_named_so(tmp_path: Path) -> None:
    result = prepare_pdf(make_pdf(tmp_path / "a.pdf", pages=3), budget())
    assert result.text == "Pages 1-3 of a.pdf"
    assert result.notices == ["a.pdf: pages 1-3 of 3 sent as images"]
    single = prepare_pdf(make_pdf(tmp_path / "b.pdf", pages=1), budget())
    assert single.text == "Page 1 of b.pdf"


def test_a_text_pdf_is_read_as_its_text_not_as_pictures(tmp_path: Path) -> None:
    pdf = text_pdf(tmp_path / "report.pdf", [paragraph(n) for n in range(1, 7)])
    result = prepare_pdf(pdf, budget(images=3, limit=16384))
    assert result.images == []  # six pages, and no image slot spent on them
    assert result.notices == ["report.pdf: pages 1-6 of 6 read as text"]
    assert result.text.startswith("report.pdf, 6 pages:\n\n--- page 1 ---\nSection 1.1: revenue")
    for page in range(1, 7):
        assert f"--- page {page} ---\nSection {page}.1: " in result.text
        assert f"Section {page}.12: revenue grew in region 12 of {page}." in result.text


def test_a_picture_page_is_sent_as_an_image_between_text_pages(tmp_path: Path) -> None:
    pdf = text_pdf(tmp_path / "mixed.pdf", [paragraph(1), None, paragraph(3)])
    result = prepare_pdf(pdf, budget(limit=4096))
    assert [image.name for image in result.images] == ["mixed.pdf page 2"]
    picture = decode(result.images[0]).convert("RGB")
    assert picture.getpixel((picture.width // 2, picture.height // 2)) == (26, 77, 204)
    assert result.notices == [
        "mixed.pdf: pages 1, 3 of 3 read as text, page 2 sent as images (no text on them)"
    ]
    assert "--- page 2: the image mixed.pdf page 2 ---" in result.text
    assert result.text.index("--- page 1 ---") < result.text.index("--- page 3 ---")


def test_text_pages_beyond_the_budget_are_left_out_in_a_plain_sentence(tmp_path: Path) -> None:
    pdf = text_pdf(tmp_path / "long.pdf", [paragraph(n) for n in range(1, 11)])
    two_pages = sum(estimate_text_tokens(paragraph(n)) + PAGE_HEADING_TOKENS for n in (1, 2))
    result = prepare_pdf(pdf, budget(tokens=two_pages + 10))
    assert result.notices == [
        "long.pdf: pages 1-2 of 10 read as text. Left out: pages 3-10, for lack of room in "
        "this message; to have them read, send them as a PDF of their own."
    ]
    assert result.text.startswith("long.pdf, 10 pages (pages 3-10 not included):")
    assert "Section 2.12" in result.text and "Section 3.1" not in result.text


# Render sizes worked by hand (tests/test_images.py FITTED shows the method): the page
# at 300 dpi, then the longer side L is the largest whose rounded shorter side keeps
# (W//14)*(H//14) within the budget; tokens = ceil(W/28) * ceil(H/28).
RENDERED = {
    # 8.5x11 in -> 2550x3300 px: in FITTED.
    ("letter", 4096): ((797, 1032), 29 * 37),
    ("letter", 16384): ((1581, 2046), 57 * 74),
    ("landscape", 4096): ((1032, 797), 37 * 29),
    ("landscape", 16384): ((2046, 1581), 74 * 57),
    # 8.27x11.69 in -> 2481x3507 px. L = 1067: S = round(754.84) = 755, 53*76 = 4028;
    # L = 1068: S = 756, 54*76 = 4104 > 4096. ceil(755/28) = 27, ceil(1067/28) = 39.
    ("a4", 4096): ((755, 1067), 27 * 39),
    # L = 2136: S = round(1511.10) = 1511, 107*152 = 16264; L = 2137: S = 1512, 108*152 =
    # 16416 > 16384. ceil(1511/28) = 54 (28*53 = 1484), ceil(2136/28) = 77 (28*76 = 2128).
    ("a4", 16384): ((1511, 2136), 54 * 77),
    # 6x60 in -> 1800x18000 px. L = 2869: S = round(286.9) = 287, 20*204 = 4080; L = 2870:
    # S = 287, 20*205 = 4100 > 4096. ceil(287/28) = 11, ceil(2869/28) = 103 (28*102 = 2856).
    ("long-strip", 4096): ((287, 2869), 11 * 103),
    # In FITTED: 573x5734.
    ("long-strip", 16384): ((573, 5734), 21 * 205),
}


@pytest.mark.parametrize("limit", LIMITS)
@pytest.mark.parametrize(
    ("kind", "size_px", "resolution"),
    [
        ("letter", (850, 1100), 100),
        ("landscape", (1100, 850), 100),
        ("a4", (827, 1169), 100),
        ("long-strip", (300, 3000), 50),
    ],
    ids=["letter", "landscape", "a4", "long-strip"],
)
def test_render_size_is_fit_to_budget_and_tokens_are_known(
    tmp_path: Path, limit: int, kind: str, size_px: tuple[int, int], resolution: float
) -> None:
    pdf = make_pdf(tmp_path / "page.pdf", pages=1, size_px=size_px, resolution=resolution)
    (page,) = prepare_pdf(pdf, budget(limit=limit)).images
    size, tokens = RENDERED[kind, limit]
    assert (page.width, page.height) == size
    assert decode(page).size == size  # the pixels sent, not only the claim
    assert page.tokens == tokens
    assert mime(page) == "image/png"  # a flat text page: lossless


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
    assert sniff_kind(disguised) is PDF
    fake = tmp_path / "fake.pdf"
    fake.write_text("<html>not a pdf</html>")
    assert sniff_kind(fake) is IMAGE  # the image decoder then says what it is
    assert sniff_kind(tmp_path / "missing.pdf") is IMAGE
