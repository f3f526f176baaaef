"""Run vLLM's own fused-MoE tuner for Kimi-VL-A3B's experts on one GPU, time-boxed.

The tuner is ``benchmarks/kernels/benchmark_moe.py`` of the vLLM repository
(taken from the v0.26.0 source release; not part of this repository, pass its
path). For every batch size it times each candidate Triton configuration of the
fused-MoE kernel inside a CUDA graph and keeps the fastest
(``BenchmarkWorker.tune``); ``save_configs`` writes the JSON vLLM reads,
``E=64,N=1408,device_name=NVIDIA_H200.json`` for this model.

What this wrapper changes, and why:

- The tuner runs its workers through Ray, which the GPU machine lacks. A small
  stand-in module (:func:`install_local_ray`) runs them in this process: one
  GPU, one worker, calls made in order.
- Its full search space is 1920 configurations per batch size (hours); with a
  few minutes of GPU time this tunes :func:`search_space` instead, an
  82-configuration subset of it (tile sizes, warp and stage counts around the
  kernel's own defaults).
- Triton compiling, not timing, is what costs (about 1.4 s per configuration
  and argument specialization, one CPU core each; 2026-12-01's run managed 4
  batch sizes in 140 s). So a first pass compiles every (batch size,
  configuration) pair in ``--compile-workers`` processes side by side, filling
  Triton's on-disk cache; the timed pass then runs alone on the GPU, one
  configuration after another as the tuner does, loading kernels from that cache.
- Batch sizes: the token counts one step of the chat load hands the MoE layer:
  decode steps of 1-64 running chats and prefill chunks up to 4096 tokens (for
  larger steps vLLM takes the nearest tuned size, 4096); the decode sizes of
  8-64 chats first. The file is written after every batch size, and any size
  the deadline left untuned gets the configuration vLLM would use without a
  file, so a partial file is never worse than none for a size it lacks (the
  partial file of 2026-12-01 made vLLM serve every large batch with M=8's small
  tiles).

The model's MoE shape is given directly (``--experts 64 --intermediate 1408
--hidden 2048 --topk 6``: ``serving/kimi_shape.py``'s text model), since the
tuner's own model lookup does not know Kimi-VL's nested text config.

Usage (on the GPU machine, vLLM importable)::

    python3 -m bench.moe_tune --tuner PATH/benchmark_moe.py --save-dir serving/moe_configs \\
        --deadline-s 200 --out $OUT/moe_tune.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
import types
from collections.abc import Callable, Iterable, Iterator
from itertools import product
from pathlib import Path
from typing import Any

BATCH_SIZES = [8, 16, 32, 64, 24, 48, 96, 128, 256, 512, 1024, 2048, 4096, 1, 2, 4]
"""In the order tuned: decode steps of 8-64 chats, then prefill chunks, then 1-4 chats."""


SHARED_MEMORY_BYTES = 227 * 1024  # per block on H100/H200 (CUDA programming guide, sm_90)


def search_space() -> list[dict[str, int]]:
    """A subset of the tuner's own CUDA space (same keys), without tiles that cannot fit.

    Tile sizes around the kernel's defaults, one group size, 4 or 8 warps, 3 or
    4 pipeline stages; configurations whose pipelined A and B tiles
    (``stages * (M + N) * K * 2`` bytes of bf16) exceed :data:`SHARED_MEMORY_BYTES`
    are left out, as Triton would refuse them (``OutOfResources``) after compiling.
    """
    keys = (
        "BLOCK_SIZE_M",
        "BLOCK_SIZE_N",
        "BLOCK_SIZE_K",
        "GROUP_SIZE_M",
        "num_warps",
        "num_stages",
    )
    ranges = ([16, 32, 64, 128], [64, 128, 256], [64, 128], [1], [4, 8], [3, 4])
    space = [dict(zip(keys, values, strict=True)) for values in product(*ranges)]
    return [
        c
        for c in space
        if c["num_stages"] * (c["BLOCK_SIZE_M"] + c["BLOCK_SIZE_N"]) * c["BLOCK_SIZE_K"] * 2
        <= SHARED_MEMORY_BYTES
    ]


class _Handle:
    """What ``SomeActor.remote(...)`` returns in the stand-in: calls run at once."""

    def __init__(self, instance: Any) -> None:
        self._instance = instance

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._instance, name)
        return types.SimpleNamespace(remote=method)


def install_local_ray() -> None:
    """Put a one-process stand-in for the parts of Ray the tuner uses in ``sys.modules``.

    ``ray.remote(num_gpus=1)`` on a class, ``.remote()`` on it and its methods,
    ``ray.get``, ``ray.init``, ``ray.available_resources`` (one GPU),
    ``ray.get_gpu_ids`` (GPU 0) and ``ray.experimental.tqdm_ray.tqdm``.
    """
    ray = types.ModuleType("ray")

    def remote(**_: Any) -> Callable[[type], Any]:
        def wrap(cls: type) -> Any:
            return types.SimpleNamespace(remote=lambda *a, **k: _Handle(cls(*a, **k)))

        return wrap

    def identity(values: Iterable[Any]) -> Iterator[Any]:
        return iter(values)

    ray.remote = remote  # type: ignore[attr-defined]
    ray.get = lambda values: values  # type: ignore[attr-defined]
    ray.init = lambda *a, **k: None  # type: ignore[attr-defined]
    ray.available_resources = lambda: {"GPU": 1}  # type: ignore[attr-defined]
    ray.get_gpu_ids = lambda: [0]  # type: ignore[attr-defined]
    experimental = types.ModuleType("ray.experimental")
    tqdm_ray = types.ModuleType("ray.experimental.tqdm_ray")
    tqdm_ray.tqdm = identity  # type: ignore[attr-defined]
    sys.modules.update(
        {"ray": ray, "ray.experimental": experimental, "ray.experimental.tqdm_ray": tqdm_ray}
    )


def load_tuner(path: Path) -> Any:
    """Import the tuner script as a module (its ``__main__`` block does not run)."""
    spec = importlib.util.spec_from_file_location("vllm_benchmark_moe", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _compile(task: tuple[str, int, dict[str, int], tuple[Any, ...]]) -> str | None:
    """Run one configuration once in a pool process (compiling it into Triton's
    on-disk cache); return the error's name if it cannot run."""
    path, m, config, shape = task
    if path not in _TUNERS:
        install_local_ray()
        _TUNERS[path] = load_tuner(Path(path))
        _TUNERS[path].torch.set_default_device("cuda")  # as the tuner's BenchmarkWorker does
    tuner = _TUNERS[path]
    try:
        tuner.benchmark_config(config, m, *shape, num_iters=1)
    except Exception as exc:  # OutOfResources and the like: the timed pass skips it too
        return type(exc).__name__
    return None


_TUNERS: dict[str, Any] = {}
"""The tuner module, imported once per pool process."""


def precompile(path: Path, shape: tuple[Any, ...], workers: int, deadline: float) -> dict[str, Any]:
    """Compile every (batch size, configuration) pair in ``workers`` processes.

    Returns counts (``pairs``, ``failed``, ``seconds``); stops handing out work
    at ``deadline`` (monotonic).
    """
    import multiprocessing

    started = time.monotonic()
    tasks = [(str(path), m, c, shape) for m in BATCH_SIZES for c in search_space()]
    failed = done = 0
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        for error in pool.imap_unordered(_compile, tasks):
            done += 1
            failed += error is not None
            if time.monotonic() > deadline:
                pool.terminate()
                break
    return {
        "pairs": len(tasks),
        "done": done,
        "failed": failed,
        "seconds": time.monotonic() - started,
    }


def main(argv: list[str] | None = None) -> int:
    """Tune, then time the default and the tuned configuration per batch size."""
    p = argparse.ArgumentParser(prog="python -m bench.moe_tune", description=__doc__.split("\n")[0])
    p.add_argument("--tuner", type=Path, required=True, help="vLLM's benchmark_moe.py (v0.26.0)")
    p.add_argument("--save-dir", default="serving/moe_configs")
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--intermediate", type=int, default=1408, help="moe_intermediate_size")
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--topk", type=int, default=6)
    p.add_argument("--deadline-s", type=float, default=200.0)
    p.add_argument("--compile-workers", type=int, default=12, help="0: no compile pass")
    p.add_argument("--compile-share", type=float, default=0.35, help="of the deadline, at most")
    p.add_argument("--out", type=Path, required=True, help="JSON report")
    args = p.parse_args(argv)

    install_local_ray()
    import torch

    tuner = load_tuner(args.tuner)
    end = time.monotonic() + args.deadline_s
    shard = 2 * args.intermediate  # w1 holds gate and up projections (TP 1)
    worker = tuner.BenchmarkWorker.remote(0)
    shape = (args.experts, shard, args.hidden, args.topk, torch.bfloat16, False, False)
    report: dict[str, Any] = {"search_space": len(search_space()), "batch_sizes": {}}
    started = time.monotonic()
    if args.compile_workers:
        report["compile_pass"] = precompile(
            args.tuner,
            (*shape[:5], False, False),
            args.compile_workers,
            started + args.compile_share * args.deadline_s,
        )
        print(f"compile pass: {report['compile_pass']}", flush=True)
    best: dict[int, Any] = {}
    for m in BATCH_SIZES:
        before_cfg, before_us = worker.benchmark.remote(m, *shape)
        if time.monotonic() > end:
            report.setdefault("not_tuned", []).append(m)
            best[m] = tuner.sort_config(before_cfg)
            tuner.save_configs(best, *shape[:5], False, False, False, None, args.save_dir)
            continue
        cfg = worker.tune.remote(m, *shape, False, search_space(), None, False)
        best[m] = tuner.sort_config(cfg)
        tuner.save_configs(best, *shape[:5], False, False, False, None, args.save_dir)
        tuned_us = tuner.benchmark_config(best[m], m, *shape[:5], False, False, num_iters=100)
        report["batch_sizes"][m] = {
            "default_config": before_cfg,
            "default_us": before_us,
            "tuned_config": best[m],
            "tuned_us": tuned_us,
        }
        print(f"M={m}: default {before_us:.1f} us, tuned {tuned_us:.1f} us", flush=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    report["seconds"] = time.monotonic() - started
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
