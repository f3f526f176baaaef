"""The lab of hosts as network namespaces (tests/netlab.py): reachable, cut, mended, gone."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest

from tests import netlab
from tests.conftest import free_port

REASON = netlab.unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"no network namespaces: {REASON}")


def wait_for(url: str, seconds: float = 15) -> httpx.Response:
    deadline = time.monotonic() + seconds
    while True:
        try:
            return httpx.get(url, timeout=1)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def test_hosts_reach_each_other_and_a_cut_host_is_unreachable_until_mended() -> None:
    with netlab.lab(["a", "b"]) as lab:
        tag = lab.tag
        b = lab.hosts["b"]
        port = free_port()  # free on this machine's loopback, so the check below means it
        server = [sys.executable, "-m", "http.server", "--bind", b, str(port)]
        lab.spawn("b", server)
        assert wait_for(f"http://{b}:{port}/").status_code == 200
        # Host a reaches b over the bridge, not through the test's own namespace.
        fetch = f"import urllib.request; print(urllib.request.urlopen('http://{b}:{port}/').status)"
        from_a = subprocess.run(
            ["ip", "netns", "exec", lab.namespace("a"), sys.executable, "-c", fetch],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert from_a.stdout.strip() == "200", from_a.stderr
        # b's server is not on the machine's own loopback: the namespaces are apart.
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)

        lab.cut("b")
        with pytest.raises(httpx.TransportError):
            httpx.get(f"http://{b}:{port}/", timeout=1)
        lab.mend("b")
        assert wait_for(f"http://{b}:{port}/").status_code == 200
        assert tag in namespaces()
    assert tag not in namespaces()
    links = subprocess.run(["ip", "link"], capture_output=True, text=True).stdout
    assert tag not in links


def routes(nets: list[int]) -> str:
    """What ``ip -4 route show`` prints with a lab on each of ``nets``."""
    lines = [f"10.231.{n}.0/24 dev kv{n}c proto kernel scope link src 10.231.{n}.254" for n in nets]
    return "\n".join(["default via 10.0.0.1 dev eth0", *lines]) + "\n"


def test_a_lab_takes_a_net_no_other_lab_routes() -> None:
    """Two labs made at once (tests in two processes) must not share a /24."""
    for left in (17, 1):  # 1: not taken for routed 10.231.1x and 10.231.1xx
        all_but = routes([n for n in range(250) if n != left])
        assert {netlab.unused_net(all_but) for _ in range(20)} == {left}
    with pytest.raises(RuntimeError, match="too many labs"):
        netlab.unused_net(routes(list(range(250))))
