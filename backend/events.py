"""Plain value types for the parts of a streamed chat completion.

A stream from :mod:`backend.client` yields, in order, at most one
:class:`ReasoningOpened`, any number of :class:`ReasoningDelta` and
:class:`AnswerDelta` parts and exactly one final :class:`Done`. Front ends
(Chainlit, the CLI) render these and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReasoningOpened:
    """The server took (HTTP 2xx) a request that began the reply inside the reasoning: a
    Thinking model's opening marker written by the request as the start of its reply
    (``ModelFamily.reply_start`` in backend/families.py), so the reply is reasoning from
    its first token. Comes before any text, at most once; it is not a token (no time to
    first token, and a server that has not started answering is still waited for as such).
    """


@dataclass(frozen=True, slots=True)
class ReasoningDelta:
    """A piece of the model's reasoning (text between its family's markers).

    Never contains the markers themselves.
    """

    text: str


@dataclass(frozen=True, slots=True)
class AnswerDelta:
    """A piece of the final answer, never containing reasoning markers."""

    text: str


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts reported by the server (OpenAI ``usage`` object)."""

    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True, slots=True)
class Done:
    """End of a stream, with what the server and our clock said about it.

    Attributes:
        finish_reason: the server's ``finish_reason`` (``"stop"``, ``"length"``,
            ...), or ``None`` if the stream ended without one.
        usage: token counts, or ``None`` when the server sent no usage chunk.
        ttft_s: seconds from sending the request to the first non-empty delta
            (time to first token), ``None`` when no token arrived.
        reasoning_s: seconds from the first reasoning delta to the first answer
            delta (or to the end if the answer never started); ``None`` if the
            model did not reason.
        elapsed_s: seconds from sending the request to the end of the stream.
        reasoning_unclosed: True if the stream ended while still inside
            reasoning (e.g. ``finish_reason == "length"``), so no answer came.
        answer_in_reasoning: True if a Thinking model's whole output came with
            no marker at all and ended normally: what was streamed as reasoning
            (text before any marker counts as reasoning) was really the answer,
            and front ends should show it as such.
        cut_at_chars: the app stopped reading the stream after this many characters
            of reasoning and answer together and closed it, so the server stopped
            generating (:func:`backend.client.output_limit`); ``finish_reason``
            is then ``None``. ``None`` when the stream ended by itself.
        decode_s: seconds from the first chunk with text to the last one, which
            with ``usage`` times the server's decode speed (``None`` without text).
    """

    finish_reason: str | None
    usage: Usage | None
    ttft_s: float | None
    reasoning_s: float | None
    elapsed_s: float
    reasoning_unclosed: bool = False
    answer_in_reasoning: bool = False
    cut_at_chars: int | None = None
    decode_s: float | None = None


@dataclass(frozen=True, slots=True)
class Waiting:
    """The server has not started answering yet (from :func:`backend.batching.coalesce`).

    Attributes:
        seconds: since the request was sent.
        queued: requests waiting on the server (vLLM ``vllm:num_requests_waiting``),
            or None when the server does not say.
    """

    seconds: float
    queued: int | None = None


TextPart = ReasoningDelta | AnswerDelta
"""A text part of a stream: what the reasoning splitter produces."""

StreamEvent = ReasoningOpened | ReasoningDelta | AnswerDelta | Done
"""Everything a chat completion stream yields."""
