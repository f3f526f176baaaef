"""Several chat UI processes behind HAProxy: ``launch.sh --ui-workers N``.

One Chainlit process keeps its chat sessions (websockets) and uploads in its
own memory and disk (``docs/storage.md``, "PostgreSQL and several replicas"), so a
browser tab must reach the same process with every request: its page, its socket.io
connection (``/ws/socket.io``) and its uploads (``/project/file``). HAProxy
(Debian's ``haproxy`` 2.6) gives each browser a cookie naming the worker that
served its first request (``cookie ... insert indirect``) and sends the
browser's later requests there; a browser without the cookie goes to the
worker with the fewest connections (``balance leastconn``: websockets are long).
A worker that is down or dying does not cost a browser its page: a refused
connection, and a GET the worker accepted but closed unanswered (it died with the
request in its listen queue), are tried again and, on the last try, sent to another
worker (``option redispatch``, ``retry-on``); other methods are sent once.

What the workers share comes from launch.sh's environment: the database
(``KIMI_DATABASE_URL``, or the SQLite file in ``KIMI_DATA_DIR``, which is safe
for several processes: WAL, a busy timeout and ``BEGIN IMMEDIATE``,
:mod:`backend.store.db`), the stored files (``KIMI_DATA_DIR/files``), the
sign-in secret (``CHAINLIT_AUTH_SECRET``) and the upload limits. Each worker
gets its own app log (``app-1.log``, ``app-2.log`` ... beside ``KIMI_APP_LOG``):
a rotating log file has one writer.

HAProxy listens where the single UI would (``KIMI_UI_HOST:KIMI_UI_PORT``, so
launch.sh's sign-in rule for addresses beyond loopback applies to it as is);
the workers listen on 127.0.0.1 only, on the first free ports after the UI
port. It passes ``Host`` unchanged, so the app's Origin check
(:mod:`ui.security`) compares the browser's Origin with the address the
browser used, as without the proxy. The app sees the browser's address: HAProxy
drops any ``X-Forwarded-For`` the client sent and adds its own, which uvicorn
trusts from 127.0.0.1 (its ``forwarded_allow_ips`` default).

:mod:`serving.supervisor` starts the workers and HAProxy this module plans.
"""

from __future__ import annotations

import csv
import io
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from serving.preflight import Finding

COOKIE: Final = "KIMI_WORKER"
"""The stickiness cookie HAProxy inserts; its value names the worker (``w1``, ``w2`` ...)."""
BACKEND: Final = "chat_workers"
"""Name of the HAProxy backend holding the workers (``show stat`` lists it)."""
HEALTH_PATH: Final = "/kimi/status"
"""What HAProxy's health check asks each worker (ui/status.py: cheap, loopback only)."""
CONFIG_FILE: Final = "haproxy.cfg"
LOG_FILE: Final = "haproxy.log"
SOCKET_FILE: Final = "haproxy.sock"
SOCKET_PATH_MAX: Final = 107
"""Longest Unix socket path Linux accepts (``sun_path`` is 108 bytes with the NUL)."""
TUNNEL_TIMEOUT: Final = "1h"
"""An idle websocket is kept this long (socket.io pings every 25 s, so only a gone tab idles)."""
SERVER_TIMEOUT: Final = "10m"
"""Longest wait for a worker's answer to an HTTP request; a chat streams over the websocket."""
ALERT: Final = re.compile(r"\[ALERT\]\s*\(\d+\)\s*:\s*(config\s*:\s*)?")
"""The prefix of HAProxy's error lines: ``[ALERT]    (6158) : config : ``."""
INSTALL_HINT: Final = "sudo apt-get install haproxy"


@dataclass(frozen=True)
class Worker:
    """One chat UI process behind the proxy.

    Attributes:
        name: HAProxy's name for it and its cookie value: ``w1``, ``w2`` ...
        port: its port.
        log: its app log (``KIMI_APP_LOG`` in its environment); empty: stderr only.
        address: where it listens: 127.0.0.1 when launch.sh starts it; another host's
            name or address in a front of several hosts (deploy/haproxy.cfg).
    """

    name: str
    port: int
    log: str
    address: str = "127.0.0.1"


@dataclass(frozen=True)
class ProxyPlan:
    """HAProxy in front of the workers.

    Attributes:
        host: where HAProxy listens (``KIMI_UI_HOST``).
        port: its port (``KIMI_UI_PORT``).
        workers: the chat UI processes, in order.
        config_path: where the config is written (``KIMI_RUN_DIR/haproxy.cfg``).
        log: HAProxy's own log (server up/down events, alerts), through serving.logpipe.
        stats_socket: HAProxy's admin socket (``show stat`` for ``./launch.sh status``),
            or None when the run directory's path is too long for a Unix socket.
    """

    host: str
    port: int
    workers: list[Worker]
    config_path: Path
    log: Path
    stats_socket: Path | None

    def config(self) -> str:
        """The HAProxy configuration text (see the module docstring for each choice)."""
        stats = (
            [f"    stats socket {self.stats_socket} mode 600 level user"]
            if self.stats_socket
            else []
        )
        servers = [
            f"    server {w.name} {bind_address(w.address, w.port)} cookie {w.name}"
            for w in self.workers
        ]
        lines = [
            f"# Written by launch.sh (serving/proxy.py) for {len(self.workers)} chat UI workers;",
            "# rewritten at every start: change the settings, not this file.",
            "# No log section: run in the foreground (-db), HAProxy writes its warnings",
            "# (a worker DOWN or UP) and alerts on stderr, which launch.sh logs.",
            "global",
            "    maxconn 4096",
            *stats,
            "",
            "defaults",
            "    mode http",
            "    option redispatch",
            "    retries 2",
            "    timeout connect 5s",
            "    timeout client 60s",
            f"    timeout server {SERVER_TIMEOUT}",
            "    timeout http-request 30s",
            "    timeout http-keep-alive 60s",
            f"    timeout tunnel {TUNNEL_TIMEOUT}",
            "    timeout client-fin 30s",
            "",
            "frontend chat_ui",
            f"    bind {bind_address(self.host, self.port)}",
            "    # The app sees the browser's address, never one the browser wrote.",
            "    http-request del-header X-Forwarded-For",
            "    option forwardfor",
            "    # The UI's status is for this machine only, as without the proxy.",
            f"    http-request deny deny_status 404 if {{ path_beg {HEALTH_PATH} }} "
            "!{ src 127.0.0.0/8 ::1 }",
            f"    default_backend {BACKEND}",
            "",
            f"backend {BACKEND}",
            "    balance leastconn",
            f"    cookie {COOKIE} insert indirect nocache httponly attr SameSite=Lax",
            f"    option httpchk GET {HEALTH_PATH}",
            "    http-check expect status 200",
            "    default-server check inter 2s fall 2 rise 2",
            "    # A worker that died with the request in its listen queue closes it unanswered:",
            "    # a GET or HEAD is sent again, on the last try to another worker, instead of a",
            "    # 502; any other method may have been acted on, so only a refused one is.",
            "    retry-on conn-failure empty-response",
            "    http-request disable-l7-retry unless METH_GET",
            *servers,
        ]
        return "\n".join(lines) + "\n"


def bind_address(host: str, port: int) -> str:
    """HAProxy's ``bind`` address: ``127.0.0.1:8300``, ``[::]:8300`` for IPv6 hosts."""
    return f"[{host.strip('[]')}]:{port}" if ":" in host else f"{host}:{port}"


def worker_log(app_log: str, index: int) -> str:
    """Worker ``index``'s (1-based) app log: ``app.log`` -> ``app-1.log``; empty stays empty."""
    if not app_log:
        return ""
    path = Path(app_log)
    return str(path.with_name(f"{path.stem}-{index}{path.suffix}"))


def worker_logs(app_log: str) -> list[str]:
    """The app logs of the UI workers a ``--ui-workers`` launch left, in worker order
    (:func:`worker_log` 1, 2, ... while the file exists); [] for an empty ``app_log``."""
    logs: list[str] = []
    while app_log and Path(name := worker_log(app_log, len(logs) + 1)).is_file():
        logs.append(name)
    return logs


def pick_ports(
    first: int, count: int, in_use: Callable[[int], bool], avoid: Iterable[int] = ()
) -> list[int]:
    """``count`` ports from ``first`` upwards, consecutive except where one is taken.

    Args:
        first: the lowest port to try (launch.sh: the UI port + 1).
        count: how many are needed.
        in_use: whether something listens on a port (``serving.launcher.port_in_use``).
        avoid: ports promised to others (the vLLM servers') even if free now.

    Raises:
        ValueError: fewer than ``count`` free ports up to 65535.
    """
    skip = set(avoid)
    ports: list[int] = []
    port = first
    while len(ports) < count:
        if port > 65535:
            raise ValueError(f"no {count} free ports from {first} up")
        if port not in skip and not in_use(port):
            ports.append(port)
        port += 1
    return ports


def make_plan(
    *,
    host: str,
    port: int,
    workers: int,
    app_log: str,
    run_dir: Path,
    in_use: Callable[[int], bool],
    avoid: Iterable[int] = (),
) -> ProxyPlan:
    """Plan ``workers`` chat UI processes behind HAProxy on ``host:port``.

    Args:
        host, port: where the UI is reached (``KIMI_UI_HOST``, ``KIMI_UI_PORT``).
        workers: number of chat UI processes (``KIMI_UI_WORKERS``, at least 2 here).
        app_log: ``KIMI_APP_LOG``; each worker's log is named after it (:func:`worker_log`).
        run_dir: ``KIMI_RUN_DIR``, where the config, HAProxy's log and socket go.
        in_use, avoid: see :func:`pick_ports`.

    Raises:
        ValueError: fewer than 2 workers, or not enough free ports.
    """
    if workers < 2:
        raise ValueError("a proxy is planned for 2 or more workers")
    ports = pick_ports(port + 1, workers, in_use, avoid={port, *avoid})
    sock = (run_dir / SOCKET_FILE).resolve()  # HAProxy reads a relative one as host:port
    return ProxyPlan(
        host=host,
        port=port,
        workers=[Worker(f"w{i}", p, worker_log(app_log, i)) for i, p in enumerate(ports, 1)],
        config_path=run_dir / CONFIG_FILE,
        log=run_dir / LOG_FILE,
        stats_socket=sock if len(str(sock).encode()) <= SOCKET_PATH_MAX else None,
    )


def find_haproxy() -> str | None:
    """The ``haproxy`` command: on ``PATH``, else in ``/usr/sbin`` or ``/usr/local/sbin``
    (Debian installs it in ``/usr/sbin``, which a normal user's ``PATH`` may lack)."""
    return shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")


def check_haproxy(workers: int, find: Callable[[], str | None] = find_haproxy) -> list[Finding]:
    """Refuse ``--ui-workers N`` (N > 1) when no ``haproxy`` command is installed.

    launch.sh installs no system package; the sentence says what to install.
    """
    if workers <= 1 or find():
        return []
    return [
        Finding(
            f"--ui-workers {workers} (KIMI_UI_WORKERS) needs HAProxy in front of the workers, "
            f"and no haproxy command is installed: install it (`{INSTALL_HINT}` on "
            "Debian or Ubuntu), or use --ui-workers 1",
            refuse=True,
        )
    ]


def validate(config_path: Path, haproxy: str = "haproxy") -> str:
    """Ask HAProxy to check a config (``haproxy -c -f FILE``); "" if fine, else its alerts.

    Raises:
        OSError: ``haproxy`` cannot be run.
    """
    out = subprocess.run(
        [haproxy, "-c", "-f", str(config_path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if out.returncode == 0:
        return ""
    lines = [line.strip() for line in (out.stdout + out.stderr).splitlines() if line.strip()]
    alerts = [ALERT.sub("", line) for line in lines if ALERT.match(line)] or lines
    return alerts[0] if alerts else f"haproxy -c exited with {out.returncode}"


def server_states(sock: Path, timeout_s: float = 2.0) -> dict[str, str]:
    """HAProxy's view of each worker: ``{"w1": "UP", "w2": "DOWN", ...}``.

    Asks the stats socket ``show stat`` (HAProxy management guide, "show stat":
    CSV, header line starting with ``# pxname,svname,...``; ``status`` is ``UP``,
    ``DOWN``, ``MAINT``, ``UP 1/2`` while a check is changing its mind ...).
    Empty if the socket does not answer.
    """
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout_s)
            conn.connect(str(sock))
            conn.sendall(b"show stat\n")
            chunks = []
            while chunk := conn.recv(65536):
                chunks.append(chunk)
    except OSError:
        return {}
    return parse_stat(b"".join(chunks).decode(errors="replace"))


def parse_stat(text: str) -> dict[str, str]:
    """The worker statuses in a ``show stat`` CSV answer (see :func:`server_states`)."""
    rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
    return {
        row["svname"]: row["status"]
        for row in rows
        if row.get("pxname") == BACKEND and row.get("svname") not in (None, "FRONTEND", "BACKEND")
    }
