"""Tables, verdicts and a plot from :mod:`bench.gpu_sweep`'s JSON files.

Reads ``seed.json`` and ``wave-*.json`` from a results folder, writes next to
the given output stem:

- ``STEM.md``: one row per variant and concurrency (TTFT p50/p95 ms, output
  tok/s per chat and aggregate, requests/s), the multi-turn rows (TTFT per turn,
  prefix-cache hit rate), start-up facts, and the check of launch.sh's defaults:
  for each metric that matters for chat (TTFT p95 at 8 and 32 chats, aggregate
  tok/s at 64) the best run and whether the default is within 10 % of it;
- ``STEM.json``: the same rows as data;
- ``STEM.png``: TTFT p95 and aggregate tok/s against concurrency, one line per run.

Runs: the seed run (``./launch.sh`` alone on the GPU) counts as a run of the
``default`` variant; a variant measured in two waves has its levels merged (the
later wave fills levels the earlier one skipped).

Usage (the app's environment plus matplotlib, requirements-bench.txt)::

    python -m bench.sweep_report artifacts/bench/gpu --out artifacts/bench/gpu/sweep
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

WITHIN = 0.10  # launch.sh's defaults must be within 10 % of the best (docs/benchmarks.md)
# (concurrency, metric, lower is better)
CRITERIA: tuple[tuple[int, str, bool], ...] = (
    (8, "ttft_p95_ms", True),
    (32, "ttft_p95_ms", True),
    (64, "tps_aggregate", False),
)


@dataclass
class Run:
    """One measured server configuration.

    Attributes:
        label: the variant name, plus where it ran when a variant ran twice.
        variant: the :data:`bench.gpu_sweep.VARIANTS` name.
        change: what differs from launch.sh's plan.
        levels: concurrency -> the level's row (gpu_sweep.LevelRow as a dict).
        multi_turn: the multi-turn result, or None.
        facts: start-up facts (healthy seconds, log facts).
    """

    label: str
    variant: str
    change: str
    levels: dict[int, dict[str, Any]] = field(default_factory=dict)
    multi_turn: dict[str, Any] | None = None
    facts: dict[str, Any] = field(default_factory=dict)


def load_runs(folder: Path) -> list[Run]:
    """The seed run, then every wave's variants in file order (merged by variant)."""
    runs: list[Run] = []
    seed_file = folder / "seed.json"
    if seed_file.exists():
        seed = json.loads(seed_file.read_text())
        run = Run(
            "default (launch.sh alone, util 0.9)",
            "default",
            "launch.sh as is, alone on the GPU",
            facts={"healthy_after_s": seed.get("healthy_after_s"), **seed.get("log_facts", {})},
        )
        run.levels = {row["chats"]: row for row in seed.get("levels", [])}
        run.multi_turn = seed.get("multi_turn")
        runs.append(run)
    by_variant: dict[str, Run] = {}
    for wave_file in sorted(folder.glob("wave-*.json")):
        wave = json.loads(wave_file.read_text())
        for entry in wave["variants"]:
            name = entry["variant"]
            if name not in by_variant:
                label = f"{name} (side by side)" if name == "default" else name
                by_variant[name] = Run(label, name, entry["change"])
                runs.append(by_variant[name])
                by_variant[name].facts = {
                    "healthy_after_s": entry.get("healthy_after_s"),
                    **entry["log_facts"],
                }
            run = by_variant[name]
            for row in entry.get("levels", []):
                run.levels.setdefault(row["chats"], row)
            if run.multi_turn is None:
                run.multi_turn = entry.get("multi_turn")
    return runs


@dataclass
class Verdict:
    """The check of one criterion (see :func:`verdicts`).

    Attributes:
        chats: the concurrency level.
        metric: the :class:`bench.gpu_sweep.LevelRow` field.
        best_other: (label, value) of the best run of any other variant.
        defaults: (label, value) of each run of the ``default`` variant.
        best_run_ok: the default's best run is within 10 % of ``best_other``
            (or better).
        all_runs_ok: every default run is.
    """

    chats: int
    metric: str
    best_other: tuple[str, float]
    defaults: list[tuple[str, float]]
    best_run_ok: bool
    all_runs_ok: bool


def within(value: float, best: float, lower_is_better: bool) -> bool:
    """``value`` is within :data:`WITHIN` of ``best`` or better than it.

    Lower is better: ``value <= best * 1.1``; higher is better: ``value >= best * 0.9``.
    """
    if lower_is_better:
        return value <= best * (1 + WITHIN)
    return value >= best * (1 - WITHIN)


def verdicts(runs: list[Run]) -> list[Verdict]:
    """For each of :data:`CRITERIA`: is the ``default`` variant within 10 % of the best other?

    Two views, since the default ran more than once: its best run, and all of
    its runs (the strict one: the side-by-side run was measured under the same
    conditions as the other variants). Criteria with no default run or no other
    run are left out.
    """
    out = []
    for chats, metric, lower in CRITERIA:

        def values(
            pick_default: bool, chats: int = chats, metric: str = metric
        ) -> list[tuple[str, float]]:
            return [
                (r.label, float(r.levels[chats][metric]))
                for r in runs
                if (r.variant == "default") == pick_default
                and chats in r.levels
                and r.levels[chats].get(metric) is not None
            ]

        others, defaults = values(False), values(True)
        if not others or not defaults:
            continue
        choose = min if lower else max
        best_other = choose(others, key=lambda x: x[1])
        best_default = choose(defaults, key=lambda x: x[1])
        out.append(
            Verdict(
                chats,
                metric,
                best_other,
                defaults,
                within(best_default[1], best_other[1], lower),
                all(within(v, best_other[1], lower) for _, v in defaults),
            )
        )
    return out


def _f(value: Any, digits: int = 0) -> str:
    return "n/a" if value is None else f"{float(value):.{digits}f}"


def render(runs: list[Run], checks: list[Verdict]) -> str:
    """The Markdown report (tables described in the module docstring)."""
    lines = [
        "| run | chats | TTFT p50 ms | TTFT p95 ms | tok/s per chat | tok/s aggregate "
        "| requests/s | prompt tokens (mean) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in runs:
        for chats in sorted(r.levels):
            row = r.levels[chats]
            lines.append(
                f"| {r.label} | {chats} | {_f(row['ttft_p50_ms'])} | {_f(row['ttft_p95_ms'])} "
                f"| {_f(row['tps_per_chat'], 1)} | {_f(row['tps_aggregate'])} "
                f"| {_f(row['requests_per_s'], 2)} | {_f(row['prompt_tokens_mean'])} |"
            )
    lines += [
        "",
        "Multi-turn (16 chats side by side, 3 turns each: photo + question; follow-up; "
        "the same photo again; 512-token answers):",
        "",
        "| run | turn 1 TTFT p50/p95 ms | turn 2 TTFT p50/p95 ms | turn 3 TTFT p50/p95 ms "
        "| prompt tokens turn 1/2/3 | prompt tokens from the prefix cache "
        "| multimodal-cache hits |",
        "| --- | --- | --- | --- | --- | ---: | ---: |",
    ]
    for r in runs:
        mt = r.multi_turn
        if not mt:
            continue
        t = mt["turns"]
        counters = mt.get("cache_counters", {})
        cached = counters.get("vllm:prompt_tokens_cached_total", 0.0)
        prompt_total = sum(
            (x["prompt_tokens_mean"] or 0) * (x["requests"] - x["failed"]) for x in t
        )
        mm_q = counters.get("vllm:mm_cache_queries_total", 0.0)
        mm_h = counters.get("vllm:mm_cache_hits_total", 0.0)
        cells = [f"{_f(x['ttft_p50_ms'])}/{_f(x['ttft_p95_ms'])}" for x in t]
        prompts = "/".join(_f(x["prompt_tokens_mean"]) for x in t)
        lines.append(
            f"| {r.label} | {' | '.join(cells)} | {prompts} "
            f"| {_pct(cached, prompt_total)} ({cached:.0f} of {prompt_total:.0f}) "
            f"| {mm_h:.0f} of {mm_q:.0f} |"
        )
    lines += [
        "",
        "Start-up (seconds to a healthy `/health`; the side-by-side servers started "
        "together, so their times overlap):",
        "",
        "| run | healthy after s | torch.compile s | CUDA graphs | init engine | KV cache "
        "| MoE kernel config |",
        "| --- | ---: | ---: | --- | --- | --- | --- |",
    ]
    for r in runs:
        f = r.facts
        kv = f.get("kv_cache_tokens", "n/a")
        if f.get("kv_cache_gib"):
            kv = f"{f['kv_cache_gib']} GiB, {kv} tokens"
        else:
            kv = f"7 GB fixed, {kv} tokens"
        lines.append(
            f"| {r.label} | {_f(f.get('healthy_after_s'))} | {f.get('compile_s', 'n/a')} "
            f"| {f.get('graphs_s', 'n/a')} | {f.get('init_engine_s', 'n/a')} | {kv} "
            f"| {f.get('moe_config', 'n/a')} |"
        )
    lines += [
        "",
        "launch.sh's defaults against the best other variant (within 10 % or better?):",
        "",
        "| chats | metric | best other variant | default runs | default's best run "
        "| every default run |",
        "| ---: | --- | --- | --- | --- | --- |",
    ]
    for v in checks:
        shown = "; ".join(f"{label}: {value:.0f}" for label, value in v.defaults)
        lines.append(
            f"| {v.chats} | {v.metric} | {v.best_other[0]}: {v.best_other[1]:.0f} | {shown} "
            f"| {'yes' if v.best_run_ok else 'no'} | {'yes' if v.all_runs_ok else 'no'} |"
        )
    return "\n".join(lines) + "\n"


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f} %" if whole else "n/a"


def plot(runs: list[Run], path: Path) -> None:
    """TTFT p95 and aggregate tok/s against concurrency, one line per run (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    for r in runs:
        xs = sorted(c for c in r.levels if c >= 8)
        if not xs:
            continue
        style = "-" if r.variant == "default" else "--"
        left.plot(xs, [r.levels[c]["ttft_p95_ms"] for c in xs], style, marker="o", label=r.label)
        right.plot(xs, [r.levels[c]["tps_aggregate"] for c in xs], style, marker="o", label=r.label)
    left.set(xlabel="concurrent chats", ylabel="TTFT p95 (ms)", title="Time to first token, p95")
    right.set(
        xlabel="concurrent chats", ylabel="output tokens/s (all chats)", title="Aggregate output"
    )
    for ax in (left, right):
        ax.set_xticks([8, 32, 64])
        ax.grid(alpha=0.3)
    right.legend(fontsize=7, loc="upper left")
    fig.suptitle(
        "Kimi-VL-A3B-Thinking-2506 shape, vLLM 0.26.0, 1x H200: one photo (368-4096 tokens) "
        "per chat, 512-token answers",
        fontsize=9,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Command line; see the module docstring."""
    p = argparse.ArgumentParser(prog="python -m bench.sweep_report")
    p.add_argument("folder", type=Path, help="folder with seed.json and wave-*.json")
    p.add_argument("--out", type=Path, required=True, help="output stem (.md, .json, .png)")
    args = p.parse_args(argv)
    runs = load_runs(args.folder)
    checks = verdicts(runs)
    text = render(runs, checks)
    args.out.with_suffix(".md").write_text(text)
    data = {
        "runs": [
            {
                "label": r.label,
                "variant": r.variant,
                "change": r.change,
                "levels": [r.levels[c] for c in sorted(r.levels)],
                "multi_turn": r.multi_turn,
                "startup": r.facts,
            }
            for r in runs
        ],
        "default_check": [asdict(v) for v in checks],
    }
    args.out.with_suffix(".json").write_text(json.dumps(data, indent=2) + "\n")
    plot(runs, args.out.with_suffix(".png"))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
