"""Markdown to HTML as the chat draws it, for files that must open anywhere (the export).

The chat's page renders answers with react-markdown (CommonMark, GFM tables and
strikethrough, remark-math's ``$...$`` and ``$$...$$``) and KaTeX; :func:`to_html`
renders the same text with markdown-it-py (CommonMark, the GFM table and strikethrough
rules) and mdit-py-plugins' dollarmath, and writes math as MathML (latex2mathml), which
browsers draw without a script or a font download. Raw HTML in the text is never HTML:
markdown-it-py escapes it (``html`` off) and refuses ``javascript:`` links. latex2mathml
copies ``\\text{...}`` into its output unescaped, so its MathML is parsed as XML and
rebuilt from known MathML elements and attributes only; math it cannot convert, or
MathML that does not parse, is shown as its LaTeX source in a code span. An image
with a remote address is drawn as a link to it, as in the chat: the page never fetches
what an answer names (the public share page and the export use this).
"""

from __future__ import annotations

import html
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from functools import cache, lru_cache
from typing import Any, Final

from latex2mathml.converter import convert
from markdown_it import MarkdownIt
from markdown_it.renderer import RendererHTML
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict
from mdit_py_plugins.dollarmath import dollarmath_plugin

from backend.safety import is_remote

MATHML: Final = "http://www.w3.org/1998/Math/MathML"
ELEMENTS: Final = frozenset(
    [
        "math",
        "mrow",
        "mi",
        "mn",
        "mo",
        "ms",
        "mtext",
        "mspace",
        "msup",
        "msub",
        "msubsup",
        "mfrac",
        "msqrt",
        "mroot",
        "mover",
        "munder",
        "munderover",
        "mtable",
        "mtr",
        "mtd",
        "mlabeledtr",
        "mstyle",
        "mpadded",
        "mphantom",
        "menclose",
        "merror",
        "semantics",
        "mmultiscripts",
        "mprescripts",
        "none",
    ]
)
"""MathML elements latex2mathml writes (MathML Core); any other element is dropped, its
text kept as text."""
ATTRIBUTES: Final = frozenset(
    [
        "display",
        "mathvariant",
        "stretchy",
        "fence",
        "separator",
        "lspace",
        "rspace",
        "width",
        "height",
        "depth",
        "columnalign",
        "rowalign",
        "columnspacing",
        "rowspacing",
        "columnlines",
        "rowlines",
        "frame",
        "accent",
        "accentunder",
        "movablelimits",
        "minsize",
        "maxsize",
        "symmetric",
        "largeop",
        "linethickness",
        "notation",
        "scriptlevel",
        "displaystyle",
        "form",
    ]
)
"""Presentation attributes kept; links (``href``), events and styles are not."""


def _clean(element: ET.Element) -> ET.Element | None:
    """A copy of ``element`` with only :data:`ELEMENTS` and :data:`ATTRIBUTES`; None if
    ``element`` itself is not MathML."""
    name = element.tag.removeprefix("{" + MATHML + "}")
    if name not in ELEMENTS:
        return None
    copy = ET.Element(name, {k: v for k, v in element.attrib.items() if k in ATTRIBUTES})
    copy.text, copy.tail = element.text, element.tail
    for child in element:
        kept = _clean(child)
        if kept is not None:
            copy.append(kept)
        else:  # the element goes; its text and the text after it stay, as text
            text = "".join(child.itertext()) + (child.tail or "")
            last = copy[-1] if len(copy) else None
            if last is not None:
                last.tail = (last.tail or "") + text
            else:
                copy.text = (copy.text or "") + text
    return copy


@lru_cache(maxsize=1024)
def math_html(latex: str, display: bool) -> str:
    """``latex`` as MathML (``display``: a block of its own), or its source as code.
    About 0.1-0.3 ms a formula; the same formula again comes from a cache."""
    try:
        root = _clean(ET.fromstring(convert(latex, display="block" if display else "inline")))
    except Exception:  # latex2mathml raises many kinds; ET.ParseError for bad output
        root = None
    if root is None or root.tag != "math":
        return f'<code class="math-source">{html.escape(latex)}</code>'
    root.set("xmlns", MATHML)
    root.tail = None
    return ET.tostring(root, encoding="unicode")


def _math(content: str, options: dict[str, Any]) -> str:
    return math_html(content, bool(options.get("display_mode")))


@cache
def _renderer() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "linkify": False})
    md.enable(["table", "strikethrough"])
    # remark-math (the page's) reads "$1 and $2" as math too: the same here.
    dollarmath_plugin(md, allow_digits=True, allow_space=True, renderer=_math)
    md.add_render_rule("image", _image_or_link)
    return md


def _image_or_link(
    self: RendererHTML, tokens: Sequence[Token], idx: int, options: OptionsDict, env: EnvType
) -> str:
    """An image with a ``data:`` address as markdown-it draws it; any other (a remote
    address a hostile answer wrote: the browser would fetch it unasked) as a link to it,
    as the chat draws it (:func:`backend.safety.link_remote_images`)."""
    token = tokens[idx]
    src = str(token.attrGet("src") or "")
    if not is_remote(src):
        return self.image(tokens, idx, options, env)
    text = html.escape(self.renderInlineAsText(token.children or [], options, env) or "image")
    href = html.escape(src, quote=True)
    return f'<a href="{href}" target="_blank" rel="noopener noreferrer">{text}</a>'


def to_html(text: str) -> str:
    """``text`` (Markdown, as a model writes it) as an HTML fragment; see the module.
    Linear in the text, but seconds for a long answer full of math: call it off the
    event loop."""
    rendered: str = _renderer().render(text)
    return rendered
