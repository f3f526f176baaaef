"""bench/netlog.py: when a tab's frames crossed chromium's network layer, and bench_tab's
first-words rounds timed from it (issue 23, item 2: the first words reaching the tab)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from playwright.sync_api import sync_playwright
from starlette.applications import Starlette
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.websockets import WebSocket

from bench.bench_tab import CHROMIUM, CHROMIUM_ARGS, Seen, TabWords, words_table
from bench.netlog import NetLog
from tests.conftest import free_port

OFFSET = 1_796_000_000_000
"""Unix ms of the synthetic logs' clock zero (``constants.timeTickOffset``)."""
TYPES = {
    "REQUEST_ALIVE": 1,
    "URL_REQUEST_START_JOB": 2,
    "WEBSOCKET_SENT_FRAME_HEADER": 3,
    "WEBSOCKET_RECV_FRAME_HEADER": 4,
}
APP, WS = "http://127.0.0.1:8000", "ws://127.0.0.1:8000/ws/socket.io/?EIO=4&sid=a"


def event(time_ms: int, source: int, kind: str, **params: Any) -> dict[str, Any]:
    """An event as chromium writes it (its time a string of ms since the clock's zero)."""
    return {"time": str(time_ms), "source": {"id": source}, "type": TYPES[kind], "params": params}


def frame(time_ms: int, source: int, sent: bool, opcode: int = 1, final: bool = True) -> Any:
    kind = "WEBSOCKET_SENT_FRAME_HEADER" if sent else "WEBSOCKET_RECV_FRAME_HEADER"
    return event(time_ms, source, kind, opcode=opcode, final=final)


def netlog(*events: dict[str, Any]) -> NetLog:
    return NetLog({"constants": {"logEventTypes": TYPES, "timeTickOffset": str(OFFSET)},
                   "events": list(events)})  # fmt: skip


SOCKETS = (
    event(0, 7, "REQUEST_ALIVE", url=WS),
    event(0, 8, "REQUEST_ALIVE", url="ws://127.0.0.1:9999/other"),
    event(0, 9, "REQUEST_ALIVE", url=f"{APP}/avatars/assistant"),
    event(0, 10, "REQUEST_ALIVE", url=f"{APP}/project/file"),
)


def test_the_question_leaves_with_the_first_frame_or_post_to_the_app_after_enter() -> None:
    log = netlog(
        *SOCKETS,
        frame(95, 7, sent=True),  # before Enter
        frame(101, 8, sent=True),  # another server
        event(102, 9, "URL_REQUEST_START_JOB", method="GET"),  # a read
        frame(103, 7, sent=True, opcode=10),  # a pong: control
        frame(104, 7, sent=True),
    )
    assert log.first_write(APP, OFFSET + 100.4) == OFFSET + 104
    posted = netlog(*SOCKETS, event(101, 10, "URL_REQUEST_START_JOB", method="POST"),
                    frame(104, 7, sent=True))  # fmt: skip
    assert posted.first_write(APP, OFFSET + 100.4) == OFFSET + 101
    with pytest.raises(LookupError):
        log.first_write(APP, OFFSET + 107)


def test_a_write_logged_a_little_before_the_pages_enter_is_still_the_question() -> None:
    """The log's times and its clock offset are both whole ms, rounded down: the question
    sent at the page's 100.9 can be logged at 99."""
    log = netlog(*SOCKETS, frame(99, 7, sent=True))
    assert log.first_write(APP, OFFSET + 100.9) == OFFSET + 99


def test_the_nth_message_counts_whole_data_messages_from_the_sockets_opening() -> None:
    log = netlog(
        *SOCKETS,
        frame(99, 7, sent=False),  # 1 (before Enter: counted, as the page counts it)
        frame(110, 7, sent=False),  # 2
        frame(111, 8, sent=False),  # another socket
        frame(112, 7, sent=False, opcode=9),  # a ping: control
        frame(113, 7, sent=False, final=False),  # the start of message 3
        frame(114, 7, sent=False, opcode=0),  # its end: 3
        frame(120, 7, sent=False, opcode=2),  # binary: 4
    )
    enter = OFFSET + 100.7
    assert [log.nth_message(WS, enter, n) - OFFSET for n in (1, 2, 3, 4)] == [99, 110, 114, 120]
    with pytest.raises(LookupError, match="4 messages"):
        log.nth_message(WS, enter, 5)
    with pytest.raises(LookupError, match="no WebSocket"):
        log.nth_message(f"{WS}x", enter, 1)


def test_the_socket_is_the_one_of_that_url_opened_last_before_enter() -> None:
    """A page loaded again opens a socket of the same URL (Open WebUI's has no session in
    it); chromium also logs the URL on a stream job that carries no frames."""
    log = netlog(
        *SOCKETS,
        event(50, 11, "REQUEST_ALIVE", url=WS),  # the stream job: no frames
        frame(60, 7, sent=False),
        event(200, 12, "REQUEST_ALIVE", url=WS),  # the page loaded again
        frame(230, 12, sent=False),
        frame(240, 7, sent=False),  # the old socket, still closing
    )
    assert log.nth_message(WS, OFFSET + 150, 1) == OFFSET + 60
    assert log.nth_message(WS, OFFSET + 250, 1) == OFFSET + 230
    with pytest.raises(LookupError, match="opened before"):
        log.nth_message(WS, OFFSET - 10, 1)


def test_an_unfinished_log_is_refused(tmp_path: Path) -> None:
    """Chromium writes the log's end when the browser closes; before, it is not JSON."""
    path = tmp_path / "netlog.json"
    path.write_text('{"constants": {}, "events": [')
    with pytest.raises(ValueError, match="not a finished NetLog"):
        NetLog.load(path)
    path.write_text('{"events": []}')
    with pytest.raises(ValueError, match="not a chromium NetLog"):
        NetLog.load(path)


def round_at(script_ms: float, count: int = 3) -> TabWords:
    return TabWords(APP, OFFSET + 100.5, OFFSET + script_ms, OFFSET + 300.5, WS, count)


def test_a_round_is_timed_from_the_question_leaving_to_the_words_frame() -> None:
    log = netlog(*SOCKETS, frame(90, 7, sent=False), frame(101, 7, sent=True),
                 frame(104, 7, sent=False), frame(110, 7, sent=False))  # fmt: skip
    assert round_at(190.5).seen(log) == pytest.approx(Seen(0.009, 0.0895, 0.2))
    with pytest.raises(LookupError, match="not between"):  # after the page's event
        round_at(107.0).seen(log)
    with pytest.raises(LookupError, match="not between"):  # before the question left
        round_at(190.5, count=1).seen(log)


def test_the_words_table_gives_each_column_added_to_the_direct_call() -> None:
    words = {
        "answer": {
            "direct": [Seen(0.008, 0.008, 0.008), Seen(0.010, 0.010, 0.010)],
            "App": [Seen(0.015, 0.080, 0.150), Seen(0.017, 0.090, 0.170)],
        },
        "answer (socket clients)": {"direct": [Seen(0.007)], "App": [Seen(0.012)]},
    }
    assert words_table(words)[2:] == [
        "| answer | direct | 9.0 ms | | |",
        "| answer | App | 16.0 ms (+7.0) | 85.0 ms (+76.0) | 160.0 ms (+151.0) |",
        "| answer (socket clients) | direct | 7.0 ms | | |",
        "| answer (socket clients) | App | 12.0 ms (+5.0) |  |  |",
    ]


PAGE = """<html><body><script>
window.got = [];
const ws = new WebSocket(`ws://${location.host}/ws`);
ws.onmessage = () => window.got.push(performance.timeOrigin + performance.now());
window.ask = () => {
  window.asked = performance.timeOrigin + performance.now();
  ws.send("question");
  const until = performance.now() + 300;
  while (performance.now() < until) {}  // the page's main thread busy, as in a render
};
</script></body></html>"""


async def page(_: object) -> Response:
    return HTMLResponse(PAGE)


async def answer(socket: WebSocket) -> None:
    """Three messages 20 ms apart for each one received."""
    await socket.accept()
    while True:
        await socket.receive_text()
        for word in ("one", "two", "three"):
            await socket.send_text(word)
            await asyncio.sleep(0.02)


@pytest.fixture
def site() -> Iterator[str]:
    """The page and its WebSocket, served by uvicorn in a thread."""
    app = Starlette(routes=[Route("/", page), WebSocketRoute("/ws", answer)])
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(10)


@pytest.mark.browser
def test_chromium_logs_the_frames_when_they_reach_the_tab_not_when_the_page_is_free(
    site: str, tmp_path: Path
) -> None:
    """The log's format as this Debian chromium writes it, and what bench_tab relies on:
    the frames' times are when they reached the browser, while the page's script gets them
    only after its main thread is free (here 300 ms busy after the question left)."""
    path = tmp_path / "netlog.json"
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, f"--log-net-log={path}"]
        )
        tab = browser.new_page()
        tab.goto(site)
        tab.wait_for_function("() => window.ask !== undefined")
        time.sleep(0.3)  # the socket open
        tab.evaluate("() => window.ask()")
        tab.wait_for_function("() => window.got.length === 3")
        asked, got = tab.evaluate("() => [window.asked, window.got]")
        browser.close()
    log = NetLog.load(path)
    left = log.first_write(site, asked)
    assert asked - 1 <= left <= asked + 5  # the clocks agree within the log's 1 ms
    socket = f"{site.replace('http', 'ws')}/ws"
    arrived = [log.nth_message(socket, asked, n) for n in (1, 2, 3)]
    assert 35 <= arrived[2] - arrived[0] <= 150  # two 20 ms pauses on the server
    assert arrived[2] - left < 200  # before the page was free
    assert min(got) - left >= 300
    assert json.loads(path.read_text())["constants"]["timeTickOffset"]
