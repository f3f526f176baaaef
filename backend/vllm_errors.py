"""What vLLM and the HTTP stack raise, as one of our errors (:mod:`backend.errors`).

vLLM answers a failed request with an HTTP status and a JSON body
``{"error": {"message", "type", "param", "code"}}`` (``ErrorInfo`` in
``vllm/entrypoints/serve/engine/protocol.py``), and a failure inside a started
stream with the same object as an SSE event. What vLLM 0.32.0 puts there, read in
its source (``vllm/entrypoints/serve/exception_handling/error_response.py``,
``vllm/exceptions.py``):

* a request it refuses (``VLLMValidationError``): 400, ``type`` "BadRequestError",
  ``param`` the field at fault: the modality (``"image"``) for more images than
  ``--limit-mm-per-prompt`` allows (``vllm/multimodal/processing/context.py``);
  ``"input_tokens"`` or ``"input_text"`` for a prompt longer than the max model
  length, ``"max_tokens"`` for an answer budget above it (``vllm/renderers/params.py``);
* an unknown model: 404, ``type`` "NotFoundError", ``param`` ``"model"``;
* a busy or briefly failing engine (``QueueOverflowError``, ``RetryableRequestError``): 503;
* anything else of the engine: 500, ``type`` "InternalServerError"; ``code`` is the status.

So errors are classified by status and ``param``. Older servers (and proxies) send
``param`` null; only then is vLLM's message text read, for the two sentences vLLM
0.32 uses ("At most N image(s) may be provided in one prompt", "This model's maximum
context length is N tokens"), older ones "max_model_len".

What a person reads is always one of our sentences: neither the server's words nor an
exception's name (issue 47). The server's words go to app.log with the request's
reference (:func:`log_reason`, logged by backend/turn_runner.py).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Protocol, TypeGuard

import aiohttp
import httpx

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
from backend.i18n import msg
from backend.logs import LOGGER_NAME

log = logging.getLogger(LOGGER_NAME)

MEDIA_PARAMS: Final = frozenset({"image", "video", "audio"})
"""``param`` of vLLM 0.32's "at most N items of this modality" refusal: the modality."""

LENGTH_PARAMS: Final = frozenset(
    {"input_tokens", "input_text", "max_tokens", "max_completion_tokens"}
)
"""``param`` of vLLM 0.32's refusals of a prompt or answer budget beyond the max model length."""

CLOSED_MESSAGE: Final = msg(
    "The app is shutting down and no longer talks to the model server. "
    "Reload the page once it is back."
)


class HttpStatusError(Exception):
    """A chat completion answered with an HTTP status that is not a success (not 2xx).

    Attributes:
        status_code: the HTTP status.
        body: the answer's body as JSON (vLLM: ``{"error": {...}}``, see the module
            docstring), or as text when it is not JSON.
    """

    def __init__(self, status: int, body: object) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status
        self.body = body


class ErrorEvent(Exception):
    """vLLM's error inside a started stream (an event ``{"error": {...}}``); ``body`` is
    the error object (``message``, ``type``, ``param``, ``code``)."""

    def __init__(self, body: object) -> None:
        super().__init__("An error occurred during streaming")
        self.body = body


def _sdk_error(name: str) -> type[BaseException] | tuple[()]:
    """The OpenAI SDK's exception class ``name``, or ``()`` (which no ``isinstance``
    matches) while the SDK is not loaded or still loading in its thread (backend/client.py
    loads it for ``/v1/models``): an exception can be the SDK's only once it is, and the
    event loop never imports it."""
    error: type[BaseException] | tuple[()] = getattr(sys.modules.get("openai"), name, ())
    return error


@dataclass(frozen=True, slots=True)
class VllmError:
    """vLLM's error object: its message, and ``param`` (None when the server gave none)."""

    message: str
    param: str | None = None

    @classmethod
    def of(cls, body: object, fallback: str) -> VllmError:
        """Read the error object out of a body (the whole body or its ``error`` part);
        ``fallback`` when it has no message."""
        inner = body.get("error", body) if isinstance(body, Mapping) else None
        if not isinstance(inner, Mapping):
            return cls(fallback)
        message = inner.get("message")
        param = inner.get("param")
        return cls(
            message if isinstance(message, str) and message else fallback,
            param if isinstance(param, str) else None,
        )


def broken_stream(exc: Exception) -> StreamBroken:
    """Say in words how a started stream broke: ``ValueError`` (a chunk that is not
    JSON, e.g. ``json.JSONDecodeError``) is garbled; a transport error (aiohttp's
    ``ClientPayloadError``, a reset connection) is cut off. The exception is the
    error's cause (raised ``from``), which :func:`log_reason` names in app.log."""
    if isinstance(exc, ValueError):
        return StreamBroken(
            msg(
                "The model server's reply was garbled (a chunk that is not valid JSON). "
                "What arrived is kept; try again."
            )
        )
    return StreamBroken(
        msg(
            "The model server's reply was cut off: the connection dropped mid-answer, "
            "maybe because the server stopped or restarted. What arrived is kept; try again."
        )
    )


def map_error(exc: Exception, *, base_url: str, model: str) -> ChatError:
    """Translate what the HTTP stack or the server raised into one of ours.

    A transport failure (aiohttp's ``ClientError``, httpx's ``TransportError``, the SDK's
    ``APIConnectionError``) that :func:`timed_out` -> :class:`RequestTimeout`, any other
    -> :class:`ServerUnreachable`; an HTTP error status (:class:`HttpStatusError`, the
    SDK's ``APIStatusError``) -> :func:`status_error`; an error event inside the stream
    (:class:`ErrorEvent`) -> the same by its ``code``, else :class:`ServerFailed`;
    httpx's ``RuntimeError`` "the client has been closed" -> :class:`ClientClosed`.
    Anything else becomes a :class:`ServerFailed` in our words (its traceback goes to
    app.log).
    """
    if isinstance(exc, ChatError):
        return exc
    if isinstance(exc, RuntimeError) and "client has been closed" in str(exc):
        return ClientClosed(CLOSED_MESSAGE)
    transport = (aiohttp.ClientError, httpx.TransportError, _sdk_error("APIConnectionError"))
    if isinstance(exc, transport):
        return _transport_failed(exc, base_url)
    if _answered_with_status(exc):
        return status_error(exc.status_code, VllmError.of(exc.body, str(exc)), model)
    if isinstance(exc, ErrorEvent):
        return stream_error(exc.body, str(exc), model)
    log.error("unexpected failure talking to %s", base_url, exc_info=exc)
    return ServerFailed(
        msg("Unexpected failure talking to the model server; app.log has the details.")
    )


class _StatusAnswer(Protocol):
    status_code: int
    body: object


def _answered_with_status(exc: BaseException | None) -> TypeGuard[_StatusAnswer]:
    """True if ``exc`` says the server answered with an HTTP error status: ours, or the
    SDK's ``APIStatusError`` (``/v1/models``); both have ``status_code`` and ``body``."""
    return isinstance(exc, (HttpStatusError, _sdk_error("APIStatusError")))


def _transport_failed(exc: Exception, base_url: str) -> ChatError:
    """A transport failure, in words: the server was slow, or could not be reached."""
    if timed_out(exc):
        log.warning("the model server at %s did not answer in time: %r", base_url, exc)
        return RequestTimeout(
            msg("The model server did not answer in time. It may be busy; try again.")
        )
    # The address and where to look are the operator's (app.log), not the person's.
    log.warning(
        "cannot reach the model server at %s (%r); launch.sh restarts a vLLM that "
        "died: see llm.log",
        base_url,
        exc,
    )
    return ServerUnreachable(
        msg("The model server cannot be reached right now: it may be starting or restarting.")
    )


def timed_out(exc: BaseException) -> bool:
    """True if ``exc``, a transport failure, means the server was slow; False if the
    connection failed another way (refused, reset, dropped).

    aiohttp's own timeouts are ``aiohttp.ServerTimeoutError`` (``SocketTimeoutError`` for
    a read, ``ConnectionTimeoutError`` for a connect). The SDK's aiohttp transport (its
    ``/v1/models``) names every aiohttp connection error a connect timeout
    (``httpx2.ConnectTimeout``, so the SDK raises ``APITimeoutError``), a refused
    connection too, and chains the aiohttp error as the cause (docs/facts.md, "The
    OpenAI SDK's aiohttp transport"). So the first aiohttp error down the chain of
    causes decides. Without one, the type does (the SDK's ``APITimeoutError``, httpx's
    ``TimeoutException``).
    """
    link: BaseException | None = exc
    for _ in range(MAX_CAUSES):
        if link is None:
            break
        if isinstance(link, aiohttp.ClientError):
            return isinstance(link, aiohttp.ServerTimeoutError)
        link = link.__cause__
    return isinstance(exc, (httpx.TimeoutException, _sdk_error("APITimeoutError")))


MAX_CAUSES: Final = 8
"""How far down a chain of causes :func:`timed_out` looks (the SDK's chains are 3 long)."""


def stream_error(body: object, fallback: str, model: str) -> ChatError:
    """An error event inside a started stream: by its ``code`` (vLLM sends the HTTP
    status it would have answered) when that is a client error, else the server failed."""
    code = body.get("code") if isinstance(body, Mapping) else None
    error = VllmError.of(body, fallback)
    if isinstance(code, int) and not isinstance(code, bool) and 400 <= code < 500:
        return status_error(code, error, model)
    return ServerFailed(
        msg("The model server reported an error while answering. What arrived is kept; try again.")
    )


def status_error(status: int, error: VllmError, model: str) -> ChatError:
    """The error for an HTTP ``status`` and vLLM's error object (see the module docstring),
    in our words: ``error.message`` decides the kind only when ``param`` is missing."""
    detail = error.message
    if status == 503:
        return ServerLoading(msg("The model server is still loading. Try again soon."))
    if status >= 500:
        return ServerFailed(msg("The model server failed while answering. Try again."))
    if status in (401, 403):
        return RequestRejected(
            msg(
                "The model server refused our API key. Check KIMI_API_KEY matches vLLM's --api-key."
            )
        )
    if status == 404:
        return RequestRejected(msg("The model server does not serve '{model}'.", model=model))
    if error.param in MEDIA_PARAMS or (error.param is None and _says_too_many_images(detail)):
        return TooManyImages(
            msg(
                "Too many images for the model server in one request (the chat's earlier "
                "images count too). Send fewer, or start a new chat."
            )
        )
    if error.param in LENGTH_PARAMS or (error.param is None and _says_too_long(detail)):
        return ContextTooLong(
            msg(
                "The conversation is too long for the model. Start a new chat, "
                "send fewer images, or lower max tokens."
            )
        )
    return RequestRejected(
        msg("The model server refused this request as it stands; app.log says why.")
    )


def _says_too_many_images(detail: str) -> bool:
    """Last resort, for a server that names no ``param``: vLLM 0.32's sentence
    (``vllm/multimodal/processing/context.py``)."""
    return "image(s) may be provided" in detail.lower()


def _says_too_long(detail: str) -> bool:
    """Last resort, for a server that names no ``param``: vLLM 0.32's sentence
    (``vllm/renderers/params.py``) and older vLLMs' "max_model_len"."""
    lowered = detail.lower()
    return "maximum context length" in lowered or "max_model_len" in lowered


def log_reason(error: ChatError) -> str:
    """Why a request failed, for the operator's log: our error's class, what the HTTP stack
    or vLLM said (the status and vLLM's error ``type``, or the transport's exception class
    and text), the sentence people read, in English, then the server's own message.

    E.g. ``"ServerFailed (HTTP 500, InternalServerError): The model server failed while
    answering. Try again. The server said: EngineCore encountered an issue."``; an error
    raised by the app itself (a plan that does not fit) has no cause: ``"ContextTooLong:
    ..."``.
    """
    said: list[str] = []
    words = ""  # the server's own message
    cause = error.__cause__
    if _answered_with_status(cause):
        said += [f"HTTP {cause.status_code}", _error_field(cause.body, "type")]
        words = _error_field(cause.body, "message") or str(cause.body)[:500]
    elif isinstance(cause, ErrorEvent):  # an error event inside a started stream
        code = _error_field(cause.body, "code")
        said += [f"code {code}" if code else "", _error_field(cause.body, "type")]
        words = _error_field(cause.body, "message")
    elif cause is not None:
        said += [type(cause).__name__, str(cause)]
    shown = ", ".join(part for part in said if part)
    name = type(error).__name__
    line = f"{name} ({shown}): {error}" if shown else f"{name}: {error}"
    return f"{line} The server said: {words}" if words else line


def _error_field(body: object, key: str) -> str:
    """Field ``key`` of vLLM's error object in ``body`` (whole body or its ``error``), or ""."""
    inner = body.get("error", body) if isinstance(body, Mapping) else None
    value = inner.get(key) if isinstance(inner, Mapping) else None
    return str(value) if isinstance(value, str | int) and not isinstance(value, bool) else ""
