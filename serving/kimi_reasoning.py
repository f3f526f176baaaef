"""The Kimi-VL reasoning parser's logic, without vLLM (vLLM's glue: ``kimi_reasoning_parser``).

Kimi-VL-A3B-Thinking-2506 writes ``OPEN reasoning CLOSE answer`` as plain text, with
its family's markers (``backend.families.THINKING_2506.markers``): a tokenizer may cut
each marker into several tokens (the dev model's byte-level tokenizer gives their first
character three), so vLLM's token-id thinking parsers
cannot find them. :class:`KimiReasoning` does the text work for one request:

* the streamed text goes through :class:`backend.reasoning.ReasoningSplitter`
  (the app's own splitter, so server and app split alike), starting in
  reasoning as the Thinking model does;
* "has the reasoning ended?" questions that vLLM asks in token ids are answered
  by decoding only a few tokens: the last assistant turn of a prompt, or the
  last :data:`MARKER_TOKENS_MAX` tokens around a decode step.

Everything here takes a ``decode`` function (token ids to text, special tokens
kept) so it runs and is tested without vLLM or a real tokenizer.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence

from backend.events import AnswerDelta, ReasoningDelta
from backend.families import THINKING_2506
from backend.reasoning import ReasoningSplitter, split_reasoning

Decode = Callable[[Sequence[int]], str]
"""Token ids to text, special tokens kept (``tokenizer.decode(ids, skip_special_tokens=False)``)."""

MARKERS = THINKING_2506.markers
"""Kimi-VL's reasoning markers (the family this parser serves)."""
THINK_CLOSE = MARKERS.close

MARKER_TOKENS_MAX = len(THINK_CLOSE.encode("utf-8"))
"""Most tokens the closing marker can span: 12, one per UTF-8 byte (its first and last
characters are 3 bytes each)."""

KIMI_ASSISTANT_HEADER = "<|im_assistant|>"
"""Kimi-VL's assistant-turn start (its chat template), used when a template gives none."""

_FIRST_PROMPT_WINDOW = 64  # tokens decoded first when looking back for the assistant header
_CLOSE_TAIL = THINK_CLOSE[-1]  # the last character of the closing marker


def assistant_header(render: Callable[[bool], str]) -> str | None:
    """The text a chat template puts before each assistant turn.

    Args:
        render: renders one fixed conversation (a single user message) with the
            chat template, ``add_generation_prompt`` set to its argument.

    Returns:
        What the generation prompt adds, stripped (``"Assistant:"`` for the dev
        model, ``"<|im_assistant|>assistant<|im_middle|>"`` for Kimi-VL), or None
        when the two renderings do not differ by a suffix.
    """
    with_prompt, without = render(True), render(False)
    if not with_prompt.startswith(without):
        return None
    return with_prompt[len(without) :].strip() or None


def _first_prefix(ids: Sequence[int], decode: Decode, found: Callable[[str], bool]) -> int:
    """Smallest ``k`` with ``found(decode(ids[:k]))``, given that ``found(decode(ids))`` holds.

    Binary search: ``found`` must stay true as the prefix grows (a marker, once
    complete in the decoded prefix, stays there), so it costs about
    ``log2(len(ids))`` decodes.
    """
    keys = range(1, len(ids) + 1)
    return keys[bisect_left(keys, True, key=lambda k: found(decode(ids[:k])))]


class KimiReasoning:
    """One request's reasoning split, as vLLM's parser calls it.

    vLLM builds one parser per request twice over: the API server (which
    streams, :meth:`feed`) and, for structured outputs, the engine (which only
    asks :meth:`ends_in` each decode step). The instance that has streamed
    answers from what it split; the other one from the token ids.

    Args:
        decode: token ids to text, special tokens kept.
        header: the assistant-turn start of the chat template
            (:func:`assistant_header`; :data:`KIMI_ASSISTANT_HEADER` if unknown).
    """

    def __init__(self, decode: Decode, header: str) -> None:
        self._decode = decode
        self._header = header
        self._splitter = ReasoningSplitter(markers=MARKERS, starts_in_reasoning=True)
        self._streamed = False
        self._handed_on = False

    @staticmethod
    def split(model_output: str) -> tuple[str | None, str | None]:
        """Split a complete reply into ``(reasoning, content)``; None for an empty side.

        Text before any marker is reasoning (the Thinking model starts there),
        so ``"a" + CLOSE + "b"`` gives ``("a", "b")`` and a reply without a closing
        marker is all reasoning (cut off by ``max_tokens``), as vLLM's own
        thinking parsers do.
        """
        reasoning, content = split_reasoning(
            model_output, markers=MARKERS, starts_in_reasoning=True
        )
        return reasoning or None, content or None

    def feed(self, delta_text: str) -> tuple[str, str]:
        """Split the next streamed text into ``(reasoning, content)`` for this delta.

        Either may be empty; text that may still become a marker is held back
        (at most 7 characters). On the delta in which the answer gets its first
        character other than whitespace, held text is released too:
        :meth:`ends_in` then reports the end and vLLM passes the rest of the
        stream on as content without asking again.
        """
        self._streamed = True
        parts = self._splitter.feed(delta_text)
        if self._splitter.answer_started and not self._handed_on:
            self._handed_on = True
            parts += self._splitter.flush()
        reasoning = "".join(p.text for p in parts if isinstance(p, ReasoningDelta))
        content = "".join(p.text for p in parts if isinstance(p, AnswerDelta))
        return reasoning, content

    def prompt_ends_reasoning(self, prompt_ids: Sequence[int]) -> bool:
        """True if the prompt's own last assistant turn already closed its reasoning.

        Only text after the last assistant header counts: an earlier turn's
        the closing marker in the history does not end the new turn's reasoning. The
        last 64 tokens are decoded first, four times more each time the header
        is not in them; without any header the whole text counts.
        """
        size = _FIRST_PROMPT_WINDOW
        while True:
            start = max(0, len(prompt_ids) - size)
            text = self._decode(prompt_ids[start:])
            at = text.rfind(self._header)
            if at >= 0:
                return THINK_CLOSE in text[at + len(self._header) :]
            if start == 0:
                return THINK_CLOSE in text
            size *= 4

    def ends_in(self, ids: Sequence[int], delta_ids: Iterable[int]) -> bool:
        """True if the reasoning ends with this decode step.

        Args:
            ids: all token ids so far, ending with ``delta_ids`` (the engine
                passes the prompt's too, the API server only the output's).
            delta_ids: this step's new token ids.

        Returns:
            After :meth:`feed`: whether the answer has started (see there).
            Otherwise: whether a closing marker completes inside ``delta_ids``,
            found by decoding the delta and the :data:`MARKER_TOKENS_MAX` - 1
            tokens before it.
        """
        if self._streamed:
            return self._splitter.answer_started
        count = len(list(delta_ids))
        if count == 0:
            return False
        window = list(ids[max(0, len(ids) - count - MARKER_TOKENS_MAX + 1) :])
        before = self._decode(window[:-count]).count(THINK_CLOSE)
        return self._decode(window).count(THINK_CLOSE) > before

    def content_ids(self, ids: Sequence[int]) -> list[int]:
        """The token ids of ``ids`` that are answer, for the delta in which reasoning ended.

        * A complete closing marker in ``ids``: the ids after the token that completes it.
        * Else, ``ids`` starting with the marker's rest (its last characters, then
          ``"Answer"``: the marker began in an earlier delta): the ids after the token
          with its last character.
        * Else: all of ``ids`` if this stream's answer has started (the marker
          was in an earlier delta), none otherwise (still reasoning).
        """
        ids = list(ids)
        text = self._decode(ids)
        if THINK_CLOSE in text:
            return ids[_first_prefix(ids, self._decode, lambda t: THINK_CLOSE in t) :]
        tail = text.find(_CLOSE_TAIL)
        if tail >= 0 and THINK_CLOSE.endswith(text[: tail + 1]):
            return ids[_first_prefix(ids, self._decode, lambda t: _CLOSE_TAIL in t) :]
        return ids if self._splitter.answer_started else []

    def reasoning_token_count(self, ids: Sequence[int]) -> int:
        """How many of the output's ``ids`` are reasoning, the closing marker's tokens included.

        All of them when no closing marker is there (the reply is still reasoning).
        """
        ids = list(ids)
        if THINK_CLOSE not in self._decode(ids):
            return len(ids)
        return _first_prefix(ids, self._decode, lambda t: THINK_CLOSE in t)
