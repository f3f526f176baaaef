"""serving.preflight: each check with fake GPU counts, disk figures and versions."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backend.images import image_tokens
from serving.preflight import (
    ADD_USER,
    CHAINLIT_SETTINGS_TABLES,
    Finding,
    check_batched_tokens,
    check_chainlit_environment,
    check_disk,
    check_images_fit,
    check_parallel,
    check_ports,
    check_router_host,
    check_ui_exposure,
    check_vllm_version,
    is_loopback,
    largest_image_tokens,
    needs_stream_interval_flag,
    parse_version,
    restart_delay,
    split_memory_utilization,
)

ROOT = Path(__file__).resolve().parents[1]


def test_parallel_sizes_must_multiply_to_the_visible_gpus() -> None:
    assert check_parallel(tp=2, pp=1, dp=4, gpus=8, mode="gpu", cores=2) == []
    [too_many] = check_parallel(tp=2, pp=2, dp=2, gpus=4, mode="gpu", cores=2)
    assert too_many.refuse
    assert too_many.text.startswith("--tp 2 x --pp 2 x --dp 2 needs 8 GPUs, but 4 are visible")
    assert "KIMI_DATA_PARALLEL_SIZE" in too_many.text
    [idle] = check_parallel(tp=1, pp=1, dp=2, gpus=8, mode="gpu", cores=2)
    assert not idle.refuse
    assert "uses 2 of the 8 visible GPUs; the other 6 stay idle" in idle.text


def test_dev_mode_counts_cpu_cores_and_refuses_pipeline_parallel() -> None:
    assert check_parallel(tp=1, pp=1, dp=2, gpus=0, mode="dev", cores=2) == []
    [cores] = check_parallel(tp=2, pp=1, dp=2, gpus=0, mode="dev", cores=2)
    assert cores.refuse and "needs 4 CPU cores in dev mode, but 2 are allowed" in cores.text
    [pipeline] = check_parallel(tp=1, pp=2, dp=1, gpus=0, mode="dev", cores=2)
    assert pipeline.refuse and "KIMI_PIPELINE_PARALLEL_SIZE" in pipeline.text


def test_largest_image_matches_an_exhaustive_search_over_pixel_sizes() -> None:
    # Every width x height in pixels whose patch grid fits the budget (what the
    # app sends): the function's shortcut must find the same maximum.
    for budget in (8, 16, 30):
        side = 14 * (budget + 1)
        best = max(
            image_tokens(w, h, budget)
            for w, h in itertools.product(range(1, side + 1), range(1, side + 1))
            if (w // 14) * (h // 14) <= budget
        )
        assert largest_image_tokens(budget) == best, budget


def test_thinking_images_reach_beyond_4096_tokens() -> None:
    # A 1792x1792 image is 128x128 patches = the whole 16384 budget: 64x64 tokens.
    assert image_tokens(1792, 1792, 16384) == 4096
    assert largest_image_tokens(16384) >= 4096
    assert largest_image_tokens(4096) >= 1024


def test_batched_tokens_below_the_largest_image_is_a_warning() -> None:
    assert check_batched_tokens(8192, 4338) == []
    [warning] = check_batched_tokens(2048, 4338)
    assert not warning.refuse
    assert "encoder-cache" in warning.text
    assert "KIMI_MAX_NUM_BATCHED_TOKENS to at least 4338" in warning.text


def test_the_seeds_64_images_cannot_all_be_full_size_in_32768_tokens() -> None:
    [warning] = check_images_fit(64, 4338, 32768)
    assert not warning.refuse
    assert "a prompt holds at most 7 full-size images" in warning.text  # 7 x 4338 = 30366
    assert "the app leaves out older images to fit" in warning.text
    assert check_images_fit(4, 4338, 32768) == []


def test_busy_ports_are_refused_by_setting() -> None:
    assert check_ports({}) == []
    findings = check_ports({8300: "--ui-port, KIMI_UI_PORT", 8100: "--vllm-port, KIMI_VLLM_PORT"})
    assert [f.text for f in findings] == [
        "port 8100 is already in use; choose another (--vllm-port, KIMI_VLLM_PORT)",
        "port 8300 is already in use; choose another (--ui-port, KIMI_UI_PORT)",
    ]
    assert all(f.refuse for f in findings)


def test_disk_is_refused_only_when_the_download_cannot_fit() -> None:
    need = 33 * 10**9
    assert check_disk(free_bytes=40 * 10**9, need_bytes=need, cached=False, cache_dir="/hf") == []
    assert check_disk(free_bytes=10**9, need_bytes=need, cached=True, cache_dir="/hf") == []
    [full] = check_disk(free_bytes=12 * 10**9, need_bytes=need, cached=False, cache_dir="/hf")
    assert full.refuse
    assert full.text == (
        "the model download needs about 33 GB but /hf has 12.0 GB free; "
        "free space or point HF_HOME at a larger disk"
    )


def test_vllm_version_against_the_pinned_one() -> None:
    assert parse_version("0.32.0+cpu") == (0, 32, 0)
    assert parse_version("garbage") is None
    assert check_vllm_version("0.32.0+cpu", "0.32.0") == []
    [other] = check_vllm_version("0.26.0", "0.32.0")
    assert not other.refuse and "this vLLM is 0.26.0, launch.sh is tested with 0.32.0" in other.text
    [unknown] = check_vllm_version(None, "0.32.0")
    assert not unknown.refuse


def test_stream_interval_goes_on_the_server_only_where_requests_cannot_carry_it() -> None:
    assert needs_stream_interval_flag("0.26.0")
    assert needs_stream_interval_flag(None)
    assert not needs_stream_interval_flag("0.32.0")
    assert not needs_stream_interval_flag("0.33.1+cpu")


def test_ui_beyond_loopback_needs_a_user_or_an_explicit_override() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0")
    assert check_ui_exposure(host="127.0.0.1", users=0, allow_anonymous=False) == []
    assert check_ui_exposure(host="0.0.0.0", users=1, allow_anonymous=False) == []
    [refusal] = check_ui_exposure(host="0.0.0.0", users=0, allow_anonymous=False)
    assert refusal.refuse and ADD_USER in refusal.text
    assert ADD_USER == ".venv/bin/python -m backend.cli user add NAME --password-stdin"
    [warning] = check_ui_exposure(host="0.0.0.0", users=0, allow_anonymous=True)
    assert warning == Finding(warning.text, refuse=False)
    assert "KIMI_ALLOW_ANONYMOUS=true" in warning.text


@pytest.mark.parametrize(
    ("host", "refused"),
    [
        ("0.0.0.0", "every interface"),
        ("::", "every interface"),
        ("8.8.8.8", "a public address"),
        ("169.254.0.9", "a link-local address"),
        ("router.internal", "not an IP address"),
    ],
)
def test_the_router_is_refused_beyond_one_private_address(host: str, refused: str) -> None:
    """vllm-router's admin API answers anyone (docs/scaling.md): loopback, or one private
    address of the host with a warning; anything else refused before it starts."""
    [refusal] = check_router_host(host)
    assert refusal.refuse and refused in refusal.text and "KIMI_ROUTER_HOST" in refusal.text


def test_the_router_on_a_private_address_is_said_to_need_a_fence() -> None:
    assert check_router_host("127.0.0.1") == check_router_host("localhost") == []
    for host in ("10.231.5.1", "192.168.1.2", "172.16.0.3", "fd12::1"):
        [warning] = check_router_host(host)
        assert not warning.refuse and "no sign-in" in warning.text and host in warning.text


def test_restart_delay_doubles_up_to_the_cap_then_gives_up() -> None:
    delays = [restart_delay(n, base_s=2, max_s=10, give_up_after=6) for n in range(1, 7)]
    assert delays == [2, 4, 8, 10, 10, -1]


@pytest.mark.parametrize(("total", "share"), [(0.9, 0.45), (0.85, 0.42), (1.0, 0.5)])
def test_two_servers_split_the_gpu_memory_share(total: float, share: float) -> None:
    assert split_memory_utilization(total, 2) == share
    assert split_memory_utilization(total, 2) * 2 <= total


def test_a_variable_chainlit_reads_as_its_settings_is_refused_in_one_line() -> None:
    """Issue 47: a shell's ``RUN`` stopped the chat UI with a SettingsError after vLLM's load,
    and launch.sh said only that the UI exited."""
    assert check_chainlit_environment({"PATH": "/bin", "RUNNER": "x", "KIMI_UI": "y"}) == []
    [finding] = check_chainlit_environment({"RUN": "1", "ui": "dark", "HOME": "/root"})
    assert finding.refuse
    assert finding.text == (
        "the environment variable RUN, ui is set, and Chainlit reads it as its own settings: "
        "the chat UI would stop as it starts; unset it (`unset RUN ui`)"
    )


def test_the_variables_refused_are_the_settings_tables_of_the_installed_chainlit() -> None:
    """Fails when Chainlit's config (chainlit/config.py) gains or loses a settings table."""
    env = {**os.environ, "CHAINLIT_APP_ROOT": str(ROOT)}
    code = (
        "import pydantic, chainlit.config as c; print(' '.join(sorted(n for n, f in "
        "c.ChainlitConfig.model_fields.items() if isinstance(f.annotation, type) and "
        "issubclass(f.annotation, pydantic.BaseModel))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == sorted(CHAINLIT_SETTINGS_TABLES)
    failed = subprocess.run(  # and such a variable does stop Chainlit
        [sys.executable, "-c", "import chainlit.config"],
        env={**env, "RUN": "1"},
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert failed.returncode != 0 and "ValidationError" in failed.stderr
