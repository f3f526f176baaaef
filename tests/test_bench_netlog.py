"""bench/netlog.py: when a tab's frames crossed chromium's network layer, and bench_tab's
first-words rounds timed from it (issue 23, item 2: the first words reaching the tab)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench.bench_tab import Seen, TabWords, words_table
from bench.netlog import NetLog

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
