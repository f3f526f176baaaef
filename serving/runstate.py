"""What the launcher started, in one file that this module alone writes and reads.

The supervisor (:mod:`serving.supervisor`) writes ``$KIMI_RUN_DIR/launch.json`` (default
``.run/``, git-ignored) whenever it starts or restarts a process and removes it when it
exits; ``./launch.sh status`` and ``./launch.sh stop`` read it. The file is
:class:`RunState` as JSON (written to a temporary file, then renamed, so a reader never
sees half of it).

``stop`` signals only these recorded PIDs (never processes found by name), and only
while each still runs the program the launcher started there.

Standard library only (``stop`` and ``status`` must not wait on heavy imports).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

STATE_FILE = "launch.json"
LAUNCHER_MARK = "serving.cli"
"""In the launcher's command line (``python -m serving.cli``, which launch.sh execs)."""


@dataclass
class Process:
    """One process the launcher keeps up, the leader of its own process group.

    Attributes:
        pid: its PID and process group; 0 while it waits to be restarted.
        port: where it listens on 127.0.0.1 (HAProxy and a single UI: the UI's address).
        log: its log file (empty: none).
        started: Unix time of its last (re)start.
        restarts: how often it was restarted after it died.
    """

    pid: int
    port: int
    log: str = ""
    started: float = 0.0
    restarts: int = 0


@dataclass
class Server(Process):
    """A vLLM server.

    Attributes:
        model: the served model name.
        parallel: tensor, pipeline and data parallel size.
        replica: its number behind the router (1, 2 ...); 0: no router.
        gpus: its ``CUDA_VISIBLE_DEVICES`` (empty: all, or the CPU).
    """

    model: str = ""
    parallel: tuple[int, int, int] = (1, 1, 1)
    replica: int = 0
    gpus: str = ""


@dataclass
class Router(Process):
    """vLLM's router in front of the replicas (``--replicas``, ``--remote-replica``).

    Attributes:
        policy: its load-balancing policy.
        host: the address it listens on (``KIMI_ROUTER_HOST``: loopback, or one private
            address for UI hosts elsewhere).
        elastic: ``"N..M"`` when the launcher adds and retires replicas; empty: fixed.
        remote: root URLs of the replicas on other hosts.
        scaling: the last replica changes, one line each (newest last).
    """

    policy: str = ""
    host: str = "127.0.0.1"
    elastic: str = ""
    remote: list[str] = field(default_factory=list)
    scaling: list[str] = field(default_factory=list)


@dataclass
class Proxy(Process):
    """HAProxy in front of the UI workers.

    Attributes:
        config: its config file.
        socket: its stats socket (empty: none, the run directory's path is too long).
    """

    config: str = ""
    socket: str = ""


@dataclass
class RunState:
    """Everything the launcher started.

    Attributes:
        launcher_pid: the launcher (``python -m serving.cli``, launch.sh's PID).
        mode: ``"dev"``, ``"gpu"``, or ``"none"`` (``--ui-only``).
        gpus: visible GPUs.
        ui_host: where the chat UI listens (``KIMI_UI_HOST``).
        servers: vLLM servers (2 with ``--both``; none with ``--ui-only``).
        model_servers: with ``--ui-only``, the OpenAI base URLs of the model servers the
            UI talks to (``KIMI_SERVERS`` or ``KIMI_BASE_URL``), which launch.sh did not start.
        ui: the single chat UI (None: none, or workers instead).
        workers: the chat UI workers behind HAProxy (``--ui-workers N``, N > 1).
        proxy: HAProxy (with workers).
        router: vLLM's router in front of replicas (``servers`` are then the local ones).
    """

    launcher_pid: int
    mode: str = "none"
    gpus: int = 0
    ui_host: str = ""
    servers: list[Server] = field(default_factory=list)
    model_servers: list[str] = field(default_factory=list)
    ui: Process | None = None
    workers: list[Process] = field(default_factory=list)
    proxy: Proxy | None = None
    router: Router | None = None

    def processes(self) -> list[Process]:
        """Every recorded process: servers, the UI or the workers and HAProxy."""
        found: list[Process] = [*self.servers, *self.workers]
        found += [p for p in (self.ui, self.proxy, self.router) if p is not None]
        return found

    def to_json(self) -> str:
        """The file's text."""
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> RunState:
        """Parse :meth:`to_json`'s text.

        Raises:
            ValueError: not such a record (malformed JSON or fields).
        """
        try:
            data: dict[str, Any] = json.loads(text)
            ui, proxy, router = data.pop("ui"), data.pop("proxy"), data.pop("router", None)
            return cls(
                **{k: v for k, v in data.items() if k not in ("servers", "workers")},
                servers=[_server(s) for s in data["servers"]],
                ui=Process(**ui) if ui else None,
                workers=[Process(**w) for w in data["workers"]],
                proxy=Proxy(**proxy) if proxy else None,
                router=Router(**router) if router else None,
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"not a launcher record: {exc}") from exc


def _server(data: dict[str, Any]) -> Server:
    return Server(**{**data, "parallel": tuple(data.get("parallel", (1, 1, 1)))})


def write(run_dir: Path, state: RunState) -> None:
    """Record ``state`` in ``run_dir`` (created if needed), atomically."""
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / (STATE_FILE + ".tmp")
    tmp.write_text(state.to_json())
    tmp.replace(run_dir / STATE_FILE)


def read(run_dir: Path) -> RunState | None:
    """The recorded state; None if the launcher left no (readable) record."""
    try:
        return RunState.from_json((run_dir / STATE_FILE).read_text())
    except (OSError, ValueError):
        return None


def remove(run_dir: Path, launcher_pid: int) -> None:
    """Delete the record if it is ``launcher_pid``'s (a later launcher's stays)."""
    state = read(run_dir)
    if state is not None and state.launcher_pid == launcher_pid:
        with contextlib.suppress(OSError):
            (run_dir / STATE_FILE).unlink()


def cmdline(pid: int) -> str:
    """The command line of ``pid`` (arguments joined by spaces); empty if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace")


def is_running(pid: int, marker: str) -> bool:
    """True if ``pid`` exists, is no zombie, and its command line contains ``marker``.

    The marker guards against a recorded PID that the kernel has since given to
    another program.
    """
    if pid <= 0:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z" and marker in cmdline(pid)


def group_alive(pgid: int) -> bool:
    """True if any process is left in process group ``pgid``."""
    if pgid <= 0:
        return False
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop(state: RunState, *, wait_s: float = 60.0, say: Callable[[str], None] = print) -> bool:
    """Stop what the launcher recorded: SIGTERM to the launcher, then to any group left.

    The launcher stops its own process groups on SIGTERM; if it is gone already (or
    does not finish within ``wait_s``), the recorded groups get SIGTERM and, after
    15 s, SIGKILL.

    Returns:
        True if nothing recorded is left running.
    """
    launcher = state.launcher_pid
    if is_running(launcher, LAUNCHER_MARK):
        say(f"stopping launch.sh (pid {launcher})")
        os.kill(launcher, signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        while is_running(launcher, LAUNCHER_MARK) and time.monotonic() < deadline:
            time.sleep(0.2)
    left = [p.pid for p in state.processes() if group_alive(p.pid)]
    for sig, pause in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        if not left:
            break
        say(f"sending {sig.name} to process groups {left}")
        for pgid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, sig)
        deadline = time.monotonic() + pause
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = [g for g in left if group_alive(g)]
    return not left and not is_running(launcher, LAUNCHER_MARK)
