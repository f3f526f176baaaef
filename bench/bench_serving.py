"""Serving benchmark against any OpenAI-compatible chat server (vLLM, or anything alike).

What it measures, for N concurrent chats that each send one image and a question:

- **TTFT**: seconds from sending the request to the first streamed chunk that
  carries text (vLLM's first chunk holds only the role, ``docs/facts.md``,
  so it does not count);
- **output tokens/s**: per stream, ``(completion_tokens - 1) / (end - first token)``
  (decode speed one person sees), and in aggregate, all completion tokens of the
  round divided by its wall time (what the server delivers);
- **app overhead**: the same request sent with raw ``httpx`` (SSE parsed here) and
  through the app's :class:`backend.client.ChatClient` (openai-python, reasoning
  splitter, error mapping), alternated, at one chat at a time; plus the time the
  app spends preparing the photo (:func:`backend.images.prepare_image`).

Every request asks for the same fixed length: ``max_tokens`` with vLLM's
``ignore_eos`` and ``min_tokens`` extensions (vLLM's ``SamplingParams``), so runs
compare across servers and tensor parallel sizes. Each chat's image differs in a
small patch and its text carries a unique tag, so neither vLLM's multimodal cache
nor prefix caching turns later requests into cache hits.

Usage::

    python -m bench.bench_serving --base-url http://127.0.0.1:8100/v1 \\
        --concurrency 1,8 --rounds 3 --max-tokens 128 --label "TP=1, H200" \\
        --gpu-memory --out bench/results/h200_tp1.md

Writes a Markdown table (``--out``) and the raw numbers next to it (``.json``).
Needs only the app's environment (httpx, openai, pillow, pydantic-settings).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import random
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from PIL import Image

from backend.client import ChatClient, ChatRequest, continuing
from backend.events import AnswerDelta, Done, ReasoningDelta
from backend.images import fit_to_budget, image_tokens, prepare_image
from backend.settings import profile_for

DEFAULT_IMAGE = Path("tests/data/rocket.jpg")
QUESTION = "What is in this picture? Answer in detail."


@dataclass(frozen=True, slots=True)
class Result:
    """One streamed request.

    Attributes:
        ttft_s: send to first non-empty content/reasoning chunk (None: none came).
        elapsed_s: send to end of stream.
        completion_tokens: from the usage chunk (0 when the server sent none).
        prompt_tokens: from the usage chunk (0 when the server sent none).
        error: the failure, empty when the request succeeded.
    """

    ttft_s: float | None
    elapsed_s: float
    completion_tokens: int
    prompt_tokens: int
    error: str = ""

    @property
    def decode_tps(self) -> float | None:
        """Output tokens per second after the first token; None when not measurable."""
        if self.ttft_s is None or self.completion_tokens < 2:
            return None
        span = self.elapsed_s - self.ttft_s
        return (self.completion_tokens - 1) / span if span > 0 else None


@dataclass(slots=True)
class LevelStats:
    """Aggregates of all rounds at one concurrency level."""

    concurrency: int
    requests: int
    failed: int
    ttft_median_ms: float | None
    ttft_p90_ms: float | None
    decode_tps_median: float | None
    aggregate_tps: float | None
    completion_tokens: int
    prompt_tokens: int
    errors: list[str] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of ``values``; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def summarise(concurrency: int, rounds: list[tuple[float, list[Result]]]) -> LevelStats:
    """Fold rounds of ``(wall_s, results)`` at one concurrency into :class:`LevelStats`.

    The aggregate rate is total completion tokens over total wall time of the
    rounds (each round starts all its chats together and ends with the last).
    """
    results = [r for _, batch in rounds for r in batch]
    ok = [r for r in results if not r.error]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    tps = [t for r in ok if (t := r.decode_tps) is not None]
    wall = sum(w for w, _ in rounds)
    tokens = sum(r.completion_tokens for r in ok)
    median_ttft = statistics.median(ttfts) * 1000 if ttfts else None
    p90 = percentile(ttfts, 90)
    return LevelStats(
        concurrency=concurrency,
        requests=len(results),
        failed=len(results) - len(ok),
        ttft_median_ms=median_ttft,
        ttft_p90_ms=p90 * 1000 if p90 is not None else None,
        decode_tps_median=statistics.median(tps) if tps else None,
        aggregate_tps=tokens / wall if wall > 0 and tokens else None,
        completion_tokens=tokens,
        prompt_tokens=sum(r.prompt_tokens for r in ok),
        errors=sorted({r.error for r in results if r.error}),
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


def messages_for(image_url: str, tag: str) -> list[dict[str, Any]]:
    """One user turn: a unique tag, the image, the question (OpenAI content parts)."""
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": f"[chat {tag}]"},
                {"type": "image_url", "image_url": {"url": image_url}},
                {"type": "text", "text": QUESTION},
            ],
        }
    ]


def fixed_length(max_tokens: int) -> dict[str, Any]:
    """vLLM sampling extensions that force exactly ``max_tokens`` output tokens."""
    return {"ignore_eos": True, "min_tokens": max_tokens}


async def stream_raw(
    http: httpx.AsyncClient,
    base_url: str,
    model: str,
    messages: list[dict[str, Any]],
    max_tokens: int,
    text: list[str] | None = None,
) -> Result:
    """Send one streamed chat completion with plain httpx and time it.

    Parses the SSE ``data:`` lines itself; counts a chunk as the first token when
    its delta has non-empty ``content``, ``reasoning`` or ``reasoning_content``.
    When ``text`` is given, every such piece is appended to it (the answer, for a
    next turn).
    """
    body = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0.8,
        "stream": True,
        "stream_options": {"include_usage": True},
        **fixed_length(max_tokens),
    }
    body |= continuing(messages, profile_for(model).reply_start)  # as the app's
    started = time.perf_counter()
    first: float | None = None
    completion = prompt = 0
    try:
        async with http.stream("POST", f"{base_url}/chat/completions", json=body) as response:
            if response.status_code != 200:
                body_text = (await response.aread()).decode(errors="replace")
                return Result(
                    None,
                    time.perf_counter() - started,
                    0,
                    0,
                    f"HTTP {response.status_code}: {body_text[:200]}",
                )
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if chunk.get("usage"):
                    completion = int(chunk["usage"].get("completion_tokens") or 0)
                    prompt = int(chunk["usage"].get("prompt_tokens") or 0)
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    piece = (
                        delta.get("content")
                        or delta.get("reasoning")
                        or delta.get("reasoning_content")
                    )
                    if piece and first is None:
                        first = time.perf_counter()
                    if piece and text is not None:
                        text.append(piece)
    except httpx.HTTPError as exc:
        return Result(None, time.perf_counter() - started, 0, 0, f"{type(exc).__name__}: {exc}")
    ended = time.perf_counter()
    return Result(first - started if first else None, ended - started, completion, prompt)


async def stream_app(
    client: ChatClient, model: str, messages: list[dict[str, Any]], max_tokens: int
) -> Result:
    """The same request through the app's :class:`ChatClient` (what the UI and CLI use)."""
    started = time.perf_counter()
    first: float | None = None
    done: Done | None = None
    profile = profile_for(model)
    request = ChatRequest(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        temperature=0.8,
        thinking=profile.thinking,
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
        return Result(None, time.perf_counter() - started, 0, 0, f"{type(exc).__name__}: {exc}")
    ended = time.perf_counter()
    usage = done.usage if done else None
    return Result(
        first - started if first else None,
        ended - started,
        usage.completion_tokens if usage else 0,
        usage.prompt_tokens if usage else 0,
    )


async def run_level(
    http: httpx.AsyncClient,
    base_url: str,
    model: str,
    images: list[str],
    concurrency: int,
    rounds: int,
    max_tokens: int,
    tag: str,
) -> LevelStats:
    """``rounds`` rounds of ``concurrency`` chats started together; images used in turn."""
    done: list[tuple[float, list[Result]]] = []
    for r in range(rounds):
        batch = [
            messages_for(
                images[(r * concurrency + i) % len(images)], f"{tag}-{concurrency}-{r}-{i}"
            )
            for i in range(concurrency)
        ]
        started = time.perf_counter()
        results = await asyncio.gather(
            *(stream_raw(http, base_url, model, m, max_tokens) for m in batch)
        )
        done.append((time.perf_counter() - started, list(results)))
    return summarise(concurrency, done)


@dataclass(slots=True)
class Overhead:
    """Raw httpx versus the app's client, same requests, one at a time."""

    pairs: int
    raw_ttft_ms: float | None
    app_ttft_ms: float | None
    raw_total_ms: float | None
    app_total_ms: float | None
    prepare_image_ms: float


async def measure_overhead(
    http: httpx.AsyncClient,
    base_url: str,
    api_key: str,
    model: str,
    images: list[str],
    image_path: Path,
    in_token_limit: int,
    pairs: int,
    max_tokens: int,
) -> Overhead:
    """Alternate raw and app requests ``pairs`` times; medians of each side.

    Alternating (raw, app, app, raw, ...) spreads any drift of the server evenly.
    ``prepare_image_ms`` is the median of 5 runs of the app's photo preparation.
    """
    client = ChatClient(base_url, api_key)
    raw: list[Result] = []
    app: list[Result] = []
    try:
        for i in range(pairs):
            m_raw = messages_for(images[(2 * i) % len(images)], f"oh-raw-{i}")
            m_app = messages_for(images[(2 * i + 1) % len(images)], f"oh-app-{i}")
            order = [("raw", m_raw), ("app", m_app)]
            if i % 2:
                order.reverse()
            for kind, messages in order:
                if kind == "raw":
                    raw.append(await stream_raw(http, base_url, model, messages, max_tokens))
                else:
                    app.append(await stream_app(client, model, messages, max_tokens))
    finally:
        await client.aclose()
    prep = []
    for _ in range(5):
        t0 = time.perf_counter()
        prepare_image(image_path, in_token_limit)
        prep.append(time.perf_counter() - t0)

    def med(values: list[float | None]) -> float | None:
        vals = [v for v in values if v is not None]
        return statistics.median(vals) * 1000 if vals else None

    return Overhead(
        pairs=pairs,
        raw_ttft_ms=med([r.ttft_s for r in raw if not r.error]),
        app_ttft_ms=med([r.ttft_s for r in app if not r.error]),
        raw_total_ms=med([r.elapsed_s for r in raw if not r.error]),
        app_total_ms=med([r.elapsed_s for r in app if not r.error]),
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


def render_markdown(
    label: str,
    meta: dict[str, Any],
    levels: list[LevelStats],
    overhead: Overhead | None,
    memory: list[tuple[int, int]],
) -> str:
    """The results as Markdown: one row per concurrency level, then overhead and memory."""
    lines = [f"## {label}", ""]
    lines += [f"- {k}: {v}" for k, v in meta.items()]
    lines += [
        "",
        "| concurrent chats | requests (failed) | TTFT median ms | TTFT p90 ms "
        "| output tok/s per chat (median) | output tok/s aggregate | prompt tokens per chat |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for s in levels:
        per_chat_prompt = s.prompt_tokens // max(1, s.requests - s.failed)
        lines.append(
            f"| {s.concurrency} | {s.requests} ({s.failed}) | {_fmt(s.ttft_median_ms)} "
            f"| {_fmt(s.ttft_p90_ms)} | {_fmt(s.decode_tps_median)} | {_fmt(s.aggregate_tps)} "
            f"| {per_chat_prompt} |"
        )
    for s in levels:
        for error in s.errors:
            lines.append(f"\nerror at {s.concurrency} chats: {error}")
    if overhead is not None:
        lines += [
            "",
            f"App overhead ({overhead.pairs} alternated pairs, one chat at a time, medians):",
            "",
            "| path | TTFT ms | whole answer ms |",
            "| --- | ---: | ---: |",
            f"| raw httpx (SSE parsed by hand) | {_fmt(overhead.raw_ttft_ms, 2)} "
            f"| {_fmt(overhead.raw_total_ms, 2)} |",
            f"| app: backend.client.ChatClient | {_fmt(overhead.app_ttft_ms, 2)} "
            f"| {_fmt(overhead.app_total_ms, 2)} |",
            "",
            f"Photo preparation in the app (backend.images.prepare_image, CPU): "
            f"{overhead.prepare_image_ms:.1f} ms median.",
        ]
    if memory:
        shown = ", ".join(f"GPU{i}: {u} MiB of {t} MiB" for i, (u, t) in enumerate(memory))
        lines += ["", f"GPU memory in use during the run (nvidia-smi): {shown}."]
    return "\n".join(lines) + "\n"


async def first_model(http: httpx.AsyncClient, base_url: str) -> tuple[str, int | None]:
    """The first served model and its ``max_model_len`` from ``GET /v1/models``."""
    response = await http.get(f"{base_url}/models")
    response.raise_for_status()
    entry = response.json()["data"][0]
    return str(entry["id"]), entry.get("max_model_len")


async def main_async(args: argparse.Namespace) -> int:
    """Run the benchmark described by ``args``; write the files; print the table."""
    base_url = args.base_url.rstrip("/")
    timeout = httpx.Timeout(args.timeout, connect=10.0)
    limits = httpx.Limits(max_connections=max(args.concurrency) + 4)
    headers = {"Authorization": f"Bearer {args.api_key}"}
    async with httpx.AsyncClient(timeout=timeout, limits=limits, headers=headers) as http:
        model, max_len = await first_model(http, base_url)
        model = args.model or model
        limit = args.in_token_limit or profile_for(model).in_token_limit
        count = max(args.concurrency) * args.rounds + 2 * args.overhead_pairs + 8
        images = variant_images(Path(args.image), count, limit, seed=args.seed)
        with Image.open(args.image) as probe:
            w, h = fit_to_budget(probe.width, probe.height, limit)
        tag = f"{args.seed}-{int(time.time())}"
        # Warm-up: compile paths, CUDA graphs and the first multimodal batch.
        for i in range(args.warmup):
            await stream_raw(
                http, base_url, model, messages_for(images[-1 - i], f"warm-{tag}-{i}"), 8
            )
        levels = []
        for c in args.concurrency:
            stats = await run_level(
                http, base_url, model, images, c, args.rounds, args.max_tokens, tag
            )
            levels.append(stats)
            print(f"{c} chats: {stats}", file=sys.stderr)
        memory = gpu_memory() if args.gpu_memory else []
        overhead = None
        if args.overhead_pairs:
            overhead = await measure_overhead(
                http,
                base_url,
                args.api_key,
                model,
                images[::-1],
                Path(args.image),
                limit,
                args.overhead_pairs,
                args.max_tokens,
            )
    meta = {
        "server": base_url,
        "model": f"{model} (max_model_len {max_len})",
        "image": f"{args.image} scaled to {w}x{h} = {image_tokens(w, h, limit)} image tokens "
        f"(Kimi-VL formula, in_token_limit {limit}); a unique 12 px patch per chat",
        "output": f"exactly {args.max_tokens} tokens per chat (ignore_eos, min_tokens)",
        "rounds": f"{args.rounds} per level after {args.warmup} warm-up request(s)",
    }
    meta.update(dict(kv.split("=", 1) for kv in args.meta))
    text = render_markdown(args.label, meta, levels, overhead, memory)
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        raw = {
            "label": args.label,
            "meta": meta,
            "levels": [asdict(s) for s in levels],
            "overhead": asdict(overhead) if overhead else None,
            "gpu_memory_mib": memory,
        }
        out.with_suffix(".json").write_text(json.dumps(raw, indent=2) + "\n")
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
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gpu-memory", action="store_true", help="record nvidia-smi memory use")
    p.add_argument("--label", default="serving benchmark")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--out", default="", help="Markdown file; raw numbers go next to it as .json")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m bench.bench_serving``."""
    return asyncio.run(main_async(parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
