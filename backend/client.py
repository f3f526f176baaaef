"""Talks to a vLLM OpenAI-compatible server: models, health, streamed chat completions.

Everything goes through ``openai.AsyncOpenAI`` (SSE parsing, timeouts) and
``httpx`` (the ``/health`` and ``/tokenize`` endpoints, which are vLLM's own and
not part of the OpenAI API). Errors from either are mapped one to one onto
:mod:`backend.errors`, whose messages are what people read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
import httpx2
import openai

from backend.batching import StreamPace
from backend.errors import (
    ChatError,
    ClientClosed,
    ContextTooLong,
    RequestRejected,
    RequestTimeout,
    ServerFailed,
    ServerLoading,
    ServerUnreachable,
    StreamBroken,
    TooManyImages,
)
from backend.events import AnswerDelta, Done, ReasoningDelta, StreamEvent, Usage
from backend.i18n import msg
from backend.logs import LOGGER_NAME
from backend.metrics import fetch_metrics, queue_length
from backend.reasoning import ReasoningSplitter
from backend.settings import Settings
from backend.sse import data_values

log = logging.getLogger(LOGGER_NAME)


@dataclass(frozen=True, slots=True)
class ServedModel:
    """One entry of ``GET /v1/models``.

    ``max_model_len`` is vLLM's extension of the OpenAI model object (tokens);
    ``None`` when the server does not say.
    """

    id: str
    max_model_len: int | None


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """One chat completion request.

    Attributes:
        model: served model name.
        messages: OpenAI chat messages (``content`` may be a list of ``text`` and
            ``image_url`` parts).
        max_tokens: answer budget in tokens (reasoning counts against it).
        temperature, top_p: sampling parameters.
        thinking: True if text before any marker is reasoning (Thinking models).
        request_id: sent as ``X-Request-Id``; vLLM uses it as the request id
            it logs, so a request can be found in ``llm.log``.
        extra_body: extra JSON fields vLLM understands (e.g. ``structured_outputs``).
    """

    model: str
    messages: list[dict[str, Any]]
    max_tokens: int
    temperature: float
    top_p: float = 1.0
    thinking: bool = False
    request_id: str | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)


def _vllm_message(body: object, fallback: str) -> str:
    """Pull vLLM's human message out of an error body.

    vLLM answers errors as ``{"error": {"message", "type", "param", "code"}}``
    (facts.md); openai-python hands us either that object or its ``error`` part.
    """
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(body.get("message"), str):
            return str(body["message"])
    return fallback


PROBE_TIMEOUT_S = 5.0
"""Seconds for the quick questions (``/health``, ``/v1/models``): a server that takes
a connection but never answers them must not hold a page or a chat start for long."""

CLOSED_MESSAGE = msg(
    "The app is shutting down and no longer talks to the model server. "
    "Reload the page once it is back."
)


def broken_stream(exc: Exception) -> StreamBroken:
    """Say in words how a started stream broke: ``ValueError`` (a chunk that is not
    JSON, e.g. ``json.JSONDecodeError``) is garbled; a transport error (openai-python
    wraps it as ``APIConnectionError`` mid-stream) is cut off."""
    if isinstance(exc, ValueError):
        return StreamBroken(
            msg(
                "The model server's reply was garbled (a chunk that is not valid JSON). "
                "What arrived is kept; try again."
            )
        )
    return StreamBroken(
        msg(
            "The model server's reply was cut off: the connection dropped mid-answer "
            "({error}), maybe because the server stopped or restarted. "
            "What arrived is kept; try again.",
            error=type(exc).__name__,
        )
    )


def map_error(exc: Exception, *, base_url: str, model: str) -> ChatError:
    """Translate an openai-python or httpx exception into one of ours.

    Mapping (one to one): ``APITimeoutError`` -> :class:`RequestTimeout`;
    ``APIConnectionError`` / ``httpx.ConnectError`` -> :class:`ServerUnreachable`;
    400 with "maximum context length" / "max_model_len" -> :class:`ContextTooLong`;
    400 with "image(s) may be provided" -> :class:`TooManyImages`; other 4xx ->
    :class:`RequestRejected`; 503 -> :class:`ServerLoading`; other 5xx and an
    error event inside the stream -> :class:`ServerFailed`; httpx's
    ``RuntimeError`` "the client has been closed" -> :class:`ClientClosed`. Anything
    else is returned as a :class:`ServerFailed` carrying its type name, never a
    traceback.
    """
    if isinstance(exc, ChatError):
        return exc
    if isinstance(exc, RuntimeError) and "client has been closed" in str(exc):
        return ClientClosed(CLOSED_MESSAGE)
    if isinstance(exc, openai.APITimeoutError | httpx.TimeoutException):
        return RequestTimeout(
            msg(
                "The model server at {url} did not answer in time. It may be busy; try again.",
                url=base_url,
            )
        )
    if isinstance(exc, openai.APIConnectionError | httpx.TransportError):
        return ServerUnreachable(
            msg(
                "Cannot reach the model server at {url}. It may be starting, or restarting "
                "after a crash (launch.sh restarts it; see llm.log); otherwise check that it "
                "is running.",
                url=base_url,
            )
        )
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        detail = _vllm_message(exc.body, exc.message)
        if status == 503:
            return ServerLoading(
                msg("The model server is still loading ({detail}). Try again soon.", detail=detail)
            )
        if status >= 500:
            return ServerFailed(
                msg(
                    "The model server failed while answering ({status}): {detail}",
                    status=status,
                    detail=detail,
                )
            )
        if status in (401, 403):
            return RequestRejected(
                msg(
                    "The model server refused our API key. "
                    "Check KIMI_API_KEY matches vLLM's --api-key."
                )
            )
        if status == 404:
            return RequestRejected(
                msg(
                    "The model server does not serve '{model}': {detail}",
                    model=model,
                    detail=detail,
                )
            )
        lowered = detail.lower()
        if "image(s) may be provided" in lowered:
            return TooManyImages(
                msg("Too many images for the server in one request: {detail}", detail=detail)
            )
        if "maximum context length" in lowered or "max_model_len" in lowered:
            return ContextTooLong(
                msg(
                    "The conversation is too long for the model: {detail} Start a new chat, "
                    "send fewer images, or lower max tokens.",
                    detail=detail,
                )
            )
        return RequestRejected(
            msg("The model server rejected the request: {detail}", detail=detail)
        )
    if isinstance(exc, openai.APIError):
        detail = _vllm_message(exc.body, exc.message)
        return ServerFailed(
            msg("The model server reported an error while answering: {detail}", detail=detail)
        )
    log.error("unexpected failure talking to %s", base_url, exc_info=exc)
    return ServerFailed(
        msg(
            "Unexpected failure talking to the model server ({error}).",
            error=type(exc).__name__,
        )
    )


async def _chunks(response: openai.AsyncAPIResponse[Any]) -> AsyncIterator[dict[str, Any]]:
    """The chunks of a raw streamed chat completion, as plain dicts, in order.

    The body is read through the SDK's raw-response interface and parsed by
    :func:`backend.sse.data_values` (orjson) instead of the SDK's typed
    ``ChatCompletionChunk`` objects: ``bench/bench_chunks.py`` measured that
    decoding and those objects as most of the app's CPU per chunk. What the SDK's
    ``AsyncStream`` raises is kept, so :func:`map_error` and the stream's own
    mapping see the same exceptions: an error event (``{"error": {...}}``, vLLM's
    mid-stream error) raises ``openai.APIError`` with that body; a read timeout
    ``openai.APITimeoutError``; any other transport failure
    ``openai.APIConnectionError``.

    Raises:
        ValueError: a chunk that is not JSON or not a JSON object (garbled).
    """
    try:
        async for value in data_values(response.iter_bytes()):
            if not isinstance(value, dict):
                raise ValueError(f"a chunk that is a JSON {type(value).__name__}, not an object")
            if error := value.get("error"):
                message = error.get("message") if isinstance(error, dict) else None
                raise openai.APIError(
                    message=message
                    if isinstance(message, str) and message
                    else "An error occurred during streaming",
                    request=response.http_request,
                    body=error,
                )
            yield value
    except httpx2.TimeoutException as exc:
        raise openai.APITimeoutError(request=response.http_request) from exc
    except httpx2.TransportError as exc:
        raise openai.APIConnectionError(request=response.http_request) from exc


KEEPALIVE_EXPIRY_S = 2.0
"""Seconds an idle pooled connection is kept for reuse. vLLM's HTTP server (uvicorn)
closes a connection idle for ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE`` = 5 s (vllm/envs.py);
httpx's own default is the same 5 s, so under load a request could be written onto a
connection the server was closing that moment and fail as "cannot reach". Dropping idle
connections well before the server does leaves no such window."""


class ChatClient:
    """A vLLM OpenAI-compatible server, as the app and the CLI see it.

    One instance per server and process, owned by whoever created it (the app
    creates it at start and closes it at stop); everyone else borrows it and
    never closes it. After :meth:`aclose`, every call raises
    :class:`backend.errors.ClientClosed`.

    Args:
        base_url: OpenAI API base URL ending in ``/v1`` (e.g. ``http://127.0.0.1:8100/v1``).
        api_key: the key vLLM was started with (``VLLM_API_KEY``), or any string.
        timeout_s: httpx read timeout in seconds: the longest silence allowed between
            two chunks of a stream (not a limit on a whole answer).
        connect_timeout_s: seconds to open a connection.
        stream_interval: tokens per streamed chunk asked of vLLM (its
            ``stream_interval`` chat completion field, vLLM >= 0.32; the first
            token always comes at once); 0 = from the server's measured speed,
            one UI update's worth (:class:`backend.batching.StreamPace`), except for
            thinking requests (:meth:`tokens_per_chunk`); 1 = every token (the field
            is not sent).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 5.0,
        stream_interval: int = 0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.stream_interval = stream_interval
        self.pace = StreamPace()
        """This server's decode speed per chat, learnt from finished answers."""
        self._openai = openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=api_key,
            timeout=openai.Timeout(timeout_s, connect=connect_timeout_s),
            max_retries=0,  # errors reach the person at once; they retry with one click
            http_client=openai.DefaultAsyncHttpxClient(
                limits=httpx2.Limits(
                    max_connections=1000,
                    max_keepalive_connections=100,
                    keepalive_expiry=KEEPALIVE_EXPIRY_S,
                )
            ),
        )
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            headers={"Authorization": f"Bearer {api_key}"},
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S),
        )

    @classmethod
    def from_settings(cls, settings: Settings, base_url: str | None = None) -> ChatClient:
        """A new client for ``base_url`` (default ``settings.base_url``) with the
        settings' key and timeouts; the caller owns (and closes) it."""
        return cls(
            base_url or settings.base_url,
            settings.api_key.get_secret_value(),
            timeout_s=settings.request_timeout_s,
            connect_timeout_s=settings.connect_timeout_s,
            stream_interval=settings.stream_interval,
        )

    def _check_open(self) -> None:
        """Raise :class:`ClientClosed` once :meth:`aclose` has run."""
        if self.closed:
            raise ClientClosed(CLOSED_MESSAGE)

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` has run."""
        return self._http.is_closed

    @property
    def server_root(self) -> str:
        """The server's root URL (``base_url`` without a trailing ``/v1``)."""
        return self.base_url.removesuffix("/v1")

    async def aclose(self) -> None:
        """Close both HTTP connection pools."""
        await self._openai.close()
        await self._http.aclose()

    async def is_healthy(self) -> bool:
        """True if ``GET /health`` answers 200 (vLLM: the engine is ready).

        Never raises: an unreachable or loading server (or a closed client) is
        simply not healthy.
        """
        if self.closed:
            return False
        try:
            response = await self._http.get(f"{self.server_root}/health", timeout=PROBE_TIMEOUT_S)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def queued_requests(self, model: str | None = None) -> int | None:
        """Requests waiting on the server (vLLM ``/metrics``), or None when unknown."""
        if self.closed:
            return None
        return queue_length(await fetch_metrics(self._http, self.server_root), model)

    async def list_models(self) -> list[ServedModel]:
        """Return the served models from ``GET /v1/models``.

        Raises:
            ChatError: mapped as in :func:`map_error`; :class:`ClientClosed` after
                :meth:`aclose`.
        """
        self._check_open()
        try:
            page = await self._openai.models.list(timeout=PROBE_TIMEOUT_S)
        except Exception as exc:
            raise map_error(exc, base_url=self.base_url, model="") from exc
        return [
            ServedModel(id=m.id, max_model_len=getattr(m, "max_model_len", None)) for m in page.data
        ]

    async def count_text_tokens(self, model: str, text: str) -> int | None:
        """Count the tokens of ``text`` with vLLM's ``POST /tokenize`` (``prompt`` form).

        Special tokens are not added: chat-template overhead is accounted for
        separately by :mod:`backend.conversation`. Returns ``None`` when the
        endpoint is missing or fails, so the caller falls back to an estimate.
        """
        return await self._tokenize({"model": model, "prompt": text, "add_special_tokens": False})

    async def count_prompt_tokens(self, model: str, messages: list[dict[str, Any]]) -> int | None:
        """Count a whole chat prompt, template and images included, with ``POST /tokenize``.

        vLLM applies the chat template and expands each image into its
        placeholder tokens, so this is what the request will cost. It decodes
        every image, so it is called only when a prompt is near the limit.
        Returns ``None`` when the endpoint is missing or fails.
        """
        body = {"model": model, "messages": messages, "add_generation_prompt": True}
        return await self._tokenize(body)

    async def _tokenize(self, body: dict[str, Any]) -> int | None:
        """POST ``body`` to vLLM's ``/tokenize``; the ``count`` it answers, or None.

        None on any failure: unreachable, a closed client, not 200, or a body that
        is not a JSON object with an integer ``count``.
        """
        if self.closed:
            return None
        try:
            response = await self._http.post(f"{self.server_root}/tokenize", json=body)
            answer = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):  # ValueError: the body is not JSON
            return None
        count = answer.get("count") if isinstance(answer, dict) else None
        return count if isinstance(count, int) and not isinstance(count, bool) else None

    def tokens_per_chunk(self, request: ChatRequest) -> int:
        """The ``stream_interval`` to ask for ``request``; 1 = every token (not sent).

        A pinned :attr:`stream_interval` wins. A thinking request asks for every
        token: its first token is the opening marker alone, which vLLM sends at
        once, and the next chunk comes only ``stream_interval`` tokens later, so
        the first words a person can read would wait about one UI update (50 ms).
        Other requests ask for the learnt pace (:class:`backend.batching.StreamPace`).
        """
        if self.stream_interval:
            return self.stream_interval
        return 1 if request.thinking else self.pace.tokens_per_chunk()

    async def stream(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        """Stream one chat completion as typed events.

        Yields :class:`ReasoningDelta` and :class:`AnswerDelta` parts as chunks
        arrive (reasoning from ``delta.reasoning``, from the older
        ``delta.reasoning_content``, or split out of ``delta.content`` by
        :class:`backend.reasoning.ReasoningSplitter`, since vLLM has no parser for
        Kimi-VL's ``◁think▷`` markers), then exactly one :class:`Done`. Once the
        server sends a reasoning field, content is taken as answer as it is.

        Closing the generator early (``aclose()``, or cancellation as Chainlit's
        Stop does) closes the HTTP response, which makes vLLM abort the request.

        Raises:
            StreamBroken: the stream broke after its first chunk (connection
                dropped, a chunk that is not JSON, or an end without a
                ``finish_reason``); what was yielded before stands.
            ChatError: otherwise mapped as in :func:`map_error`;
                :class:`ClientClosed` after :meth:`aclose`.
        """
        self._check_open()
        splitter = ReasoningSplitter(starts_in_reasoning=request.thinking)
        headers = {"X-Request-Id": request.request_id} if request.request_id else None
        extra_body = dict(request.extra_body)
        interval = self.tokens_per_chunk(request)
        if interval > 1:
            extra_body.setdefault("stream_interval", interval)
        started = time.perf_counter()
        first_token: float | None = None
        first_reasoning: float | None = None
        first_answer: float | None = None
        first_chunk: float | None = None
        last_chunk: float | None = None
        finish_reason: str | None = None
        usage: Usage | None = None
        server_splits = False
        started_streaming = False
        try:
            async with self._openai.chat.completions.with_streaming_response.create(
                model=request.model,
                messages=cast(Any, request.messages),  # OpenAI TypedDicts; ours are plain dicts
                max_tokens=request.max_tokens,
                temperature=request.temperature,
                top_p=request.top_p,
                stream=True,
                stream_options={"include_usage": True},
                extra_headers=headers,
                extra_body=extra_body or None,
            ) as response:
                started_streaming = True
                async for chunk in _chunks(response):
                    if counts := chunk.get("usage"):
                        usage = Usage(counts["prompt_tokens"], counts["completion_tokens"])
                    choices = chunk.get("choices")
                    if not choices:
                        continue
                    choice = choices[0]
                    if choice.get("finish_reason") is not None:
                        finish_reason = choice["finish_reason"]
                    delta = choice.get("delta") or {}
                    # vLLM's reasoning field: `reasoning` now, `reasoning_content` before 2026.
                    reasoning = delta.get("reasoning") or delta.get("reasoning_content")
                    content = delta.get("content")
                    parts: list[StreamEvent] = []
                    if reasoning:
                        server_splits = True
                        parts.append(ReasoningDelta(reasoning))
                    if content:
                        if server_splits:  # a server-side parser already took the reasoning out
                            parts.append(AnswerDelta(content))
                        else:
                            parts.extend(splitter.feed(content))
                            if not parts and first_token is None and splitter.in_reasoning:
                                # The opening marker alone (vLLM sends the first token
                                # at once, the next ones a UI update later): say the
                                # reasoning has begun, so the step shows now.
                                parts.append(ReasoningDelta(""))
                    if reasoning or content:
                        last_chunk = time.perf_counter()
                        first_chunk = first_chunk or last_chunk
                    for part in parts:
                        now = time.perf_counter()
                        if first_token is None:
                            first_token = now
                        if isinstance(part, ReasoningDelta):
                            first_reasoning = first_reasoning or now
                        elif first_answer is None:
                            first_answer = now
                        yield part
        except Exception as exc:
            if (
                started_streaming
                and isinstance(exc, openai.APIConnectionError | httpx.TransportError | ValueError)
                and not isinstance(exc, openai.APITimeoutError | httpx.TimeoutException)
            ):
                raise broken_stream(exc) from exc
            raise map_error(exc, base_url=self.base_url, model=request.model) from exc
        if finish_reason is not None and usage is not None and first_chunk and last_chunk:
            self.pace.observe(usage.completion_tokens - 1, last_chunk - first_chunk)
        if finish_reason is None:
            raise StreamBroken(
                msg(
                    "The model server's reply was cut off before the answer ended (the "
                    "stream closed without a finish reason). What arrived is kept; try again."
                )
            )
        for part in splitter.flush():
            if isinstance(part, AnswerDelta) and first_answer is None:
                first_answer = time.perf_counter()
            yield part
        ended = time.perf_counter()
        unmarked = (
            request.thinking
            and not server_splits
            and not splitter.saw_marker
            and first_reasoning is not None
            and finish_reason != "length"
        )
        yield Done(
            finish_reason=finish_reason,
            usage=usage,
            ttft_s=None if first_token is None else first_token - started,
            reasoning_s=None
            if first_reasoning is None or unmarked
            else (first_answer or ended) - first_reasoning,
            elapsed_s=ended - started,
            reasoning_unclosed=first_reasoning is not None
            and first_answer is None
            and not unmarked,
            answer_in_reasoning=unmarked,
        )
