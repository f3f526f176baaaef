"""Helpers for tests that run ``launch.sh`` as a subprocess."""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

from serving.launcher import port_in_use

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = ROOT / "launch.sh"


def quiet_ports(count: int = 1) -> int:
    """The first of ``count`` consecutive free TCP ports below the kernel's ephemeral range.

    vLLM and the chat UI bind their ports seconds (vLLM: minutes) after the launcher
    checked them. A port in the ephemeral range may be handed out meanwhile to anything
    that asks the kernel for a free port on a busy test machine (another test's
    ``tests.conftest.free_port``, an outgoing connection); one below it is not.

    Raises:
        RuntimeError: no such ports found in 200 tries.
    """
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        first = random.randrange(10000, low - count)
        if not any(port_in_use(port) for port in range(first, first + count)):
            return first
    raise RuntimeError(f"no {count} free ports below {low}")


def launch_env(log_dir: Path, **extra: str) -> dict[str, str]:
    """Environment for launch.sh: vLLM on free ports (:func:`quiet_ports`, two: ``--both``
    takes the next one too), its files in ``log_dir``.

    The files: ``llm.log``, the run-state directory ``run/``, the env file
    ``env`` that launch.sh writes its generated secrets into (the repository's
    ``.env`` is never touched) and the app's data directory ``data/`` (users,
    which launch.sh counts before it lets the UI listen beyond loopback). One chat UI
    process (``KIMI_UI_WORKERS=1``): on a fake GPU machine the default would size the UI
    by this machine's cores (serving/room.py), so a test would depend on where it runs.
    """
    return {
        **os.environ,
        "KIMI_UI_WORKERS": "1",
        "KIMI_VLLM_PORT": str(quiet_ports(2)),
        "KIMI_LLM_LOG": str(log_dir / "llm.log"),
        "KIMI_RUN_DIR": str(log_dir / "run"),
        "KIMI_ENV_FILE": str(log_dir / "env"),
        "KIMI_DATA_DIR": str(log_dir / "data"),
        **extra,
    }


def live_processes_in_group(pgid: int) -> list[str]:
    """Command names of the processes in group ``pgid`` that are not zombies.

    Zombies are left out: a dead engine process reparented to PID 1 lingers as
    ``<defunct>`` until PID 1 reaps it, and it holds no memory or port.
    """
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :]
        state, _ppid, group = rest.split()[:3]
        if int(group) == pgid and state != "Z":
            alive.append(name)
    return alive


# The flags a vLLM 0.26-like `serve --help` lists (all that launch.sh's plans use,
# plus --load-format); anything else must be dropped.
FAKE_HELP = " ".join(
    [
        "--trust-remote-code",
        "--served-model-name",
        "--tensor-parallel-size",
        "--max-model-len",
        "--max-num-batched-tokens",
        "--limit-mm-per-prompt",
        "--host",
        "--port",
        "--api-key",
        "--gpu-memory-utilization",
        "--kv-cache-memory-bytes",
        "--load-format",
        "--enable-log-requests",
        "--stream-interval",
        "--reasoning-parser-plugin",
        "--reasoning-parser",
    ]
)

FAKE_VLLM = """#!{python}
import http.server, json, os, signal, sys, threading, time
args = sys.argv[1:]
record = os.environ["FAKE_VLLM_RECORD"]
with open(record, "a") as f:
    f.write(json.dumps(args) + "\\n")
if args[:2] == ["-m", "serving.devmodel"]:
    sys.exit(0)
if args[:1] == ["-c"]:  # launch.sh's version probe
    print(os.environ.get("FAKE_VLLM_VERSION", "0.32.0"))
    sys.exit(0)
if args and args[0].endswith("vllm_main.py"):
    args = args[1:]
if args[:1] == ["serve"] and any(a.startswith("--help") for a in args):
    print({help!r})
    sys.exit(0)
port = int(args[args.index("--port") + 1])
with open(record + ".keys", "a") as f:
    f.write(os.environ.get("VLLM_API_KEY", "(none)") + "\\n")
with open(record + ".secret", "a") as f:
    f.write(os.environ.get("CHAINLIT_AUTH_SECRET", "(none)") + "\\n")
with open(record + ".gpus", "a") as f:
    f.write(str(port) + " " + os.environ.get("CUDA_VISIBLE_DEVICES", "(all)") + "\\n")
print("fake vLLM serving on port", port, flush=True)
if str(port) == os.environ.get("FAKE_VLLM_FAIL_PORT"):
    sys.exit(1)
die_after = float(os.environ.get("FAKE_VLLM_DIE_AFTER_S", "0"))
if die_after:
    threading.Timer(die_after, os._exit, (1,)).start()
if os.environ.get("FAKE_VLLM_IGNORE_TERM"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
time.sleep(float(os.environ.get("FAKE_VLLM_START_S", "0")))

class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        queue = os.environ.get("FAKE_VLLM_WAITING")
        if self.path == "/metrics" and queue:
            body = ('vllm:num_requests_waiting{{model_name="m"}} ' + queue + "\\n").encode()
            self.send_response(200)
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *_):
        pass

http.server.HTTPServer(("127.0.0.1", port), Health).serve_forever()
"""

FAKE_NVIDIA_SMI = """#!/bin/bash
for ((i = 0; i < ${FAKE_GPUS:-0}; i++)); do echo "GPU $i: NVIDIA H200 (UUID: GPU-fake-$i)"; done
"""


def fake_machine(tmp_path: Path, gpus: int, **extra: str) -> tuple[dict[str, str], Path]:
    """Environment with the fakes on PATH; returns it and the record file.

    The fake vLLM python records every argument list it gets (``calls``), the
    ``VLLM_API_KEY`` of each server start (``fake_keys``), answers launch.sh's
    version probe with ``FAKE_VLLM_VERSION`` (default 0.32.0), serves
    ``/health`` (after ``FAKE_VLLM_START_S`` seconds of starting, if set) and exits after
    ``FAKE_VLLM_DIE_AFTER_S`` seconds if set; ``FAKE_VLLM_IGNORE_TERM=1`` makes it ignore
    SIGTERM. With
    ``FAKE_VLLM_WAITING=N`` its ``/metrics`` says N requests wait; a server on port
    ``FAKE_VLLM_FAIL_PORT`` exits at once with status 1.
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    vllm = bin_dir / "fake-vllm-python"
    vllm.write_text(FAKE_VLLM.format(python=sys.executable, help=FAKE_HELP))
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI)
    for path in (vllm, smi):
        path.chmod(0o755)
    record = tmp_path / "record.jsonl"
    # Both models "downloaded", so the disk preflight passes whatever this disk holds.
    hub = tmp_path / "hub"
    for repo in ("Kimi-VL-A3B-Thinking-2506", "Kimi-VL-A3B-Instruct"):
        snapshot = hub / f"models--moonshotai--{repo}" / "snapshots" / "fake"
        snapshot.mkdir(parents=True)
        (snapshot / "model.safetensors").write_bytes(b"")
    env = launch_env(
        tmp_path,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        FAKE_GPUS=str(gpus),
        FAKE_VLLM_RECORD=str(record),
        KIMI_APP_PYTHON=sys.executable,
        KIMI_VLLM_PYTHON=str(vllm),
        HF_HUB_CACHE=str(hub),
        **extra,
    )
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env, record


def fake_keys(record: Path) -> list[str]:
    """The VLLM_API_KEY each fake server start saw in its environment."""
    keys = record.with_name(record.name + ".keys")
    return keys.read_text().splitlines() if keys.exists() else []


def calls(record: Path) -> list[list[str]]:
    """Every argument list the fake vLLM python was started with."""
    if not record.exists():
        return []
    return [json.loads(line) for line in record.read_text().splitlines()]
