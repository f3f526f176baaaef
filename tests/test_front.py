"""The front host over UI hosts (serving/front.py): real HAProxy, hosts as namespaces.

Three hosts (tests/netlab.py): ``front`` runs HAProxy with the config
``python -m serving.front`` writes; ``b`` and ``c`` each run a stand-in chat UI that answers
``/kimi/status`` (what HAProxy checks) and says which host it is and what
``X-Forwarded-For`` it got. The test is a browser on the lab's bridge.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from serving import proxy
from serving.front import front_config, host_port, model_api_config
from tests import netlab
from tests.conftest import free_port

REASON = netlab.unavailable()
HAPROXY = proxy.find_haproxy()
pytestmark = [
    pytest.mark.skipif(REASON is not None, reason=f"no network namespaces: {REASON}"),
    pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed"),
]

STAND_IN_UI = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Ui(BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"{sys.argv[2]} {self.headers.get('X-Forwarded-For')}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

ThreadingHTTPServer((sys.argv[1], 8300), Ui).serve_forever()
"""


def test_host_port_reads_addresses_and_refuses_what_is_not_one() -> None:
    import argparse

    assert host_port("10.0.0.2:8300") == ("10.0.0.2", 8300)
    assert host_port("[fd00::3]:8300") == ("fd00::3", 8300)
    assert host_port("ui-1:8300") == ("ui-1", 8300)
    for bad in ("10.0.0.2", ":8300", "h:0", "h:70000", "h:x"):
        with pytest.raises(argparse.ArgumentTypeError):
            host_port(bad)


def test_the_front_names_each_ui_host_by_its_address() -> None:
    config = front_config(("0.0.0.0", 8300), [("10.0.0.2", 8300), ("fd00::3", 8301)])
    servers = [line.split()[1:3] for line in config.splitlines() if "    server " in line]
    assert servers == [["w1", "10.0.0.2:8300"], ["w2", "[fd00::3]:8301"]]


def served_by(client: httpx.Client, url: str, seconds: float = 20) -> tuple[str, str]:
    """(host, X-Forwarded-For it saw) of the first answer through the front."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            answer = client.get(url, timeout=2)
            if answer.status_code == 200:
                host, forwarded = answer.text.split(" ", 1)
                return host, forwarded
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"no answer from {url} in {seconds} s")
        time.sleep(0.2)


def test_a_front_keeps_a_browser_on_its_ui_host_and_moves_it_when_that_host_is_cut(
    tmp_path: Path,
) -> None:
    with netlab.lab(["front", "b", "c"]) as lab:
        for name in ("b", "c"):
            lab.spawn(name, [sys.executable, "-c", STAND_IN_UI, lab.hosts[name], name])
        uis = [(lab.hosts["b"], 8300), (lab.hosts["c"], 8300)]
        config = tmp_path / "front.cfg"
        config.write_text(front_config((lab.hosts["front"], 8300), uis))
        assert proxy.validate(config, HAPROXY or "haproxy") == ""
        lab.spawn("front", [HAPROXY or "haproxy", "-db", "-f", str(config)], log=tmp_path / "log")
        url = f"http://{lab.hosts['front']}:8300/"
        # Wait until HAProxy's health checks found both hosts up (rise 2, every 2 s).
        time.sleep(4.5)

        with httpx.Client() as browser:
            first, forwarded = served_by(browser, url)
            assert forwarded == lab.client_address  # the browser's address, not the front's
            assert browser.cookies.get(proxy.COOKIE)
            # Affinity: every later request of this browser reaches the same host, even
            # one that writes its own X-Forwarded-For.
            for _ in range(6):
                host, forwarded = served_by(browser, url)
                assert host == first
            forged = browser.get(url, headers={"X-Forwarded-For": "1.2.3.4"}, timeout=2)
            assert forged.text == f"{first} {lab.client_address}"
            # The UI's status (its open chats) is not for browsers through the front.
            assert browser.get(url + "kimi/status", timeout=2).status_code == 404

            lab.cut(first)
            other = "c" if first == "b" else "b"
            assert served_by(browser, url, seconds=30)[0] == other
            # It stays there, and a new browser goes there too while the host is cut.
            assert served_by(browser, url)[0] == other
            with httpx.Client() as newcomer:
                assert served_by(newcomer, url)[0] == other
        out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert lab.namespace("front") in out


class _StandInRouter(BaseHTTPRequestHandler):
    """Answers every request 200 and keeps its path as sent (``seen``)."""

    seen: ClassVar[list[str]] = []

    def _answer(self) -> None:
        self.seen.append(self.path)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


def status_of(port: int, method: str, path: str) -> int:
    """The status HAProxy on 127.0.0.1:``port`` answers to ``path`` sent as is (httpx would
    remove its dot segments)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(
            f"{method} {path} HTTP/1.1\r\nHost: a\r\nContent-Length: 0\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        reply = b""
        while chunk := sock.recv(4096):
            reply += chunk
    return int(reply.split(b" ", 2)[1])


def test_the_model_api_passes_the_chat_uis_paths_to_the_router_and_no_admin_path(
    tmp_path: Path,
) -> None:
    """``--model-api``: the UI hosts reach the front host's router for a chat completion,
    the model list, token counts, metrics and health; the router's admin API (which adds
    and removes replicas, with no key) is refused by HAProxy, however the path is written."""
    router = ThreadingHTTPServer(("127.0.0.1", 0), _StandInRouter)
    threading.Thread(target=router.serve_forever, daemon=True).start()
    api_port, ui_port = free_port(), free_port()
    config = tmp_path / "front.cfg"
    text = front_config(("127.0.0.1", ui_port), [("127.0.0.1", 9)])
    served = ("127.0.0.1", router.server_port)
    config.write_text(text + model_api_config(("127.0.0.1", api_port), served))
    assert proxy.validate(config, HAPROXY or "haproxy") == ""
    front = subprocess.Popen([HAPROXY or "haproxy", "-db", "-f", str(config)])
    try:
        deadline = time.monotonic() + 10
        while True:
            with suppress(OSError):
                socket.create_connection(("127.0.0.1", api_port), timeout=1).close()
                break
            assert time.monotonic() < deadline, "HAProxy did not listen"
            time.sleep(0.1)
        passed = [("POST", "/v1/chat/completions"), ("GET", "/v1/models"),
                  ("POST", "/tokenize"), ("GET", "/metrics"), ("GET", "/health")]  # fmt: skip
        assert [status_of(api_port, *request) for request in passed] == [200] * 5
        admin = [
            ("POST", "/add_worker?url=http://evil:8000"),
            ("POST", "/remove_worker?url=http://10.0.0.2:8000"),
            ("GET", "/list_workers"),
            ("POST", "/v1/models/../add_worker?url=http://evil:8000"),
            ("POST", "/%61dd_worker?url=http://evil:8000"),
            ("POST", "//add_worker?url=http://evil:8000"),
            ("GET", "/v1/models/"),
            ("GET", "/healthz"),
        ]
        assert [status_of(api_port, *request) for request in admin] == [403] * len(admin)
        assert _StandInRouter.seen == [path for _, path in passed]
    finally:
        front.terminate()
        front.wait(timeout=10)
        router.shutdown()
