"""What launch.sh started, recorded in a file: ``status`` and ``stop`` read it.

``launch.sh`` writes ``$KIMI_RUN_DIR/launch.state`` (default ``.run/``,
git-ignored) whenever it starts or restarts a process, and removes it when it
exits. The file is ``key=value`` lines::

    launch_pid=1234            launch.sh itself
    mode=dev | gpu
    gpus=0
    servers=1                  vLLM servers (2 with --both)
    server.0.pid=1240          the server's process group (setsid leader)
    server.0.port=8100
    server.0.model=kimi-vl-dev
    server.0.log=llm.log
    server.0.parallel=1 1 1    tensor, pipeline, data parallel size
    server.0.started=1796118821   Unix time of the last (re)start
    server.0.restarts=0
    ui_pid=1300                the chat UI's process group (absent: none)
    ui_port=8300
    ui_host=127.0.0.1
    app_log=app.log

With ``--ui-workers N`` (N > 1) there is no ``ui_pid``; instead::

    ui_workers=2
    proxy_pid=1310             HAProxy, listening on ui_host:ui_port (0: not started yet)
    proxy_config=.run/haproxy.cfg
    proxy_log=.run/haproxy.log
    proxy_socket=.run/haproxy.sock   its stats socket (empty: none)
    ui.0.pid=1300              worker 1's process group
    ui.0.port=8301             on 127.0.0.1
    ui.0.log=app-1.log

``stop`` signals only these recorded PIDs (never processes found by name), and
only while each still runs the program launch.sh started there.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from serving import proxy

STATE_FILE = "launch.state"

# Lines of llm.log that operators want to see first: vLLM's own ERROR and
# CRITICAL records, Python tracebacks and exception lines.
ERROR_LINE = re.compile(r"\b(ERROR|CRITICAL)\b|Traceback \(most recent call last\)|^\S*Error: ")


def read_state(run_dir: Path) -> dict[str, str]:
    """The recorded ``key=value`` pairs; empty if launch.sh left no record."""
    try:
        text = (run_dir / STATE_FILE).read_text()
    except OSError:
        return {}
    pairs = (line.split("=", 1) for line in text.splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def cmdline(pid: int) -> str:
    """The command line of ``pid`` (arguments joined by spaces); empty if it is gone."""
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


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
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def error_lines(log: Path, count: int = 5) -> list[str]:
    """The last ``count`` lines of ``log`` that report errors (see :data:`ERROR_LINE`).

    Reads at most the last 2 MB of the file.
    """
    try:
        with log.open("rb") as f:
            f.seek(max(0, log.stat().st_size - 2 * 2**20))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if ERROR_LINE.search(line)][-count:]


def format_duration(seconds: float) -> str:
    """``3725`` -> ``"1 h 2 min"``; ``45`` -> ``"45 s"``."""
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60} s"
    return f"{s // 3600} h {s % 3600 // 60} min"


@dataclass(frozen=True)
class Probe:
    """What the HTTP endpoints answered (None: no answer).

    Attributes:
        health: vLLM ``/health`` status code per server index.
        models: per server index, ``(id, max_model_len)`` pairs from ``/v1/models``.
        ui: the UI's status code for ``/`` (with workers: through HAProxy).
        open_chats: ``open_chats`` from the UI's ``/kimi/status`` (with workers: the sum
            over those that answered).
        workers: per worker index, its own ``/`` status code and open chats.
        balanced: HAProxy's view of each worker by name (``w1``: ``UP``, ...), from its
            stats socket; empty without one.
    """

    health: dict[int, int | None]
    models: dict[int, list[tuple[str, int | None]]]
    ui: int | None
    open_chats: int | None
    workers: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)
    balanced: dict[str, str] = field(default_factory=dict)


def probe(state: dict[str, str], api_key: str, timeout_s: float = 3.0) -> Probe:
    """Ask each recorded server and the UI how they are (each request at most ``timeout_s``)."""

    def get(url: str, **headers: str) -> httpx.Response | None:
        try:
            return httpx.get(url, timeout=timeout_s, headers=headers)
        except httpx.HTTPError:
            return None

    health: dict[int, int | None] = {}
    models: dict[int, list[tuple[str, int | None]]] = {}
    for i in range(int(state.get("servers", "0") or 0)):
        root = f"http://127.0.0.1:{state.get(f'server.{i}.port', '')}"
        answer = get(f"{root}/health")
        health[i] = answer.status_code if answer else None
        listed = get(f"{root}/v1/models", Authorization=f"Bearer {api_key}")
        if listed is not None and listed.status_code == 200:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                models[i] = [(m["id"], m.get("max_model_len")) for m in listed.json()["data"]]

    def ui_at(port: str) -> tuple[int | None, int | None]:
        root = f"http://127.0.0.1:{port}"
        answer = get(f"{root}/")
        count = None
        chats = get(f"{root}/kimi/status")
        if chats is not None and chats.status_code == 200:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                count = int(chats.json()["open_chats"])
        return (answer.status_code if answer else None), count

    ui = open_chats = None
    workers: dict[int, tuple[int | None, int | None]] = {}
    balanced: dict[str, str] = {}
    if state.get("ui_workers"):
        workers = {
            i: ui_at(state.get(f"ui.{i}.port", ""))
            for i in range(int(state.get("ui_workers", "0") or 0))
        }
        answer = get(f"http://127.0.0.1:{state.get('ui_port', '')}/")
        ui = answer.status_code if answer else None
        counts = [chats for _, chats in workers.values() if chats is not None]
        open_chats = sum(counts) if counts else None
        if state.get("proxy_socket"):
            balanced = proxy.server_states(Path(state["proxy_socket"]), timeout_s)
    elif state.get("ui_port"):
        ui, open_chats = ui_at(state["ui_port"])
    return Probe(
        health=health,
        models=models,
        ui=ui,
        open_chats=open_chats,
        workers=workers,
        balanced=balanced,
    )


def status_report(
    state: dict[str, str],
    seen: Probe,
    *,
    now: float,
    alive: Callable[[int, str], bool] = is_running,
    errors: Callable[[Path], list[str]] = error_lines,
) -> tuple[str, bool]:
    """The text of ``./launch.sh status`` and whether everything recorded is healthy.

    Args:
        state: :func:`read_state`'s pairs (empty: launch.sh is not running).
        seen: what the endpoints answered.
        now: the current Unix time (uptime).
        alive: process check, :func:`is_running` (tests pass a fake).
        errors: error lines of a log, :func:`error_lines`.
    """
    if not state:
        return "launch.sh is not running (no record in the run directory).", False
    launch_pid = int(state.get("launch_pid", "0"))
    ok = alive(launch_pid, "launch.sh")
    lines = [
        f"launch.sh: pid {launch_pid} " + ("running" if ok else "NOT running (stale record)"),
        f"mode: {state.get('mode', '?')}, GPUs: {state.get('gpus', '?')}",
    ]
    for i in range(int(state.get("servers", "0") or 0)):
        key = f"server.{i}."
        pid = int(state.get(key + "pid", "0"))
        code = seen.health.get(i)
        healthy = code == 200
        ok = ok and healthy
        if healthy:
            health = "healthy"
        elif alive(pid, "serve"):
            health = "starting or restarting (no /health yet)"
        else:
            health = "DOWN"
        tp, pp, dp = (state.get(key + "parallel", "? ? ?").split() + ["?"] * 3)[:3]
        started = float(state.get(key + "started", "0") or 0)
        uptime = format_duration(now - started) if started else "?"
        served = seen.models.get(i)
        model = state.get(key + "model", "?")
        if served:
            model = ", ".join(f"{m} (max model len {n})" for m, n in served)
        lines += [
            f"vLLM {i}: {health}, pid {pid}, port {state.get(key + 'port', '?')}, "
            f"up {uptime}, restarts {state.get(key + 'restarts', '0')}",
            f"  model: {model}",
            f"  tensor/pipeline/data parallel: {tp}/{pp}/{dp}",
        ]
        log = Path(state.get(key + "log", "llm.log"))
        found = errors(log)
        if found:
            lines.append(f"  last error lines of {log}:")
            lines += [f"    {line}" for line in found]
        else:
            lines.append(f"  no error lines in {log}")
    if "ui_pid" in state:
        ui_up = seen.ui == 200
        ok = ok and ui_up
        if ui_up:
            ui = "up"
        elif alive(int(state["ui_pid"]), "chainlit"):
            ui = "starting (no answer yet)"
        else:
            ui = "DOWN"
        chats = "unknown" if seen.open_chats is None else str(seen.open_chats)
        lines.append(
            f"chat UI: {ui}, pid {state['ui_pid']}, "
            f"http://{state.get('ui_host', '?')}:{state.get('ui_port', '?')}, "
            f"open chats: {chats}"
        )
    elif "ui_workers" in state:
        lines += _workers_report(state, seen, alive)
        ok = ok and seen.ui == 200 and all(code == 200 for code, _ in seen.workers.values())
    else:
        lines.append("chat UI: not started by launch.sh (--server-only)")
    return "\n".join(lines), ok


def _workers_report(
    state: dict[str, str], seen: Probe, alive: Callable[[int, str], bool]
) -> list[str]:
    """The chat UI lines of ``status`` with ``--ui-workers N``: HAProxy, then each worker."""
    proxy_pid = int(state.get("proxy_pid", "0") or 0)
    if seen.ui == 200:
        front = "up"
    elif alive(proxy_pid, "haproxy"):
        front = "HAProxy runs but no worker answers" if seen.ui else "starting (no answer yet)"
    else:
        front = "DOWN (HAProxy is not running)"
    chats = "unknown" if seen.open_chats is None else str(seen.open_chats)
    count = int(state.get("ui_workers", "0") or 0)
    lines = [
        f"chat UI: {front}, HAProxy pid {proxy_pid}, "
        f"http://{state.get('ui_host', '?')}:{state.get('ui_port', '?')}, "
        f"{count} workers, open chats: {chats}",
        f"  HAProxy config {state.get('proxy_config', '?')}, log {state.get('proxy_log', '?')}",
    ]
    for i in range(count):
        key = f"ui.{i}."
        pid = int(state.get(key + "pid", "0") or 0)
        code, open_chats = seen.workers.get(i, (None, None))
        if code == 200:
            health = "up"
        elif alive(pid, "chainlit"):
            health = "starting (no answer yet)"
        else:
            health = "DOWN (launch.sh does not restart workers; HAProxy sends nobody there)"
        view = seen.balanced.get(f"w{i + 1}")
        said = f", HAProxy: {view}" if view else ""
        chats = "" if open_chats is None else f", open chats: {open_chats}"
        lines.append(
            f"  worker {i + 1}: {health}, pid {pid}, port {state.get(key + 'port', '?')}"
            f"{chats}{said}, log {state.get(key + 'log') or '(stderr only)'}"
        )
    return lines


def stop(
    state: dict[str, str],
    *,
    wait_s: float = 60.0,
    say: Callable[[str], None] = print,
) -> bool:
    """Stop what launch.sh recorded: SIGTERM to launch.sh, then to any group left.

    launch.sh stops its own process groups on SIGTERM; if it is gone already (or
    does not finish within ``wait_s``), the recorded groups get SIGTERM and,
    after 15 s, SIGKILL.

    Returns:
        True if nothing recorded is left running.
    """
    launch_pid = int(state.get("launch_pid", "0"))
    groups = [
        int(state[k]) for k in sorted(state) if k.endswith(".pid") or k in ("ui_pid", "proxy_pid")
    ]
    if is_running(launch_pid, "launch.sh"):
        say(f"stopping launch.sh (pid {launch_pid})")
        os.kill(launch_pid, signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        while is_running(launch_pid, "launch.sh") and time.monotonic() < deadline:
            time.sleep(0.2)
    left = [g for g in groups if g > 0 and group_alive(g)]
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
    return not left and not is_running(launch_pid, "launch.sh")
