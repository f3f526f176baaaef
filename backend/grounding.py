"""Points and boxes in an answer, read back onto the image they refer to, and drawn.

Kimi-VL answers grounding questions with coordinates in the format the prompt asks
for (research notes, "Kimi-VL grounding output"): the official ScreenSpot-Pro
evaluation of Kimi-VL-A3B-Thinking-2506 asks for pyautogui code with coordinates
normalised to 0-1 of the image's width and height and reads ``x=0.204, y=0.149``
from the answer; Kimi-VL-Instruct users report ``{"bbox_2d": [0.28, 0.5, 0.52,
0.7]}`` (normalised x1, y1, x2, y2) for objects; asked for pixels, models give
pixels of the image they saw. :func:`read_marks` accepts, in the answer only (any
reasoning left between markers is removed first):

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
(there is no telling which image it is on). A question without images of its own
refers to one image of the chat (:func:`referred_images`); one that names an image the chat
does not have gets a sentence saying so instead, when the answer gives coordinates.

:func:`draw_marks` draws marks on a new copy of an image with Pillow;
:func:`overlays` does the whole job for an answer and the turn's prepared images.
"""

from __future__ import annotations

import io
import math
import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate, product
from typing import Final, Generic, Literal, Protocol, TypeVar

from PIL import Image, ImageDraw, ImageFont

from backend.i18n import ENGLISH, Message, Translator, msg
from backend.images import PNG_COMPRESS_LEVEL, decode_data_url
from backend.reasoning import strip_any_reasoning
from backend.safety import collector_paused, escape_markdown

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


Seen = TypeVar("Seen", bound=SeenImage)


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
        marks: the marks to draw, numbered in answer order (at most :data:`MAX_MARKS`).
        not_drawn: one sentence per coordinate given in an explicit format (click,
            bbox_2d) that is not drawn, saying why (at most :data:`MAX_REASONS`); bare
            tuples that are not read as coordinates are left out silently (they are
            usually not coordinates).
        marks_left_out: further marks found (distinct places) beyond :data:`MAX_MARKS`.
        reasons_left_out: further coordinates not drawn beyond :data:`MAX_REASONS`.
    """

    marks: tuple[Mark, ...] = ()
    not_drawn: tuple[str, ...] = ()
    marks_left_out: int = 0
    reasons_left_out: int = 0

    @property
    def has_note(self) -> bool:
        """True if something found is not drawn (:func:`not_drawn_note` says what)."""
        return bool(self.not_drawn or self.marks_left_out or self.reasons_left_out)

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
_COMMENT: Final = re.compile(r"\s*\)?\s*#\s*(.{1,80}?)\s*$")
"""A ``# comment`` after a click, matched from the click's end to its line's end."""
_BOLD: Final = re.compile(r"\*\*([^*\n]{1,60})\*\*")
_CUE: Final = re.compile(
    r"\b(?:click|clicks|clicking|tap|press|coordinates?|points?|pixels?|px|positions?|"
    r"located|location|at|box|bbox|bounding|cent(?:er|re)|corners?|region|x1|y1|"
    r"(?:top|bottom|upper|lower)[- ](?:left|right))\b"
    r"|\(\s*x\s*,\s*y\s*\)|点击|坐标|位置|位于|在|框|中心|处|角|左上|右下",
    re.IGNORECASE,
)
_NOT_DECORATION: Final = re.compile(r"[^\s\-*+>•`:：.。,，]")
_CURRENCY: Final = "$€£¥"

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


MAX_MARKS: Final = 50
"""Marks drawn for one answer, at most, the first in answer order; the others are counted
(:attr:`Grounding.marks_left_out`). Tags stay readable up to a few dozen; an answer with
10,000 boxes would take minutes to draw and hide the photo."""

MAX_REASONS: Final = 10
"""Sentences about coordinates not drawn, at most, the first in answer order; the others are
counted (:attr:`Grounding.reasons_left_out`)."""

MAX_DIGITS: Final = 12
"""A number with more digits than this is no coordinate: it reads as infinity, outside every
image (``float()`` would read a 5,000-digit number uselessly; ``int()`` refuses one of more
than 4,300 digits with a ValueError)."""

QUOTE_CHARS: Final = 80
"""The longest model text quoted in a sentence about a coordinate; longer ends with "…"."""


def _number(text: str) -> float:
    """A number matched by :data:`_NUM` as a float; infinity past :data:`MAX_DIGITS` digits."""
    return math.inf if len(text) - text.count(".") > MAX_DIGITS else float(text)


def _whole(text: str) -> int | None:
    """A number matched by :data:`_NUM` as an integer, or None if it has a point or is too long."""
    return int(text) if "." not in text and len(text) <= MAX_DIGITS else None


def _quote(text: str) -> str:
    """``text`` in quotation marks, cut at :data:`QUOTE_CHARS`."""
    return f"“{text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1] + '…'}”"


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


SCAN_CHARS: Final = 5_000
"""Characters one regular-expression call reads at most (:func:`_finditer`). Python's
``re`` holds the GIL for a whole call: one pattern over a 450,000-character answer with
no match takes 0.1-0.4 s, for which the event loop's thread waits."""

LONGEST_MATCH: Final = 2_000
"""Characters a coordinate's text may take; longer matches are not read (:func:`_finditer`)."""


def _finditer(pattern: re.Pattern[str], text: str) -> Iterator[re.Match[str]]:
    """``pattern.finditer(text)``, read in windows of :data:`SCAN_CHARS` (each overlapping
    the next by :data:`LONGEST_MATCH`), so that no single call holds the GIL for long.

    The same matches, in order, as long as none is longer than :data:`LONGEST_MATCH`
    (those are left out).
    """
    at = 0
    while at < len(text):
        edge = at + SCAN_CHARS
        last = at
        for match in pattern.finditer(text, at, edge + LONGEST_MATCH):
            if match.start() >= edge:
                break
            last = match.end()
            if last - match.start() <= LONGEST_MATCH and last <= edge + LONGEST_MATCH:
                yield match
            if last == match.start():  # an empty match: move past it
                last += 1
        at = max(edge, last)


def _last_within(matches: list[re.Match[str]], ends: list[int], low: int, high: int) -> str | None:
    """The text of the last of ``matches`` (in order, not overlapping, ``ends`` their ends)
    that lies within ``[low, high)``, or None."""
    at = bisect_right(ends, high) - 1
    return matches[at].group(0) if at >= 0 and matches[at].start() >= low else None


class _Index:
    """An answer with what the readers ask about many places in it found once.

    The readers look at the line around each coordinate (a label before it, a cue word,
    a comment after it) and at the ``{...}`` around it; scanning the line or the text
    each time would make an answer with 10,000 coordinates on one line take minutes.
    Here each question is a binary search in positions found by one pass.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self._newlines = [m.start() for m in re.finditer("\n", text)]
        self._opens = [m.start() for m in re.finditer("{", text)]
        self._closes = [m.start() for m in re.finditer("}", text)]
        self._found: dict[re.Pattern[str], tuple[list[re.Match[str]], list[int]]] = {}
        self._labels: dict[int, str] = {}
        self._first_word: dict[int, int] = {}

    def line_start(self, pos: int) -> int:
        """Where the line holding ``pos`` starts."""
        before = bisect_left(self._newlines, pos)
        return self._newlines[before - 1] + 1 if before else 0

    def line_end(self, pos: int) -> int:
        """Where the line holding ``pos`` ends (its newline, or the end of the text)."""
        after = bisect_left(self._newlines, pos)
        return self._newlines[after] if after < len(self._newlines) else len(self.text)

    def last_on_line(self, pattern: re.Pattern[str], pos: int) -> str | None:
        """The last match of ``pattern`` on the line of ``pos`` that ends by ``pos``."""
        if pattern not in self._found:
            matches = list(_finditer(pattern, self.text))
            self._found[pattern] = matches, [m.end() for m in matches]
        matches, ends = self._found[pattern]
        return _last_within(matches, ends, self.line_start(pos), pos)

    def bold_label(self, pos: int) -> str:
        """The last ``**bold**`` name on the line before ``pos``, or ""."""
        bold = self.last_on_line(_BOLD, pos)
        return bold[2:-2].strip().rstrip(":：") if bold else ""

    def decoration_only(self, low: int, high: int) -> bool:
        """True if ``text[low:high]`` holds only spaces, list markers and punctuation."""
        return _NOT_DECORATION.search(self.text, low, high) is None

    def decoration_before(self, pos: int) -> bool:
        """True if the line before ``pos`` holds only decoration (one scan per line)."""
        start = self.line_start(pos)
        if start not in self._first_word:
            word = _NOT_DECORATION.search(self.text, start, self.line_end(start))
            self._first_word[start] = word.start() if word else len(self.text)
        return self._first_word[start] >= pos

    def currency_before(self, pos: int) -> bool:
        """True if the last character before ``pos`` on its line, spaces aside, is a currency."""
        start, at = self.line_start(pos), pos
        while at > start and self.text[at - 1].isspace():
            at -= 1
        return at > start and self.text[at - 1] in _CURRENCY

    def object_label(self, start: int, end: int) -> str:
        """The ``"label"`` of the flat ``{...}`` around ``text[start:end]``, or ""."""
        opening = bisect_left(self._opens, start) - 1
        closing = bisect_left(self._closes, end)
        if opening < 0 or closing == len(self._closes):
            return ""
        first, last = self._opens[opening], self._closes[closing]
        closed_before = bisect_left(self._closes, start) - 1
        opened_after = bisect_left(self._opens, end)
        if closed_before >= 0 and self._closes[closed_before] > first:
            return ""  # a "}" between the "{" and the coordinates: not around them
        if opened_after < len(self._opens) and self._opens[opened_after] < last:
            return ""
        if last - first > LONGEST_MATCH:
            return ""  # no flat object of a box and its label is that long
        if first not in self._labels:
            named = _LABEL_KEY.search(self.text, first, last + 1)
            self._labels[first] = named.group(1).strip() if named else ""
        return self._labels[first]


def _explicit(index: _Index) -> list[_Found]:
    """Coordinates in the click and bbox_2d formats."""
    answer, found = index.text, []
    for pattern in (_KEYWORD_POINT, _POSITIONAL_CLICK):
        for match in _finditer(pattern, answer):
            comment = _COMMENT.match(answer, match.end(), index.line_end(match.end()))
            label = comment.group(1) if comment else index.bold_label(match.start())
            point = (_number(match.group(1)), _number(match.group(2)))
            found.append(_Found(match.start(), match.end(), point, "click", label, match[0], 2))
    for match in _finditer(_KEYED, answer):
        label = index.object_label(match.start(), match.end()) or index.bold_label(match.start())
        values = tuple(_number(n) for n in re.findall(_NUM, match.group(2)))
        wanted = 2 if "point" in match.group(1).lower() else 4
        found.append(_Found(match.start(), match.end(), values, "bbox_2d", label, match[0], wanted))
    return found


class _Taken:
    """Spans of text already read, asked whether a new span overlaps one (binary search)."""

    def __init__(self, found: Sequence[_Found]) -> None:
        spans = sorted((f.start, f.end) for f in found)
        self._starts = [start for start, _ in spans]
        self._reach = list(accumulate((end for _, end in spans), max))

    def overlaps(self, start: int, end: int) -> bool:
        """True if ``[start, end)`` overlaps one of the spans."""
        before = bisect_left(self._starts, end)  # the spans that start before ``end``
        return before > 0 and self._reach[before - 1] > start


def _bare(index: _Index, taken: Sequence[_Found]) -> list[_Found]:
    """Bare ``(x, y)`` / ``[x1, y1, x2, y2]`` that read unambiguously as coordinates."""
    answer, found, spans = index.text, [], _Taken(taken)
    for match in _finditer(_TUPLE, answer):
        start, end = match.span()
        if spans.overlaps(start, end):
            continue
        texts = [v for v in match.groups() if v is not None]
        whole = [_whole(v) for v in texts]
        if all(n is not None and n < SMALL_INTEGER for n in whole):
            continue  # "(1, 2)": numbering
        if all(n is not None and n in YEARS for n in whole):
            continue  # "(1999, 2004)": years
        if index.currency_before(start):
            continue
        alone = index.decoration_before(start) and index.decoration_only(end, index.line_end(end))
        if not alone and index.last_on_line(_CUE, start) is None:
            continue
        values = tuple(_number(v) for v in texts)
        label = index.bold_label(start)
        found.append(_Found(start, end, values, "tuple", label, match[0], len(values)))
    return found


_TOP_LEFT: Final = re.compile(r"top[- ]left|upper[- ]left|左上", re.IGNORECASE)
_BOTTOM_RIGHT: Final = re.compile(r"bottom[- ]right|lower[- ]right|右下", re.IGNORECASE)


def _corner_pairs(index: _Index, found: list[_Found]) -> list[_Found]:
    """Join a bare top-left point and the bottom-right point after it on one line into a box.

    E.g. ``"top-left corner (324, 64), bottom-right corner (426, 328)"``: the words
    before the first point name the top-left corner, those between the two the
    bottom-right one.
    """
    answer = index.text
    joined: list[_Found] = []
    for item in found:
        previous = joined[-1] if joined else None
        if (
            previous is not None
            and previous.source == item.source == "tuple"
            and len(previous.values) == len(item.values) == 2
            and answer.find("\n", previous.end, item.start) < 0
            and index.last_on_line(_TOP_LEFT, previous.start) is not None
            and item.start - previous.end <= LONGEST_MATCH
            and _BOTTOM_RIGHT.search(answer, previous.end, item.start)
        ):
            text = answer[previous.start : item.end]
            values = previous.values + item.values
            joined[-1] = _Found(previous.start, item.end, values, "tuple", previous.label, text, 4)
        else:
            joined.append(item)
    return joined


class _References:
    """Every place the answer names one of the turn's images, asked which came last."""

    def __init__(self, answer: str, images: Sequence[SeenImage]) -> None:
        refs = []
        for number, image in enumerate(images, start=1):
            if image.name:
                pattern = re.compile(re.escape(image.name), re.IGNORECASE)
                refs += [(m.start(), number) for m in _finditer(pattern, answer)]
        for match in _finditer(_NUMBERED_IMAGE, answer):
            digits, ordinal, nth, figure = match.groups()
            word = (digits or nth or figure or "").strip()
            if ordinal:
                refs.append((match.start(), _ORDINALS[ordinal.lower()]))
            elif word.isdigit():
                if len(word) <= MAX_DIGITS:  # "image 99…9" (5,000 digits) names no image
                    refs.append((match.start(), int(word)))
            else:
                refs.append((match.start(), _CHINESE_DIGITS[word]))
        self._refs = sorted(refs)
        self._positions = [position for position, _ in self._refs]

    def named_before(self, pos: int) -> int | None:
        """The number (from 1) of the image named last before ``pos``, or None."""
        before = bisect_left(self._positions, pos)
        return self._refs[before - 1][1] if before else None


def _shape(values: tuple[float, ...], image: SeenImage) -> Point | Box | str:
    """The shape in fractions of ``image``, or why the values do not fit it."""
    if any(v > 1 for v in values):
        if any(0 < v < 1 for v in values):
            return msg("a mix of fractions (below 1) and pixels (above 1)")
        sides = (image.width, image.height) * (len(values) // 2)
        if any(v > side for v, side in zip(values, sides, strict=True)):
            return msg(
                "outside {name} ({width}x{height})",
                name=image.name,
                width=image.width,
                height=image.height,
            )
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


def _coordinates(shape: Point | Box) -> tuple[float, ...]:
    if isinstance(shape, Point):
        return shape.x, shape.y
    return shape.left, shape.top, shape.right, shape.bottom


def _same_place(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return len(a) == len(b) and all(abs(p - q) <= SAME_PLACE for p, q in zip(a, b, strict=True))


class _Places:
    """The places already marked, per image, in a grid of cells twice :data:`SAME_PLACE`
    wide: a place within :data:`SAME_PLACE` of a new one lies in one of the two cells its
    coordinate's neighbourhood touches on each axis (16 cells for a box), so a new shape is
    compared with the few marks there, not with every mark."""

    def __init__(self) -> None:
        self._cells: dict[tuple[int, tuple[int, ...]], list[tuple[float, ...]]] = {}

    def add(self, image: int, shape: Point | Box) -> bool:
        """Remember ``shape`` on ``image``; False (and nothing kept) if that place is known."""
        place = _coordinates(shape)
        width = 2 * SAME_PLACE
        near = [
            range(math.floor((v - SAME_PLACE) / width), math.floor((v + SAME_PLACE) / width) + 1)
            for v in place
        ]
        for cell in product(*near):
            for other in self._cells.get((image, cell), ()):
                if _same_place(place, other):
                    return False
        own = tuple(math.floor(v / width) for v in place)
        self._cells.setdefault((image, own), []).append(place)
        return True


def _image_of(item: _Found, refs: _References, images: Sequence[SeenImage]) -> int | Message | None:
    """The index of the image ``item`` is on, a reason it is on none, or None (say nothing)."""
    if len(images) == 1:
        return 0
    named = refs.named_before(item.start)
    if named is None:
        if item.source == "tuple":
            return None
        return msg(
            "{quoted} does not say which of the {count} images it is on.",
            quoted=_quote(item.text),
            count=len(images),
        )
    if not 1 <= named <= len(images):
        return msg(
            "{quoted} is on image {number}, but there are {count}.",
            quoted=_quote(item.text),
            number=named,
            count=len(images),
        )
    return named - 1


def _count_problem(item: _Found) -> Message | None:
    """Why ``item`` does not hold the numbers its format holds, or None when it does."""
    count, wanted, quoted = len(item.values), item.wanted, _quote(item.text)
    if count == wanted:
        return None
    if count == 1:
        return msg("{quoted} has 1 number, not {wanted}.", quoted=quoted, wanted=wanted)
    return msg(
        "{quoted} has {count} numbers, not {wanted}.", quoted=quoted, count=count, wanted=wanted
    )


def _judge(
    item: _Found, refs: _References, images: Sequence[SeenImage]
) -> tuple[int, Point | Box] | Message | None:
    """Where ``item`` goes: ``(image index, shape)``, or why it is not drawn, or None when
    that goes unsaid (a bare tuple that does not fit is usually no coordinate at all)."""
    problem = _count_problem(item)
    if problem is not None:
        return problem
    where = _image_of(item, refs, images)
    if not isinstance(where, int):
        return where
    shape = _shape(item.values, images[where])
    if isinstance(shape, str):
        if item.source == "tuple":
            return None
        return msg("{quoted} is {shape}.", quoted=_quote(item.text), shape=shape)
    return where, shape


def read_marks(
    answer: str, images: Sequence[SeenImage], missing: Message | None = None
) -> Grounding:
    """The points and boxes of ``answer`` on the turn's ``images`` (module docstring).

    Takes time linear in the answer's length (10,000 boxes: well under a second).

    Args:
        answer: the answer text; any reasoning left in it between markers is ignored.
        images: the turn's images as the model saw them, in upload order; their
            sizes (pixels) convert pixel coordinates into fractions.
        missing: why there is no image to draw on (:attr:`Referred.missing`), when
            ``images`` is empty for that reason.

    Returns:
        The first :data:`MAX_MARKS` marks (one per place: see :data:`SAME_PLACE`)
        and the first :data:`MAX_REASONS` sentences about explicit coordinates
        that are not drawn, with counts of the others. Without images: empty, or
        ``missing`` as the one sentence when the answer gives any coordinate.
    """
    with collector_paused():
        text = strip_any_reasoning(answer)
        if images:
            return _read(text, images)
        if missing is not None and _found(_Index(text)):
            return Grounding(not_drawn=(missing,))
        return Grounding()


@dataclass(frozen=True, slots=True)
class Referred(Generic[Seen]):
    """The images an answer's coordinates are drawn on (:func:`referred_images`).

    Attributes:
        images: the images, in upload order; empty when there is none to draw on.
        missing: when the question names an image the chat does not have, the sentence
            that says so ("the question names image 3, but the chat's images end at image
            2."), shown if the answer gives coordinates; else None.
    """

    images: tuple[Seen, ...]
    missing: Message | None = None


def referred_images(question: str, own: Sequence[Seen], earlier: Sequence[Seen]) -> Referred[Seen]:
    """The images an answer's coordinates refer to: the turn's ``own`` images, or, for a
    question that comes without images (a follow-up such as "Find the spoon in the first
    photo"), the one image of the chat it names (by file name, "the second photo",
    "image 2", "第2张", "图2": numbered across ``earlier``, the chat's images before this
    turn, oldest first) or else the latest one. A question that names an image the chat
    does not have ("the third photo" of two) gets none, and the sentence why
    (:attr:`Referred.missing`): drawing on another would be a guess. Empty when the chat
    has no image. The caption of a drawn copy names the image (:func:`caption`), so a
    person sees which one was taken."""
    if own:
        return Referred(tuple(own))
    with collector_paused():
        named = _References(question, earlier).named_before(len(question))
    if named is None:
        return Referred(tuple(earlier[-1:]))
    if 1 <= named <= len(earlier):
        return Referred((earlier[named - 1],))
    if not earlier:
        return Referred(
            (), msg("the question names image {number}, but the chat has no image.", number=named)
        )
    return Referred(
        (),
        msg(
            "the question names image {number}, but the chat's images end at image {count}.",
            number=named,
            count=len(earlier),
        ),
    )


def _found(index: _Index) -> list[_Found]:
    """Every coordinate the text gives, in text order (explicit formats and bare tuples the
    module docstring reads), before any is fitted to an image."""
    explicit = _explicit(index)
    return _corner_pairs(index, sorted(explicit + _bare(index, explicit), key=lambda f: f.start))


def _read(answer: str, images: Sequence[SeenImage]) -> Grounding:
    """:func:`read_marks` of an answer without its reasoning."""
    index = _Index(answer)
    found = _found(index)
    refs, places = _References(index.text, images), _Places()
    marks: list[Mark] = []
    reasons: list[str] = []
    marks_left_out = reasons_left_out = 0
    for item in found:
        judged = _judge(item, refs, images)
        if judged is None:
            continue
        if isinstance(judged, str):
            if len(reasons) < MAX_REASONS:
                reasons.append(judged)
            else:
                reasons_left_out += 1
        elif places.add(*judged):
            where, shape = judged
            if len(marks) < MAX_MARKS:
                marks.append(Mark(len(marks) + 1, shape, where, item.label, item.source, item.text))
            else:
                marks_left_out += 1
    return Grounding(tuple(marks), tuple(reasons), marks_left_out, reasons_left_out)


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


def caption(name: str, marks: Sequence[Mark], tr: Translator = ENGLISH) -> str:
    """The line above an annotated copy, naming the image and listing its marks.

    E.g. ``"Marked on **coffee.png** (a copy; the original is unchanged): box 1, spoon;
    point 2."`` (Markdown; the name and labels escaped).
    """
    items = []
    for mark in marks:
        point = isinstance(mark.shape, Point)
        if mark.label:
            label = escape_markdown(mark.label)
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
        name=escape_markdown(name),
        marks="; ".join(items),
    )


def not_drawn_note(grounding: Grounding, tr: Translator = ENGLISH) -> str:
    """One note for what :func:`read_marks` found but does not draw (Markdown, model text
    escaped), e.g. ``"Not drawn: “x=0.5, y=0.5” does not say which of the 2 images it
    is on."`` (an info note: the page draws its sign); the marks and reasons beyond the
    limits are counted in a sentence each."""
    sentences = [tr.text(reason) for reason in grounding.not_drawn]
    if grounding.reasons_left_out:
        sentences.append(
            tr("{count} more coordinates cannot be drawn either.", count=grounding.reasons_left_out)
        )
    if grounding.marks_left_out:
        sentences.append(
            tr(
                "{count} more points and boxes are not drawn: at most {limit} are drawn "
                "for one answer.",
                count=grounding.marks_left_out,
                limit=MAX_MARKS,
            )
        )
    return tr("Not drawn:") + " " + " ".join(escape_markdown(s) for s in sentences)


def _decode(data_url: str) -> tuple[Image.Image, str]:
    mime, data = decode_data_url(data_url)
    return Image.open(io.BytesIO(data)), mime


def overlays(
    answer: str, images: Sequence[EncodedImage], missing: Message | None = None
) -> tuple[list[Overlay], Grounding]:
    """Annotated copies of the turn's images that the answer points at.

    Reads the marks (:func:`read_marks`), then draws each image's marks on a copy of
    that image as the model saw it (decoded from ``data_url``: coordinates in pixels
    are pixels of exactly this picture) and encodes it in the same format. That takes
    tens to hundreds of milliseconds per image (measured on one core: 36 ms for a
    2071x1553 JPEG, about 200 ms for a 2281x1426 PNG, mostly decoding and PNG
    encoding): call it off the event loop.

    Returns:
        One :class:`Overlay` per image with marks, in image order, and the
        :class:`Grounding` (whose ``not_drawn`` a UI may show; ``missing``, why there
        are no images, is its sentence when the answer gives coordinates).
    """
    grounding = read_marks(answer, images, missing)
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
