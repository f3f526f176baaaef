"""What was measured of one answer, and the two lines people read made of it.

A turn stores its numbers (:class:`Timings`), never the words shown: the stats
line under an answer and the reasoning step's title are made from the numbers
in the reader's language, live (ui/answer.py) and in an export
(:mod:`backend.store.export`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from backend.events import Done
from backend.i18n import ENGLISH, Translator

StepEnd = Literal["done", "stopped", "failed"]
"""How a reasoning step ended: the answer followed, Stop was pressed, or an error."""


@dataclass(frozen=True, slots=True)
class Timings:
    """The numbers of one answer, as the stream measured them (``None``: not known).

    Attributes:
        ttft_s: seconds from the request to the first token.
        reasoning_s: seconds the model reasoned, if it did.
        elapsed_s: seconds from the request to the end of the stream.
        completion_tokens: tokens the server generated (its ``usage``).
    """

    ttft_s: float | None = None
    reasoning_s: float | None = None
    elapsed_s: float | None = None
    completion_tokens: int | None = None

    @classmethod
    def from_done(cls, done: Done) -> Timings:
        """The numbers of a finished stream."""
        tokens = done.usage.completion_tokens if done.usage is not None else None
        return cls(done.ttft_s, done.reasoning_s, done.elapsed_s, tokens)

    @property
    def tokens_per_s(self) -> float | None:
        """Output tokens per second over the generation phase (after the first token)."""
        if self.completion_tokens is None or self.ttft_s is None or self.elapsed_s is None:
            return None
        generating_s = self.elapsed_s - self.ttft_s
        if generating_s <= 0 or self.completion_tokens < 2:
            return None
        return (self.completion_tokens - 1) / generating_s


def thought_label(seconds: float, ended: StepEnd = "done", tr: Translator = ENGLISH) -> str:
    """Title of a finished reasoning step, e.g. ``"Thought for 12.3s"``.

    ``"stopped"`` adds "(stopped)" (the person pressed Stop); ``"failed"`` adds
    "(interrupted by an error)", explained in the message below it.
    """
    if ended == "stopped":
        return tr("Thought for {seconds:.1f}s (stopped)", seconds=seconds)
    if ended == "failed":
        return tr("Thought for {seconds:.1f}s (interrupted by an error)", seconds=seconds)
    return tr("Thought for {seconds:.1f}s", seconds=seconds)


def stored_thought_label(seconds: float | None, tr: Translator = ENGLISH) -> str:
    """Title of a stored turn's reasoning drawn again (a version shown with ‹ n/m ›, an
    export): :func:`thought_label` when its time was measured, else "Thought"."""
    return thought_label(seconds, tr=tr) if seconds is not None else tr("Thought")


def stats_line(timings: Timings, tr: Translator = ENGLISH) -> str:
    """One compact line under an answer: TTFT, thinking time, tokens, tokens/s, total.

    Example: ``"TTFT 0.41 s · thought 12.3 s · 512 tokens · 48.2 tokens/s · total 11.0 s"``;
    numbers that were not measured are left out.
    """
    parts = []
    if timings.ttft_s is not None:
        parts.append(tr("TTFT {seconds:.2f} s", seconds=timings.ttft_s))
    if timings.reasoning_s is not None:
        parts.append(tr("thought {seconds:.1f} s", seconds=timings.reasoning_s))
    if timings.completion_tokens is not None:
        parts.append(tr("{count} tokens", count=timings.completion_tokens))
    rate = timings.tokens_per_s
    if rate is not None:
        parts.append(tr("{rate:.1f} tokens/s", rate=rate))
    if timings.elapsed_s is not None:
        parts.append(tr("total {seconds:.1f} s", seconds=timings.elapsed_s))
    return " · ".join(parts)
