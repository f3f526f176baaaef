"""Start to ready, side by side: the app (through ``launch.sh`` and by itself) and Open WebUI.

One scripted server (``tests/fakes/kimi_server.py``) runs for the whole run. Each
round starts every side in turn (the order rotates from round to round, so a
drift in the machine's load falls on all sides alike), times it from starting
the process to the first HTTP 200 of ``GET /`` (polled every 20 ms), reads the
CPU seconds its processes had used by then (on a shared 2-core machine wall time
is mostly waiting for the CPU; CPU time much less so), waits ``--settle-s``
seconds and reads its idle RSS (the process and its children), then stops it. The sides:

``launch.sh --ui-only``
    ``./launch.sh --ui-only`` against the scripted server: launch.sh's own checks
    (settings, secrets, ``ui-check``) and then ``chainlit run``; ready is the
    first 200 of its UI port. RSS is the chat UI process launch.sh recorded
    (``ui_pid``). ``KIMI_APP_PYTHON`` is this Python, so nothing is installed.
``serving.ui_main``
    the UI process alone, as launch.sh starts it (``serving.ui_main.ui_command``:
    Chainlit's ``chainlit run app.py --headless`` on asyncio's C tasks).
``Open WebUI 0.12.4``
    ``open-webui serve`` offline (:func:`bench.openwebui.running_openwebui`;
    install it first: ``python -m bench.openwebui install``). Its ready time
    ends at the first 200 of ``/`` too; sign-in and the model list come after.

Each side keeps its data folder for the whole run, so round 1 is a first start
(databases created: Open WebUI also runs its migrations) and later rounds are
restarts; the table gives the first start apart and the restarts' median, min
and max. Writes ``artifacts/bench/<name>.md`` and ``.json``. Run from the
repository root::

    .venv/bin/python -m bench.bench_startup --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.harness import (
    Report,
    free_port,
    hermetic_environ,
    rotated,
    scripted_server,
    started,
    table,
    tree_cpu_s,
    tree_rss_mb,
    wait_ready,
)
from bench.openwebui import VERSION, running_openwebui
from serving import runstate
from serving.ui_main import ui_command

Started = tuple[float, float, int]
"""(seconds from process start to the first 200 of ``/``, CPU seconds the UI's processes
had used by then, the pid whose RSS is the UI's)."""
Side = Callable[[str, Path], AbstractContextManager[Started]]
"""Starts one UI against a base URL with a data folder of its own; stops it on exit."""


def app_env(base_url: str, state: Path, **extra: str) -> dict[str, str]:
    """The app's environment: its defaults (:func:`bench.harness.hermetic_environ`), its
    files under ``state``."""
    return hermetic_environ(
        KIMI_BASE_URL=base_url,
        KIMI_DATA_DIR=str(state / "data"),
        KIMI_ENV_FILE=str(state / "env"),
        KIMI_APP_LOG=str(state / "app.log"),
        **extra,
    )


@contextmanager
def ready(command: list[str], url: str, env: dict[str, str], log: Path) -> Iterator[Started]:
    """``command`` started, until ``url`` answers 200 (within 10 minutes): the seconds that
    took, the CPU seconds its process tree had used by then, its pid; stopped on leaving."""
    begun = time.monotonic()
    with started(command, env, log) as process:
        wait_ready(url, process, 600, log)
        yield time.monotonic() - begun, tree_cpu_s(process.pid), process.pid


@contextmanager
def through_launch_sh(base_url: str, state: Path) -> Iterator[Started]:
    """``./launch.sh --ui-only`` on a free port; stopped by SIGTERM (the launcher stops the
    UI); its RSS is the chat UI process launch.sh recorded."""
    port, run_dir = free_port(), state / "run"
    env = app_env(
        base_url,
        state,
        KIMI_UI_PORT=str(port),
        KIMI_RUN_DIR=str(run_dir),
        KIMI_APP_PYTHON=sys.executable,
    )
    url = f"http://127.0.0.1:{port}/"
    with ready(["./launch.sh", "--ui-only"], url, env, state / "launch.out") as (seconds, cpu, _):
        recorded = runstate.read(run_dir)
        if recorded is None or recorded.ui is None:
            raise RuntimeError(f"launch.sh recorded no chat UI in {run_dir}")
        yield seconds, cpu, recorded.ui.pid


def ui_alone(base_url: str, state: Path) -> AbstractContextManager[Started]:
    """The UI process alone (:func:`serving.ui_main.ui_command`) on a free port."""
    port = free_port()
    command = ui_command("127.0.0.1", port)
    return ready(command, f"http://127.0.0.1:{port}/", app_env(base_url, state), state / "ui.out")


@contextmanager
def open_webui(base_url: str, state: Path) -> Iterator[Started]:
    """Open WebUI offline (:func:`bench.openwebui.running_openwebui`), data in ``state``."""
    with running_openwebui(base_url, data_dir=state) as peer:
        yield peer.ready_s, peer.ready_cpu_s, peer.pid


SIDES: dict[str, Side] = {
    "launch.sh --ui-only": through_launch_sh,
    "python -m serving.ui_main": ui_alone,
    f"Open WebUI {VERSION}": open_webui,
}


@dataclass
class Measured:
    """One side's rounds, round 1 first: ready seconds, CPU seconds to ready, idle RSS
    (MB), and the machine's 1-minute load average just before each start."""

    ready_s: list[float] = field(default_factory=list)
    ready_cpu_s: list[float] = field(default_factory=list)
    idle_rss_mb: list[float] = field(default_factory=list)
    load_1m: list[float] = field(default_factory=list)


def run_rounds(
    base_url: str, names: list[str], rounds: int, settle_s: float
) -> dict[str, Measured]:
    """Start and stop every side ``rounds`` times, rotating the order; data kept per side."""
    results = {name: Measured() for name in names}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        states = {name: Path(tmp) / f"side{i}" for i, name in enumerate(names)}
        for state in states.values():
            state.mkdir()
        for r in range(rounds):
            for name in rotated(names, r):
                load = os.getloadavg()[0]
                with SIDES[name](base_url, states[name]) as (ready_s, cpu, pid):
                    time.sleep(settle_s)
                    rss = tree_rss_mb(pid)
                results[name].ready_s.append(ready_s)
                results[name].ready_cpu_s.append(cpu)
                results[name].idle_rss_mb.append(rss)
                results[name].load_1m.append(load)
                print(
                    f"round {r + 1} {name}: ready {ready_s:.2f} s ({cpu:.2f} s CPU), "
                    f"idle RSS {rss:.0f} MB "
                    f"(load {load:.1f} before)",
                    flush=True,
                )
    return results


def summary(results: dict[str, Measured]) -> str:
    """The table: first start, restarts (median, min, max), CPU seconds to ready of the
    restarts (median), idle RSS (median), the 1-minute load average before the starts
    (lowest-highest)."""
    rows = []
    for name, m in results.items():
        first, restarts = m.ready_s[0], m.ready_s[1:] or m.ready_s
        cpu = statistics.median(m.ready_cpu_s[1:] or m.ready_cpu_s)
        rows.append([
            name, f"{first:.2f}", f"{statistics.median(restarts):.2f}", f"{min(restarts):.2f}",
            f"{max(restarts):.2f}", f"{cpu:.2f}", f"{statistics.median(m.idle_rss_mb):.0f}",
            f"{min(m.load_1m):.1f}-{max(m.load_1m):.1f}",
        ])  # fmt: skip
    head = ["UI", "first start (s)", "restart median (s)", "min (s)", "max (s)",
            "CPU to ready, restart median (s)", "idle RSS (MB)", "load (1 min)"]  # fmt: skip
    return table(head, rows)


def main(argv: list[str] | None = None) -> None:
    """Run the rounds, print the table, write ``artifacts/bench/<name>.md`` and ``.json``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="starts of each side (>= 2)")
    parser.add_argument("--settle-s", type=float, default=5.0, help="wait before reading RSS")
    parser.add_argument("--sides", nargs="+", choices=list(SIDES), default=list(SIDES))
    parser.add_argument("--name", default="startup", help="results file name")
    args = parser.parse_args(argv)
    report = Report("Start to ready", args.name)
    with scripted_server() as base_url:
        results = run_rounds(base_url, args.sides, args.rounds, args.settle_s)
    report.add(
        f"{args.rounds} rounds, order rotated; ready = process start to the first HTTP 200 "
        f"of `GET /`; CPU to ready = user + system seconds of the process tree by then (what "
        f"a busy machine distorts least); idle RSS {args.settle_s:.0f} s after ready, process "
        "tree.",
        summary(results),
    )
    report.finish({"args": vars(args), "sides": {name: asdict(m) for name, m in results.items()}})


if __name__ == "__main__":
    main()
