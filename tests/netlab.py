"""Hosts as Linux network namespaces, for tests of several hosts on one machine.

A :class:`Lab` makes one network namespace per host and one more, the switch, that holds a
Linux bridge. Each host gets a veth pair: ``eth0`` inside the host, with the address
``10.231.<net>.<n>/24``, and a port of the bridge in the switch. The test process joins the
bridge the same way (address ``.254``, one /24 route and nothing else), so it reaches the
hosts as a client of the front would. Nothing leaves the machine: no namespace of the lab has
a route beyond its /24, and the lab's addresses are its own.

:meth:`Lab.cut` takes a host's link down (its processes live on, unreachable) and
:meth:`Lab.mend` brings it back. :meth:`Lab.close` ends every process the lab started
(``SIGKILL`` to each process group) and deletes the namespaces and links. Needs root and
``ip`` (iproute2); :func:`unavailable` says why a lab cannot be made here.
"""

from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

CLIENT_OCTET = 254


def _ip(*args: str, netns: str | None = None) -> None:
    prefix = ["ip", "netns", "exec", netns] if netns else []
    subprocess.run([*prefix, "ip", *args], check=True, capture_output=True, timeout=30)


def unavailable() -> str | None:
    """Why no lab can be made here (not root, no ``ip``, namespaces refused), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "no `ip` command (Debian: apt-get install iproute2)"
    probe = f"kvp{secrets.token_hex(3)}"
    try:
        _ip("netns", "add", probe)
    except subprocess.CalledProcessError as exc:
        return f"`ip netns add` failed: {exc.stderr.decode(errors='replace').strip()}"
    _ip("netns", "del", probe)
    return None


@dataclass
class Lab:
    """A running lab: ``hosts`` maps a host's name to its address."""

    tag: str
    net: int
    hosts: dict[str, str] = field(default_factory=dict)
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def switch(self) -> str:
        return f"{self.tag}-sw"

    @property
    def client_address(self) -> str:
        """The test process's own address on the lab's bridge."""
        return f"10.231.{self.net}.{CLIENT_OCTET}"

    def namespace(self, host: str) -> str:
        """The network namespace of ``host`` (for ``ip netns exec``)."""
        return f"{self.tag}-{host}"

    def _port(self, host: str) -> str:
        # The bridge-side end of host's veth pair: at most 15 characters.
        return f"{self.tag}{list(self.hosts).index(host)}"

    def _add_host(self, host: str) -> None:
        octet = len(self.hosts) + 1
        self.hosts[host] = f"10.231.{self.net}.{octet}"
        ns, port = self.namespace(host), self._port(host)
        _ip("netns", "add", ns)
        _ip("link", "add", port, "type", "veth", "peer", "name", f"{port}h")
        _ip("link", "set", port, "netns", self.switch)
        _ip("link", "set", f"{port}h", "netns", ns)
        _ip("link", "set", f"{port}h", "name", "eth0", netns=ns)
        _ip("addr", "add", f"{self.hosts[host]}/24", "dev", "eth0", netns=ns)
        _ip("link", "set", "eth0", "up", netns=ns)
        _ip("link", "set", "lo", "up", netns=ns)
        _ip("link", "set", port, "master", "br0", netns=self.switch)
        _ip("link", "set", port, "up", netns=self.switch)

    def _add_client(self) -> None:
        port = f"{self.tag}c"
        _ip("link", "add", port, "type", "veth", "peer", "name", f"{port}s")
        _ip("link", "set", f"{port}s", "netns", self.switch)
        _ip("link", "set", f"{port}s", "master", "br0", netns=self.switch)
        _ip("link", "set", f"{port}s", "up", netns=self.switch)
        _ip("addr", "add", f"{self.client_address}/24", "dev", port)
        _ip("link", "set", port, "up")

    def spawn(
        self,
        host: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        log: Path | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside ``host``'s namespace, in a new process group, its output
        (stdout and stderr) appended to ``log`` (or discarded). :meth:`close` kills it."""
        sink = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - child owns it
        try:
            process = subprocess.Popen(
                ["ip", "netns", "exec", self.namespace(host), *argv],
                env=dict(env) if env is not None else None,
                cwd=cwd,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            if log:
                sink.close()  # type: ignore[union-attr]
        self._processes.append(process)
        return process

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        """``SIGKILL`` to ``process``'s whole group, and reap it."""
        with suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        with suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)

    def cut(self, host: str) -> None:
        """Take ``host``'s link down: its processes run on, nobody reaches them."""
        _ip("link", "set", self._port(host), "down", netns=self.switch)

    def mend(self, host: str) -> None:
        """Bring ``host``'s link back up."""
        _ip("link", "set", self._port(host), "up", netns=self.switch)

    def close(self) -> None:
        """Kill every process started here, then delete the namespaces and the links."""
        for process in self._processes:
            self.kill(process)
        for host in self.hosts:
            with suppress(subprocess.CalledProcessError):
                _ip("netns", "del", self.namespace(host))
        with suppress(subprocess.CalledProcessError):
            _ip("link", "del", f"{self.tag}c")
        with suppress(subprocess.CalledProcessError):
            _ip("netns", "del", self.switch)


LOCK = Path(tempfile.gettempdir()) / "kimi-netlab.lock"
"""Held while a lab picks its /24 and routes it, so that labs of tests running at once in
several processes (tests/run.sh's unit tests) never share one."""


def unused_net(routes: str) -> int:
    """A ``<net>`` of ``10.231.<net>.0/24`` that none of ``routes`` (``ip -4 route show``)
    names, at random.

    Raises:
        RuntimeError: all 250 are routed.
    """
    free = [net for net in range(250) if f"10.231.{net}.0/24 " not in routes + " "]
    if not free:
        raise RuntimeError("every 10.231.<net>.0/24 is routed: too many labs at once")
    return secrets.choice(free)


@contextmanager
def lab(hosts: Sequence[str]) -> Iterator[Lab]:
    """A lab of ``hosts`` (names of at most 6 characters), closed on exit.

    Raises:
        subprocess.CalledProcessError: ``ip`` refused a step (what it said is in ``stderr``).
    """
    made = Lab(tag=f"kv{secrets.token_hex(2)}", net=-1)
    try:
        with LOCK.open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when closed
            routes = subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True)
            made.net = unused_net(routes.stdout)
            _ip("netns", "add", made.switch)
            _ip("link", "add", "br0", "type", "bridge", netns=made.switch)
            _ip("link", "set", "br0", "up", netns=made.switch)
            for host in hosts:
                made._add_host(host)
            made._add_client()  # routes the lab's /24
        yield made
    finally:
        made.close()
