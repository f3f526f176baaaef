"""Points and boxes in an answer, read back onto the image they refer to, and drawn.

Kimi-VL answers grounding questions with coordinates in the format the prompt asks
for (research notes, "Kimi-VL grounding output"): the official ScreenSpot-Pro
evaluation of Kimi-VL-A3B-Thinking-2506 asks for pyautogui code with coordinates
normalised to 0-1 of the image's width and height and reads ``x=0.204, y=0.149``
from the answer; Kimi-VL-Instruct users report ``{"bbox_2d": [0.28, 0.5, 0.52,
0.7]}`` (normalised x1, y1, x2, y2) for objects; asked for pixels, models give
pixels of the image they saw. :func:`read_marks` accepts, in the answer only (any
``◁think▷`` reasoning is removed first):

* **click**: ``click(x=0.204, y=0.149)``, with or without ``pyautogui.``, any of
  the pyautogui pointer functions, keyword or positional, or a bare
  ``x=0.204, y=0.149``; a trailing ``# comment`` is the label.
* **bbox_2d**: ``"bbox_2d": [x1, y1, x2, y2]`` (also ``bbox``), and
  ``"point_2d": [x, y]``, JSON or Python-dict quoting; a ``"label"`` in the same
  object is the label.
* **bare tuples**: ``(x, y)`` and ``[x1, y1, x2, y2]`` (either bracket), only where
  the reading is unambiguous: the line says what they are (a cue word such as
  "click", "at", "coordinates", "box", "坐标", "位于") or holds nothing else; not
  after a currency sign, not followed by ``%``; not all small integers below 10
  (list numbering such as "(1, 2)"); not all years (1900-2100). A ``**bold**`` name
  earlier on the line is the label. A top-left point followed on its line by a
  bottom-right one ("top-left (324, 64), bottom-right (426, 328)") is one box.

Values that are all between 0 and 1 are fractions of the image; otherwise they are
pixels of the image the model saw, our prepared copy (:class:`SeenImage`, e.g.
:class:`backend.images.PreparedImage`), and are divided by its size. A fraction is
the same place on the original upload: preparation only scales, keeping the aspect
ratio, so ``original_x = x * original_width / prepared_width`` is
``fraction * original_width``. (Kimi-VL's processor also pads the bottom and right
to multiples of 28 px; a model counting fractions of the padded picture would be
off by less than 28 px of the prepared image, not corrected here.) Anything outside
the image, values mixing fractions below 1 with pixels above 1, and boxes whose
corners are not top-left then bottom-right, are dropped. (Values on a 0-1000 scale,
as some other models give, read as pixels when they fit the image: no format tells
them apart.)

With several images in the turn a mark belongs to the image the answer last named
before it: its file name, "image 2" / "picture 2" / "screenshot 2" / "photo 2", "the
second image", "图2", "第2张" / "第二张"; a mark before any such name is not drawn
(there is no telling which image it is on).

:func:`draw_marks` draws marks on a new copy of an image with Pillow;
:func:`overlays` does the whole job for an answer and the turn's prepared images.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import astuple, dataclass
from functools import lru_cache
from typing import Final, Literal, Protocol

from PIL import Image, ImageDraw, ImageFont

from backend.i18n import ENGLISH, Translator, msg
from backend.images import PNG_COMPRESS_LEVEL, decode_data_url
from backend.reasoning import strip_reasoning

Source = Literal["click", "bbox_2d", "tuple"]
"""Which format a mark was read from (see the module docstring)."""


class SeenImage(Protocol):
    """What :func:`read_marks` needs of an image the model saw (a PreparedImage fits)."""

    @property
    def name(self) -> str:
        """The file name the person gave (found in answers that name the image)."""
        ...

    @property
    def width(self) -> int:
        """Width in pixels of the image as sent to the model."""
        ...

    @property
    def height(self) -> int:
        """Height in pixels of the image as sent to the model."""
        ...


@dataclass(frozen=True, slots=True)
class Point:
    """A place on an image, as fractions of its width (``x``) and height (``y``), 0-1."""

    x: float
    y: float


@dataclass(frozen=True, slots=True)
class Box:
    """A rectangle on an image, as fractions 0-1: ``left < right``, ``top < bottom``."""

    left: float
    top: float
    right: float
    bottom: float


@dataclass(frozen=True, slots=True)
class Mark:
    """A point or box the answer gave, on one image of the turn.

    Attributes:
        number: 1, 2, ... in the order of the answer (across all images), drawn
            next to the shape.
        shape: where, in fractions of the image (so it fits any copy of it).
        image: index of the image in the turn's images.
        label: what the model called it ("" when it gave no name).
        source: the format it was read from.
        text: the text it was read from, e.g. ``"pyautogui.click(x=0.204, y=0.149)"``.
    """

    number: int
    shape: Point | Box
    image: int
    label: str
    source: Source
    text: str


@dataclass(frozen=True, slots=True)
class Grounding:
    """What :func:`read_marks` found in an answer.

    Attributes:
        marks: the marks to draw, numbered in answer order.
        not_drawn: one sentence per coordinate given in an explicit format (click,
            bbox_2d) that is not drawn, saying why; bare tuples that are not read
            as coordinates are left out silently (they are usually not coordinates).
    """

    marks: tuple[Mark, ...] = ()
    not_drawn: tuple[str, ...] = ()

    def on(self, image: int) -> tuple[Mark, ...]:
        """The marks on image number ``image`` of the turn."""
        return tuple(mark for mark in self.marks if mark.image == image)


_NUM: Final = r"(?:\d+(?:\.\d+)?|\.\d+)"
_CLICK_FUNCTIONS: Final = (
    r"(?:pyautogui\.)?(?:click|doubleClick|double_click|rightClick|right_click|"
    r"middleClick|tripleClick|moveTo|move_to|dragTo|tap)"
)
_KEYWORD_POINT: Final = re.compile(
    rf"(?:\b{_CLICK_FUNCTIONS}\(\s*)?\bx\s*=\s*({_NUM})\s*,\s*y\s*=\s*({_NUM})(?:\s*\))?"
)
_POSITIONAL_CLICK: Final = re.compile(rf"\b{_CLICK_FUNCTIONS}\(\s*({_NUM})\s*,\s*({_NUM})\s*[,)]")
_KEYED: Final = re.compile(
    r"""["']?\b(bbox_2d|bbox|point_2d)\b["']?\s*[:=]\s*[\[(]([\d.,\s]*)[\])]""", re.IGNORECASE
)
_TUPLE: Final = re.compile(
    rf"(?<![\w$€£¥.])[\[(]\s*({_NUM})\s*,\s*({_NUM})"
    rf"(?:\s*,\s*({_NUM})\s*,\s*({_NUM}))?\s*[\])](?!\s*%)"
)
_LABEL_KEY: Final = re.compile(
    r"""["'](?:label|name|object|text|description)["']\s*:\s*["']([^"'\n]{1,80})["']"""
)
_COMMENT: Final = re.compile(r"^\s*\)?\s*#\s*(.{1,80}?)\s*$")
_BOLD: Final = re.compile(r"\*\*([^*\n]{1,60})\*\*")
_CUE: Final = re.compile(
    r"\b(?:click|clicks|clicking|tap|press|coordinates?|points?|pixels?|px|positions?|"
    r"located|location|at|box|bbox|bounding|cent(?:er|re)|corners?|region|x1|y1|"
    r"(?:top|bottom|upper|lower)[- ](?:left|right))\b"
    r"|\(\s*x\s*,\s*y\s*\)|点击|坐标|位置|位于|在|框|中心|处|角|左上|右下",
    re.IGNORECASE,
)
_ONLY_DECORATION: Final = re.compile(r"^[\s\-*+>•`:：.。,，]*$")
_CURRENCY_BEFORE: Final = re.compile(r"[$€£¥]\s*$")

_ORDINALS: Final = {
    "first": 1, "second": 2, "third": 3, "fourth": 4, "fifth": 5,
    "sixth": 6, "seventh": 7, "eighth": 8, "ninth": 9, "tenth": 10,
}  # fmt: skip
_CHINESE_DIGITS: Final = {c: i for i, c in enumerate("一二三四五六七八九十", start=1)}
_IMAGE_NOUN: Final = r"(?:image|picture|photo|screenshot|img)"
_NUMBERED_IMAGE: Final = re.compile(
    rf"\b{_IMAGE_NOUN}\s*#?\s*(\d+)\b"
    rf"|\b({'|'.join(_ORDINALS)})\s+{_IMAGE_NOUN}\b"
    r"|第\s*([0-9一二三四五六七八九十])\s*[张幅个]"
    r"|图(?:片|像)?\s*([0-9一二三四五六七八九十])",
    re.IGNORECASE,
)

SMALL_INTEGER: Final = 10
"""Bare tuples whose values are all integers below this are read as numbering."""

YEARS: Final = range(1900, 2101)
"""Bare tuples whose values are all integers in this range are read as years."""


@dataclass(frozen=True, slots=True)
class _Found:
    start: int
    end: int
    values: tuple[float, ...]
    source: Source
    label: str
    text: str
    wanted: int
    """How many numbers the format holds: 2 for a point, 4 for a box."""


def _numbers(text: str) -> tuple[float, ...]:
    return tuple(float(n) for n in re.findall(_NUM, text))


def _enclosing_object(text: str, start: int, end: int) -> str:
    """The flat ``{...}`` around ``text[start:end]``, or "" when there is none."""
    opening, closing = text.rfind("{", 0, start), text.find("}", end)
    if opening < 0 or closing < 0 or "}" in text[opening:start] or "{" in text[end:closing]:
        return ""
    return text[opening : closing + 1]


def _line_around(text: str, start: int, end: int) -> tuple[str, str]:
    """The parts of the line before ``start`` and after ``end``."""
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    return text[line_start:start], text[end : len(text) if line_end < 0 else line_end]


def _bold_label(before: str) -> str:
    names = _BOLD.findall(before)
    return names[-1].strip().rstrip(":：") if names else ""


def _explicit(answer: str) -> list[_Found]:
    """Coordinates in the click and bbox_2d formats."""
    found = []
    for pattern in (_KEYWORD_POINT, _POSITIONAL_CLICK):
        for match in pattern.finditer(answer):
            before, after = _line_around(answer, match.start(), match.end())
            comment = _COMMENT.match(after)
            label = comment.group(1) if comment else _bold_label(before)
            point = (float(match.group(1)), float(match.group(2)))
            found.append(_Found(match.start(), match.end(), point, "click", label, match[0], 2))
    for match in _KEYED.finditer(answer):
        obj = _enclosing_object(answer, match.start(), match.end())
        named = _LABEL_KEY.search(obj)
        before, _ = _line_around(answer, match.start(), match.end())
        label = named.group(1).strip() if named else _bold_label(before)
        values, wanted = _numbers(match.group(2)), 2 if "point" in match.group(1).lower() else 4
        found.append(_Found(match.start(), match.end(), values, "bbox_2d", label, match[0], wanted))
    return found


def _overlaps(start: int, end: int, taken: Sequence[_Found]) -> bool:
    return any(start < other.end and other.start < end for other in taken)


def _bare(answer: str, taken: Sequence[_Found]) -> list[_Found]:
    """Bare ``(x, y)`` / ``[x1, y1, x2, y2]`` that read unambiguously as coordinates."""
    found = []
    for match in _TUPLE.finditer(answer):
        if _overlaps(match.start(), match.end(), taken):
            continue
        values = tuple(float(v) for v in match.groups() if v is not None)
        texts = [v for v in match.groups() if v is not None]
        if all("." not in v and float(v) < SMALL_INTEGER for v in texts):
            continue  # "(1, 2)": numbering
        if all("." not in v and int(v) in YEARS for v in texts):
            continue  # "(1999, 2004)": years
        before, after = _line_around(answer, match.start(), match.end())
        if _CURRENCY_BEFORE.search(before):
            continue
        alone = _ONLY_DECORATION.match(before) and _ONLY_DECORATION.match(after)
        if not alone and not _CUE.search(before):
            continue
        label = _bold_label(before)
        found.append(
            _Found(match.start(), match.end(), values, "tuple", label, match[0], len(values))
        )
    return found


_TOP_LEFT: Final = re.compile(r"top[- ]left|upper[- ]left|左上", re.IGNORECASE)
_BOTTOM_RIGHT: Final = re.compile(r"bottom[- ]right|lower[- ]right|右下", re.IGNORECASE)


def _corner_pairs(answer: str, found: list[_Found]) -> list[_Found]:
    """Join a bare top-left point and the bottom-right point after it on one line into a box.

    E.g. ``"top-left corner (324, 64), bottom-right corner (426, 328)"``: the words
    before the first point name the top-left corner, those between the two the
    bottom-right one.
    """
    joined: list[_Found] = []
    for item in found:
        previous = joined[-1] if joined else None
        if (
            previous is not None
            and previous.source == item.source == "tuple"
            and len(previous.values) == len(item.values) == 2
            and "\n" not in answer[previous.end : item.start]
            and _TOP_LEFT.search(_line_around(answer, previous.start, previous.end)[0])
            and _BOTTOM_RIGHT.search(answer[previous.end : item.start])
        ):
            text = answer[previous.start : item.end]
            values = previous.values + item.values
            joined[-1] = _Found(previous.start, item.end, values, "tuple", previous.label, text, 4)
        else:
            joined.append(item)
    return joined


def _references(answer: str, images: Sequence[SeenImage]) -> list[tuple[int, int]]:
    """``(position, image number from 1)`` of every place the answer names an image."""
    refs = []
    for index, image in enumerate(images, start=1):
        if image.name:
            refs += [(m.start(), index) for m in re.finditer(re.escape(image.name), answer, re.I)]
    for match in _NUMBERED_IMAGE.finditer(answer):
        digits, ordinal, nth, figure = match.groups()
        word = (digits or nth or figure or "").strip()
        if ordinal:
            number = _ORDINALS[ordinal.lower()]
        elif word.isdigit():
            number = int(word)
        else:
            number = _CHINESE_DIGITS[word]
        refs.append((match.start(), number))
    return sorted(refs)


def _shape(values: tuple[float, ...], image: SeenImage) -> Point | Box | str:
    """The shape in fractions of ``image``, or why the values do not fit it."""
    if any(v > 1 for v in values):
        if any(0 < v < 1 for v in values):
            return msg("a mix of fractions (below 1) and pixels (above 1)")
        sides = (image.width, image.height) * (len(values) // 2)
        if any(v > side for v, side in zip(values, sides, strict=True)):
            return msg("outside the {width}x{height} image", width=image.width, height=image.height)
        values = tuple(v / side for v, side in zip(values, sides, strict=True))
    if len(values) == 2:
        return Point(values[0], values[1])
    left, top, right, bottom = values
    if not (left < right and top < bottom):
        return msg("not a box from its top-left to its bottom-right corner")
    return Box(left, top, right, bottom)


SAME_PLACE: Final = 0.01
"""Shapes whose coordinates all differ by at most this fraction of the image are one
mark (an answer giving ``x=0.917, y=0.201`` in code and "about (0.92, 0.20)" in prose)."""


def _same_place(a: Point | Box, b: Point | Box) -> bool:
    if type(a) is not type(b):
        return False
    return all(abs(p - q) <= SAME_PLACE for p, q in zip(astuple(a), astuple(b), strict=True))


def _placed(
    item: _Found, refs: list[tuple[int, int]], images: Sequence[SeenImage]
) -> tuple[int, Point | Box] | str | None:
    """Where ``item`` goes: (image index, shape); or a sentence saying why it is not drawn;
    or None when it is not drawn and needs no word (a bare tuple that may not be one)."""
    quoted = f"“{item.text}”"
    count, wanted = len(item.values), item.wanted
    if count != wanted:
        if count == 1:
            return msg("{quoted} has 1 number, not {wanted}.", quoted=quoted, wanted=wanted)
        return msg(
            "{quoted} has {count} numbers, not {wanted}.", quoted=quoted, count=count, wanted=wanted
        )
    named = [number for position, number in refs if position < item.start]
    if len(images) == 1:
        index = 0
    elif not named:
        if item.source == "tuple":
            return None
        return msg(
            "{quoted} does not say which of the {count} images it is on.",
            quoted=quoted,
            count=len(images),
        )
    elif not 1 <= named[-1] <= len(images):
        return msg(
            "{quoted} is on image {number}, but there are {count}.",
            quoted=quoted,
            number=named[-1],
            count=len(images),
        )
    else:
        index = named[-1] - 1
    shape = _shape(item.values, images[index])
    if isinstance(shape, str):
        return (
            None
            if item.source == "tuple"
            else msg("{quoted} is {shape}.", quoted=quoted, shape=shape)
        )
    return index, shape


def read_marks(answer: str, images: Sequence[SeenImage]) -> Grounding:
    """The points and boxes of ``answer`` on the turn's ``images`` (module docstring).

    Args:
        answer: the answer text; any ``◁think▷`` reasoning in it is ignored.
        images: the turn's images as the model saw them, in upload order; their
            sizes (pixels) convert pixel coordinates into fractions.

    Returns:
        The marks (one per place: see :data:`SAME_PLACE`) and the sentences
        about explicit coordinates that are not drawn. Empty without images.
    """
    if not images:
        return Grounding()
    answer = strip_reasoning(answer)
    explicit = _explicit(answer)
    found = _corner_pairs(answer, sorted(explicit + _bare(answer, explicit), key=lambda f: f.start))
    refs = _references(answer, images)
    marks: list[Mark] = []
    not_drawn: list[str] = []
    for item in found:
        placed = _placed(item, refs, images)
        if isinstance(placed, str):
            not_drawn.append(placed)
        elif placed is not None:
            index, shape = placed
            if not any(m.image == index and _same_place(m.shape, shape) for m in marks):
                marks.append(Mark(len(marks) + 1, shape, index, item.label, item.source, item.text))
    return Grounding(tuple(marks), tuple(not_drawn))


PALETTE: Final = ((230, 38, 64), (24, 112, 240), (0, 150, 80), (235, 120, 0), (170, 40, 200))
"""Colours of marks 1, 2, 3, ... (then again): strong hues that stay apart on photos
and on white or dark screenshots; each shape has a white halo for contrast."""

FONT_FILES: Final = ("NotoSansCJK-Bold.ttc", "NotoSansCJK-Regular.ttc", "DejaVuSans-Bold.ttf")
"""Fonts for the number tags, first found wins (Pillow searches the system's font
folders): Noto Sans CJK (Debian ``fonts-noto-cjk``) draws Chinese labels too; without
any, Pillow's built-in font (Latin only)."""


@lru_cache(maxsize=16)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    for name in FONT_FILES:
        try:
            return ImageFont.truetype(name, size)
        except OSError:
            continue
    return ImageFont.load_default(size)


def draw_marks(image: Image.Image, marks: Sequence[Mark]) -> Image.Image:
    """A new RGB copy of ``image`` with ``marks`` drawn on it; ``image`` is unchanged.

    A point is a ring with a dot in its centre, its tag to the right (to the left at
    the right edge); a box is its outline, its tag on top of its top-left corner (or
    just inside when there is no room above). Tags hold the number and the label.
    Line widths and text scale with the image (text about 1/36 of its longer side),
    so they look the same in the chat whatever the image's size. ``mark.image`` is
    not checked: pass the marks of this image (:meth:`Grounding.on`).
    """
    canvas = image.convert("RGB")  # always a new image
    draw = ImageDraw.Draw(canvas)
    width, height = canvas.size
    longer = max(width, height)
    line = max(2, round(longer / 220))
    halo = max(1, line // 2)
    radius = max(8, round(longer / 40))
    font = _font(max(12, round(longer / 36)))
    for mark in marks:
        colour = PALETTE[(mark.number - 1) % len(PALETTE)]
        text = f"{mark.number} {mark.label}".strip()
        plate_w, plate_h = _plate_size(draw, text, font)
        if isinstance(mark.shape, Point):
            x, y = mark.shape.x * width, mark.shape.y * height
            ring = (x - radius, y - radius, x + radius, y + radius)
            draw.ellipse(_grow(ring, halo), outline="white", width=line + 2 * halo)
            draw.ellipse(ring, outline=colour, width=line)
            dot = max(2, line)
            draw.ellipse((x - dot, y - dot, x + dot, y + dot), fill=colour, outline="white")
            gap = radius + 2 * line
            left = x + gap if x + gap + plate_w <= width else x - gap - plate_w
            top = y - plate_h / 2
        else:
            box = mark.shape
            corners = (box.left * width, box.top * height, box.right * width, box.bottom * height)
            draw.rectangle(_grow(corners, halo), outline="white", width=line + 2 * halo)
            draw.rectangle(corners, outline=colour, width=line)
            left = corners[0] - halo
            top = corners[1] - halo - plate_h if corners[1] - halo >= plate_h else corners[1]
        left = min(max(0.0, left), max(0.0, width - plate_w))
        top = min(max(0.0, top), max(0.0, height - plate_h))
        _tag(draw, (left, top), text, colour, font)
    return canvas


def _grow(rect: tuple[float, float, float, float], by: float) -> tuple[float, ...]:
    return (rect[0] - by, rect[1] - by, rect[2] + by, rect[3] + by)


def _plate_size(
    draw: ImageDraw.ImageDraw, text: str, font: ImageFont.FreeTypeFont | ImageFont.ImageFont
) -> tuple[float, float]:
    """Width and height in pixels of the tag holding ``text``."""
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    pad = max(2, (bottom - top) // 4)
    return right - left + 2 * pad, bottom - top + 2 * pad


def _tag(
    draw: ImageDraw.ImageDraw,
    at: tuple[float, float],
    text: str,
    colour: tuple[int, int, int],
    font: ImageFont.FreeTypeFont | ImageFont.ImageFont,
) -> None:
    """White ``text`` on a ``colour`` plate with a white edge, top-left corner ``at``."""
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    pad = max(2, (bottom - top) // 4)
    x, y = at
    plate = (x, y, x + right - left + 2 * pad, y + bottom - top + 2 * pad)
    draw.rectangle(plate, fill=colour, outline="white")
    draw.text((x + pad - left, y + pad - top), text, fill="white", font=font)


class EncodedImage(SeenImage, Protocol):
    """What :func:`overlays` needs of a turn's image (a PreparedImage fits)."""

    @property
    def data_url(self) -> str:
        """The image as sent: ``data:image/png;base64,...`` or ``image/jpeg``."""
        ...


@dataclass(frozen=True, slots=True)
class Overlay:
    """An annotated copy of one image of the turn, ready to show under the answer.

    Attributes:
        image: index of the image in the turn.
        name: a file name for the copy, e.g. ``"coffee (marked).png"``.
        caption: one line naming the image and listing its marks (Markdown, with
            the file name and labels escaped).
        content: the encoded copy (PNG for PNG sources, JPEG quality 90 otherwise).
        mime: ``image/png`` or ``image/jpeg``.
        marks: the marks drawn on it.
    """

    image: int
    name: str
    caption: str
    content: bytes
    mime: str
    marks: tuple[Mark, ...]


def _escape(text: str) -> str:
    """``text`` with Markdown's punctuation escaped, so names render as written."""
    return re.sub(r"([\\`*_{}\[\]<>()#+\-.!|~])", r"\\\1", text)


def caption(name: str, marks: Sequence[Mark], tr: Translator = ENGLISH) -> str:
    """The line above an annotated copy, naming the image and listing its marks.

    E.g. ``"Marked on **coffee.png** (a copy; the original is unchanged): box 1, spoon;
    point 2."`` (Markdown; the name and labels escaped).
    """
    items = []
    for mark in marks:
        point = isinstance(mark.shape, Point)
        if mark.label:
            label = _escape(mark.label)
            item = (
                tr("point {number}, {label}", number=mark.number, label=label)
                if point
                else tr("box {number}, {label}", number=mark.number, label=label)
            )
        else:
            item = (
                tr("point {number}", number=mark.number)
                if point
                else tr("box {number}", number=mark.number)
            )
        items.append(item)
    return tr(
        "Marked on **{name}** (a copy; the original is unchanged): {marks}.",
        name=_escape(name),
        marks="; ".join(items),
    )


def not_drawn_note(reasons: Sequence[str], tr: Translator = ENGLISH) -> str:
    """One note for :attr:`Grounding.not_drawn` (Markdown, model text escaped), e.g.
    ``"ℹ️ Not drawn: “x=0.5, y=0.5” does not say which of the 2 images it is on."``."""
    return "ℹ️ " + tr("Not drawn:") + " " + " ".join(_escape(tr.text(reason)) for reason in reasons)


def _decode(data_url: str) -> tuple[Image.Image, str]:
    mime, data = decode_data_url(data_url)
    return Image.open(io.BytesIO(data)), mime


def overlays(answer: str, images: Sequence[EncodedImage]) -> tuple[list[Overlay], Grounding]:
    """Annotated copies of the turn's images that the answer points at.

    Reads the marks (:func:`read_marks`), then draws each image's marks on a copy of
    that image as the model saw it (decoded from ``data_url``: coordinates in pixels
    are pixels of exactly this picture) and encodes it in the same format. That takes
    tens to hundreds of milliseconds per image (measured on one core: 36 ms for a
    2071x1553 JPEG, about 200 ms for a 2281x1426 PNG, mostly decoding and PNG
    encoding): call it off the event loop.

    Returns:
        One :class:`Overlay` per image with marks, in image order, and the
        :class:`Grounding` (whose ``not_drawn`` a UI may show).
    """
    grounding = read_marks(answer, images)
    result = []
    for index, image in enumerate(images):
        marks = grounding.on(index)
        if not marks:
            continue
        picture, mime = _decode(image.data_url)
        drawn = draw_marks(picture, marks)
        out = io.BytesIO()
        stem = image.name.rsplit(".", 1)[0] if "." in image.name else image.name
        if mime == "image/png":
            drawn.save(out, "PNG", compress_level=PNG_COMPRESS_LEVEL)
            name = f"{stem} (marked).png"
        else:
            mime = "image/jpeg"
            drawn.save(out, "JPEG", quality=90)
            name = f"{stem} (marked).jpg"
        result.append(Overlay(index, name, caption(image.name, marks), out.getvalue(), mime, marks))
    return result, grounding
