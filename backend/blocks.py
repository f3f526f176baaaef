"""Cut a growing markdown text into blocks that stop changing, so a browser keeps up with it.

Chainlit 2.12's frontend renders a message's markdown afresh at every update:
its ``Markdown`` component (``frontend/src/components/Markdown.tsx``) passes
``react-markdown`` a new ``components`` object each render, so React remounts
the whole rendered tree, and highlight.js colours every code block again. A
text of n characters costs O(n) per update and O(n²) over the stream: a
10,000-token reasoning froze a tab for over a second at a time. The views in
:mod:`ui.blocks` put a long text into a run of messages or steps instead, one
block each: a block is re-rendered while it is the open one, once when it
closes, then never again, so an update costs at most one block's worth.

:class:`BlockSplitter` is pure and incremental (in the style of
:class:`backend.reasoning.ReasoningSplitter`): feed it the text in pieces, in
order; it returns the same text, with :class:`BlockCut` between blocks, however
the text was cut into pieces. Where it cuts (CommonMark terms):

* At a *paragraph cut*, once the open block has ``soft_chars``: after a blank
  line, outside fenced code and ``$$`` display math, before a line that starts
  with a character other than whitespace (so it is no continuation of a list
  item, nor an indented code block). Each block then renders as the same text
  rendered whole would, with two exceptions: a list cut there becomes two
  lists (a loose list's items lose some spacing), and a reference-style link
  whose definition is in another block stays text.
* At a *forced cut*, once the open block has ``hard_chars`` and no paragraph
  cut came: at the next line start. Inside fenced code the block gets a
  closing fence and the next one the opening fence line again
  (:attr:`BlockCut.closing`, :attr:`BlockCut.opening`: for display only; the
  text itself is unchanged): the reader sees the code in two boxes, in order.
  Outside code, a line break becomes a paragraph break.
* In a line longer than ``2 * hard_chars``: after its first space at or past that
  size (not one the line ends right after); the rest of the line continues in the
  next block, as a new paragraph.

A cut is only made once text for the next block has arrived, so no block is
ever empty.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

SOFT_CHARS: Final = 2_000
"""Characters after which a block ends at the next paragraph cut (the module docstring)."""

HARD_CHARS: Final = 4_000
"""Characters after which a block ends at the next line start, whatever it is."""

_LINE_HEAD: Final = 200
"""Characters of a line kept to recognise it (a fence and its info string)."""

_FENCE: Final = re.compile(r"^[ \t]*(?:(?:[-*+]|\d{1,9}[.)])[ \t]+)*(`{3,}|~{3,})(.*)$")
"""An opening code fence, also after list markers (``- ```python``)."""


@dataclass(frozen=True, slots=True)
class BlockCut:
    """The open block is complete; the next text opens a new one.

    Attributes:
        closing: text to show at the end of the closed block and nowhere else
            (a closing code fence when the cut is inside fenced code), or "".
        opening: text to show at the start of the next block and nowhere else
            (the opening fence line again), or "".
    """

    closing: str = ""
    opening: str = ""


BlockPart = str | BlockCut
"""What :meth:`BlockSplitter.feed` returns: text for the open block, or a cut."""


class BlockSplitter:
    """Incremental splitter of markdown into blocks (see the module docstring).

    Args:
        soft_chars: the open block ends at the next paragraph cut once it has this many
            characters (its opening text included).
        hard_chars: the open block ends at the next line start once it has this many.
    """

    __slots__ = (
        "_after_blank",
        "_fence",
        "_hard",
        "_line",
        "_line_start",
        "_math",
        "_size",
        "_soft",
        "_space_cut_due",
    )

    def __init__(self, soft_chars: int = SOFT_CHARS, hard_chars: int = HARD_CHARS) -> None:
        self._soft = soft_chars
        self._hard = max(hard_chars, soft_chars)
        self._size = 0  # characters of the open block, its opening text included
        self._line = ""  # the head of the current line
        self._line_start = True  # the next character starts a line
        self._after_blank = False  # the line before the current one was blank
        self._fence: tuple[str, str] | None = None  # (fence characters, opening line)
        self._math = False  # inside $$ display math
        self._space_cut_due = False  # a piece ended with a space past the line limit

    def feed(self, text: str) -> list[BlockPart]:
        """Split the next piece of text.

        Returns:
            The text in order, with a :class:`BlockCut` wherever a block ends;
            consecutive text is merged, no text part is empty.
        """
        out: list[BlockPart] = []
        pos = 0
        while pos < len(text):
            if self._line_start and text[pos] != "\n":
                self._cut_at_line_start(text[pos], out)
            newline = text.find("\n", pos)
            end = len(text) if newline < 0 else newline + 1
            pos = self._add_line_part(text, pos, end, out)
        return out

    def _cut_at_line_start(self, first: str, out: list[BlockPart]) -> None:
        """Cut before a line whose first character is ``first``, if this is a place to."""
        if self._math or first in " \t":
            return
        if self._fence is not None:
            fence, opening = self._fence
            if self._size >= self._hard and first not in "`~":  # not maybe its closing fence
                self._cut(out, BlockCut(fence + "\n", opening + "\n"))
        else:
            paragraph = self._after_blank and self._size >= self._soft
            forced = self._size >= self._hard and first not in "|="  # a table row, an underline
            if paragraph or forced:
                self._cut(out, BlockCut())

    def _add_line_part(self, text: str, start: int, end: int, out: list[BlockPart]) -> int:
        """Add ``text[start:end]`` (at most one line end, at its end); the next position.

        A line that runs past ``2 * hard_chars`` is cut after its first space at or past
        that size, unless the line ends right after it: where depends on the text only,
        not on how it came in pieces (a space that ends a piece is cut after once the next
        character has come, and is not a line end).
        """
        if self._space_cut_due:
            self._space_cut_due = False
            if text[start] != "\n":
                self._cut(out, self._fence_cut())
        first = max(start, start + 2 * self._hard - self._size - 1)
        space = text.find(" ", first, end)
        if space >= 0 and space + 1 < end and text[space + 1] != "\n":
            self._add_to_line(out, text[start : space + 1])
            self._line_start = False
            self._cut(out, self._fence_cut())
            return space + 1
        self._space_cut_due = space == end - 1
        piece = text[start:end]
        self._add_to_line(out, piece)
        if piece.endswith("\n"):
            self._end_line()
        else:
            self._line_start = False
        return end

    def _add_to_line(self, out: list[BlockPart], piece: str) -> None:
        """Append ``piece`` of the current line, keeping the line's head (what
        :meth:`_end_line` reads) whatever block it goes in."""
        self._append(out, piece)
        if len(self._line) < _LINE_HEAD:
            self._line += piece[: _LINE_HEAD - len(self._line)]

    def _fence_cut(self) -> BlockCut:
        """A cut here: inside fenced code it closes and reopens the fence."""
        if self._fence is None:
            return BlockCut()
        fence, opening = self._fence
        return BlockCut("\n" + fence + "\n", opening + "\n")

    def _end_line(self) -> None:
        """A line ended: note whether it was blank, opened or closed code or math."""
        line = self._line.rstrip("\n")
        self._line = ""
        self._line_start = True
        stripped = line.strip()
        if self._fence is not None:
            fence = self._fence[0]
            if stripped.startswith(fence) and not stripped.lstrip(fence[0]).strip():
                self._fence = None
            return
        if self._math:
            self._math = "$$" not in stripped
            return
        self._after_blank = not stripped
        if found := _FENCE.match(line):
            fence, info = found.groups()
            if not (fence[0] == "`" and "`" in info):
                self._fence = (fence, f"{fence}{info}".strip())
        elif stripped.startswith("$$"):
            self._math = "$$" not in stripped[2:]

    def _append(self, out: list[BlockPart], text: str) -> None:
        self._size += len(text)
        if out and isinstance(out[-1], str):
            out[-1] += text
        else:
            out.append(text)

    def _cut(self, out: list[BlockPart], cut: BlockCut) -> None:
        out.append(cut)
        self._size = len(cut.opening)
        self._after_blank = False


def block_texts(text: str, soft_chars: int = SOFT_CHARS, hard_chars: int = HARD_CHARS) -> list[str]:
    """The texts of the blocks ``text`` streams into, as each block shows once closed
    (``ui/blocks.py``): each cut's ``closing`` at the end of its block, its ``opening`` at
    the start of the next. [] for an empty text. The splitter cuts the same way however
    the text came in pieces, so this is what a stream of ``text`` drew."""
    blocks: list[str] = []
    current: str | None = None  # the open block's text; None: no block open
    opening = ""
    for part in BlockSplitter(soft_chars, hard_chars).feed(text):
        if isinstance(part, BlockCut):
            if current is not None:
                blocks.append(current + part.closing)
            current, opening = None, part.opening
        elif current is None:
            current, opening = opening + part, ""
        else:
            current += part
    return [*blocks, current] if current is not None else blocks


def blocks_for(text: str, count: int) -> list[str]:
    """The texts of ``count`` stored blocks of ``text`` (:func:`block_texts`); where the
    blocks are not those ``text`` cuts into (a block's write was lost), the whole text in
    the first and the others empty, so nothing of it is lost."""
    texts = block_texts(text)
    if len(texts) == count:
        return texts
    return [text, *[""] * (count - 1)] if count else []
