"""Pace a streamed answer for the UI: fewer, larger updates, on a clock of their own.

Chainlit sends one websocket frame per ``stream_token`` call and each frame
costs the server about 0.35 ms of CPU whatever its size (docs/facts.md,
measured), and the browser re-renders markdown per frame. A 30,000-token
reasoning sent token by token would freeze the page; batched at 20 updates a
second it does not.

The stream is read by a pump task into a queue, so the clock keeps running
whatever the server does: held text goes on screen within the interval even if
the server stalls; a :class:`~backend.events.Waiting` event says the server has
not started answering yet; and the first-token and idle timeouts end a request
the server sits on.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import cast

from backend.errors import FirstTokenTimeout, StreamStalled
from backend.events import (
    AnswerDelta,
    Done,
    ReasoningDelta,
    ReasoningOpened,
    StreamEvent,
    Waiting,
)
from backend.i18n import msg

DEFAULT_INTERVAL_S = 0.05
"""Seconds between two UI updates of the same text (20 updates a second)."""


@dataclass(frozen=True, slots=True)
class Pacing:
    """The clocks of one answer, in seconds.

    Attributes:
        interval_s: the longest text is held before it goes on screen.
        waiting_after_s: with no text yet, a :class:`Waiting` event after this
            long, then every ``waiting_every_s``.
        waiting_every_s: see ``waiting_after_s``.
        first_token_timeout_s: give up when no text came for this long after the
            request (None: never).
        idle_timeout_s: give up when the stream, once started, is silent this
            long (None: never).
    """

    interval_s: float = DEFAULT_INTERVAL_S
    waiting_after_s: float = 3.0
    waiting_every_s: float = 5.0
    first_token_timeout_s: float | None = None
    idle_timeout_s: float | None = None


TextDelta = ReasoningDelta | AnswerDelta
"""A text part of a stream (:data:`backend.events.TextPart`)."""

QueueLength = Callable[[], Awaitable[int | None]]
"""Asks the server how many requests are queued (vLLM ``/metrics``); None if unknown."""


def visible(text: str) -> bool:
    """Whether ``text`` shows anything: the empty delta of a lone opening marker does not."""
    return bool(text.strip())


class Pacer:
    """The pacing rules of :func:`coalesce`, pure: the caller passes the clock (seconds).

    Text deltas of one kind are held and released together at most every
    ``pacing.interval_s``. The first *visible* text of each kind is released at
    once: a delta with nothing to show (the empty reasoning delta that says a
    lone opening marker opened the reasoning) is released at once too, but does not
    start the interval, so the first words after it are not held back.

    Use: :meth:`feed` each event as it arrives, :meth:`tick` when the clock
    reaches :meth:`deadline`, :meth:`flush` at the end or before an error.
    """

    def __init__(self, pacing: Pacing, started: float) -> None:
        self.pacing = pacing
        self.started = started
        self._last_event = started
        self._next_waiting = started + pacing.waiting_after_s
        self._seen_text = False
        self._held: list[str] = []
        self._kind: type[TextDelta] | None = None  # of the text last fed
        self._shown = float("-inf")  # when visible text of this kind last went out

    def deadline(self) -> float | None:
        """The clock at which :meth:`tick` is due; None: nothing is due before the next event."""
        due: list[float] = []
        if self._held:
            due.append(self._shown + self.pacing.interval_s)
        if not self._seen_text:
            due.append(self._next_waiting)
            if self.pacing.first_token_timeout_s is not None:
                due.append(self.started + self.pacing.first_token_timeout_s)
        elif self.pacing.idle_timeout_s is not None:
            due.append(self._last_event + self.pacing.idle_timeout_s)
        return min(due) if due else None

    def feed(self, event: StreamEvent, now: float) -> list[StreamEvent]:
        """An event from the stream, at ``now``: what goes to the UI now, in order. A
        :class:`ReasoningOpened` goes at once and is not text: the server is still waited
        for (:class:`Waiting`, the first-token timeout) until text comes."""
        if isinstance(event, ReasoningOpened):
            return [*self.flush(), event]
        self._last_event = now
        if isinstance(event, Done):
            return [*self.flush(), event]
        self._seen_text = True
        out: list[StreamEvent] = []
        if type(event) is not self._kind:
            out += self.flush()  # the first text of a new kind passes at once
            self._kind, self._shown = type(event), float("-inf")
        self._held.append(event.text)
        if now - self._shown >= self.pacing.interval_s:
            out += self._release(now)
        return out

    def tick(self, now: float) -> list[TextDelta | Waiting]:
        """The clock reached :meth:`deadline`: held text, a :class:`Waiting` (``queued``
        None), or nothing.

        Raises:
            FirstTokenTimeout: no text within ``pacing.first_token_timeout_s``.
            StreamStalled: the started stream was silent for ``pacing.idle_timeout_s``.
        """
        if self._held and now >= self._shown + self.pacing.interval_s:
            return list(self._release(now))
        if not self._seen_text:
            limit = self.pacing.first_token_timeout_s
            if limit is not None and now >= self.started + limit:
                raise FirstTokenTimeout(
                    msg(
                        "The model server has not started answering in {seconds:.0f} s; "
                        "it may be overloaded or stuck. Try again in a moment.",
                        seconds=limit,
                    )
                )
            if now >= self._next_waiting:
                self._next_waiting = now + self.pacing.waiting_every_s
                return [Waiting(now - self.started)]
        elif (idle := self.pacing.idle_timeout_s) is not None and now >= self._last_event + idle:
            raise StreamStalled(
                msg(
                    "The model server stopped sending mid-answer: nothing for "
                    "{seconds:.0f} s. What arrived is kept; try again.",
                    seconds=idle,
                )
            )
        return []

    def flush(self) -> list[TextDelta]:
        """The held text, released now whatever the interval (end of stream, an error)."""
        return self._release(None) if self._held else []

    def _release(self, now: float | None) -> list[TextDelta]:
        assert self._kind is not None
        part = self._kind("".join(self._held))
        self._held.clear()
        if now is not None and visible(part.text):
            self._shown = now
        return [part]


_END = object()
"""Put on the queue by the pump when the source ended normally."""


async def _pump(events: AsyncGenerator[StreamEvent, None], queue: asyncio.Queue[object]) -> None:
    """Read ``events`` into ``queue`` (then :data:`_END`, or the exception it raised)."""
    try:
        async with aclosing(events):
            async for event in events:
                queue.put_nowait(event)
    except Exception as exc:  # handed to the reader, raised there
        queue.put_nowait(exc)
    else:
        queue.put_nowait(_END)


async def _next(queue: asyncio.Queue[object], timeout: float | None) -> object:
    """The next item of ``queue``, waiting at most ``timeout`` seconds.

    Raises:
        TimeoutError: nothing came in time.
    """
    if not queue.empty():
        return queue.get_nowait()
    # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a Stop
    # (cancellation) that lands as the queue gets an item.
    async with asyncio.timeout(timeout):
        return await queue.get()


async def coalesce(
    events: AsyncGenerator[StreamEvent, None],
    pacing: Pacing | None = None,
    queued: QueueLength | None = None,
) -> AsyncGenerator[StreamEvent | Waiting, None]:
    """Merge consecutive text deltas of one kind into one per ``pacing.interval_s``.

    The first visible text of each kind passes at once (time to the first words
    is not delayed; a lone marker's empty delta passes at once and does not
    count, :class:`Pacer`); later text is held and released together once the
    interval has passed since the last release, when the kind changes, before
    an error, or when the stream ends; held text is released by the clock even
    if nothing else arrives. Order and text are preserved exactly;
    :class:`backend.events.Done` passes unchanged, after any held text. Before
    the first text, :class:`Waiting` events come as ``pacing`` says, with the
    server's queue length from ``queued`` when given.

    Closing this generator (Stop) cancels the pump task, which closes ``events``
    in the task that opened it, at once.

    Raises:
        FirstTokenTimeout: no text within ``pacing.first_token_timeout_s``.
        StreamStalled: the started stream was silent for ``pacing.idle_timeout_s``.
        ChatError: whatever ``events`` raised, after the text before it.
    """
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[object] = asyncio.Queue()
    pacer = Pacer(pacing or Pacing(), loop.time())
    task = asyncio.create_task(_pump(events, queue))
    try:
        while True:
            due = pacer.deadline()
            try:
                item = await _next(queue, None if due is None else max(0.0, due - loop.time()))
            except TimeoutError:
                for due_part in pacer.tick(loop.time()):
                    if isinstance(due_part, Waiting) and queued is not None:
                        due_part = Waiting(due_part.seconds, await queued())
                    yield due_part
                continue
            if item is _END:
                break
            if isinstance(item, BaseException):
                for held in pacer.flush():
                    yield held
                raise item
            for part in pacer.feed(cast(StreamEvent, item), loop.time()):
                yield part
        for held in pacer.flush():
            yield held
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


MAX_TOKENS_PER_CHUNK = 32
"""The most tokens :class:`StreamPace` asks vLLM to put in one chunk."""

MIN_OBSERVED_TOKENS = 16
"""Answers shorter than this teach :class:`StreamPace` nothing (too few to time)."""

ASSUMED_TOKENS_PER_S = 40.0
"""The speed :class:`StreamPace` assumes of one chat before it has timed an answer: 2 tokens
a chunk at 50 ms updates. Every token a chunk (vLLM's default) made a freshly started app
process read 5 times the chunks of a learnt pace in its first burst at the scripted server's
100 tokens/s; with 2 a chunk its CPU per chat in a first burst of 64 through
``--ui-workers 2`` fell from 37-45 ms to 30-40 ms on the 2-core machine
(docs/benchmarks.md, a burst of first questions). The price is on servers slower than this: there
the first answer's chunks come less often than every UI update (every 100 ms at 20 tokens/s);
the first answer the process times replaces it."""


class StreamPace:
    """A server's decode speed per chat, learnt from finished answers, as a chunk size.

    vLLM sends one chunk per token unless asked otherwise (``stream_interval``,
    a chat completion field since vLLM 0.32; ``vllm/v1/engine/output_processor.py``
    sends the first token at once, then a chunk every that many tokens, and the
    last at the end). Every chunk costs the app CPU to read, while the UI shows
    text at most every ``interval_s`` anyway: asking for as many tokens per chunk
    as arrive in one UI interval cuts the chunks without delaying the screen.

    :meth:`tokens_per_chunk` is ``floor(tokens/s x interval_s)``, between 1 and
    ``max_tokens``: floor, so a chunk comes at least once per UI update. Before
    any answer was observed the speed is ``assumed_tokens_per_s``
    (:data:`ASSUMED_TOKENS_PER_S`). The learnt speed is an exponential moving
    average (weight ``smoothing`` for the newest answer), so it follows the
    server as its load changes.
    """

    def __init__(
        self,
        interval_s: float = DEFAULT_INTERVAL_S,
        max_tokens: int = MAX_TOKENS_PER_CHUNK,
        smoothing: float = 0.3,
        assumed_tokens_per_s: float = ASSUMED_TOKENS_PER_S,
    ) -> None:
        self.interval_s = interval_s
        self.max_tokens = max_tokens
        self.smoothing = smoothing
        self.assumed_tokens_per_s = assumed_tokens_per_s
        self.tokens_per_s: float | None = None
        """The learnt speed of one chat in tokens per second; None before any answer."""

    def observe(self, tokens: int, seconds: float) -> None:
        """Learn from one answer: ``tokens`` generated over ``seconds``.

        Pass the tokens after the first and the time from the first chunk to the
        last (so neither the prompt's prefill nor the chunk size skews it).
        Answers under :data:`MIN_OBSERVED_TOKENS` tokens, or timed at 0, are ignored.
        """
        if tokens < MIN_OBSERVED_TOKENS or seconds <= 0:
            return
        rate = tokens / seconds
        old = self.tokens_per_s
        self.tokens_per_s = rate if old is None else old + self.smoothing * (rate - old)

    def tokens_per_chunk(self) -> int:
        """Tokens to ask per streamed chunk (vLLM's ``stream_interval``), at least 1."""
        speed = self.assumed_tokens_per_s if self.tokens_per_s is None else self.tokens_per_s
        return max(1, min(self.max_tokens, int(speed * self.interval_s)))
