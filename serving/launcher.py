"""The decisions behind ``launch.sh``, as plain functions that tests can call.

``launch.sh`` does the process work (environments, logs, health wait, signals);
this module decides what to run: how many GPUs there are, which model, and the
exact ``vllm serve`` argument list. It runs in the app's environment and reads
:class:`~serving.settings.LaunchSettings` (the app's settings and launch.sh's).

Command line (used by ``launch.sh``)::

    python -m serving.launcher gpus
        number of visible NVIDIA GPUs (0 without nvidia-smi)
    python -m serving.launcher plan --mode {gpu,dev} --gpus N [--model-path P] [--serve-help F]
        bash assignments: SERVE_ARGS=(...), KIMI_SERVED_MODEL, and for a
        tensor-parallel CPU server VLLM_CPU_OMP_THREADS_BIND; exit 2 with a
        one-line reason when the plan cannot work (tensor parallel size).

Sources for the seed flags: issue 2 part 1; CPU specifics: ``../shared/notes/facts.md``
("vLLM on the CPU"); version differences: ``../shared/notes/gpu.md``.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from backend.settings import DEV
from serving.settings import LaunchSettings

# Attention heads per tower; tensor parallelism splits heads, so the size must
# divide all of them. Kimi-VL-A3B (Thinking-2506 and Instruct): DeepSeek-V2-style
# text model with 16 heads (config.json text_config.num_attention_heads) and the
# MoonViT vision tower with 16 heads (vLLM transformers_utils/configs/moonvit.py).
# Dev model: serving/devmodel.py (text 4 heads, vision 2 heads).
KIMI_VL_HEADS = (16, 16)
DEV_HEADS = (4, 2)


class PlanError(Exception):
    """The requested launch cannot work; the message says why, in one line."""


@dataclass(frozen=True)
class Plan:
    """What launch.sh runs: ``vllm`` followed by ``args``, with ``env`` added."""

    served_model: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_bash(self) -> str:
        """Render as bash assignments for ``eval`` (values quoted with shlex)."""
        lines = [f"KIMI_SERVED_MODEL={shlex.quote(self.served_model)}"]
        lines.append("SERVE_ARGS=(" + " ".join(shlex.quote(a) for a in self.args) + ")")
        lines += [f"export {k}={shlex.quote(v)}" for k, v in self.env.items()]
        return "\n".join(lines)


def count_gpus(nvidia_smi_list: str, cuda_visible_devices: str | None) -> int:
    """Number of GPUs vLLM will see.

    Args:
        nvidia_smi_list: output of ``nvidia-smi -L`` (one ``GPU i: ...`` line each).
        cuda_visible_devices: ``$CUDA_VISIBLE_DEVICES`` if set; it limits the count
            (empty string: no GPU visible).
    """
    listed = sum(1 for line in nvidia_smi_list.splitlines() if line.startswith("GPU "))
    if cuda_visible_devices is None:
        return listed
    visible = [d for d in cuda_visible_devices.split(",") if d.strip() not in ("", "-1")]
    return min(listed, len(visible))


def detect_gpus() -> int:
    """Run ``nvidia-smi -L``; 0 if it is missing or fails."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return count_gpus(out, os.environ.get("CUDA_VISIBLE_DEVICES"))


def tensor_parallel_size(requested: int, gpus: int, heads: tuple[int, ...]) -> tuple[int, str]:
    """Choose the tensor parallel size and say why if it is not the obvious one.

    ``requested`` 0 means "all visible GPUs"; if that count does not divide the
    attention heads (3 GPUs, 16 heads) the largest size that does is used. An
    explicit size that does not divide the heads raises :class:`PlanError`.

    Returns:
        (size, note); note is empty unless the default was reduced.
    """
    if requested > 0:
        bad = [h for h in heads if h % requested]
        if bad:
            raise PlanError(
                f"tensor parallel size {requested} does not divide the model's "
                f"{bad[0]} attention heads; choose one of "
                f"{[n for n in range(1, max(heads) + 1) if all(h % n == 0 for h in heads)]}"
            )
        return requested, ""
    wanted = max(gpus, 1)
    size = max(n for n in range(1, wanted + 1) if all(h % n == 0 for h in heads))
    if size == wanted:
        return size, ""
    return size, f"{wanted} GPUs do not divide the attention heads; tensor parallel size {size}"


def cpu_threads_bind(cores: int, tp: int) -> str:
    """``VLLM_CPU_OMP_THREADS_BIND`` for ``tp`` CPU workers: cores split evenly.

    vllm-cpu refuses tensor parallelism without it on a single NUMA node
    (facts.md: "Not enough allowed NUMA nodes"); ``"0|1"`` for 2 cores and 2 workers.
    """
    if tp > cores:
        raise PlanError(f"tensor parallel size {tp} needs at least {tp} CPU cores, found {cores}")
    per = cores // tp
    ranges = [(i * per, i * per + per - 1) for i in range(tp)]
    return "|".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def known_flags(serve_help: str) -> set[str]:
    """The ``--flags`` a ``vllm serve --help`` text mentions."""
    return set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", serve_help))


def filter_flags(args: list[str], serve_help: str) -> tuple[list[str], list[str]]:
    """Drop flags (with their value) that this vLLM's ``serve --help`` does not list.

    An installed vLLM of another version (the GPU box's 0.26, gpu.md) may lack a
    flag of 0.32. Arguments are ``[subcommand, model, --flag, value | --switch, ...]``.

    Returns:
        (kept arguments, dropped flags).
    """
    known = known_flags(serve_help)
    kept: list[str] = []
    dropped: list[str] = []
    skipping = False
    for arg in args:
        if arg.startswith("--"):
            name = arg.split("=", 1)[0]
            skipping = name not in known
            if skipping:
                dropped.append(name)
                continue
        elif skipping:
            continue
        kept.append(arg)
    return kept, dropped


def make_plan(
    settings: LaunchSettings,
    *,
    mode: str,
    gpus: int,
    model_path: str = "",
    serve_help: str | None = None,
    cpu_cores: int | None = None,
) -> Plan:
    """Build the ``vllm serve`` argument list.

    Args:
        settings: the launch settings.
        mode: ``"gpu"`` (Kimi-VL from Hugging Face) or ``"dev"`` (tiny model on vllm-cpu).
        gpus: visible GPUs (tensor parallel default).
        model_path: dev mode: the directory ``serving.devmodel`` built.
        serve_help: ``serve --help`` text of an installed vLLM; when given, flags
            it does not list are left out (with a note).
        cpu_cores: dev mode: cores to split between tensor-parallel workers.
    """
    notes: list[str] = []
    env: dict[str, str] = {}
    if mode == "dev":
        if not model_path:
            raise PlanError("dev mode needs the dev model directory (--model-path)")
        served, model, heads = DEV.served_name, model_path, DEV_HEADS
        max_len = settings.dev_max_model_len
        batched = min(settings.max_num_batched_tokens, max_len)
        images = settings.dev_max_images_per_prompt
    elif mode == "gpu":
        profile = settings.served_profile
        served, model, heads = profile.served_name, profile.hf_id, KIMI_VL_HEADS
        max_len = settings.max_model_len
        batched = settings.max_num_batched_tokens
        images = settings.max_images_per_prompt
    else:
        raise PlanError(f"unknown mode {mode!r}")

    tp, note = tensor_parallel_size(settings.tensor_parallel_size, gpus, heads)
    if note:
        notes.append(note)
    if mode == "gpu" and tp > gpus:
        # Issue 6's preflight: refuse before anything starts rather than let vLLM
        # fail to place its workers after minutes of loading.
        raise PlanError(
            f"tensor parallel size {tp} needs {tp} GPUs, but {gpus} are visible "
            "(nvidia-smi -L, CUDA_VISIBLE_DEVICES)"
        )
    args = [
        "serve",
        model,
        "--trust-remote-code",
        "--served-model-name",
        served,
        "--tensor-parallel-size",
        str(tp),
        "--max-model-len",
        str(max_len),
        "--max-num-batched-tokens",
        str(batched),
        "--limit-mm-per-prompt",
        f'{{"image":{images}}}',
        "--host",
        "127.0.0.1",
        "--port",
        str(settings.vllm_port),
    ]
    # Log each request's id (our X-Request-Id, as "chatcmpl-<id>"), its parameters
    # and aborts at INFO; prompts are logged only at DEBUG (vLLM's serve --help).
    args.append("--enable-log-requests")
    if settings.api_key.get_secret_value():
        args += ["--api-key", settings.api_key.get_secret_value()]
    if mode == "dev":
        # facts.md: default CPU KV-cache sizing fails on this kind of machine.
        args += ["--kv-cache-memory-bytes", settings.dev_kv_cache_memory]
        if tp > 1:
            cores = cpu_cores or os.cpu_count() or 1
            env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_threads_bind(cores, tp)
    else:
        args += ["--gpu-memory-utilization", str(settings.gpu_memory_utilization)]
    args += shlex.split(settings.vllm_extra_args)

    if serve_help is not None:
        args, dropped = filter_flags(args, serve_help)
        if dropped:
            notes.append("this vLLM does not know " + ", ".join(dropped) + ": left out")
    return Plan(served_model=served, args=args, env=env, notes=notes)


def main(argv: list[str] | None = None) -> int:
    """Command line for launch.sh; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python -m serving.launcher")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("gpus", help="print the number of visible NVIDIA GPUs")
    plan_p = sub.add_parser("plan", help="print the vllm serve arguments as bash")
    plan_p.add_argument("--mode", choices=["gpu", "dev"], required=True)
    plan_p.add_argument("--gpus", type=int, required=True)
    plan_p.add_argument("--model-path", default="")
    plan_p.add_argument("--serve-help", type=Path, help="file with this vLLM's serve --help")
    args = parser.parse_args(argv)

    if args.command == "gpus":
        print(detect_gpus())
        return 0
    serve_help = args.serve_help.read_text(errors="replace") if args.serve_help else None
    try:
        plan = make_plan(
            LaunchSettings(),
            mode=args.mode,
            gpus=args.gpus,
            model_path=args.model_path,
            serve_help=serve_help,
        )
    except PlanError as exc:
        print(f"launch.sh: {exc}", file=sys.stderr)
        return 2
    for note in plan.notes:
        print(f"launch.sh: note: {note}", file=sys.stderr)
    print(plan.to_bash())
    return 0


if __name__ == "__main__":
    sys.exit(main())
