"""Serving-flag sweep for chat with photos, run on a GPU machine (docs/gpu.md).

It starts vLLM the way ``launch.sh`` would (the argument list of
:func:`serving.launcher.make_plan`, which is launch.sh's plan), changes one flag
per *variant*, and drives the same chat workload against each:

- **levels**: N chats (8, 32, 64 by default) start together, each with one photo
  and a question, each answer exactly ``--max-tokens`` (512) tokens long
  (``ignore_eos`` + ``min_tokens``); photos cycle through
  :data:`PHOTO_SIZES` (368 to 4096 image tokens, the Thinking-2506 budget), each
  with its own 12 px patch and text tag so no cache turns one chat into another;
- **multi-turn**: C chats of three turns each: photo and question; a follow-up
  without a photo (the photo stays in the history); the same photo sent again.
  Prefix caching and the multimodal caches decide turns 2 and 3.

Metrics per level (:class:`bench.bench_serving.LevelRow`): TTFT p50/p95 (ms), output
tok/s per chat (median of ``(tokens - 1) / (end - first token)``), aggregate output tok/s
(all tokens over the rounds' wall time) and requests/s. Requests go straight to the
server as the app's client writes them (:class:`bench.harness.DirectClient`).

Three commands, each writing JSON into ``--out`` as it goes (a run killed at
the device's time limit keeps what it finished):

- ``seed``: ``./launch.sh --server-only`` with the seed's flags (they are
  launch.sh's defaults): seconds to healthy, the KV cache vLLM reports, prompts of
  7, 8 and 10 full-size photos (4096 tokens each), then the workload;
- ``wave V1,V2,V3``: start up to three variants side by side on one GPU (each
  with a fixed ``--kv-cache-memory-bytes``, so their memory profiles cannot
  disturb each other), wait until all are healthy, then run the workload on one
  at a time while the others sit idle;
- ``variants``: list the variants.

Usage on the GPU machine (vLLM importable by ``python3``, the Kimi-VL shape in
the Hugging Face cache, ``HF_HUB_OFFLINE=1``; see docs/gpu.md)::

    python3 -m bench.gpu_sweep seed --out $OUT
    python3 -m bench.gpu_sweep wave default,batched-8192,batched-16384 --out $OUT
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from PIL import Image

from backend.images import image_tokens
from bench.bench_serving import (
    QUESTION,
    LevelRow,
    ask_fixed,
    fixed_length,
    gpu_memory,
    messages_for,
    ms,
    summarise_level,
)
from bench.harness import DirectClient, Timing
from serving.launcher import make_plan
from serving.settings import LaunchSettings

PHOTO = Path("tests/data/rocket.jpg")
IN_TOKEN_LIMIT = 16384  # Thinking-2506 (backend.families.THINKING_2506)
# (width, height): 368, 1426, 2752 and 4096 image tokens (backend.images.image_tokens).
PHOTO_SIZES: tuple[tuple[int, int], ...] = ((640, 427), (1280, 853), (1792, 1195), (1792, 1792))
FULL_SIZE = (1792, 1792)  # 128 x 128 patches = the 16384 budget = 4096 tokens
FOLLOW_UP = "Tell me more about the colours in it."
AGAIN = "Here is the same photo again: what is at the top of it?"


@dataclass(frozen=True)
class Variant:
    """One server configuration: launch.sh's plan with some settings or flags changed.

    Attributes:
        name: short id used on the command line and in the tables.
        change: what differs from launch.sh's plan, in words.
        settings: :class:`serving.settings.LaunchSettings` fields to override.
        flags: extra ``vllm serve`` flags appended after the plan's.
        env: extra environment variables for the server.
    """

    name: str
    change: str
    settings: dict[str, Any] = field(default_factory=dict)
    flags: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("default", "launch.sh as is (max-num-batched-tokens 32768)"),
        Variant(
            "batched-8192",
            "--max-num-batched-tokens 8192 (vLLM 0.26's own default on H100/H200)",
            {"max_num_batched_tokens": 8192},
        ),
        Variant(
            "batched-16384", "--max-num-batched-tokens 16384", {"max_num_batched_tokens": 16384}
        ),
        Variant("seqs-64", "--max-num-seqs 64 (vLLM default 1024)", flags=("--max-num-seqs", "64")),
        Variant("seqs-256", "--max-num-seqs 256", flags=("--max-num-seqs", "256")),
        Variant(
            "no-prefix-cache",
            "--no-enable-prefix-caching",
            flags=("--no-enable-prefix-caching",),
        ),
        Variant(
            "no-mm-cache",
            "--mm-processor-cache-gb 0 (default 4)",
            flags=("--mm-processor-cache-gb", "0"),
        ),
        Variant("no-async", "--no-async-scheduling", flags=("--no-async-scheduling",)),
        Variant(
            "moe-untuned",
            "vLLM's default fused-MoE config (launch.sh points vLLM at serving/moe_configs)",
            env={"VLLM_TUNED_CONFIG_FOLDER": "bench/no-moe-configs"},  # no such folder
        ),
    )
}


def serve_command(
    variant: Variant,
    port: int,
    *,
    shared_kv_bytes: str = "",
    python: str = "python3",
) -> tuple[list[str], dict[str, str]]:
    """The server command for ``variant``: launch.sh's plan plus the variant's changes.

    Args:
        variant: what to change.
        port: the server's port.
        shared_kv_bytes: when several servers share the GPU, the fixed KV cache
            size (``--kv-cache-memory-bytes``, e.g. ``"9G"``); the memory share is
            then lowered to 0.28 so that vLLM's start-up check (free memory >=
            share x total) passes beside the others. Empty: launch.sh's share.
        python: the interpreter that has vLLM.

    Returns:
        ``[python, "serving/vllm_main.py", "serve", MODEL, ...]`` (launch.sh's form)
        and the environment launch.sh's plan adds, with the variant's changes.
    """
    overrides: dict[str, Any] = {"vllm_port": port, "tensor_parallel_size": 1}
    overrides.update(variant.settings)
    extra = ["--load-format", "dummy", *variant.flags]
    if shared_kv_bytes:
        overrides["gpu_memory_utilization"] = 0.28
        extra += ["--kv-cache-memory-bytes", shared_kv_bytes]
    settings = LaunchSettings(**overrides, vllm_extra_args=" ".join(extra))
    plan = make_plan(settings, mode="gpu", gpus=1)
    return [python, "serving/vllm_main.py", *plan.args], plan.env | variant.env


# --- the workload -------------------------------------------------------------------


def photo_url(size: tuple[int, int], seed: int) -> str:
    """A JPEG data URL of the test photo resized to ``size``, with a unique 12 px patch."""
    rng = random.Random(seed)
    with Image.open(PHOTO) as source:
        image = source.convert("RGB").resize(size, Image.Resampling.LANCZOS)
    colour = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
    x, y = rng.randrange(size[0] - 12), rng.randrange(size[1] - 12)
    image.paste(colour, (x, y, x + 12, y + 12))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()


def user_turn(tag: str, image_urls: list[str], question: str) -> dict[str, Any]:
    """One user message: a unique tag, the photos, the question (OpenAI content parts)."""
    return messages_for(image_urls, tag, question)[0]


class ChatLoad:
    """The chat workload against one server (see the module docstring)."""

    def __init__(self, base_url: str, max_tokens: int, seed: int) -> None:
        self.base_url = base_url.rstrip("/")
        self.direct = DirectClient(self.base_url, LaunchSettings().api_key.get_secret_value())
        self.max_tokens = max_tokens
        self.seed = seed
        self.model = ""
        self.counter = 0

    def next_photo(self, size: tuple[int, int] | None = None) -> str:
        """A fresh unique photo; sizes cycle through :data:`PHOTO_SIZES` unless given."""
        self.counter += 1
        chosen = size or PHOTO_SIZES[self.counter % len(PHOTO_SIZES)]
        return photo_url(chosen, self.seed * 1_000_003 + self.counter)

    async def connect(self, http: httpx.AsyncClient) -> None:
        """Learn the served model's name from ``/v1/models``."""
        response = await http.get(f"{self.base_url}/models")
        response.raise_for_status()
        self.model = str(response.json()["data"][0]["id"])

    async def ask(self, messages: list[dict[str, Any]], max_tokens: int | None = None) -> Timing:
        """One streamed request of exactly ``max_tokens`` (default: the workload's)."""
        return await ask_fixed(self.direct, self.model, messages, max_tokens or self.max_tokens)

    async def level(self, chats: int, rounds: int) -> LevelRow:
        """``rounds`` rounds of ``chats`` single-photo chats started together."""
        done: list[tuple[float, list[Timing]]] = []
        for r in range(rounds):
            batch = [
                [user_turn(f"{self.seed}-{chats}-{r}-{i}", [self.next_photo()], QUESTION)]
                for i in range(chats)
            ]
            started = time.perf_counter()
            results = await asyncio.gather(*(self.ask(m) for m in batch))
            done.append((time.perf_counter() - started, list(results)))
        return summarise_level(chats, done)

    async def conversation(self, index: int) -> list[Timing]:
        """Three turns: photo + question, follow-up, the same photo again."""
        photo = self.next_photo(PHOTO_SIZES[2])
        history = [user_turn(f"mt-{self.seed}-{index}", [photo], QUESTION)]
        results = []
        for turn in range(3):
            result = await self.ask(history)
            results.append(result)
            if result.error:
                break
            history.append({"role": "assistant", "content": result.text})
            if turn == 0:
                history.append({"role": "user", "content": FOLLOW_UP})
            else:
                history.append(user_turn(f"mt-{index}-again", [photo], AGAIN))
        return results

    async def multi_turn(self, http: httpx.AsyncClient, chats: int) -> dict[str, Any]:
        """``chats`` three-turn conversations side by side; per-turn TTFT and cache hits."""
        before = await cache_counters(http, self.base_url)
        started = time.perf_counter()
        convs = await asyncio.gather(*(self.conversation(i) for i in range(chats)))
        wall = time.perf_counter() - started
        after = await cache_counters(http, self.base_url)
        turns = []
        for t in range(3):
            rs = [c[t] for c in convs if len(c) > t]
            ok = [r for r in rs if not r.error]
            turns.append(
                {
                    "turn": t + 1,
                    "requests": len(rs),
                    "failed": len(rs) - len(ok),
                    "ttft_p50_ms": ms([r.first_s for r in ok], 50),
                    "ttft_p95_ms": ms([r.first_s for r in ok], 95),
                    "prompt_tokens_mean": statistics.mean(r.prompt_tokens for r in ok)
                    if ok
                    else None,
                    "errors": sorted({r.error for r in rs if r.error})[:3],
                }
            )
        counters = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
        return {"chats": chats, "wall_s": wall, "turns": turns, "cache_counters": counters}


def auth_headers() -> dict[str, str]:
    """The ``Authorization`` header for the key launch.sh hands vLLM (``KIMI_API_KEY``)."""
    key = LaunchSettings().api_key.get_secret_value()
    return {"Authorization": f"Bearer {key}"} if key else {}


def shown(command: list[str]) -> list[str]:
    """``command`` with the value after ``--api-key`` replaced by ``***`` (for reports)."""
    return ["***" if i and command[i - 1] == "--api-key" else arg for i, arg in enumerate(command)]


async def cache_counters(http: httpx.AsyncClient, base_url: str) -> dict[str, float]:
    """vLLM's cache counters from ``/metrics`` (prefix cache and multimodal cache).

    Sums each ``vllm:*cache*_total`` counter over its labels; empty if the
    endpoint does not answer.
    """
    root = base_url.rsplit("/v1", 1)[0]
    try:
        response = await http.get(f"{root}/metrics")
    except httpx.HTTPError:
        return {}
    totals: dict[str, float] = {}
    for line in response.text.splitlines():
        match = re.match(r"^(vllm:[a-z_]*cache[a-z_]*_total)(?:\{[^}]*\})? ([0-9.eE+-]+)$", line)
        if match:
            totals[match.group(1)] = totals.get(match.group(1), 0.0) + float(match.group(2))
    return totals


async def run_workload(
    base_url: str,
    levels: list[int],
    rounds: dict[int, int],
    multi_turn_chats: int,
    max_tokens: int,
    seed: int,
    deadline: float,
) -> dict[str, Any]:
    """Warm-up, the levels, the multi-turn run; stops early past ``deadline`` (monotonic)."""
    work = ChatLoad(base_url, max_tokens, seed)
    out: dict[str, Any] = {"levels": [], "multi_turn": None, "skipped": []}
    async with httpx.AsyncClient(timeout=30, headers=auth_headers()) as http:
        await work.connect(http)
        for i in range(2):  # warm-up: the first image batches and sampler paths
            await work.ask([user_turn(f"warm-{seed}-{i}", [work.next_photo()], QUESTION)], 8)
        for chats in levels:
            if time.monotonic() > deadline:
                out["skipped"].append(f"{chats} chats")
                continue
            row = await work.level(chats, rounds.get(chats, 2))
            out["levels"].append(asdict(row))
            print(f"  {chats} chats: {row}", file=sys.stderr, flush=True)
        if multi_turn_chats and time.monotonic() <= deadline:
            out["multi_turn"] = await work.multi_turn(http, multi_turn_chats)
            print(f"  multi-turn: {out['multi_turn']}", file=sys.stderr, flush=True)
        elif multi_turn_chats:
            out["skipped"].append("multi-turn")
    await work.direct.aclose()
    return out


# --- servers ------------------------------------------------------------------------

LOG_FACTS = {
    "weights": r"Model loading took ([0-9.]+) ?GiB",
    "kv_cache_gib": r"Available KV cache memory: ([0-9.]+) GiB",
    "kv_cache_tokens": r"GPU KV cache size: ([0-9,]+) tokens",
    "max_concurrency": r"Maximum concurrency for ([0-9,]+ tokens per request: [0-9.]+x)",
    "compile_s": r"torch\.compile took ([0-9.]+) s",
    "graphs_s": r"Graph capturing finished in ([0-9.]+ secs, took [0-9.]+ GiB)",
    "init_engine_s": r"init engine \(profile, create kv cache, warmup model\) took ([^\n]+)",
    "moe_config": r"(Using default MoE config|Using configuration from \S+ for MoE layer)",
    "attention": r"Using (\S+) attention backend",
    "load_s": r"Model loading took [0-9.]+ ?GiB memory and ([0-9.]+) seconds",
}


def log_facts(text: str) -> dict[str, str]:
    """The first match of each :data:`LOG_FACTS` pattern in a vLLM log."""
    facts = {}
    for key, pattern in LOG_FACTS.items():
        match = re.search(pattern, text)
        if match:
            facts[key] = match.group(1)
    return facts


@dataclass
class Server:
    """A vLLM server this module started (its own process group)."""

    name: str
    port: int
    process: subprocess.Popen[bytes]
    log: Path
    started: float
    healthy_after_s: float | None = None

    @property
    def base_url(self) -> str:
        """The OpenAI API root."""
        return f"http://127.0.0.1:{self.port}/v1"

    def stop(self) -> None:
        """TERM the process group, KILL it after 20 s."""
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(20)
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(10)


def start_server(
    name: str, command: list[str], port: int, env: dict[str, str], logs: Path
) -> Server:
    """Start ``command`` in a new session with its output in ``logs/NAME.log``."""
    log = logs / f"{name}.log"
    handle = log.open("wb")
    process = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=handle,
        stderr=subprocess.STDOUT,
        env={**os.environ, **env},
        start_new_session=True,
    )
    print(f"started {name} on {port}: {' '.join(shown(command))}", file=sys.stderr, flush=True)
    return Server(name, port, process, log, time.monotonic())


def wait_healthy(servers: list[Server], timeout_s: float) -> None:
    """Poll each ``/health`` once a second until all answer, exit, or time runs out."""
    end = time.monotonic() + timeout_s
    pending = list(servers)
    while pending and time.monotonic() < end:
        for s in list(pending):
            if s.process.poll() is not None:
                pending.remove(s)
                print(f"{s.name} exited with {s.process.returncode}", file=sys.stderr, flush=True)
                continue
            try:
                ok = httpx.get(f"http://127.0.0.1:{s.port}/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                ok = False
            if ok:
                s.healthy_after_s = time.monotonic() - s.started
                pending.remove(s)
                print(
                    f"{s.name} healthy after {s.healthy_after_s:.0f} s", file=sys.stderr, flush=True
                )
        time.sleep(1)


def gpu_memory_mib() -> list[int]:
    """Used MiB per GPU (nvidia-smi, via :func:`bench.bench_serving.gpu_memory`)."""
    return [used for used, _ in gpu_memory()]


def write_json(path: Path, data: Any) -> None:
    """Write ``data`` as indented JSON (replacing the file)."""
    path.write_text(json.dumps(data, indent=2) + "\n")


# --- commands -----------------------------------------------------------------------


def cmd_wave(args: argparse.Namespace) -> int:
    """Start the variants side by side, then run the workload on each in turn."""
    deadline = time.monotonic() + args.budget_s
    out, logs = Path(args.out), Path(args.out) / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    names = args.variants.split(",")
    servers = []
    for i, name in enumerate(names):
        variant = VARIANTS[name]
        port = args.base_port + i
        command, env = serve_command(variant, port, shared_kv_bytes=args.kv_bytes)
        servers.append(start_server(name, command, port, env, logs))
        time.sleep(args.stagger_s)
    wait_healthy(servers, args.start_timeout_s)
    memory = gpu_memory_mib()
    report: dict[str, Any] = {"wave": names, "gpu_memory_used_mib": memory, "variants": []}
    result_file = out / f"wave-{args.tag}.json"
    try:
        for server in servers:
            variant = VARIANTS[server.name]
            command, env = serve_command(variant, server.port, shared_kv_bytes=args.kv_bytes)
            entry: dict[str, Any] = {
                "variant": server.name,
                "change": variant.change,
                "command": shown(command),
                "env": env,
                "healthy_after_s": server.healthy_after_s,
            }
            if server.healthy_after_s is not None:
                print(f"workload on {server.name}", file=sys.stderr, flush=True)
                entry.update(
                    asyncio.run(
                        run_workload(
                            server.base_url,
                            args.levels,
                            {8: 3},
                            args.multi_turn_chats,
                            args.max_tokens,
                            args.seed,
                            deadline,
                        )
                    )
                )
            server.stop()
            log_text = server.log.read_text(errors="replace")
            entry["log_facts"] = log_facts(log_text)
            if server.healthy_after_s is None:
                entry["log_tail"] = log_text.splitlines()[-30:]
            report["variants"].append(entry)
            write_json(result_file, report)
    finally:
        for server in servers:
            server.stop()
    return 0


def long_prompt_checks(base_url: str, counts: list[int], max_tokens: int) -> list[dict[str, Any]]:
    """Send prompts of ``count`` full-size photos (4096 tokens each); status and timing.

    One request at a time; records the HTTP status, the first 400 characters of
    an error body, TTFT and the prompt tokens vLLM counted.
    """
    tokens = image_tokens(*FULL_SIZE, IN_TOKEN_LIMIT)

    async def one(count: int) -> dict[str, Any]:
        urls = [photo_url(FULL_SIZE, 9000 + 100 * count + i) for i in range(count)]
        messages = [user_turn(f"long-{count}", urls, QUESTION)]
        timeout = httpx.Timeout(600.0, connect=10.0)
        async with httpx.AsyncClient(timeout=timeout, headers=auth_headers()) as http:
            model = str((await http.get(f"{base_url}/models")).json()["data"][0]["id"])
            body = {
                "model": model,
                "messages": messages,
                "max_tokens": max_tokens,
                "stream": False,
                **fixed_length(max_tokens),
            }
            started = time.perf_counter()
            response = await http.post(f"{base_url}/chat/completions", json=body)
            elapsed = time.perf_counter() - started
            entry: dict[str, Any] = {
                "photos": count,
                "image_tokens": count * tokens,
                "status": response.status_code,
                "elapsed_s": round(elapsed, 2),
            }
            try:
                entry["usage"] = response.json().get("usage")
            except ValueError:
                entry["usage"] = None
            if response.status_code != 200:
                entry["error"] = response.text[:400]
            return entry

    results = []
    for count in counts:
        results.append(asyncio.run(one(count)))
        print(f"  {results[-1]}", file=sys.stderr, flush=True)
    return results


def cmd_seed(args: argparse.Namespace) -> int:
    """``./launch.sh --server-only`` with its defaults (the seed's flags) and the checks."""
    deadline = time.monotonic() + args.budget_s
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "KIMI_VLLM_PYTHON": "python3",
        "KIMI_APP_PYTHON": "python3",
        "KIMI_VLLM_EXTRA_ARGS": "--load-format dummy",
        "KIMI_VLLM_PORT": str(args.base_port),
    }
    launch_log = out / "launch.stderr"
    started = time.monotonic()
    with launch_log.open("wb") as handle:
        process = subprocess.Popen(
            ["./launch.sh", "--server-only", "--tp", "1"],
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    server = Server("seed", args.base_port, process, Path("llm.log"), started)
    wait_healthy([server], args.start_timeout_s)
    report: dict[str, Any] = {
        "command": "KIMI_VLLM_PYTHON=python3 KIMI_APP_PYTHON=python3 HF_HUB_OFFLINE=1 "
        "KIMI_VLLM_EXTRA_ARGS='--load-format dummy' ./launch.sh --server-only --tp 1",
        "healthy_after_s": server.healthy_after_s,
        "gpu_memory_used_mib": gpu_memory_mib(),
    }
    result_file = out / "seed.json"
    try:
        if server.healthy_after_s is not None:
            report["log_facts"] = log_facts(server.log.read_text(errors="replace"))
            write_json(result_file, report)
            report["long_prompts"] = long_prompt_checks(server.base_url, [10, 8, 7], 64)
            write_json(result_file, report)
            report.update(
                asyncio.run(
                    run_workload(
                        server.base_url,
                        args.levels,
                        {1: 3, 8: 3},
                        args.multi_turn_chats,
                        args.max_tokens,
                        args.seed,
                        deadline,
                    )
                )
            )
    finally:
        server.stop()
        report["launch_sh"] = launch_log.read_text(errors="replace").splitlines()[-40:]
        write_json(result_file, report)
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line; see the module docstring."""
    p = argparse.ArgumentParser(
        prog="python -m bench.gpu_sweep", description=__doc__.split("\n")[0]
    )
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("seed", "wave"):
        s = sub.add_parser(name)
        if name == "wave":
            s.add_argument(
                "variants", help="comma-separated names (python -m bench.gpu_sweep variants)"
            )
            s.add_argument("--tag", default="a", help="result file: wave-TAG.json")
            s.add_argument("--kv-bytes", default="9G", help="--kv-cache-memory-bytes per server")
            s.add_argument("--stagger-s", type=float, default=5.0, help="seconds between starts")
        default_levels = "1,8,32,64" if name == "seed" else "8,32,64"
        s.add_argument(
            "--levels", type=lambda v: [int(x) for x in v.split(",")], default=default_levels
        )
        s.add_argument("--multi-turn-chats", type=int, default=16)
        s.add_argument("--max-tokens", type=int, default=512)
        s.add_argument("--seed", type=int, default=17)
        s.add_argument("--base-port", type=int, default=8101)
        s.add_argument("--start-timeout-s", type=float, default=420.0)
        s.add_argument("--budget-s", type=float, default=480.0, help="skip work started later")
        s.add_argument("--out", required=True)
    sub.add_parser("variants")
    args = p.parse_args(argv)
    if isinstance(getattr(args, "levels", None), str):
        args.levels = [int(x) for x in args.levels.split(",")]
    return args


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m bench.gpu_sweep``."""
    args = parse_args(argv)
    if args.command == "variants":
        for v in VARIANTS.values():
            print(f"{v.name:16} {v.change}")
        return 0
    if args.command == "seed":
        return cmd_seed(args)
    return cmd_wave(args)


if __name__ == "__main__":
    sys.exit(main())
