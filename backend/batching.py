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

from backend.errors import FirstTokenTimeout, StreamStalled
from backend.events import AnswerDelta, Done, ReasoningDelta, StreamEvent, Waiting
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


_END = object()
"""Put on the queue by the pump when the source ended normally."""

QueueLength = Callable[[], Awaitable[int | None]]
"""Asks the server how many requests are queued (vLLM ``/metrics``); None if unknown."""


async def coalesce(
    events: AsyncGenerator[StreamEvent, None],
    pacing: Pacing | None = None,
    queued: QueueLength | None = None,
) -> AsyncGenerator[StreamEvent | Waiting, None]:
    """Merge consecutive text deltas of one kind into one per ``pacing.interval_s``.

    The first delta of each kind passes at once (time to first token is not
    delayed); later ones are held and released together once the interval has
    passed since the last release, when the kind changes, before an error, or
    when the stream ends; held text is released by the clock even if nothing
    else arrives. Order and text are preserved exactly;
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
    pacing = pacing or Pacing()
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[object] = asyncio.Queue()

    async def pump() -> None:
        try:
            async with aclosing(events):
                async for event in events:
                    queue.put_nowait(event)
        except Exception as exc:  # handed to the reader, raised there
            queue.put_nowait(exc)
        else:
            queue.put_nowait(_END)

    task = asyncio.create_task(pump())
    started = last_event = loop.time()
    next_waiting = started + pacing.waiting_after_s
    seen_text = False
    held: list[str] = []
    held_kind: type[ReasoningDelta] | type[AnswerDelta] | None = None
    last_release = float("-inf")

    def release() -> ReasoningDelta | AnswerDelta:
        nonlocal held_kind, last_release
        assert held_kind is not None
        part = held_kind("".join(held))
        held.clear()
        held_kind = None
        last_release = loop.time()
        return part

    try:
        while True:
            deadlines = []
            if held_kind is not None:
                deadlines.append(last_release + pacing.interval_s)
            if not seen_text:
                deadlines.append(next_waiting)
                if pacing.first_token_timeout_s is not None:
                    deadlines.append(started + pacing.first_token_timeout_s)
            elif pacing.idle_timeout_s is not None:
                deadlines.append(last_event + pacing.idle_timeout_s)
            timeout = max(0.0, min(deadlines) - loop.time()) if deadlines else None
            try:
                if queue.empty():
                    # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow
                    # a Stop (cancellation) that lands as the queue gets an item.
                    async with asyncio.timeout(timeout):
                        item = await queue.get()
                else:
                    item = queue.get_nowait()
            except TimeoutError:
                now = loop.time()
                if held_kind is not None and now >= last_release + pacing.interval_s:
                    yield release()
                elif not seen_text:
                    limit = pacing.first_token_timeout_s
                    if limit is not None and now >= started + limit:
                        raise FirstTokenTimeout(
                            msg(
                                "The model server has not started answering in {seconds:.0f} s; "
                                "it may be overloaded or stuck. Try again in a moment.",
                                seconds=limit,
                            )
                        ) from None
                    if now >= next_waiting:
                        next_waiting = now + pacing.waiting_every_s
                        yield Waiting(now - started, await queued() if queued else None)
                elif (idle := pacing.idle_timeout_s) is not None and now >= last_event + idle:
                    raise StreamStalled(
                        msg(
                            "The model server stopped sending mid-answer: nothing for "
                            "{seconds:.0f} s. What arrived is kept; try again.",
                            seconds=idle,
                        )
                    ) from None
                continue
            last_event = loop.time()
            if item is _END:
                break
            if isinstance(item, BaseException):
                if held_kind is not None:
                    yield release()
                raise item
            if isinstance(item, ReasoningDelta | AnswerDelta):
                seen_text = True
                kind = type(item)
                if held_kind is not None and kind is not held_kind:
                    yield release()
                    last_release = float("-inf")
                held.append(item.text)
                held_kind = kind
                if loop.time() - last_release >= pacing.interval_s:
                    yield release()
            elif isinstance(item, Done):
                if held_kind is not None:
                    yield release()
                yield item
        if held_kind is not None:
            yield release()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


MAX_TOKENS_PER_CHUNK = 32
"""The most tokens :class:`StreamPace` asks vLLM to put in one chunk."""

MIN_OBSERVED_TOKENS = 16
"""Answers shorter than this teach :class:`StreamPace` nothing (too few to time)."""


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
    any answer was observed it is 1 (every token, vLLM's default). The speed is
    an exponential moving average (weight ``smoothing`` for the newest answer),
    so it follows the server as its load changes.
    """

    def __init__(
        self,
        interval_s: float = DEFAULT_INTERVAL_S,
        max_tokens: int = MAX_TOKENS_PER_CHUNK,
        smoothing: float = 0.3,
    ) -> None:
        self.interval_s = interval_s
        self.max_tokens = max_tokens
        self.smoothing = smoothing
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
        if self.tokens_per_s is None:
            return 1
        return max(1, min(self.max_tokens, int(self.tokens_per_s * self.interval_s)))
