"""Split Kimi-VL's streamed text into reasoning and answer, incrementally.

Kimi-VL-A3B-Thinking-2506 writes its reasoning between the text markers
``◁think▷`` and ``◁/think▷`` inside the ordinary answer text (``delta.content``
of the OpenAI stream), followed by the answer (model card, whose example
``extract_thinking_and_summary`` splits on the same markers). vLLM has no
built-in reasoning parser for these markers, and its token-id based thinking
parser would need each marker to be one token, which Kimi-VL's tokenizer does
not guarantee (project notes, facts.md, "Reasoning"). So the app splits
the text itself, in the style of vLLM's reasoning parsers but on text.

:class:`ReasoningSplitter` is pure (no I/O, no asyncio) and runs once per
streamed chunk: each :meth:`~ReasoningSplitter.feed` costs time linear in the
chunk's length (``str.find``; no rescanning of earlier text) and holds back at
most ``len("◁/think▷") - 1`` = 7 characters, the longest suffix that could still
start a marker. :func:`strip_reasoning` removes reasoning from a complete
assistant message before it goes back to the model as history, as the official
demo does.
"""

from __future__ import annotations

from backend.events import AnswerDelta, ReasoningDelta, TextPart

THINK_OPEN = "◁think▷"
"""Marker that opens a reasoning block (Kimi-VL-A3B-Thinking-2506 model card)."""

THINK_CLOSE = "◁/think▷"
"""Marker that closes a reasoning block (Kimi-VL-A3B-Thinking-2506 model card)."""

_MARKER_START = "◁"  # both markers start with it, and neither contains it elsewhere


class _PartBuilder:
    """Collects text pieces in order, merging consecutive pieces of the same kind."""

    __slots__ = ("_kinds", "_pieces")

    def __init__(self) -> None:
        self._kinds: list[bool] = []  # True: reasoning, False: answer
        self._pieces: list[list[str]] = []

    def add(self, reasoning: bool, text: str) -> None:
        """Append ``text`` (non-empty) as reasoning or answer."""
        if self._kinds and self._kinds[-1] == reasoning:
            self._pieces[-1].append(text)
        else:
            self._kinds.append(reasoning)
            self._pieces.append([text])

    def parts(self) -> list[TextPart]:
        """The collected parts; no two neighbours share a kind, none is empty."""
        return [
            ReasoningDelta("".join(pieces)) if reasoning else AnswerDelta("".join(pieces))
            for reasoning, pieces in zip(self._kinds, self._pieces, strict=True)
        ]


class ReasoningSplitter:
    """Incremental splitter of ``◁think▷ ... ◁/think▷`` text into parts.

    Feed each chunk of ``delta.content`` in order to :meth:`feed`, then call
    :meth:`flush` once at the end of the stream. The concatenated output does
    not depend on how the text was cut into chunks; markers may be split across
    chunks at any position.

    Rules:
        * ``◁think▷`` switches to reasoning, ``◁/think▷`` to answer. A marker
          that does not change the state (an opening marker inside reasoning,
          which the thinking model writes first when the splitter
          ``starts_in_reasoning``, or a stray closing marker inside the answer)
          is dropped. Markers never appear in the output, with one exception
          that no splitter can avoid without changing characters: text the
          model wrote on both sides of a removed marker is kept as written, so
          ``"◁/think◁/think▷▷"`` gives the text ``"◁/think▷"``.
        * Whitespace at the start of the stream and right after a marker that
          switches the state is dropped until the first other character, so
          ``"◁/think▷\\n\\nAnswer"`` gives the answer ``"Answer"``. Whitespace
          anywhere else is kept.
        * Text that only looks like the start of a marker (``"◁thin"``) is held
          until it either completes a marker or can no longer become one; then
          it is emitted as ordinary text, once and in order.

    Args:
        starts_in_reasoning: True for a thinking model (the thinking profile):
            text before any marker is reasoning, so an answer that begins with
            only the closing marker (``"reasoning◁/think▷answer"``) still splits.
            False for a model that answers directly: text is answer until an
            opening marker.
    """

    __slots__ = ("_held", "_in_reasoning", "_saw_marker", "_section_started")

    def __init__(self, *, starts_in_reasoning: bool = False) -> None:
        self._in_reasoning = starts_in_reasoning
        self._saw_marker = False
        self._held = ""  # a proper prefix of a marker, at most 7 characters
        self._section_started = False  # a non-whitespace character emitted since the switch

    @property
    def in_reasoning(self) -> bool:
        """True while inside reasoning (and still True after a stream cut off there)."""
        return self._in_reasoning

    @property
    def saw_marker(self) -> bool:
        """True once any marker, opening or closing, has been seen."""
        return self._saw_marker

    @property
    def answer_started(self) -> bool:
        """True once the answer is under way: in the answer, with text other than whitespace.

        The leading whitespace the splitter drops after ``◁/think▷`` does not
        count. A server-side parser that hands the rest of the stream on
        unsplit waits for this, so the result is the same as splitting it all.
        """
        return not self._in_reasoning and self._section_started

    def feed(self, text: str) -> list[TextPart]:
        """Split the next chunk of streamed text.

        Args:
            text: the chunk's ``delta.content``; may be empty (vLLM's first chunk
                carries only the role), which changes nothing.

        Returns:
            The parts now known, in order; consecutive parts of one kind are
            merged, none is empty. Text that may still become a marker is held
            back until a later chunk or :meth:`flush`.
        """
        if not text:
            return []
        buf = self._held + text if self._held else text
        self._held = ""
        out = _PartBuilder()
        pos = 0
        while True:
            start = buf.find(_MARKER_START, pos)
            if start < 0:
                self._emit(out, buf[pos:])
                break
            self._emit(out, buf[pos:start])
            if buf.startswith(THINK_OPEN, start):
                self._switch(reasoning=True)
                pos = start + len(THINK_OPEN)
            elif buf.startswith(THINK_CLOSE, start):
                self._switch(reasoning=False)
                pos = start + len(THINK_CLOSE)
            else:
                rest = buf[start:]
                if len(rest) < len(THINK_CLOSE) and (
                    THINK_OPEN.startswith(rest) or THINK_CLOSE.startswith(rest)
                ):
                    self._held = rest
                    break
                self._emit(out, _MARKER_START)
                pos = start + 1
        return out.parts()

    def flush(self) -> list[TextPart]:
        """End of stream: release held partial-marker text as ordinary text.

        The text goes to the current kind (reasoning if the stream ended inside
        reasoning, e.g. ``finish_reason == "length"``); :attr:`in_reasoning` is
        left as it is so the caller can tell the reasoning was never closed.

        Returns:
            At most one part; empty if nothing was held.
        """
        out = _PartBuilder()
        self._emit(out, self._held)
        self._held = ""
        return out.parts()

    def _switch(self, *, reasoning: bool) -> None:
        """Apply a marker: enter reasoning (``True``) or the answer (``False``)."""
        self._saw_marker = True
        if reasoning != self._in_reasoning:
            self._in_reasoning = reasoning
            self._section_started = False

    def _emit(self, out: _PartBuilder, text: str) -> None:
        """Add ``text`` as the current kind, dropping a section's leading whitespace."""
        if not self._section_started:
            text = text.lstrip()
            if not text:
                return
            self._section_started = True
        if text:
            out.add(self._in_reasoning, text)


def split_reasoning(text: str, *, starts_in_reasoning: bool) -> tuple[str, str]:
    """Split a complete message into ``(reasoning, answer)``, markers removed.

    The same rules as :class:`ReasoningSplitter` (this feeds it the whole text,
    then flushes); either string may be empty.

    Args:
        text: the full message as the model wrote it.
        starts_in_reasoning: as for :class:`ReasoningSplitter`.
    """
    splitter = ReasoningSplitter(starts_in_reasoning=starts_in_reasoning)
    parts = splitter.feed(text) + splitter.flush()
    reasoning = "".join(part.text for part in parts if isinstance(part, ReasoningDelta))
    answer = "".join(part.text for part in parts if isinstance(part, AnswerDelta))
    return reasoning, answer


def strip_reasoning(text: str) -> str:
    """Remove the reasoning from a complete assistant message, for history.

    The official Kimi-VL demo strips everything up to and including
    ``◁/think▷`` before sending a reply back as history (facts.md, "Kimi-VL"),
    so the model does not see, and imitate, its old reasoning. vLLM has no
    parser for these markers that could do it server-side.

    * No marker: the text is returned unchanged.
    * A closing marker: everything before the first one is reasoning, whether or
      not an opening marker precedes it (the thinking model may start with only
      the closing marker); later ``◁think▷ ... ◁/think▷`` blocks are removed too.
    * An opening marker never closed (the reply was cut off by ``max_tokens``):
      it and everything after it are dropped.

    Leading whitespace after a removed block is dropped, as in
    :class:`ReasoningSplitter`, whose answer parts this returns joined.

    Args:
        text: the full assistant message as the model wrote it.

    Returns:
        The answer alone, without markers.
    """
    if THINK_OPEN not in text and THINK_CLOSE not in text:
        return text
    return split_reasoning(text, starts_in_reasoning=THINK_CLOSE in text)[1]
