"""Talks to a vLLM OpenAI-compatible server: models, health, streamed chat completions.

A streamed chat completion goes on an ``aiohttp`` session of its own (the request, its
timeouts, the raw body parsed by :mod:`backend.sse`); the served models through
``openai.AsyncOpenAI`` (``/v1/models``); vLLM's own endpoints (``/health``, ``/tokenize``,
not part of the OpenAI API) through ``httpx``. Errors from any of them are mapped one to
one onto :mod:`backend.errors` (:func:`backend.vllm_errors.map_error`), whose messages are
what people read.

Why not the SDK for the chat completion too: its request (``AsyncOpenAI.post``: the
request's options, URL and headers built in its own types, then handed to aiohttp) took
about 2 ms of CPU a request more than aiohttp's own, about half of a first question's CPU
in the app (docs/benchmarks.md, "The chat completion on aiohttp"); in a room that asks
at once every question waits for the ones before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import logging
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import aiohttp
import httpx
import httpx2
import orjson

from backend.errors import ClientClosed, StreamBroken
from backend.events import (
    AnswerDelta,
    Done,
    ReasoningDelta,
    ReasoningOpened,
    StreamEvent,
    TextPart,
    Usage,
)
from backend.families import KIMI_MARKERS, ModelFamily, ReasoningMarkers
from backend.i18n import msg
from backend.logs import LOGGER_NAME
from backend.reasoning import ReasoningSplitter
from backend.settings import Settings
from backend.sse import data_values
from backend.vllm_errors import (
    CLOSED_MESSAGE,
    ErrorEvent,
    HttpStatusError,
    broken_stream,
    map_error,
    timed_out,
)

# The OpenAI SDK is imported where a client first lists its server's models: importing it
# costs about half a second of CPU (docs/benchmarks.md, start to ready), which serving the
# first page does not need (tests/test_startup_imports.py).
if TYPE_CHECKING:
    import openai

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
        markers: the family's reasoning markers, for a server without a reasoning parser.
        prefill: the start of the reply, already written: sent as a last assistant
            message that the model continues (vLLM's ``continue_final_message``) and
            not streamed back: the opening marker for a Thinking model
            (``ModelFamily.reply_start`` in backend/families.py).
        request_id: sent as ``X-Request-Id``; vLLM uses it as the request id
            it logs, so a request can be found in ``llm.log``.
        extra_body: extra JSON fields vLLM understands (e.g. ``structured_outputs``).
        session_id: the chat's id, sent as ``X-Session-Id``: vLLM's router keeps a chat on
            one replica by it (serving/replicas.py); a single vLLM ignores it.
    """

    model: str
    messages: list[dict[str, Any]]
    max_tokens: int
    temperature: float
    top_p: float = 1.0
    thinking: bool = False
    markers: ReasoningMarkers = KIMI_MARKERS
    prefill: str = ""
    request_id: str | None = None
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    session_id: str | None = None


REASONING_PROBE_ID = "reasoning-probe-"
"""The ``X-Request-Id`` prefix of the one-token request that learns whether a server
separates a model's reasoning (:meth:`ChatClient.learn_reasoning`); in ``llm.log``."""

PROBE_TIMEOUT_S = 5.0
"""Seconds for the quick questions (``/health``, ``/v1/models``): a server that takes
a connection but never answers them must not hold a page or a chat start for long."""

CHARS_PER_TOKEN_LIMIT = 10
"""Characters of reasoning and answer together that a stream may bring per token of its
request's ``max_tokens``; past that the app stops reading and closes the stream, which
makes vLLM abort the request. A real answer averages about 4 characters a token (English;
Chinese about 1.5), so at 32,768 max tokens one is about 130,000 characters and the limit
327,680: only a broken or hostile stream reaches it. The page's cost grows with the
square of an answer's length (measured in Chromium: 250,000 characters froze it 6 s,
500,000 27 s; a 5 MB answer, minutes)."""

MIN_OUTPUT_CHARS = 100_000
MAX_OUTPUT_CHARS = 1_000_000
"""The limit whatever ``max_tokens`` says (:func:`output_limit`): a small budget still
allows 100,000 characters (the page shows them in about a second), a huge one no more
than 1,000,000."""


def output_limit(max_tokens: int) -> int:
    """Characters a stream asked for ``max_tokens`` may bring: :data:`CHARS_PER_TOKEN_LIMIT`
    a token, from :data:`MIN_OUTPUT_CHARS` to :data:`MAX_OUTPUT_CHARS`."""
    per_token = max_tokens * CHARS_PER_TOKEN_LIMIT
    return min(MAX_OUTPUT_CHARS, max(MIN_OUTPUT_CHARS, per_token))


class OutputLimit:
    """Counts the characters of a stream's text parts and cuts them at ``chars``.

    Once :attr:`reached`, the last part has been cut to fit and nothing more passes.
    """

    def __init__(self, chars: int) -> None:
        self.chars = chars
        self._left = chars
        self.reached = False

    def cut(self, parts: Iterable[TextPart]) -> Iterator[TextPart]:
        """``parts`` as long as they fit; the one that does not, cut to what is left."""
        for part in parts:
            if self.reached:
                return
            if len(part.text) > self._left:
                part = type(part)(part.text[: self._left])
                self.reached = True
            self._left -= len(part.text)
            yield part


def load_sdk() -> None:
    """Import the OpenAI SDK (about 0.5 s of CPU); for a worker thread, off the event loop.

    The app starts it at its start (:meth:`backend.resources.AppResources.start_housekeeping`)
    and a client's first model list waits for it (:meth:`ChatClient.list_models`), so the
    first page does not wait for the import and the event loop never runs it.
    """
    importlib.import_module("openai")


NO_KEY: Final = "no-key"
"""What the OpenAI SDK is given when there is no key: it refuses an empty one ("Missing
credentials"); the ``Authorization`` header is left out all the same."""


async def _chunks(response: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    """The chunks of a raw streamed chat completion, as plain dicts, in order.

    The body is parsed by :func:`backend.sse.data_values` (orjson) as its bytes come,
    not into the SDK's typed ``ChatCompletionChunk`` objects: ``bench/bench_chunks.py``
    measured that decoding and those objects as most of the app's CPU per chunk.

    Raises:
        ErrorEvent: vLLM's error event (``{"error": {...}}``) inside the stream.
        ValueError: a chunk that is not JSON or not a JSON object (garbled).
        aiohttp.ClientError: the body broke (``ClientPayloadError``) or timed out.
    """
    async for value in data_values(response.content.iter_any()):
        if not isinstance(value, dict):
            raise ValueError(f"a chunk that is a JSON {type(value).__name__}, not an object")
        if error := value.get("error"):
            raise ErrorEvent(error)
        yield value


async def _error_body(response: aiohttp.ClientResponse) -> object:
    """The body of an HTTP error answer: its JSON value, or its text when it is not JSON."""
    raw = await response.read()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")


KEEPALIVE_EXPIRY_S = 2.0
"""Seconds an idle pooled connection is kept for reuse. vLLM's HTTP server (uvicorn)
closes a connection idle for ``VLLM_HTTP_TIMEOUT_KEEP_ALIVE`` = 5 s (vllm/envs.py);
httpx's own default is the same 5 s, so under load a request could be written onto a
connection the server was closing that moment and fail as "cannot reach". Dropping idle
connections well before the server does leaves no such window."""

MAX_CONNECTIONS = 1000
"""Connections open at once to one server, streams and idle ones together: more than the
chats one app process serves (``bench/bench_burst.py`` runs 64)."""


class ChatClient:
    """A vLLM OpenAI-compatible server, as the app and the CLI see it.

    One instance per server and process, owned by whoever created it (the app
    creates it at start and closes it at stop); everyone else borrows it and
    never closes it. After :meth:`aclose`, every call raises
    :class:`backend.errors.ClientClosed`.

    Args:
        base_url: OpenAI API base URL ending in ``/v1`` (e.g. ``http://127.0.0.1:8100/v1``).
        api_key: the key vLLM was started with (``VLLM_API_KEY``); "" for none, and then
            no ``Authorization`` header is sent (not even the SDK's ``OPENAI_API_KEY``).
        timeout_s: read timeout in seconds: the longest silence allowed between two
            chunks of a stream (not a limit on a whole answer); also the longest wait for
            a connection of the streams' pool.
        connect_timeout_s: seconds to open a connection.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = 600.0,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._auth = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            headers=self._auth,
            limits=httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY_S),
        )
        self._completions_url = f"{self.base_url}/chat/completions"
        self._streams: aiohttp.ClientSession | None = None  # made in the loop, on first use
        self._closing = False
        self._separates: dict[str, asyncio.Task[bool | None]] = {}  # by served model

    def _stream_session(self) -> aiohttp.ClientSession:
        """The aiohttp session of the chat completions, made on the first (in the event
        loop, as aiohttp wants); its timeouts are this client's: ``timeout_s`` between two
        reads of a body and for a connection of the pool (name lookup and connect
        included), ``connect_timeout_s`` to open one, none on a whole answer.

        Raises:
            ClientClosed: :meth:`aclose` has begun.
        """
        self._check_open()
        if self._streams is None:
            self._streams = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=MAX_CONNECTIONS, keepalive_timeout=KEEPALIVE_EXPIRY_S
                ),
                timeout=aiohttp.ClientTimeout(
                    total=None,
                    connect=self._timeout_s,
                    sock_connect=self._connect_timeout_s,
                    sock_read=self._timeout_s,
                ),
                headers=self._auth,
            )
        return self._streams

    @functools.cached_property
    def _headers(self) -> dict[str, str | openai.Omit]:
        """Headers of every OpenAI API request; without a key, the SDK's own goes."""
        import openai

        return {} if self._api_key else {"Authorization": openai.Omit()}

    async def _sdk_loaded(self) -> None:
        """Before this client's first model list: import the SDK in a thread (or wait
        there for the import already under way), never in the event loop."""
        if "_openai" not in vars(self):
            await asyncio.to_thread(load_sdk)

    @functools.cached_property
    def _openai(self) -> openai.AsyncOpenAI:
        """The SDK's client (``/v1/models``), made on first use (see the import note above),
        on the SDK's aiohttp transport (``openai.DefaultAioHttpClient``): aiohttp, as the
        chat completions' session (:meth:`_stream_session`), with the same pool limits."""
        import openai

        return openai.AsyncOpenAI(
            base_url=self.base_url,
            api_key=self._api_key or NO_KEY,
            timeout=openai.Timeout(self._timeout_s, connect=self._connect_timeout_s),
            max_retries=0,  # errors reach the person at once; they retry with one click
            http_client=openai.DefaultAioHttpClient(
                limits=httpx2.Limits(
                    max_connections=MAX_CONNECTIONS,
                    max_keepalive_connections=100,
                    keepalive_expiry=KEEPALIVE_EXPIRY_S,
                )
            ),
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
        )

    def _check_open(self) -> None:
        """Raise :class:`ClientClosed` once :meth:`aclose` has run."""
        if self.closed:
            raise ClientClosed(CLOSED_MESSAGE)

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` has begun."""
        return self._closing

    @property
    def server_root(self) -> str:
        """The server's root URL (``base_url`` without a trailing ``/v1``)."""
        return self.base_url.removesuffix("/v1")

    @property
    def http(self) -> httpx.AsyncClient:
        """The HTTP client for vLLM's own endpoints (``/metrics``...), with the key;
        borrowed: closed by :meth:`aclose`."""
        return self._http

    async def aclose(self) -> None:
        """Close every HTTP connection pool (the streams' and the SDK's, if they were made);
        from its first instant, every call raises :class:`ClientClosed`."""
        self._closing = True
        for learning in self._separates.values():
            learning.cancel()
        if self._streams is not None:
            await self._streams.close()
        if "_openai" in vars(self):
            await self._openai.close()
        await self._http.aclose()

    def learn_reasoning(self, model: str, family: ModelFamily) -> asyncio.Task[bool | None] | None:
        """Start learning, once per served ``model``, whether this server separates its
        reasoning (a vLLM reasoning parser): a chat calls it as it connects. Returns the
        learning (its answer as :meth:`separates_reasoning` gives it), None where there is
        nothing to learn.

        Only a family whose replies begin inside the reasoning needs it (another's text is
        answer until the model writes a marker, either way). The answer is one request of
        one token (:data:`REASONING_PROBE_ID`), its reply started as the family's requests
        start it: a parser sends that token as ``delta.reasoning``, a server without one as
        ``delta.content``. An unclear answer (the server not ready, an error) is learnt
        again by the next stream.
        """
        if (family.starts_in_reasoning or family.dev_shaped) and not self.closed:
            return self._learning(model, family.reply_start)
        return None

    def separates_reasoning(self, model: str) -> bool | None:
        """Whether this server sends ``model``'s reasoning in its own field, as learnt
        (:meth:`learn_reasoning`); None while it is not known. A question never waits
        for it: until it is known, a stream's content is split unless a reasoning
        field comes first."""
        learning = self._separates.get(model)
        if learning is None or not learning.done() or learning.cancelled():
            return None
        return learning.result()

    def _learning(self, model: str, prefill: str) -> asyncio.Task[bool | None]:
        """The probe of ``model``: the one under way or learnt, or a new one where the
        last was unclear."""
        known = self._separates.get(model)
        if known is None or (known.done() and (known.cancelled() or known.result() is None)):
            known = asyncio.create_task(self._probe_reasoning(model, prefill))
            self._separates[model] = known
        return known

    async def _probe_reasoning(self, model: str, prefill: str) -> bool | None:
        """One token of a reply begun with ``prefill``: True if it came as reasoning, False
        as content, None if the server did not answer it (within :data:`PROBE_TIMEOUT_S`)."""
        probe = ChatRequest(
            model=model,
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=1,
            temperature=0.0,
            prefill=prefill,
            request_id=f"{REASONING_PROBE_ID}{uuid.uuid4().hex}",
        )
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S), self._open(probe) as response:
                async for chunk in _chunks(response):
                    delta = ((chunk.get("choices") or [{}])[0]).get("delta") or {}
                    if delta.get("reasoning") or delta.get("reasoning_content"):
                        return True
                    if delta.get("content"):
                        return False
        except Exception as exc:  # any failure: unclear, learnt again by the next stream
            log.info("reasoning probe of %s at %s: %s", model, self.base_url, exc)
        return None

    async def list_models(self) -> list[ServedModel]:
        """Return the served models from ``GET /v1/models``.

        Raises:
            ChatError: mapped as in :func:`backend.vllm_errors.map_error`;
                :class:`ClientClosed` after :meth:`aclose`.
        """
        self._check_open()
        await self._sdk_loaded()
        try:
            page = await self._openai.models.list(
                timeout=PROBE_TIMEOUT_S, extra_headers=self._headers or None
            )
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

    async def count_prompt_tokens(
        self, model: str, messages: list[dict[str, Any]], prefill: str = ""
    ) -> int | None:
        """Count a whole chat prompt, template and images included, with ``POST /tokenize``.

        vLLM applies the chat template and expands each image into its
        placeholder tokens, so this is what the request will cost; ``prefill``: the
        start of the reply the request writes itself (:attr:`ChatRequest.prefill`),
        counted as the request renders it. It decodes every image, so it is called
        only when a prompt is near the limit. Returns ``None`` when the endpoint is
        missing or fails. The caller bounds how long it waits (planning has a
        deadline of its own).
        """
        body = {"model": model, "messages": messages, "add_generation_prompt": True}
        return await self._tokenize(body | continuing(messages, prefill))

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

    async def stream(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        """Stream one chat completion as typed events.

        Yields :class:`ReasoningOpened` once the server took a request whose prefill
        began the reply inside the reasoning (before the model's first token: the page
        shows the reasoning step while the server prepares it), then
        :class:`ReasoningDelta` and :class:`AnswerDelta` parts as chunks arrive
        (reasoning from ``delta.reasoning``, from the older ``delta.reasoning_content``,
        or, from a server without a reasoning parser, split out of ``delta.content`` by
        :class:`backend.reasoning.ReasoningSplitter`), then exactly one :class:`Done`.
        Which of the two a server does is learnt once per served model, when a chat
        connects (:meth:`learn_reasoning`); a server that separates the reasoning has
        its content taken as answer as it is, never split again. Before that is known
        (the first question right after the connect), content is split until a
        reasoning field comes.

        Closing the generator early (``aclose()``, or cancellation as Chainlit's
        Stop does) closes the HTTP response, which makes vLLM abort the request.
        So does a stream whose text reaches :func:`output_limit` of its
        ``max_tokens``: it is cut there and its :class:`Done` has ``cut_at_chars`` set.

        Raises:
            StreamBroken: the stream broke after its first chunk (connection
                dropped, a chunk that is not JSON, or an end without a
                ``finish_reason``); what was yielded before stands.
            ChatError: otherwise mapped as in :func:`backend.vllm_errors.map_error`;
                :class:`ClientClosed` after :meth:`aclose`.
        """
        self._check_open()
        server_splits = False
        if request.thinking:
            server_splits = self.separates_reasoning(request.model) is True
            self._learning(request.model, request.prefill)  # learnt once, for the next
        splitter = ReasoningSplitter(markers=request.markers, starts_in_reasoning=request.thinking)
        reading = _Reading(splitter, server_splits=server_splits)
        splitter.feed(request.prefill)  # written by the request: read, not shown
        started_streaming = False
        limit = OutputLimit(output_limit(request.max_tokens))
        try:
            async with self._open(request) as response:
                started_streaming = True
                if request.prefill and splitter.in_reasoning:
                    yield ReasoningOpened()
                async for chunk in _chunks(response):
                    for part in limit.cut(reading.parts(chunk)):
                        yield part
                    if limit.reached:
                        break  # leaving the block closes the response: vLLM aborts
        except Exception as exc:
            if started_streaming and _broke(exc):
                raise broken_stream(exc) from exc
            raise map_error(exc, base_url=self.base_url, model=request.model) from exc
        if reading.finish_reason is None and not limit.reached:
            raise StreamBroken(
                msg(
                    "The model server's reply was cut off before the answer ended (the "
                    "stream closed without a finish reason). What arrived is kept; try again."
                )
            )
        for part in limit.cut(reading.flush()):
            yield part
        yield reading.done(
            thinking=request.thinking, cut_at_chars=limit.chars if limit.reached else None
        )

    @contextlib.asynccontextmanager
    async def _open(self, request: ChatRequest) -> AsyncIterator[aiohttp.ClientResponse]:
        """The streamed chat completion of ``request``: its raw HTTP response, body unread,
        released on leaving; a body not read to its end closes its connection then (aiohttp
        keeps only a finished one), which makes vLLM abort the request.

        Raises:
            HttpStatusError: the server answered with a status that is not 2xx.
            aiohttp.ClientError: the server could not be reached or did not answer in time.
        """
        headers = {"Content-Type": "application/json"}
        if request.request_id:
            headers["X-Request-Id"] = request.request_id
        if request.session_id:
            headers["X-Session-Id"] = request.session_id
        body = orjson.dumps(request_body(request))
        post = self._stream_session().post
        async with post(self._completions_url, data=body, headers=headers) as response:
            if not 200 <= response.status < 300:
                raise HttpStatusError(response.status, await _error_body(response))
            yield response


def request_body(request: ChatRequest) -> dict[str, Any]:
    """The JSON body of ``request``'s streamed chat completion (OpenAI's chat completions
    API, with vLLM's extra fields from ``request.extra_body`` merged in last)."""
    return {
        "model": request.model,
        "messages": request.messages,
        "max_tokens": request.max_tokens,
        "temperature": request.temperature,
        "top_p": request.top_p,
        "stream": True,
        "stream_options": {"include_usage": True},
        **continuing(request.messages, request.prefill),
        **request.extra_body,
    }


def continuing(messages: list[dict[str, Any]], prefill: str) -> dict[str, Any]:
    """The chat completion fields that make the model continue ``prefill`` after
    ``messages``: ``messages`` with ``prefill`` as a last assistant message, which the
    chat template renders as the start of the reply (vLLM's ``continue_final_message``;
    the generation prompt is then not added, as vLLM requires). Nothing for an empty
    ``prefill``: the request's own fields stand."""
    if not prefill:
        return {}
    return {
        "messages": [*messages, {"role": "assistant", "content": prefill}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }


def _broke(exc: Exception) -> bool:
    """True if ``exc``, raised after the stream started, means it broke (a transport
    failure or a garbled chunk), not that the server was slow."""
    return isinstance(exc, aiohttp.ClientError | ValueError) and not timed_out(exc)


class _Reading:
    """One stream being read: the reasoning split, the finish reason, usage and the clock."""

    def __init__(self, splitter: ReasoningSplitter, *, server_splits: bool) -> None:
        """``server_splits``: the server separates the reasoning (learnt at connect), so
        content is answer as it is; otherwise ``splitter`` splits it, until the server
        sends a reasoning field after all."""
        self.splitter = splitter
        self.started = time.perf_counter()
        self.first_token: float | None = None
        self.first_reasoning: float | None = None
        self.first_answer: float | None = None
        self.first_chunk: float | None = None
        self.last_chunk: float | None = None
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.server_splits = server_splits

    def parts(self, chunk: dict[str, Any]) -> list[TextPart]:
        """The text parts of one chunk, in order (noting its finish reason and usage)."""
        if counts := chunk.get("usage"):
            self.usage = Usage(counts["prompt_tokens"], counts["completion_tokens"])
        choices = chunk.get("choices")
        if not choices:
            return []
        choice = choices[0]
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta") or {}
        # vLLM's reasoning field: `reasoning` now, `reasoning_content` before 2026.
        reasoning = delta.get("reasoning") or delta.get("reasoning_content")
        content = delta.get("content")
        parts = self._split(reasoning, content)
        if reasoning or content:
            self.last_chunk = time.perf_counter()
            self.first_chunk = self.first_chunk or self.last_chunk
        for part in parts:
            self._clock(part)
        return parts

    def _split(self, reasoning: str | None, content: str | None) -> list[TextPart]:
        parts: list[TextPart] = []
        if reasoning:
            self.server_splits = True
            parts.append(ReasoningDelta(reasoning))
        if content and self.server_splits:  # a server-side parser already took reasoning out
            parts.append(AnswerDelta(content))
        elif content:
            parts.extend(self.splitter.feed(content))
            if not parts and self.first_token is None and self.splitter.in_reasoning:
                # The opening marker alone (vLLM sends the first token at once, the
                # next ones a UI update later): say the reasoning has begun, so the
                # step shows now.
                parts.append(ReasoningDelta(""))
        return parts

    def _clock(self, part: TextPart) -> None:
        now = time.perf_counter()
        self.first_token = self.first_token or now
        if isinstance(part, ReasoningDelta):
            self.first_reasoning = self.first_reasoning or now
        elif self.first_answer is None:
            self.first_answer = now

    def flush(self) -> list[TextPart]:
        """What the splitter still holds at the end of the stream."""
        parts: list[TextPart] = list(self.splitter.flush())
        for part in parts:
            if isinstance(part, AnswerDelta) and self.first_answer is None:
                self.first_answer = time.perf_counter()
        return parts

    def done(self, *, thinking: bool, cut_at_chars: int | None = None) -> Done:
        """The end of the stream (see :class:`backend.events.Done`); ``cut_at_chars``: the
        :class:`OutputLimit` the stream was cut at, if it was."""
        ended = time.perf_counter()
        reasoned = self.first_reasoning is not None
        unmarked = (
            thinking
            and not self.server_splits
            and not self.splitter.saw_marker
            and reasoned
            and self.finish_reason != "length"
        )
        reasoning_s = None
        if self.first_reasoning is not None and not unmarked:
            reasoning_s = (self.first_answer or ended) - self.first_reasoning
        decode_s = None
        if self.first_chunk is not None and self.last_chunk is not None:
            decode_s = self.last_chunk - self.first_chunk
        return Done(
            finish_reason=self.finish_reason,
            usage=self.usage,
            ttft_s=None if self.first_token is None else self.first_token - self.started,
            reasoning_s=reasoning_s,
            elapsed_s=ended - self.started,
            reasoning_unclosed=reasoned and self.first_answer is None and not unmarked,
            answer_in_reasoning=unmarked,
            cut_at_chars=cut_at_chars,
            decode_s=decode_s,
        )
