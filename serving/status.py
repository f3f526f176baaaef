"""``./launch.sh status``: what the run state records, and how each part answers now.

:func:`probe` asks the recorded servers and the UI over HTTP; :func:`report` turns the
record and the answers into the text people read, and says whether all is healthy.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx

from serving import proxy, replicas, ui_main
from serving.replicas import Load
from serving.runstate import (
    LAUNCHER_MARK,
    Process,
    Proxy,
    Router,
    RunState,
    Server,
    is_running,
)

# Lines of llm.log that operators want to see first: vLLM's own ERROR and
# CRITICAL records, Python tracebacks and exception lines.
ERROR_LINE = re.compile(r"\b(ERROR|CRITICAL)\b|Traceback \(most recent call last\)|^\S*Error: ")


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
        model_servers: per model server launch.sh did not start (``--ui-only``, by index
            of ``RunState.model_servers``), its ``/health`` status code and served models.
        loads: requests running and waiting (``/metrics``) per replica root URL, local
            or remote (with a router).
        router: the router's ``/health`` status code (None: no answer or no router).
        routed: the replica root URLs the router routes to (``/list_workers``).
    """

    health: dict[int, int | None]
    models: dict[int, list[tuple[str, int | None]]]
    ui: int | None
    open_chats: int | None
    workers: dict[int, tuple[int | None, int | None]] = field(default_factory=dict)
    balanced: dict[str, str] = field(default_factory=dict)
    model_servers: dict[int, tuple[int | None, list[tuple[str, int | None]]]] = field(
        default_factory=dict
    )
    loads: dict[str, Load] = field(default_factory=dict)
    router: int | None = None
    routed: list[str] | None = None


NO_ANSWER = Probe({}, {}, None, None)
"""What :func:`probe` finds when nothing is recorded."""


Served = list[tuple[str, int | None]]
"""A server's models: ``(id, max_model_len)`` pairs from ``/v1/models``."""


def _get(url: str, timeout_s: float, **headers: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=timeout_s, headers=headers)
    except httpx.HTTPError:
        return None


def _server_at(root: str, api_key: str, timeout_s: float) -> tuple[int | None, Served | None]:
    """A model server's ``/health`` status code (None: no answer) and its models (None: not
    listed), at ``root`` (its URL without ``/v1``)."""
    answer = _get(f"{root}/health", timeout_s)
    listed = _get(f"{root}/v1/models", timeout_s, Authorization=f"Bearer {api_key}")
    models = None
    if listed is not None and listed.status_code == 200:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            models = [(m["id"], m.get("max_model_len")) for m in listed.json()["data"]]
    return (answer.status_code if answer else None), models


def _ui_at(port: int, timeout_s: float) -> tuple[int | None, int | None]:
    """A chat UI's status code for ``/`` and its open chats (``/kimi/status``), None: no answer."""
    root = f"http://127.0.0.1:{port}"
    answer = _get(f"{root}/", timeout_s)
    count = None
    chats = _get(f"{root}/kimi/status", timeout_s)
    if chats is not None and chats.status_code == 200:
        with contextlib.suppress(ValueError, KeyError, TypeError):
            count = int(chats.json()["open_chats"])
    return (answer.status_code if answer else None), count


def probe(state: RunState, api_key: str, timeout_s: float = 3.0) -> Probe:
    """Ask each recorded server and the UI how they are (each request at most ``timeout_s``)."""
    health: dict[int, int | None] = {}
    models: dict[int, Served] = {}
    for i, server in enumerate(state.servers):
        health[i], served = _server_at(f"http://127.0.0.1:{server.port}", api_key, timeout_s)
        if served is not None:
            models[i] = served
    elsewhere: dict[int, tuple[int | None, Served]] = {}
    for i, url in enumerate(state.model_servers):
        code, served = _server_at(url.rstrip("/").removesuffix("/v1"), api_key, timeout_s)
        elsewhere[i] = (code, served or [])
    ui = open_chats = None
    workers: dict[int, tuple[int | None, int | None]] = {}
    balanced: dict[str, str] = {}
    if state.proxy is not None:
        workers = {i: _ui_at(w.port, timeout_s) for i, w in enumerate(state.workers)}
        answer = _get(f"http://127.0.0.1:{state.proxy.port}/", timeout_s)
        ui = answer.status_code if answer else None
        counts = [chats for _, chats in workers.values() if chats is not None]
        open_chats = sum(counts) if counts else None
        if state.proxy.socket:
            balanced = proxy.server_states(Path(state.proxy.socket), timeout_s)
    elif state.ui is not None:
        ui, open_chats = _ui_at(state.ui.port, timeout_s)
    seen = Probe(health, models, ui, open_chats, workers, balanced, elsewhere)
    return _probe_router(state, seen, timeout_s) if state.router else seen


def _probe_router(state: RunState, seen: Probe, timeout_s: float) -> Probe:
    """``seen`` plus the router's health, its replica list and each replica's load."""
    assert state.router is not None
    root = replicas.router_root(state.router.host, state.router.port)
    answer = _get(f"{root}/health", timeout_s)
    roots = [f"http://127.0.0.1:{s.port}" for s in state.servers] + state.router.remote
    now = time.monotonic()
    loads = {url: load for url in roots if (load := replicas.read_load(url, now)) is not None}
    return replace(
        seen,
        loads=loads,
        router=answer.status_code if answer else None,
        routed=replicas.RouterAdmin(root).listed(),
    )


Alive = Callable[[int, str], bool]


def _mode_line(state: RunState) -> str:
    """What launch.sh started: ``mode: gpu, GPUs: 2``; with ``--ui-only`` (mode "none",
    no vLLM of its own) ``mode: chat UI only (--ui-only)``."""
    if state.mode == "none":
        return "mode: chat UI only (--ui-only)"
    return f"mode: {state.mode}, GPUs: {state.gpus}"


def report(
    state: RunState | None,
    seen: Probe,
    *,
    now: float,
    alive: Alive = is_running,
    errors: Callable[[Path], list[str]] = error_lines,
) -> tuple[str, bool]:
    """The text of ``./launch.sh status`` and whether everything recorded is healthy.

    Args:
        state: the record (None: the launcher is not running).
        seen: what the endpoints answered.
        now: the current Unix time (uptime).
        alive: process check, :func:`serving.runstate.is_running` (tests pass a fake).
        errors: error lines of a log, :func:`error_lines`.
    """
    if state is None:
        return "launch.sh is not running (no record in the run directory).", False
    ok = alive(state.launcher_pid, LAUNCHER_MARK)
    running = "running" if ok else "NOT running (stale record)"
    lines = [
        f"launch.sh: pid {state.launcher_pid} {running}",
        _mode_line(state),
    ]
    if state.router is not None:
        router_lines, healthy = _router_report(state.router, seen, now)
        ok = ok and healthy
        lines += router_lines
    for i, server in enumerate(state.servers):
        healthy = seen.health.get(i) == 200
        ok = ok and healthy
        lines += _server_lines(i, server, seen, healthy, now, alive, errors)
    if state.router is not None:
        lines += _router_changes(state.router)
    for i, url in enumerate(state.model_servers):
        line, healthy = _model_server_line(i, url, seen)
        ok = ok and healthy
        lines.append(line)
    if state.ui is not None:
        ui_up = seen.ui == 200
        ok = ok and ui_up
        chats = "unknown" if seen.open_chats is None else str(seen.open_chats)
        lines.append(
            f"chat UI: {_ui_health(state.ui, seen.ui, alive)}, pid {state.ui.pid}, "
            f"http://{state.ui_host}:{state.ui.port}, restarts {state.ui.restarts}, "
            f"open chats: {chats}"
        )
    elif state.proxy is not None:
        lines += _workers_report(state, state.proxy, seen, alive)
        ok = ok and seen.ui == 200 and all(code == 200 for code, _ in seen.workers.values())
    else:
        lines.append("chat UI: not started by launch.sh (--server-only)")
    return "\n".join(lines), ok


def _server_lines(
    i: int,
    server: Server,
    seen: Probe,
    healthy: bool,
    now: float,
    alive: Alive,
    errors: Callable[[Path], list[str]],
) -> list[str]:
    """The lines about vLLM server ``i``: health, model, parallel sizes, error lines."""
    if healthy:
        health = "healthy"
    elif server.pid == 0:
        health = "DOWN (waiting to be restarted)"
    elif alive(server.pid, "serve"):
        health = "starting or restarting (no /health yet)"
    else:
        health = "DOWN"
    uptime = format_duration(now - server.started) if server.started else "?"
    model = server.model
    served = seen.models.get(i)
    if served:
        model = ", ".join(f"{m} (max model len {n})" for m, n in served)
    tp, pp, dp = server.parallel
    name = f"replica {server.replica}" if server.replica else f"vLLM {i}"
    routed = _routing(f"http://127.0.0.1:{server.port}", seen) if server.replica else ""
    gpus = f", GPUs {server.gpus}" if server.gpus else ""
    lines = [
        f"{name}: {health}{routed}, pid {server.pid}, port {server.port}{gpus}, "
        f"up {uptime}, restarts {server.restarts}",
        f"  model: {model}",
        f"  tensor/pipeline/data parallel: {tp}/{pp}/{dp}",
    ]
    log = Path(server.log or "llm.log")
    found = errors(log)
    if found:
        lines.append(f"  last error lines of {log}:")
        lines += [f"    {line}" for line in found]
    else:
        lines.append(f"  no error lines in {log}")
    return lines


def _routing(root: str, seen: Probe) -> str:
    """``, in the router, running 1, waiting 0`` for the replica at ``root``."""
    if seen.routed is None:
        where = ", router's list unknown"
    else:
        where = ", in the router" if root in seen.routed else ", NOT in the router"
    load = seen.loads.get(root)
    counts = f", running {load.running}, waiting {load.waiting}" if load else ", load unknown"
    return where + counts


def _router_report(router: Router, seen: Probe, now: float) -> tuple[list[str], bool]:
    """The router's line, one per remote replica, and whether all of them are up."""
    healthy = seen.router == 200
    health = "healthy" if healthy else "DOWN" if router.pid else "DOWN (waiting to be restarted)"
    uptime = format_duration(now - router.started) if router.started else "?"
    count = "?" if seen.routed is None else str(len(seen.routed))
    elastic = f", elastic {router.elastic}" if router.elastic else ""
    root = replicas.router_root(router.host, router.port)
    lines = [
        f"vLLM router: {health}, pid {router.pid}, {root} "
        f"(policy {router.policy}{elastic}), routing to {count} replicas, up {uptime}, "
        f"restarts {router.restarts}, log {router.log}"
    ]
    for url in router.remote:
        up = seen.loads.get(url) is not None
        healthy = healthy and up
        state = "answers" if up else "DOWN (no answer; waiting for it)"
        lines.append(f"remote replica {url}: {state}{_routing(url, seen)}")
    return lines, healthy


def _router_changes(router: Router) -> list[str]:
    """The last replica changes (elastic adds and retirements, replicas in and out)."""
    if not router.scaling:
        return []
    return ["replica changes (newest last):", *(f"  {line}" for line in router.scaling[-10:])]


def _model_server_line(i: int, url: str, seen: Probe) -> tuple[str, bool]:
    """The line about model server ``i`` at ``url``, which launch.sh did not start
    (``--ui-only``), and whether it is healthy."""
    code, served = seen.model_servers.get(i, (None, []))
    if code == 200:
        models = ", ".join(f"{m} (max model len {n})" for m, n in served) or "no models listed"
        return f"model server {i}: healthy, {url} (not started by launch.sh), {models}", True
    why = "no answer" if code is None else f"/health answered {code}"
    return f"model server {i}: DOWN ({why}), {url} (not started by launch.sh)", False


def _ui_health(process: Process, code: int | None, alive: Alive) -> str:
    """``up``, ``starting (no answer yet)`` or why it is down, for one chat UI process."""
    if code == 200:
        return "up"
    if process.pid == 0:
        return "DOWN (waiting to be restarted)"
    if alive(process.pid, ui_main.MODULE):
        return "starting (no answer yet)"
    return "DOWN"


def _workers_report(state: RunState, front: Proxy, seen: Probe, alive: Alive) -> list[str]:
    """The chat UI lines of ``status`` with ``--ui-workers N``: HAProxy, then each worker."""
    if seen.ui == 200:
        health = "up"
    elif alive(front.pid, "haproxy"):
        health = "HAProxy runs but no worker answers" if seen.ui else "starting (no answer yet)"
    else:
        health = "DOWN (HAProxy is not running)"
    chats = "unknown" if seen.open_chats is None else str(seen.open_chats)
    lines = [
        f"chat UI: {health}, HAProxy pid {front.pid}, http://{state.ui_host}:{front.port}, "
        f"{len(state.workers)} workers, open chats: {chats}",
        f"  HAProxy config {front.config}, log {front.log}",
    ]
    for i, worker in enumerate(state.workers):
        code, open_chats = seen.workers.get(i, (None, None))
        health = _ui_health(worker, code, alive)
        if health.startswith("DOWN"):
            health += "; HAProxy sends nobody there"
        view = seen.balanced.get(f"w{i + 1}")
        said = f", HAProxy: {view}" if view else ""
        count = "" if open_chats is None else f", open chats: {open_chats}"
        lines.append(
            f"  worker {i + 1}: {health}, pid {worker.pid}, port {worker.port}, "
            f"restarts {worker.restarts}{count}{said}, log {worker.log or '(stderr only)'}"
        )
    return lines
