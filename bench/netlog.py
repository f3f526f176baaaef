"""When a tab's traffic crossed chromium's network layer, apart from the page's main thread.

A page's script sees a received WebSocket frame only once its main thread is free (after
whatever render it is in); chromium's network service reads the frame off the socket at
once and, with ``--log-net-log=FILE``, logs it with a time. ``bench/bench_tab.py`` uses
this to time when an answer's first words reached the tab, before the page drew anything.

The file is chromium's NetLog JSON (``net/log/net_log_event_type_list.h`` in chromium's
source names the events; read here: ``constants.logEventTypes`` maps names to numbers,
an event's ``time`` is milliseconds of chromium's monotonic clock as a string, and
``constants.timeTickOffset`` added to it gives Unix milliseconds, the clock of a page's
``performance.timeOrigin + performance.now()``). The default capture mode is enough:
frame headers and request URLs, no payloads. Times have a resolution of 1 ms.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

CLOCK_SLACK_MS = 2
"""How much earlier than a page's clock the log may read: its times and its clock offset
are both whole milliseconds, rounded down (a write logged at x.0 for a page's x.5)."""
DATA_OPCODES = {0, 1, 2}
"""WebSocket continuation, text and binary frames (RFC 6455 section 5.2); the rest are
control frames, which a page's script never sees."""


@dataclass(frozen=True)
class Event:
    """One NetLog event: ``time_ms`` in Unix milliseconds, its ``source`` id (a request
    or socket), its type's name (``kind``) and its ``params``."""

    time_ms: float
    source: int
    kind: str
    params: dict[str, Any]


class NetLog:
    """The events of one chromium NetLog file, in the order logged.

    Raises:
        ValueError: a file that is not a finished NetLog (chromium writes its end when the
            browser closes).
    """

    def __init__(self, data: dict[str, Any]) -> None:
        try:
            constants = data["constants"]
            names = {number: name for name, number in constants["logEventTypes"].items()}
            offset = float(constants["timeTickOffset"])
            raw = data["events"]
        except (KeyError, TypeError) as error:
            raise ValueError(f"not a chromium NetLog: {error!r} missing") from None
        self.events = [
            Event(
                offset + float(e["time"]), e["source"]["id"], names[e["type"]], e.get("params", {})
            )
            for e in raw
        ]
        self.urls = {e.source: e.params["url"] for e in self.events if "url" in e.params}
        """Each request's (a WebSocket's too) URL by source id."""
        self.opened: dict[int, float] = {}
        """Each source's first event's time."""
        for e in self.events:
            self.opened.setdefault(e.source, e.time_ms)
        self.framed = {e.source for e in self.events if e.kind.startswith("WEBSOCKET_")}
        """The sources that carried WebSocket frames (chromium logs a socket's URL on a
        stream job too)."""

    @classmethod
    def load(cls, path: Path) -> NetLog:
        """Read ``path`` (written by ``--log-net-log``, the browser since closed).

        Raises:
            ValueError: not JSON, or not a NetLog.
        """
        try:
            return cls(json.loads(path.read_text()))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not a finished NetLog ({error})") from None

    def first_write(self, origin: str, after_ms: float) -> float:
        """When the first write to ``origin`` (``http://host:port``) left at or after
        ``after_ms`` (Unix ms, the page's clock; :data:`CLOCK_SLACK_MS` earlier in the
        log's): a WebSocket data frame sent, or a request other than GET started (a page
        that posts its question over HTTP).

        Raises:
            LookupError: nothing written there after ``after_ms``.
        """
        host = urlsplit(origin).netloc
        for e in self.events:
            there = urlsplit(self.urls.get(e.source, "")).netloc == host
            if there and e.time_ms >= after_ms - CLOCK_SLACK_MS and is_write(e):
                return e.time_ms
        raise LookupError(f"nothing written to {origin} after {after_ms:.0f}")

    def nth_message(self, url: str, open_before_ms: float, n: int) -> float:
        """When the ``n``-th whole message (1 for the first) arrived on the WebSocket of
        ``url`` opened last before ``open_before_ms`` (Unix ms; a page loaded again opens
        a socket of the same URL), counted from its opening, as a page's ``message``
        events are: its final frame's header read.

        Raises:
            LookupError: no socket of ``url`` opened by then, or fewer than ``n`` messages.
        """
        sockets = [
            source
            for source in self.framed
            if self.urls.get(source) == url
            and self.opened[source] <= open_before_ms + CLOCK_SLACK_MS
        ]
        if not sockets:
            raise LookupError(f"no WebSocket to {url} opened before {open_before_ms:.0f}")
        socket = max(sockets, key=self.opened.__getitem__)
        ends = [e.time_ms for e in self.events if e.source == socket and is_message_end(e)]
        if len(ends) < n:
            raise LookupError(f"{len(ends)} messages on {url}, not {n}")
        return ends[n - 1]


def is_message_end(event: Event) -> bool:
    """Whether ``event`` read the last frame of a data message (a page gets one
    ``message`` event per such frame)."""
    return (
        event.kind == "WEBSOCKET_RECV_FRAME_HEADER"
        and event.params["opcode"] in DATA_OPCODES
        and bool(event.params["final"])
    )


def is_write(event: Event) -> bool:
    """Whether ``event`` sent something of a page's own: a WebSocket data frame, or a
    request other than GET started."""
    if event.kind == "WEBSOCKET_SENT_FRAME_HEADER":
        return event.params["opcode"] in DATA_OPCODES
    return event.kind == "URL_REQUEST_START_JOB" and event.params.get("method", "GET") != "GET"
