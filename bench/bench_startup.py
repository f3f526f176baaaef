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
and max. Writes ``bench/results/<name>.md`` and ``.json``. Run from the
repository root::

    .venv/bin/python -m bench.bench_startup --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench._common import (
    ROOT,
    free_port,
    hermetic_environ,
    machine,
    now_utc,
    running_server,
    stop,
    tree_cpu_s,
    tree_rss_mb,
    write_results,
)
from bench.openwebui import VERSION, running_openwebui, wait_until_ready
from serving import runstate
from serving.ui_main import ui_command

Started = tuple[float, float, int]
"""(seconds from process start to the first 200 of ``/``, CPU seconds the UI's processes
had used by then, the pid whose RSS is the UI's)."""
Side = Callable[[str, Path], AbstractContextManager[Started]]
"""Starts one UI against a base URL with a data folder of its own; stops it on exit."""


def app_env(base_url: str, state: Path, **extra: str) -> dict[str, str]:
    """The app's environment: its defaults (:func:`bench._common.hermetic_environ`), its
    files under ``state``."""
    return hermetic_environ(
        KIMI_BASE_URL=base_url,
        KIMI_DATA_DIR=str(state / "data"),
        KIMI_ENV_FILE=str(state / "env"),
        KIMI_APP_LOG=str(state / "app.log"),
        **extra,
    )


def _ready(
    url: str, process: subprocess.Popen[bytes], started: float, log: Path
) -> tuple[float, float]:
    """Seconds from ``started`` to the first 200 of ``url`` (within 10 minutes), and the
    CPU seconds ``process`` and its descendants had used by then."""
    wait_until_ready(url, process, 600, log)
    return time.monotonic() - started, tree_cpu_s(process.pid)


@contextmanager
def through_launch_sh(base_url: str, state: Path) -> Iterator[Started]:
    """``./launch.sh --ui-only`` on a free port; stopped by SIGTERM (the launcher stops the UI)."""
    port, run_dir = free_port(), state / "run"
    env = app_env(
        base_url,
        state,
        KIMI_UI_PORT=str(port),
        KIMI_RUN_DIR=str(run_dir),
        KIMI_APP_PYTHON=sys.executable,
    )
    log = state / "launch.out"
    with log.open("ab") as out:
        started = time.monotonic()
        launch = subprocess.Popen(
            ["./launch.sh", "--ui-only"], cwd=ROOT, env=env, stdout=out, stderr=out
        )
    try:
        ready_s, cpu = _ready(f"http://127.0.0.1:{port}/", launch, started, log)
        recorded = runstate.read(run_dir)
        if recorded is None or recorded.ui is None:
            raise RuntimeError(f"launch.sh recorded no chat UI in {run_dir}")
        yield ready_s, cpu, recorded.ui.pid
    finally:
        stop(launch)


@contextmanager
def ui_alone(base_url: str, state: Path) -> Iterator[Started]:
    """The UI process alone (:func:`serving.ui_main.ui_command`) on a free port."""
    port = free_port()
    log = state / "chainlit.out"
    with log.open("ab") as out:
        started = time.monotonic()
        app = subprocess.Popen(
            ui_command("127.0.0.1", port),
            cwd=ROOT,
            env=app_env(base_url, state),
            stdout=out,
            stderr=out,
        )
    try:
        yield *_ready(f"http://127.0.0.1:{port}/", app, started, log), app.pid
    finally:
        stop(app)


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
            for name in names[r % len(names) :] + names[: r % len(names)]:
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


def table(results: dict[str, Measured]) -> str:
    """The markdown table: first start, restarts (median, min, max), CPU seconds to ready
    of the restarts (median), idle RSS (median),
    the 1-minute load average before the starts (lowest-highest)."""
    lines = [
        "| UI | first start (s) | restart median (s) | min (s) | max (s) "
        "| CPU to ready, restart median (s) | idle RSS (MB) | load (1 min) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, m in results.items():
        first, restarts = m.ready_s[0], m.ready_s[1:] or m.ready_s
        cpu = statistics.median(m.ready_cpu_s[1:] or m.ready_cpu_s)
        lines.append(
            f"| {name} | {first:.2f} | {statistics.median(restarts):.2f} | "
            f"{min(restarts):.2f} | {max(restarts):.2f} | {cpu:.2f} | "
            f"{statistics.median(m.idle_rss_mb):.0f} | "
            f"{min(m.load_1m):.1f}-{max(m.load_1m):.1f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Run the rounds, print the table, write ``bench/results/<name>.md`` and ``.json``."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="starts of each side (>= 2)")
    parser.add_argument("--settle-s", type=float, default=5.0, help="wait before reading RSS")
    parser.add_argument("--sides", nargs="+", choices=list(SIDES), default=list(SIDES))
    parser.add_argument("--name", default="startup", help="results file name")
    args = parser.parse_args(argv)
    header = f"{now_utc()}; {machine()}"
    with running_server() as base_url:
        results = run_rounds(base_url, args.sides, args.rounds, args.settle_s)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    markdown = (
        f"# Start to ready\n\n{header}; load average {load} at the end.\n"
        f"{args.rounds} rounds, order rotated; ready = process start to the first HTTP 200 "
        f"of `GET /`; CPU to ready = user + system seconds of the process tree by then (what a "
        f"busy machine distorts least); idle RSS {args.settle_s:.0f} s after ready, process "
        f"tree.\n\n"
        f"{table(results)}\n"
    )
    print(markdown)
    data = {
        "when": header,
        "load_end": load,
        "rounds": args.rounds,
        "settle_s": args.settle_s,
        "sides": {name: asdict(m) for name, m in results.items()},
    }
    for path in write_results(args.name, markdown, data):
        print(f"wrote {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
