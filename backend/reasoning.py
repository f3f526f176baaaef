"""Split a model's streamed text into reasoning and answer, incrementally.

A reasoning model writes its reasoning between two text markers inside the ordinary
answer text (``delta.content`` of the OpenAI stream) when its server has no reasoning
parser, followed by the answer; each family's markers are data
(:class:`backend.families.ReasoningMarkers`). Kimi-VL's are not single tokens of its
tokenizer, so vLLM's token-id based thinking parsers cannot split them (facts.md,
"Reasoning"); this splits the text itself, in the style of vLLM's reasoning parsers.
It runs in the client only for servers without a parser (:mod:`backend.client`) and
inside our vLLM parser plugin (``serving/kimi_reasoning.py``).

:class:`ReasoningSplitter` is pure (no I/O, no asyncio) and runs once per
streamed chunk: each :meth:`~ReasoningSplitter.feed` costs time linear in the
chunk's length (``str.find``; no rescanning of earlier text) and holds back at
most one character less than the longer marker, the longest suffix that could still
start a marker. :func:`strip_reasoning` removes reasoning from a complete
assistant message before it goes back to the model as history, as the official
demos do.
"""

from __future__ import annotations

from backend.events import AnswerDelta, ReasoningDelta, TextPart
from backend.families import KNOWN_MARKERS, ReasoningMarkers


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
    """Incremental splitter of ``OPEN reasoning CLOSE answer`` text into parts.

    Feed each chunk of ``delta.content`` in order to :meth:`feed`, then call
    :meth:`flush` once at the end of the stream. The concatenated output does
    not depend on how the text was cut into chunks; markers may be split across
    chunks at any position.

    Rules:
        * The opening marker switches to reasoning, the closing one to answer. A marker
          that does not change the state (an opening marker inside reasoning,
          which the thinking model writes first when the splitter
          ``starts_in_reasoning``, or a stray closing marker inside the answer)
          is dropped. Markers never appear in the output, with one exception
          that no splitter can avoid without changing characters: text the
          model wrote on both sides of a removed marker is kept as written, so
          ``"[/[/r]r]"`` gives the text ``"[/r]"`` (with the markers ``[r]`` and
          ``[/r]``, as in the examples below).
        * Whitespace at the start of the stream and right after a marker that
          switches the state is dropped until the first other character, so
          ``"[/r]\\n\\nAnswer"`` gives the answer ``"Answer"``. Whitespace
          anywhere else is kept.
        * Text that only looks like the start of a marker (``"[/"``) is held
          until it either completes a marker or can no longer become one; then
          it is emitted as ordinary text, once and in order.

    Args:
        markers: the family's opening and closing markers.
        starts_in_reasoning: True for a thinking model (its family's
            ``starts_in_reasoning``): text before any marker is reasoning, so an answer
            that begins with only the closing marker (``"reasoning[/r]answer"``)
            still splits. False for a model that answers directly: text is answer until
            an opening marker.
    """

    __slots__ = (
        "_held",
        "_in_reasoning",
        "_markers",
        "_saw_marker",
        "_section_started",
        "_single_start",
        "_starts",
    )

    def __init__(self, *, markers: ReasoningMarkers, starts_in_reasoning: bool = False) -> None:
        self._markers = markers
        self._starts = {markers.open[0], markers.close[0]}
        self._single_start = markers.open[0] if len(self._starts) == 1 else ""
        self._in_reasoning = starts_in_reasoning
        self._saw_marker = False
        self._held = ""  # a proper prefix of a marker
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

        The leading whitespace the splitter drops after the closing marker does not
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
        opening, closing = self._markers.open, self._markers.close
        pos = 0
        while True:
            start = self._next_start(buf, pos)
            if start < 0:
                self._emit(out, buf[pos:])
                break
            self._emit(out, buf[pos:start])
            if buf.startswith(opening, start):
                self._switch(reasoning=True)
                pos = start + len(opening)
            elif buf.startswith(closing, start):
                self._switch(reasoning=False)
                pos = start + len(closing)
            else:
                rest = buf[start:]
                if len(rest) < self._markers.longest and (
                    opening.startswith(rest) or closing.startswith(rest)
                ):
                    self._held = rest
                    break
                self._emit(out, buf[start])
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

    def _next_start(self, text: str, pos: int) -> int:
        """Where the next character that may begin a marker is, from ``pos``; -1 if none."""
        if self._single_start:  # both markers begin alike (Kimi-VL's, Qwen3's)
            return text.find(self._single_start, pos)
        found = [at for char in self._starts if (at := text.find(char, pos)) >= 0]
        return min(found, default=-1)

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


def split_reasoning(
    text: str, *, markers: ReasoningMarkers, starts_in_reasoning: bool
) -> tuple[str, str]:
    """Split a complete message into ``(reasoning, answer)``, markers removed.

    The same rules as :class:`ReasoningSplitter` (this feeds it the whole text,
    then flushes); either string may be empty.

    Args:
        text: the full message as the model wrote it.
        markers, starts_in_reasoning: as for :class:`ReasoningSplitter`.
    """
    splitter = ReasoningSplitter(markers=markers, starts_in_reasoning=starts_in_reasoning)
    parts = splitter.feed(text) + splitter.flush()
    reasoning = "".join(part.text for part in parts if isinstance(part, ReasoningDelta))
    answer = "".join(part.text for part in parts if isinstance(part, AnswerDelta))
    return reasoning, answer


def strip_reasoning(text: str, markers: ReasoningMarkers) -> str:
    """Remove the reasoning from a complete assistant message, for history.

    The official Kimi-VL demo strips everything up to and including its closing
    marker before sending a reply back as history (facts.md, "Kimi-VL"), so the
    model does not see, and imitate, its old reasoning; Qwen3's chat templates drop
    the reasoning of earlier turns the same way.

    * No marker: the text is returned unchanged.
    * A closing marker: everything before the first one is reasoning, whether or
      not an opening marker precedes it (a thinking model may start with only
      the closing marker); later ``OPEN ... CLOSE`` blocks are removed too.
    * An opening marker never closed (the reply was cut off by ``max_tokens``):
      it and everything after it are dropped.

    Leading whitespace after a removed block is dropped, as in
    :class:`ReasoningSplitter`, whose answer parts this returns joined.

    Args:
        text: the full assistant message as the model wrote it.
        markers: the markers of the family that wrote it.

    Returns:
        The answer alone, without markers.
    """
    if not markers.within(text):
        return text
    return split_reasoning(text, markers=markers, starts_in_reasoning=markers.close in text)[1]


def strip_any_reasoning(text: str) -> str:
    """:func:`strip_reasoning` with each known family's markers in turn.

    For text whose family is not at hand: a turn's stored answer was split as it
    streamed, so this only removes markers a model left inside its answer, whichever
    family's they are (:data:`backend.families.KNOWN_MARKERS`).
    """
    for markers in KNOWN_MARKERS:
        text = strip_reasoning(text, markers)
    return text
