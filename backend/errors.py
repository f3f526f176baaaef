"""Exceptions whose messages are what people read.

Every failure that reaches a person (in the chat or on the CLI's stderr) is a
:class:`ChatError`; ``str(error)`` is a complete, one-line, human sentence with no
stack trace. :mod:`backend.client` maps openai-python's exception classes one to
one onto these (connection -> :class:`ServerUnreachable`, timeout ->
:class:`RequestTimeout`, 400 -> :class:`RequestRejected` and its subclasses,
5xx -> :class:`ServerFailed`, 503 while loading -> :class:`ServerLoading`, a stream
that breaks after it started -> :class:`StreamBroken`).
"""

from __future__ import annotations


class ChatError(Exception):
    """Base class: a failure explained in one sentence a person can act on.

    Raised with a :class:`backend.i18n.Message` (``ChatError(msg("...", name=...))``),
    ``str(error)`` is the English sentence and :attr:`message` the message the UI
    renders in the person's language.
    """

    @property
    def message(self) -> str:
        """The sentence as raised (a :class:`backend.i18n.Message` when made with ``msg``)."""
        first = self.args[0] if len(self.args) == 1 else None
        return first if isinstance(first, str) else str(self)


class ServerUnreachable(ChatError):
    """The vLLM server did not accept a connection (down, wrong URL, wrong port)."""


class ServerLoading(ChatError):
    """The vLLM server is up but not ready yet (model still loading)."""


class RequestTimeout(ChatError):
    """The server accepted the request but did not answer in time."""


class FirstTokenTimeout(RequestTimeout):
    """The server took the request but sent no text within the first-token timeout."""


class RequestRejected(ChatError):
    """HTTP 400 (or 404/413/422) from vLLM: the request itself is wrong.

    The message is ours; vLLM's own explanation (e.g. "At most 4 image(s) may be
    provided in one prompt.") goes to app.log (backend/vllm_errors.py, ``log_reason``).
    """


class ContextTooLong(RequestRejected):
    """The prompt plus the answer budget exceed the server's max model length."""


class TooManyImages(RequestRejected):
    """More images than the server's ``--limit-mm-per-prompt`` allows."""


class ServerFailed(ChatError):
    """HTTP 5xx or a broken stream: the server failed while answering."""


class StreamBroken(ServerFailed):
    """The answer had started but its stream broke: cut off (connection dropped,
    server died) or garbled (a chunk that is not valid JSON). What arrived is kept."""


class StreamStalled(StreamBroken):
    """The answer had started, then the server sent nothing for the idle timeout."""


class ClientClosed(ChatError):
    """The app's connection pool to the server is closed (the app is stopping)."""


class ImageError(ChatError):
    """An uploaded file could not be used as an image; the message names the file."""


def can_retry(error: ChatError) -> bool:
    """True if sending the same request again may succeed.

    A request the server rejected as such (too long, too many images, a wrong
    key or model) fails again until the person changes it, so it gets no
    Retry button; an unreachable, loading, failing or slow server may recover.
    """
    return not isinstance(error, RequestRejected | ImageError)
