"""The GPU sweep's pure parts: server commands, level summaries, the default check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.bench_serving import summarise_level
from bench.gpu_sweep import VARIANTS, log_facts, serve_command, shown
from bench.harness import Timing
from bench.sweep_report import Run, load_runs, verdicts, within


def flag(command: list[str], name: str) -> str:
    """The value after ``name`` in ``command``."""
    return command[command.index(name) + 1]


def test_default_variant_is_launch_sh_plan_on_dummy_weights(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KIMI_MAX_NUM_BATCHED_TOKENS", raising=False)
    command, env = serve_command(VARIANTS["default"], 8123)
    assert Path(env["VLLM_TUNED_CONFIG_FOLDER"]).name == "moe_configs"  # launch.sh's tuned file
    _, untuned = serve_command(VARIANTS["moe-untuned"], 8123)
    assert not Path(untuned["VLLM_TUNED_CONFIG_FOLDER"]).exists()  # vLLM's own default
    assert command[:4] == [
        "python3",
        "serving/vllm_main.py",
        "serve",
        "moonshotai/Kimi-VL-A3B-Thinking-2506",
    ]
    assert flag(command, "--max-num-batched-tokens") == "32768"
    assert flag(command, "--max-model-len") == "32768"
    assert flag(command, "--limit-mm-per-prompt") == '{"image":64}'
    assert flag(command, "--gpu-memory-utilization") == "0.9"
    assert flag(command, "--load-format") == "dummy"
    assert flag(command, "--port") == "8123"
    assert "--kv-cache-memory-bytes" not in command


def test_side_by_side_servers_get_a_fixed_kv_cache_and_a_small_share() -> None:
    command, _ = serve_command(VARIANTS["batched-8192"], 8102, shared_kv_bytes="7G")
    assert flag(command, "--max-num-batched-tokens") == "8192"
    assert flag(command, "--kv-cache-memory-bytes") == "7G"
    assert flag(command, "--gpu-memory-utilization") == "0.28"


def test_flags_of_a_variant_come_after_the_plan() -> None:
    command, _ = serve_command(VARIANTS["no-prefix-cache"], 8101)
    assert command[-1] == "--no-enable-prefix-caching"


def test_shown_hides_the_api_key() -> None:
    assert shown(["serve", "--api-key", "s3cret", "--port", "1"]) == [
        "serve",
        "--api-key",
        "***",
        "--port",
        "1",
    ]


def test_level_summary_counts_failures_and_rates() -> None:
    ok = [  # TTFT 100..400 ms, each answer 101 tokens of a 50-token prompt, ending at 2.1 s
        Timing(0.1 * (i + 1), 2.0, 2.1, tokens=101, prompt_tokens=50) for i in range(4)
    ]
    failed = Timing(1.0, 1.0, 1.0, error="HTTP 400: too long")
    row = summarise_level(5, [(2.0, [*ok[:2], failed]), (2.0, ok[2:])])
    assert (row.requests, row.failed) == (5, 1)
    assert row.ttft_p50_ms == pytest.approx(250.0)  # halfway between 200 and 300
    assert row.ttft_p95_ms == pytest.approx(385.0)  # 95 % of the way from 300 to 400
    assert row.tps_per_chat == pytest.approx((100 / 1.9 + 100 / 1.8) / 2)  # the middle two
    assert row.prompt_tokens_mean == 50
    assert row.tps_aggregate == pytest.approx(4 * 101 / 4.0)
    assert row.requests_per_s == pytest.approx(4 / 4.0)
    assert row.errors == ["HTTP 400: too long"]


def test_log_facts_reads_vllm_startup_lines() -> None:
    log = (
        "INFO [gpu_worker.py:560] Available KV cache memory: 89.44 GiB\n"
        "INFO [kv_cache_utils.py:2177] GPU KV cache size: 3,087,648 tokens\n"
        "WARNING [fused_moe.py:1107] Using default MoE config. Performance might be sub-optimal!\n"
    )
    facts = log_facts(log)
    assert facts["kv_cache_gib"] == "89.44"
    assert facts["kv_cache_tokens"] == "3,087,648"
    assert facts["moe_config"] == "Using default MoE config"


def test_within_ten_percent_on_the_side_that_counts() -> None:
    assert within(110.0, 100.0, lower_is_better=True)
    assert not within(111.0, 100.0, lower_is_better=True)
    assert within(90.0, 100.0, lower_is_better=False)
    assert not within(89.0, 100.0, lower_is_better=False)
    assert within(50.0, 100.0, lower_is_better=True)  # better than the best is fine


def run(label: str, variant: str, p95_8: float, tps_64: float) -> Run:
    levels = {
        8: {"chats": 8, "ttft_p95_ms": p95_8, "tps_aggregate": 1.0},
        64: {"chats": 64, "ttft_p95_ms": 1.0, "tps_aggregate": tps_64},
    }
    return Run(label, variant, "", levels)


def test_verdicts_compare_the_default_with_the_best_other_variant() -> None:
    runs = [
        run("default alone", "default", p95_8=1000.0, tps_64=3000.0),
        run("default side by side", "default", p95_8=1300.0, tps_64=3500.0),
        run("other", "batched-8192", p95_8=1100.0, tps_64=4000.0),
    ]
    by_chats = {v.chats: v for v in verdicts(runs)}
    assert 32 not in by_chats  # nobody measured it
    eight = by_chats[8]
    assert eight.best_other == ("other", 1100.0)
    assert eight.best_run_ok and not eight.all_runs_ok  # 1000 is better; 1300 > 1210
    sixty_four = by_chats[64]
    assert not sixty_four.best_run_ok  # 3500 < 0.9 * 4000


def test_load_runs_merges_a_variant_measured_in_two_waves(tmp_path: Path) -> None:
    def wave(levels: list[int]) -> dict[str, object]:
        return {
            "variants": [
                {
                    "variant": "batched-16384",
                    "change": "x",
                    "healthy_after_s": 100.0,
                    "log_facts": {},
                    "levels": [{"chats": c, "ttft_p95_ms": float(c)} for c in levels],
                    "multi_turn": None,
                }
            ]
        }

    (tmp_path / "wave-a.json").write_text(json.dumps(wave([8, 32])))
    (tmp_path / "wave-c.json").write_text(json.dumps(wave([64])))
    runs = load_runs(tmp_path)
    assert [r.label for r in runs] == ["batched-16384"]
    assert sorted(runs[0].levels) == [8, 32, 64]
