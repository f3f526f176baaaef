"""Serving benchmark against any OpenAI-compatible chat server (vLLM, or anything alike).

What it measures, for N concurrent chats that each send one image and a question:

- **TTFT**: seconds from sending the request to the first streamed chunk with
  visible text (vLLM's first chunk holds only the role, ``docs/facts.md``, and a lone
  reasoning marker is no text: neither counts);
- **output tokens/s**: per stream, ``(completion_tokens - 1) / (end - first token)``
  (decode speed one person sees), and in aggregate, all completion tokens of the
  round divided by its wall time (what the server delivers);
- **app overhead**: the same request sent straight (:class:`bench.harness.DirectClient`)
  and through the app's :class:`backend.client.ChatClient` (its SSE reading, reasoning
  splitter, error mapping), in rounds whose order rotates, one chat at a time; plus the
  time the app spends preparing the photo (:func:`backend.images.prepare_image`).

Every request asks for the same fixed length: ``max_tokens`` with vLLM's
``ignore_eos`` and ``min_tokens`` extensions (vLLM's ``SamplingParams``), so runs
compare across servers and tensor parallel sizes. Each chat's image differs in a
small patch and its text carries a unique tag, so neither vLLM's multimodal cache
nor prefix caching turns later requests into cache hits.

Usage::

    python -m bench.bench_serving --base-url http://127.0.0.1:8100/v1 \\
        --concurrency 1,8 --rounds 3 --max-tokens 128 --label "TP=1, H200" \\
        --gpu-memory --name h200_tp1

Prints the tables and writes them with the raw numbers to ``artifacts/bench/NAME.md`` and
``.json``. Needs only the app's environment.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import random
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
from PIL import Image

from backend.client import ChatClient, ChatRequest
from backend.events import AnswerDelta, Done, ReasoningDelta
from backend.families import family_for
from backend.images import fit_to_budget, image_tokens, prepare_image
from bench.harness import DirectClient, Report, Timing, Workload, percentile, rotated, table

DEFAULT_IMAGE = Path("tests/data/rocket.jpg")
QUESTION = "What is in this picture? Answer in detail."


def fixed_length(max_tokens: int) -> dict[str, Any]:
    """vLLM sampling extensions that force exactly ``max_tokens`` output tokens."""
    return {"ignore_eos": True, "min_tokens": max_tokens}


async def ask_fixed(
    direct: DirectClient, model: str, messages: list[dict[str, Any]], max_tokens: int
) -> Timing:
    """One streamed chat completion of exactly ``max_tokens`` tokens (temperature 0.8)
    straight to the server; a broken request is a :class:`Timing` with its error."""
    work = Workload("", max_tokens, 0.0, "", max_tokens, model, uses_budget=True)
    extra = {"temperature": 0.8, **fixed_length(max_tokens)}
    try:
        return await direct.ask(work, extra=extra, messages=messages)
    except httpx2.HTTPError as exc:
        return Timing.failed(exc)


@dataclass
class LevelRow:
    """One concurrency level (times in ms, rates per second; None: nothing measured).

    TTFT percentiles are over the requests that succeeded (linear between ranks); the
    aggregate rate is all their completion tokens over the sum of the rounds' wall times;
    requests/s counts them over the same time.
    """

    chats: int
    requests: int
    failed: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    tps_per_chat: float | None
    tps_aggregate: float | None
    requests_per_s: float | None
    prompt_tokens_mean: float | None
    errors: list[str] = field(default_factory=list)


def ms(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile of ``values`` (seconds) in ms; None for none."""
    return percentile(values, q) * 1000 if values else None


def summarise_level(chats: int, rounds: list[tuple[float, list[Timing]]]) -> LevelRow:
    """Fold ``(wall_s, timings)`` rounds of ``chats`` chats into a :class:`LevelRow`."""
    timings = [t for _, batch in rounds for t in batch]
    ok = [t for t in timings if not t.error]
    tps = [r for t in ok if (r := t.decode_tps) is not None]
    wall = sum(w for w, _ in rounds)
    tokens = sum(t.tokens for t in ok)
    return LevelRow(
        chats=chats,
        requests=len(timings),
        failed=len(timings) - len(ok),
        ttft_p50_ms=ms([t.first_s for t in ok], 50),
        ttft_p95_ms=ms([t.first_s for t in ok], 95),
        tps_per_chat=statistics.median(tps) if tps else None,
        tps_aggregate=tokens / wall if wall > 0 and tokens else None,
        requests_per_s=len(ok) / wall if wall > 0 else None,
        prompt_tokens_mean=statistics.mean(t.prompt_tokens for t in ok) if ok else None,
        errors=sorted({t.error for t in timings if t.error})[:5],
    )


def variant_images(path: Path, count: int, in_token_limit: int, seed: int = 0) -> list[str]:
    """``count`` JPEG data URLs of the photo, scaled to the budget, each with its own patch.

    A 12x12 block of a distinct colour at a distinct place makes every image's
    hash differ (no multimodal-cache hits) while the token count stays the same.
    """
    rng = random.Random(seed)
    with Image.open(path) as source:
        base = source.convert("RGB")
    size = fit_to_budget(base.width, base.height, in_token_limit)
    if size != base.size:
        base = base.resize(size, Image.Resampling.LANCZOS)
    urls = []
    for _ in range(count):
        image = base.copy()
        colour = (rng.randrange(256), rng.randrange(256), rng.randrange(256))
        x, y = rng.randrange(max(1, base.width - 12)), rng.randrange(max(1, base.height - 12))
        image.paste(colour, (x, y, x + 12, y + 12))
        buffer = io.BytesIO()
        image.save(buffer, "JPEG", quality=90)
        urls.append("data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode())
    return urls


def messages_for(image_urls: list[str], tag: str, question: str = QUESTION) -> list[dict[str, Any]]:
    """One user turn: a unique tag, the images, the question (OpenAI content parts)."""
    parts: list[dict[str, Any]] = [{"type": "text", "text": f"[chat {tag}]"}]
    parts += [{"type": "image_url", "image_url": {"url": u}} for u in image_urls]
    return [{"role": "user", "content": [*parts, {"type": "text", "text": question}]}]


async def stream_app(
    client: ChatClient, model: str, messages: list[dict[str, Any]], max_tokens: int
) -> Timing:
    """The same request through the app's :class:`ChatClient` (what the UI and CLI use)."""
    started = time.perf_counter()
    first: float | None = None
    done: Done | None = None
    profile = family_for(model)
    request = ChatRequest(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        temperature=0.8,
        thinking=profile.starts_in_reasoning,
        prefill=profile.reply_start,
        extra_body=fixed_length(max_tokens),
    )
    try:
        async for event in client.stream(request):
            if isinstance(event, ReasoningDelta | AnswerDelta):
                if first is None and event.text:
                    first = time.perf_counter()
            elif isinstance(event, Done):
                done = event
    except Exception as exc:  # a ChatError: reported, the run goes on
        return Timing.failed(exc)
    end = time.perf_counter() - started
    usage = done.usage if done else None
    at = first - started if first else end
    tokens, prompt = (usage.completion_tokens, usage.prompt_tokens) if usage else (0, 0)
    return Timing(at, end, end, tokens=tokens, prompt_tokens=prompt)


async def run_level(
    direct: DirectClient,
    model: str,
    images: list[str],
    concurrency: int,
    rounds: int,
    max_tokens: int,
    tag: str,
) -> LevelRow:
    """``rounds`` rounds of ``concurrency`` chats started together; images used in turn."""
    done: list[tuple[float, list[Timing]]] = []
    for r in range(rounds):
        batch = [
            messages_for(
                [images[(r * concurrency + i) % len(images)]], f"{tag}-{concurrency}-{r}-{i}"
            )
            for i in range(concurrency)
        ]
        started = time.perf_counter()
        results = await asyncio.gather(*(ask_fixed(direct, model, m, max_tokens) for m in batch))
        done.append((time.perf_counter() - started, list(results)))
    return summarise_level(concurrency, done)


@dataclass(slots=True)
class Overhead:
    """Straight to the server against the app's client, same requests, one at a time
    (medians, ms)."""

    pairs: int
    raw_ttft_ms: float | None
    app_ttft_ms: float | None
    raw_total_ms: float | None
    app_total_ms: float | None
    prepare_image_ms: float


async def measure_overhead(
    direct: DirectClient,
    args: argparse.Namespace,
    model: str,
    images: list[str],
    in_token_limit: int,
) -> Overhead:
    """``--overhead-pairs`` rounds of one request straight and one through the app's client,
    the order rotating; ``prepare_image_ms`` is the median of 5 runs of the app's photo
    preparation."""
    client = ChatClient(args.base_url.rstrip("/"), args.api_key)
    seen: dict[str, list[Timing]] = {"raw": [], "app": []}
    try:
        for i in range(args.overhead_pairs):
            for side in rotated(list(seen), i):
                messages = messages_for([images[(2 * i) % len(images)]], f"oh-{side}-{i}")
                ask = ask_fixed(direct, model, messages, args.max_tokens)
                if side == "app":
                    ask = stream_app(client, model, messages, args.max_tokens)
                seen[side].append(await ask)
    finally:
        await client.aclose()
    prep = []
    for _ in range(5):
        t0 = time.perf_counter()
        prepare_image(Path(args.image), in_token_limit)
        prep.append(time.perf_counter() - t0)

    def med(side: str, total: bool) -> float | None:
        values = [t.end_s if total else t.first_s for t in seen[side] if not t.error]
        return statistics.median(values) * 1000 if values else None

    return Overhead(
        pairs=args.overhead_pairs,
        raw_ttft_ms=med("raw", False),
        app_ttft_ms=med("app", False),
        raw_total_ms=med("raw", True),
        app_total_ms=med("app", True),
        prepare_image_ms=statistics.median(prep) * 1000,
    )


def gpu_memory() -> list[tuple[int, int]]:
    """(used MiB, total MiB) per GPU from ``nvidia-smi``; empty without one."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    rows = []
    for line in out.strip().splitlines():
        used, total = (int(v.strip()) for v in line.split(","))
        rows.append((used, total))
    return rows


def _fmt(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def level_table(levels: list[LevelRow]) -> str:
    """One row per concurrency level."""
    head = ["concurrent chats", "requests (failed)", "TTFT p50 ms", "TTFT p95 ms",
            "output tok/s per chat (median)", "output tok/s aggregate",
            "prompt tokens per chat"]  # fmt: skip
    rows = [
        [str(s.chats), f"{s.requests} ({s.failed})", _fmt(s.ttft_p50_ms), _fmt(s.ttft_p95_ms),
         _fmt(s.tps_per_chat), _fmt(s.tps_aggregate), _fmt(s.prompt_tokens_mean, 0)]
        for s in levels
    ]  # fmt: skip
    errors = [f"error at {s.chats} chats: {e}" for s in levels for e in s.errors]
    return "\n\n".join([table(head, rows), *errors])


def overhead_table(overhead: Overhead) -> str:
    """Straight against the app's client, and the photo's preparation."""
    rows = [
        ["straight (bench.harness.DirectClient)", _fmt(overhead.raw_ttft_ms, 2),
         _fmt(overhead.raw_total_ms, 2)],
        ["app: backend.client.ChatClient", _fmt(overhead.app_ttft_ms, 2),
         _fmt(overhead.app_total_ms, 2)],
    ]  # fmt: skip
    return (
        f"App overhead ({overhead.pairs} rounds, one chat at a time, medians):\n\n"
        + table(["path", "TTFT ms", "whole answer ms"], rows)
        + "\n\nPhoto preparation in the app (backend.images.prepare_image, CPU): "
        f"{overhead.prepare_image_ms:.1f} ms median."
    )


async def first_model(http: httpx.AsyncClient, base_url: str) -> tuple[str, int | None]:
    """The first served model and its ``max_model_len`` from ``GET /v1/models``."""
    response = await http.get(f"{base_url}/models")
    response.raise_for_status()
    entry = response.json()["data"][0]
    return str(entry["id"]), entry.get("max_model_len")


async def main_async(args: argparse.Namespace) -> int:
    """Run the benchmark described by ``args``; print and write the report; 1 if any
    request failed."""
    base_url = args.base_url.rstrip("/")
    headers = {"Authorization": f"Bearer {args.api_key}"}
    async with httpx.AsyncClient(timeout=30, headers=headers) as http:
        model, max_len = await first_model(http, base_url)
    model = args.model or model
    limit = args.in_token_limit or family_for(model).in_token_limit
    count = max(args.concurrency) * args.rounds + 2 * args.overhead_pairs + 8
    images = variant_images(Path(args.image), count, limit, seed=args.seed)
    with Image.open(args.image) as probe:
        w, h = fit_to_budget(probe.width, probe.height, limit)
    tag = f"{args.seed}-{int(time.time())}"
    direct = DirectClient(base_url, args.api_key)
    try:
        # Warm-up: compile paths, CUDA graphs and the first multimodal batch.
        for i in range(args.warmup):
            await ask_fixed(direct, model, messages_for([images[-1 - i]], f"warm-{tag}-{i}"), 8)
        levels = []
        for c in args.concurrency:
            row = await run_level(direct, model, images, c, args.rounds, args.max_tokens, tag)
            levels.append(row)
            print(f"{c} chats: {row}", file=sys.stderr)
        memory = gpu_memory() if args.gpu_memory else []
        overhead = None
        if args.overhead_pairs:
            overhead = await measure_overhead(direct, args, model, images[::-1], limit)
    finally:
        await direct.aclose()
    meta = {
        "server": base_url,
        "model": f"{model} (max_model_len {max_len})",
        "image": f"{args.image} scaled to {w}x{h} = {image_tokens(w, h, limit)} image tokens "
        f"(Kimi-VL formula, in_token_limit {limit}); a unique 12 px patch per chat",
        "output": f"exactly {args.max_tokens} tokens per chat (ignore_eos, min_tokens)",
        "rounds": f"{args.rounds} per level after {args.warmup} warm-up request(s)",
        **dict(kv.split("=", 1) for kv in args.meta),
    }
    report = Report(f"Serving: {args.label}", args.name)
    report.add("\n".join(f"- {k}: {v}" for k, v in meta.items()), level_table(levels))
    if overhead is not None:
        report.add(overhead_table(overhead))
    if memory:
        shown = ", ".join(f"GPU{i}: {u} MiB of {t} MiB" for i, (u, t) in enumerate(memory))
        report.add(f"GPU memory in use during the run (nvidia-smi): {shown}.")
    report.finish({
        "meta": meta,
        "levels": [asdict(s) for s in levels],
        "overhead": asdict(overhead) if overhead else None,
        "gpu_memory_mib": memory,
    })  # fmt: skip
    return 1 if any(s.failed for s in levels) else 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line; see the module docstring."""
    p = argparse.ArgumentParser(
        prog="python -m bench.bench_serving", description=__doc__.split("\n")[0]
    )
    p.add_argument("--base-url", default="http://127.0.0.1:8100/v1")
    p.add_argument("--api-key", default="EMPTY")
    p.add_argument("--model", default="", help="default: first of /v1/models")
    p.add_argument("--image", default=str(DEFAULT_IMAGE))
    p.add_argument("--in-token-limit", type=int, default=0, help="default: the model's profile")
    p.add_argument(
        "--concurrency",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1, 8],
        help="comma-separated levels (default 1,8)",
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--overhead-pairs", type=int, default=6, help="0 skips the overhead part")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gpu-memory", action="store_true", help="record nvidia-smi memory use")
    p.add_argument("--label", default="serving benchmark")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--name", default="serving", help="results file: artifacts/bench/NAME.md")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m bench.bench_serving``."""
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
