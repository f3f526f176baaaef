"""Reading points and boxes out of answers, and drawing them (backend/grounding.py).

Expectations are written by hand: the screenshot is public/samples/settings.png
(1280x800; its Dark mode switch spans pixels 1148-1200 x 146-176, centre (1174, 161),
as tests/data/settings-page/render.py prints), the photo is coffee.png (600x400; the
spoon lies within about x 324-426, y 64-328).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass

import pytest
from PIL import Image

from backend.grounding import (
    MAX_MARKS,
    MAX_REASONS,
    PALETTE,
    Box,
    Grounding,
    Mark,
    Point,
    Referred,
    caption,
    draw_marks,
    not_drawn_note,
    overlays,
    read_marks,
    referred_images,
)
from backend.i18n import translator
from backend.images import prepare_image
from backend.starters import SAMPLES
from tests.conftest import DATA


@dataclass(frozen=True)
class Seen:
    """An image as the model saw it: a name and a size in pixels."""

    name: str
    width: int
    height: int


SCREEN = Seen("settings.png", 1280, 800)
PHOTO = Seen("coffee.png", 600, 400)


def shapes(answer: str, *images: Seen) -> list[Point | Box]:
    """The shapes read from ``answer`` (on the screenshot when no image is given)."""
    return [mark.shape for mark in read_marks(answer, images or (SCREEN,)).marks]


def approx_point(x: float, y: float) -> object:
    return Point(pytest.approx(x, abs=1e-3), pytest.approx(y, abs=1e-3))  # type: ignore[arg-type]


def approx_box(left: float, top: float, right: float, bottom: float) -> object:
    return Box(*(pytest.approx(v, abs=1e-3) for v in (left, top, right, bottom)))  # type: ignore[arg-type]


# --- pyautogui click, as the ScreenSpot-Pro evaluation of Thinking-2506 asks for ---------


def test_thinking_answer_counts_and_the_reasoning_it_corrects_does_not() -> None:
    answer = (
        "◁think▷The user wants dark mode. The green switch is near x=0.917, y=0.301 … "
        "no, that one is Night light; Dark mode is the row above it.◁/think▷"
        "```python\npyautogui.click(x=0.917, y=0.201)\n```"
    )
    assert shapes(answer) == [Point(0.917, 0.201)]


def test_only_the_closing_marker_still_strips_the_reasoning() -> None:
    answer = "I guess click(x=0.1, y=0.1) at first.◁/think▷pyautogui.click(x=0.917, y=0.201)"
    assert shapes(answer) == [Point(0.917, 0.201)]


def test_reasoning_alone_draws_nothing() -> None:
    assert shapes("◁think▷The switch is at x=0.9, y=0.2, I think◁/think▷It is on the right.") == []


def test_plain_click_keyword_and_positional() -> None:
    assert shapes("click(x=0.204, y=0.149)") == [Point(0.204, 0.149)]
    assert shapes("pyautogui.click(0.5, 0.25)") == [Point(0.5, 0.25)]
    assert shapes("pyautogui.doubleClick(x=0.3, y=0.4)") == [Point(0.3, 0.4)]
    assert shapes("Action: moveTo(x=.75, y=.5)") == [Point(0.75, 0.5)]


def test_click_in_pixels_of_the_image_seen() -> None:
    assert shapes("pyautogui.click(x=640, y=400)") == [Point(0.5, 0.5)]
    assert shapes("pyautogui.click(1174, 161)") == [approx_point(1174 / 1280, 161 / 800)]


def test_click_comment_is_the_label() -> None:
    marks = read_marks("pyautogui.click(x=0.917, y=0.201)  # Dark mode switch", [SCREEN]).marks
    assert [(m.label, m.source) for m in marks] == [("Dark mode switch", "click")]


def test_click_outside_the_image_is_not_drawn_and_said() -> None:
    grounding = read_marks("pyautogui.click(x=1500, y=300)", [SCREEN])
    assert grounding.marks == ()
    assert grounding.not_drawn == (
        "“pyautogui.click(x=1500, y=300)” is outside settings.png (1280x800).",
    )


def test_fractions_mixed_with_pixels_are_not_drawn() -> None:
    grounding = read_marks("pyautogui.click(x=0.5, y=1.2)", [SCREEN])
    assert grounding.marks == ()
    assert grounding.not_drawn == (
        "“pyautogui.click(x=0.5, y=1.2)” is a mix of fractions (below 1) and pixels (above 1).",
    )


def test_the_same_point_twice_is_drawn_once() -> None:
    answer = "```python\nclick(x=0.5, y=0.5)\n```\nThat is x=0.5, y=0.5, the centre."
    assert shapes(answer) == [Point(0.5, 0.5)]
    rounded = "pyautogui.click(x=0.917, y=0.201)\nThat is about (0.92, 0.20), top right."
    assert shapes(rounded) == [Point(0.917, 0.201)]
    apart = "pyautogui.click(x=0.917, y=0.201)\nThen click (0.917, 0.301)."
    assert shapes(apart) == [Point(0.917, 0.201), Point(0.917, 0.301)]


# --- bbox_2d, as Instruct users report it -----------------------------------------------


def test_bbox_2d_normalised_json_list_with_labels() -> None:
    answer = (
        "Here are the objects:\n```json\n[\n"
        '  {"bbox_2d": [0.54, 0.16, 0.71, 0.82], "label": "spoon"},\n'
        '  {"bbox_2d": [0.32, 0.56, 0.44, 0.77], "label": "cup handle"}\n]\n```'
    )
    marks = read_marks(answer, [PHOTO]).marks
    assert [m.shape for m in marks] == [Box(0.54, 0.16, 0.71, 0.82), Box(0.32, 0.56, 0.44, 0.77)]
    assert [(m.number, m.label) for m in marks] == [(1, "spoon"), (2, "cup handle")]


def test_bbox_2d_in_pixels() -> None:
    answer = '{"bbox_2d": [324, 64, 426, 328], "label": "spoon"}'
    assert shapes(answer, PHOTO) == [approx_box(0.54, 0.16, 0.71, 0.82)]


def test_label_before_the_box_in_the_object() -> None:
    marks = read_marks("{'label': 'cup', 'bbox_2d': [120, 40, 420, 300]}", [PHOTO]).marks
    assert [(m.label, m.shape) for m in marks] == [("cup", approx_box(0.2, 0.1, 0.7, 0.75))]


def test_point_2d() -> None:
    assert shapes('{"point_2d": [300, 200], "label": "cup"}', PHOTO) == [Point(0.5, 0.5)]


def test_full_image_box_in_fractions() -> None:
    assert shapes('{"bbox_2d": [0, 0, 1, 1]}', PHOTO) == [Box(0, 0, 1, 1)]


def test_box_corners_in_the_wrong_order_are_not_drawn() -> None:
    grounding = read_marks('{"bbox_2d": [0.7, 0.5, 0.3, 0.2]}', [PHOTO])
    assert grounding.marks == ()
    assert "not a box from its top-left to its bottom-right corner" in grounding.not_drawn[0]


def test_box_of_three_numbers_is_not_drawn() -> None:
    grounding = read_marks('"bbox_2d": [0.1, 0.2, 0.3]', [PHOTO])
    assert grounding.marks == ()
    assert grounding.not_drawn == ('“"bbox_2d": [0.1, 0.2, 0.3]” has 3 numbers, not 4.',)


def test_an_echo_of_the_format_asked_for_is_not_a_box() -> None:
    answer = 'As asked, {"bbox_2d": [x1, y1, x2, y2], "label": "spoon"} with x1 = left.'
    assert read_marks(answer, [PHOTO]) == read_marks("", [PHOTO])
    assert shapes("I will answer with pyautogui.click(x=..., y=...).") == []


def test_box_partly_outside_in_pixels_is_not_drawn() -> None:
    assert shapes('{"bbox_2d": [324, 64, 426, 450]}', PHOTO) == []


# --- bare tuples, in pixels of the image seen --------------------------------------------


def test_point_after_a_cue_word() -> None:
    assert shapes("The Save button is at (1148, 539).") == [approx_point(1148 / 1280, 539 / 800)]
    assert shapes("Click the switch: (1174.0, 161.0)") == [approx_point(1174 / 1280, 161 / 800)]
    assert shapes("Its coordinates are [640, 400].") == [Point(0.5, 0.5)]


def test_box_after_a_cue_word() -> None:
    answer = "Bounding box of the spoon: [324, 64, 426, 328]"
    assert shapes(answer, PHOTO) == [approx_box(0.54, 0.16, 0.71, 0.82)]
    assert shapes("The spoon is in the region (324, 64, 426, 328).", PHOTO) == [
        approx_box(0.54, 0.16, 0.71, 0.82)
    ]


def test_corner_points_make_a_box() -> None:
    answer = "The spoon: top-left corner (324, 64), bottom-right corner (426, 328)."
    assert shapes(answer, PHOTO) == [approx_box(0.54, 0.16, 0.71, 0.82)]
    assert shapes("勺子左上角 (324, 64)，右下角 (426, 328)。", PHOTO) == [
        approx_box(0.54, 0.16, 0.71, 0.82)
    ]
    # On two lines, or without the corner words, they stay two points.
    assert len(shapes("Top-left (324, 64).\nBottom-right (426, 328).", PHOTO)) == 2
    assert len(shapes("The cup is at (324, 64) and the spoon at (426, 328).", PHOTO)) == 2


def test_named_box_variables() -> None:
    answer = "(x1, y1, x2, y2) = (324, 64, 426, 328)"
    assert shapes(answer, PHOTO) == [approx_box(0.54, 0.16, 0.71, 0.82)]


def test_a_line_of_only_coordinates() -> None:
    assert shapes("(640, 400)") == [Point(0.5, 0.5)]
    assert shapes("- `[324, 64, 426, 328]`", PHOTO) == [approx_box(0.54, 0.16, 0.71, 0.82)]


def test_fractions_in_a_bare_tuple() -> None:
    assert shapes("The switch is at (0.917, 0.201).") == [Point(0.917, 0.201)]


def test_bold_name_on_the_line_is_the_label() -> None:
    marks = read_marks("- **Dark mode**: click at (1174, 161)", [SCREEN]).marks
    assert [m.label for m in marks] == ["Dark mode"]


def test_chinese_answers() -> None:
    assert shapes("深色模式开关位于 (1174, 161)。") == [approx_point(1174 / 1280, 161 / 800)]
    assert shapes("勺子的坐标框是 [324, 64, 426, 328]", PHOTO) == [
        approx_box(0.54, 0.16, 0.71, 0.82)
    ]


def test_several_points_are_numbered_in_answer_order() -> None:
    answer = (
        "1. Open the switch: pyautogui.click(x=0.917, y=0.201)\n"
        "2. Then press **Save changes** at (1148, 539)"
    )
    marks = read_marks(answer, [SCREEN]).marks
    assert [(m.number, m.source, m.label) for m in marks] == [
        (1, "click", ""),
        (2, "tuple", "Save changes"),
    ]


# --- numbers that are not coordinates -----------------------------------------------------


@pytest.mark.parametrize(
    "answer",
    [
        "Do steps (1, 2) and then (3).",  # list numbering
        "Click options (1, 2) to continue.",  # numbering, even after a cue word
        "The vector at (3, 4) has length 5.",  # small integers
        "He lived there between (1999, 2004).",  # years
        "Sales peaked at (2019, 2020).",  # years, even after a cue word
        "Tickets cost $(12, 15) at the door.",  # prices
        "Tickets cost €(12, 15) at the door.",
        "The sizes are (12.99, 15.99) in the shop.",  # no cue word
        "The screen resolution is (1920, 1080).",  # no cue word, and outside the image
        "Aspect ratio (16, 9) is the most common one.",
        "The mix is (50%, 30%) at most.",  # percentages
        "The mix at (50, 30)% is typical.",
        "Meet at (12:30, 14:00).",  # times
        "At (-5, 10) nothing is there.",  # negative
        "The point (640, 400, 12) has three numbers.",  # three numbers
        "The dark mode switch is on the right of the first row.",  # no numbers at all
    ],
)
def test_not_coordinates(answer: str) -> None:
    grounding = read_marks(answer, [SCREEN])
    assert grounding.marks == ()
    assert grounding.not_drawn == ()  # bare numbers are left out silently


def test_bare_tuple_outside_the_image_is_left_out_silently() -> None:
    grounding = read_marks("The button is at (1500, 300).", [SCREEN])
    assert grounding == read_marks("", [SCREEN])


def test_no_images_no_marks() -> None:
    assert read_marks("pyautogui.click(x=0.5, y=0.5)", []).marks == ()


# --- several images -----------------------------------------------------------------------


def test_several_images_and_no_name_draws_nothing_and_says_why() -> None:
    grounding = read_marks("pyautogui.click(x=0.5, y=0.5)", [SCREEN, PHOTO])
    assert grounding.marks == ()
    assert grounding.not_drawn == (
        "“pyautogui.click(x=0.5, y=0.5)” does not say which of the 2 images it is on.",
    )


def test_several_images_bare_tuples_without_a_name_are_silent() -> None:
    grounding = read_marks("The switch is at (640, 400).", [SCREEN, PHOTO])
    assert grounding.marks == () and grounding.not_drawn == ()


def test_marks_follow_the_image_the_answer_names() -> None:
    answer = (
        'In coffee.png the spoon is {"bbox_2d": [0.54, 0.16, 0.71, 0.82], "label": "spoon"}; '
        "in settings.png click(x=0.917, y=0.201)."
    )
    marks = read_marks(answer, [SCREEN, PHOTO]).marks
    assert [(m.number, m.image) for m in marks] == [(1, 1), (2, 0)]


def test_ordinal_and_numbered_image_names() -> None:
    second = read_marks("In the second image the cup is at [0.2, 0.1, 0.7, 0.75].", [SCREEN, PHOTO])
    assert [(m.image, m.shape) for m in second.marks] == [(1, Box(0.2, 0.1, 0.7, 0.75))]
    first = read_marks("Image 1: pyautogui.click(x=0.917, y=0.201)", [SCREEN, PHOTO])
    assert [m.image for m in first.marks] == [0]


def test_chinese_image_names() -> None:
    assert [
        m.image for m in read_marks("图2中，勺子位于 [324, 64, 426, 328]", [SCREEN, PHOTO]).marks
    ] == [1]
    assert [
        m.image for m in read_marks("第一张图：click(x=0.5, y=0.5)", [SCREEN, PHOTO]).marks
    ] == [0]


def test_pixels_are_checked_against_the_named_image() -> None:
    # (700, 300) fits the 1280x800 screenshot but not the 600x400 photo.
    assert read_marks("In image 2, the cup is at (700, 300).", [SCREEN, PHOTO]).marks == ()
    marks = read_marks("In image 1, the switch is at (700, 300).", [SCREEN, PHOTO]).marks
    assert [m.image for m in marks] == [0]


def test_an_image_that_is_not_in_the_turn() -> None:
    grounding = read_marks("In image 3: click(x=0.5, y=0.5)", [SCREEN, PHOTO])
    assert grounding.marks == ()
    assert grounding.not_drawn == ("“click(x=0.5, y=0.5)” is on image 3, but there are 2.",)


def test_one_image_ignores_image_numbers() -> None:
    assert shapes("In the first image: click(x=0.5, y=0.5)") == [Point(0.5, 0.5)]


# --- the prepared copy and the original ---------------------------------------------------


def test_pixels_of_the_prepared_copy_land_on_the_original() -> None:
    # Instruct's 4096-patch budget scales the 1280x800 screenshot down; the model
    # answers in pixels of what it saw, where the switch centre is at 1174 and 161
    # times the scale (1141/1280 and 713/800: about (1046.5, 143.5)).
    prepared = prepare_image(SAMPLES / "settings.png", 4096)
    assert (prepared.width, prepared.height) == (1141, 713)
    (mark,) = read_marks("The switch is at (1046, 143).", [prepared]).marks
    assert isinstance(mark.shape, Point)
    assert mark.shape.x * 1280 == pytest.approx(1174, abs=1.5)  # pixels of the original
    assert mark.shape.y * 800 == pytest.approx(161, abs=1.5)


# --- drawing ------------------------------------------------------------------------------


def test_draw_marks_draws_on_a_new_copy() -> None:
    white = Image.new("RGB", (400, 200), "white")
    point = Mark(1, Point(0.25, 0.5), 0, "", "click", "")
    box = Mark(2, Box(0.6, 0.2, 0.9, 0.8), 0, "cup", "bbox_2d", "")
    drawn = draw_marks(white, [point, box])
    assert drawn is not white and drawn.size == (400, 200)
    assert white.getcolors() == [(400 * 200, (255, 255, 255))]  # the original is untouched
    assert drawn.getpixel((100, 100)) == PALETTE[0]  # the point's centre dot
    assert drawn.getpixel((300, 160)) == PALETTE[1]  # the box's bottom edge (y = 160)
    assert drawn.getpixel((240, 100)) == PALETTE[1]  # its left edge (x = 240)
    assert drawn.getpixel((300, 100)) == (255, 255, 255)  # inside the box
    assert drawn.getpixel((20, 180)) == (255, 255, 255)  # far from both


def test_draw_marks_keeps_tags_inside_the_image() -> None:
    white = Image.new("RGB", (200, 100), "white")
    corner = Mark(1, Point(0.99, 0.01), 0, "a rather long label", "click", "")
    drawn = draw_marks(white, [corner])
    assert drawn.size == (200, 100)
    assert drawn.getpixel((198, 1)) != (255, 255, 255)  # the ring reaches the corner


def test_overlays_decode_the_prepared_image_and_keep_its_format() -> None:
    photo = prepare_image(DATA / "coffee.png", 16384)
    screen = prepare_image(SAMPLES / "settings.png", 16384)
    answer = (
        'In coffee.png: {"bbox_2d": [0.54, 0.16, 0.71, 0.82], "label": "spoon"}\n'
        "In settings.png: pyautogui.click(x=0.917, y=0.201)"
    )
    before = photo.data_url
    (on_screen, on_photo), grounding = overlays(answer, [screen, photo])
    assert len(grounding.marks) == 2
    assert (on_screen.image, on_screen.mime, on_screen.name) == (
        0,
        "image/png",
        "settings (marked).png",
    )
    assert (on_photo.image, on_photo.mime, on_photo.name) == (
        1,
        "image/jpeg",
        "coffee (marked).jpg",
    )
    assert photo.data_url == before
    drawn = Image.open(io.BytesIO(on_photo.content))
    assert drawn.size == (600, 400)
    original = Image.open(io.BytesIO(base64.b64decode(photo.data_url.split(",")[1])))
    # The box's left edge (x = 324) is drawn red; away from it the photo is as it was.
    red = drawn.getpixel((324, 200))
    assert isinstance(red, tuple) and red[0] > 180 and red[1] < 90 and red[2] < 110
    assert drawn.getpixel((100, 380)) == pytest.approx(original.getpixel((100, 380)), abs=12)
    assert "**coffee.png**" in on_photo.caption and "box 1, spoon." in on_photo.caption


def test_overlays_without_marks() -> None:
    photo = prepare_image(DATA / "coffee.png", 16384)
    assert overlays("A cup of espresso on a saucer.", [photo])[0] == []


def test_caption_names_the_image_and_escapes_markdown() -> None:
    marks = [
        Mark(1, Point(0.5, 0.5), 0, "", "click", ""),
        Mark(2, Box(0.1, 0.1, 0.2, 0.2), 0, "*big* cup", "bbox_2d", ""),
    ]
    assert caption("my_shot.png", marks) == (
        "Marked on **my\\_shot.png** (a copy; the original is unchanged): "
        "point 1; box 2, \\*big\\* cup."
    )


def test_not_drawn_note_escapes_the_model_text() -> None:
    grounding = read_marks('"bbox_2d": [0.1, 0.2, 0.3] and "point_2d": [5]', [PHOTO])
    assert not_drawn_note(grounding) == (
        'Not drawn: “"bbox\\_2d": \\[0.1, 0.2, 0.3\\]” has 3 numbers, not 4. '
        '“"point\\_2d": \\[5\\]” has 1 number, not 2.'
    )


# --- hostile answers: bounded work, bounded drawing ---------------------------------------


def test_a_number_too_long_to_read_is_skipped_and_the_valid_box_drawn() -> None:
    photo = prepare_image(DATA / "coffee.png", 16384)
    huge = "9" * 5000  # int() refuses more than 4,300 digits
    answer = (
        '{"bbox_2d": [0.54, 0.16, 0.71, 0.82], "label": "spoon"}\n'
        f"Also at ({huge}, {huge}), as image {huge} shows.\n"
        f"pyautogui.click(x={huge[:1000]}, y=5)"  # read: outside any image, and said
    )
    (overlay,), grounding = overlays(answer, [photo])
    assert [(m.shape, m.label) for m in overlay.marks] == [(Box(0.54, 0.16, 0.71, 0.82), "spoon")]
    (reason,) = grounding.not_drawn
    assert reason.startswith("“pyautogui.click(x=9999") and len(reason) < 150
    assert reason.endswith("…” is outside coffee.png (600x400).")


def test_at_most_max_marks_are_drawn_and_the_others_are_counted() -> None:
    photo = prepare_image(DATA / "coffee.png", 16384)
    boxes = "\n".join(
        f'{{"bbox_2d": [{x}, {y}, {x + 5}, {y + 5}]}}'
        for x in range(0, 600, 20)
        for y in range(0, 400, 20)
    )  # 30 x 20 = 600 boxes, all in different places
    (overlay,), grounding = overlays(boxes, [photo])
    assert len(overlay.marks) == MAX_MARKS == 50
    assert [m.number for m in overlay.marks] == list(range(1, 51))
    assert grounding.marks_left_out == 550
    assert "550 more points and boxes are not drawn: at most 50" in not_drawn_note(grounding)


def test_at_most_max_reasons_are_said_and_the_others_are_counted() -> None:
    answer = "\n".join(f'"bbox_2d": [0.{i}, 0.2, 0.3]' for i in range(1, 26))
    grounding = read_marks(answer, [PHOTO])
    assert len(grounding.not_drawn) == MAX_REASONS == 10
    assert grounding.not_drawn[0] == '“"bbox_2d": [0.1, 0.2, 0.3]” has 3 numbers, not 4.'
    assert grounding.reasons_left_out == 15
    assert "15 more coordinates cannot be drawn either." in not_drawn_note(grounding)


CAT = Seen("chelsea.png", 451, 300)


@pytest.mark.parametrize(
    ("question", "own", "earlier", "expected"),
    [
        ("Where is the switch?", [SCREEN], [PHOTO, CAT], (SCREEN,)),  # its own images
        ("Find the spoon in the first photo", [], [PHOTO, SCREEN, CAT], (PHOTO,)),
        ("And in image 2?", [], [PHOTO, SCREEN, CAT], (SCREEN,)),
        ("第二张图里的开关在哪？", [], [PHOTO, SCREEN, CAT], (SCREEN,)),
        ("Point at it in CHELSEA.png", [], [PHOTO, CAT, SCREEN], (CAT,)),
        ("Where is the spoon?", [], [PHOTO, SCREEN, CAT], (CAT,)),  # the latest
        ("Where is it?", [], [], ()),  # no image in the chat
    ],
)
def test_a_question_without_images_refers_to_the_one_it_names_or_the_latest(
    question: str, own: list[Seen], earlier: list[Seen], expected: tuple[Seen, ...]
) -> None:
    assert referred_images(question, own, earlier) == Referred(expected)


@pytest.mark.parametrize(
    ("question", "earlier", "sentence"),
    [
        (
            "Find the spoon in the third photo",
            [PHOTO, SCREEN],
            "the question names image 3, but the chat's images end at image 2.",
        ),
        (
            "Find it in photo 7",
            [PHOTO],
            "the question names image 7, but the chat's images end at image 1.",
        ),
        (
            "第三张图里的勺子在哪？",
            [PHOTO, SCREEN],
            "the question names image 3, but the chat's images end at image 2.",
        ),
        (
            "Where is the spoon in image 2?",
            [],
            "the question names image 2, but the chat has no image.",
        ),
    ],
)
def test_a_question_naming_an_image_the_chat_lacks_gets_none_and_the_reason(
    question: str, earlier: list[Seen], sentence: str
) -> None:
    referred = referred_images(question, [], earlier)
    assert (referred.images, referred.missing) == ((), sentence)


BBOX_ANSWER = '```json\n[{"bbox_2d": [0.54, 0.16, 0.71, 0.82], "label": "spoon"}]\n```'


def test_the_missing_image_is_said_once_when_the_answer_gives_coordinates() -> None:
    referred = referred_images("Find the spoon in the third photo", [], [PHOTO, SCREEN])
    grounding = read_marks(BBOX_ANSWER + " and at (300, 120).", referred.images, referred.missing)
    assert grounding.marks == ()
    assert not_drawn_note(grounding) == (
        "Not drawn: the question names image 3, but the chat's images end at image 2."
    )
    said_in_chinese = not_drawn_note(grounding, translator("zh-CN"))
    assert "第 3 张" in said_in_chinese and "第 2 张" in said_in_chinese, said_in_chinese


def test_the_missing_image_goes_unsaid_when_the_answer_gives_no_coordinates() -> None:
    referred = referred_images("Find the spoon in the third photo", [], [PHOTO, SCREEN])
    answer = "There are only two photos here: the 2 of them show a cup and a settings page."
    assert read_marks(answer, referred.images, referred.missing) == Grounding()
    assert overlays(answer, [], referred.missing) == ([], Grounding())


def test_a_follow_up_answer_outside_the_photo_it_names_says_which_photo() -> None:
    referred = referred_images("Find the spoon in the first photo", [], [PHOTO, SCREEN])
    grounding = read_marks("pyautogui.click(x=900, y=100)", referred.images, referred.missing)
    assert grounding.marks == ()
    assert not_drawn_note(grounding) == (
        "Not drawn: “pyautogui.click(x=900, y=100)” is outside coffee.png (600x400)."
    )
