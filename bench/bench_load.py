"""The app under load, driven as browsers drive it: concurrent chats, a soak, many tabs.

Starts the scripted server (``python -m tests.fakes.kimi_server``, scenario
``paced``: 200 pieces 10 ms apart, 100 tokens/s per chat, on a fixed schedule as
a model would send them) and the app in front of it, then, in one of three modes:

``sweep``
    For each number of concurrent chats (1/8/32/64) and with and without a
    photo (a 1.5 MB 2000x1500 JPEG made on the spot, uploaded as the browser
    does when it is attached, before Enter), phases of direct requests (httpx
    straight to the scripted server) alternate with phases through the app
    (a fresh tab per ask). In a phase each of N workers asks in a loop,
    started a fraction of an answer apart so N answers are always streaming;
    each worker's first ask is a warm-up and asks after its measured one only
    keep the load on until every worker's measured ask is done. Reported:
    added time to first token (TTFT: question sent -> first visible text)
    p50/p90/p95 versus direct, tokens/s relayed per chat (the 200 scripted
    tokens over the time from the first to the last visible text) as a share
    of direct, the app's CPU per answer and its RSS.
``soak``
    64 tabs x 20 turns, a photo every few turns, each tab one conversation;
    then every tab closes and the app's RSS is followed for ten minutes.
    Pass: zero errors, every answer complete, RSS back within 20% of the
    baseline (RSS after one warm-up chat with a photo, before the soak).
``tabs``
    1,000 tabs opened, used once with a photo and closed (8 at a time, the
    ``quick`` scenario: the same 200 pieces at once); RSS after the last one
    closed and after a wait. Target <= 250 MB.

Through a proxy in front of several app processes (``--ui-workers N``), start
them elsewhere and name them: the scripted server
(``python -m tests.fakes.kimi_server --port 8199 --no-record``), then
``KIMI_BASE_URL=http://127.0.0.1:8199/v1 ./launch.sh --ui-only --ui-workers 4``,
then ``... sweep --app-url http://127.0.0.1:8300 --base-url http://127.0.0.1:8199/v1``;
each tab loads the page first and keeps HAProxy's stickiness cookie, and CPU
and RSS are summed over the workers and HAProxy that launch.sh recorded.

Each run writes ``artifacts/bench/load_<mode>.md`` and ``.json`` (with date and
machine) and a PNG plot. Run from the repository root, e.g.
``.venv/bin/python -m bench.bench_load sweep``; ``--help`` on each mode lists
its sizes (``sweep --levels 1 8 --pairs 6`` for a quick look).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from bench.harness import (
    PACED,
    RESULTS,
    DirectClient,
    Report,
    Sampler,
    Target,
    Timing,
    Workload,
    add_target_options,
    measured_app,
    percentile,
    question,
    rotated,
    table,
    tok_s,
)
from bench.media import make_photo

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def figure(size: tuple[float, float]) -> Figure:
    """A matplotlib figure of ``size`` inches (requirements-bench.txt; imported only to
    draw, as the GPU machine has no matplotlib: runs there pass ``--no-plot``)."""
    from matplotlib.figure import Figure

    return Figure(figsize=size)


# --------------------------------------------------------------------------- sweep


@dataclass
class Phase:
    """One phase of one level: who was asked, what each measured ask took, what it cost."""

    side: str  # "direct" or "app"
    timings: list[Timing] = field(default_factory=list)
    asks: int = 0
    """All asks of the phase, warm-up and load-keeping ones included."""
    app_cpu_s: float = 0.0
    wall_s: float = 0.0


async def app_ask(
    stack: Target,
    http: httpx.AsyncClient,
    photo: bytes | None,
    work: Workload = PACED,
    think_s: float = 0.0,
) -> Timing:
    """A fresh tab: open it, attach the photo (if any), wait ``think_s`` (a person
    typing the question after attaching), ask, close it."""
    tab = stack.tab(http)
    await tab.open()
    try:
        if work.max_tokens:
            await tab.apply_settings({"max_tokens": work.max_tokens})
        file_ids = [await tab.upload(photo)] if photo is not None else []
        if file_ids:
            await asyncio.sleep(think_s)
        cut_off_at = work.max_tokens if work.uses_budget else None
        return await tab.ask(work.text, file_ids, marker=work.end, cut_off_at=cut_off_at)
    finally:
        await tab.close()


async def run_phase(
    side: str,
    workers: int,
    ask: Callable[[], Awaitable[Timing]],
    target: Target,
    answer_s: float = PACED.answer_s,
) -> Phase:
    """Run ``workers`` asking loops, started ``answer_s / workers`` apart.

    With one worker: one measured ask. With more: a warm-up ask, the measured
    ask, then asks that keep the load on until every worker's measured ask is
    done.
    """
    phase = Phase(side)
    warm = workers > 1

    async def ask_once() -> Timing:
        try:
            return await ask()
        except Exception as exc:  # a failed ask is counted as an error, the run goes on
            return Timing.failed(exc)

    measured_left = workers
    all_measured = asyncio.Event()

    async def worker(i: int) -> None:
        nonlocal measured_left
        await asyncio.sleep(i * answer_s / workers)
        if warm:
            await ask_once()
            phase.asks += 1
        phase.timings.append(await ask_once())
        phase.asks += 1
        measured_left -= 1
        if measured_left == 0:
            all_measured.set()
        while warm and not all_measured.is_set():
            await ask_once()
            phase.asks += 1

    cpu0, t0 = target.cpu_s(), time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(workers)))
    phase.app_cpu_s = target.cpu_s() - cpu0
    phase.wall_s = time.perf_counter() - t0
    return phase


@dataclass
class LevelResult:
    """The figures of one (concurrency, photo or not) cell of the sweep, times in ms."""

    chats: int
    kind: str
    pairs: int
    direct_ttft_ms: dict[str, float]
    app_ttft_ms: dict[str, float]
    added_ttft_ms: dict[str, float]
    direct_tok_s: float
    app_tok_s: float
    relayed_pct: float
    app_cpu_ms_per_chat: float
    app_cpu_pct: float
    rss_mb_peak: float
    rss_mb_after: float
    errors: int
    incomplete: int
    load_avg: float
    """The machine's 1-minute load average at the end of the row (2 cores here)."""


def ttft_stats(timings: list[Timing]) -> dict[str, float]:
    """p50/p90/p95 of time to first token in ms (answers with an error left out)."""
    values = [t.first_s * 1000 for t in timings if not t.error]
    return {f"p{q}": percentile(values, q) for q in (50, 90, 95)}


async def sweep_level(
    stack: Target,
    direct: DirectClient,
    http: httpx.AsyncClient,
    sampler: Sampler,
    chats: int,
    photo: bytes | None,
    pairs: int,
    work: Workload = PACED,
    think_s: float = 0.0,
) -> LevelResult:
    """Alternate direct and app phases at ``chats`` concurrent chats until ``pairs`` each."""
    phases_each = max(2, math.ceil(pairs / chats))
    started = sampler.now()
    phases: list[Phase] = []

    async def direct_ask() -> Timing:
        return await direct.ask(work, photo)

    async def through_app() -> Timing:
        return await app_ask(stack, http, photo, work, think_s)

    sides = {"direct": direct_ask, "app": through_app}
    for i in range(phases_each):
        for side in rotated(list(sides), i):
            phases.append(await run_phase(side, chats, sides[side], stack, work.answer_s))
    d = [t for p in phases if p.side == "direct" for t in p.timings]
    a = [t for p in phases if p.side == "app" for t in p.timings]
    app_phases = [p for p in phases if p.side == "app"]
    cpu = sum(p.app_cpu_s for p in app_phases)
    asks = sum(p.asks for p in app_phases)
    wall = sum(p.wall_s for p in app_phases)
    d_stats, a_stats = ttft_stats(d), ttft_stats(a)
    d_rate, a_rate = tok_s(d, work.tokens), tok_s(a, work.tokens)
    return LevelResult(
        chats=chats,
        kind="photo" if photo is not None else "text",
        pairs=min(len(d), len(a)),
        direct_ttft_ms=d_stats,
        app_ttft_ms=a_stats,
        added_ttft_ms={k: a_stats[k] - d_stats[k] for k in a_stats},
        direct_tok_s=d_rate,
        app_tok_s=a_rate,
        relayed_pct=a_rate / d_rate * 100,
        app_cpu_ms_per_chat=cpu / asks * 1000,
        app_cpu_pct=cpu / wall * 100,
        rss_mb_peak=sampler.peak_since(started),
        rss_mb_after=stack.rss_mb(),
        errors=sum(bool(t.error) for t in d + a),
        incomplete=sum(not t.complete for t in d + a),
        load_avg=os.getloadavg()[0],
    )


def sweep_table(results: list[LevelResult]) -> str:
    """The sweep as a Markdown table."""
    lines = [
        "| chats | photo | pairs | added TTFT p50 / p90 / p95 (ms) | TTFT direct p50 (ms) "
        "| tok/s per chat app / direct | relayed | app CPU per chat (ms) | app CPU (% of a core) "
        "| app RSS peak (MB) | errors / incomplete | load avg |",
        "| ---: | :---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in results:
        added = " / ".join(f"{r.added_ttft_ms[k]:+.1f}" for k in ("p50", "p90", "p95"))
        lines.append(
            f"| {r.chats} | {'yes' if r.kind == 'photo' else 'no'} | {r.pairs} | {added} "
            f"| {r.direct_ttft_ms['p50']:.1f} | {r.app_tok_s:.1f} / {r.direct_tok_s:.1f} "
            f"| {r.relayed_pct:.1f}% | {r.app_cpu_ms_per_chat:.0f} | {r.app_cpu_pct:.0f} "
            f"| {r.rss_mb_peak:.0f} | {r.errors} / {r.incomplete} | {r.load_avg:.1f} |"
        )
    return "\n".join(lines)


def sweep_plot(results: list[LevelResult], path: str) -> None:
    """Added TTFT (p50, p95), relayed share and app CPU against concurrent chats."""
    fig = figure((15, 4.5))
    axes = fig.subplots(1, 3)
    for kind, style in (("text", "-o"), ("photo", "--s")):
        rows = [r for r in results if r.kind == kind]
        if not rows:
            continue
        x = [r.chats for r in rows]
        axes[0].plot(x, [r.added_ttft_ms["p50"] for r in rows], style, label=f"{kind} p50")
        axes[0].plot(x, [r.added_ttft_ms["p95"] for r in rows], style, label=f"{kind} p95")
        axes[1].plot(x, [r.relayed_pct for r in rows], style, label=kind)
        axes[2].plot(x, [r.app_cpu_ms_per_chat for r in rows], style, label=kind)
    titles = (
        "added time to first token (ms)",
        "tokens/s relayed per chat (% of direct)",
        "app CPU per chat (ms)",
    )
    levels = sorted({r.chats for r in results})
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(n) for n in levels])
        ax.set_xlabel("concurrent chats")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
    relayed = [r.relayed_pct for r in results]
    axes[1].set_ylim(min(90.0, min(relayed) - 2), max(102.0, max(relayed) + 2))
    axes[1].ticklabel_format(axis="y", useOffset=False)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


async def sweep(args: argparse.Namespace, stack: Target, report: Report) -> dict[str, Any]:
    """Mode ``sweep``: its tables into ``report``; returns the run's data."""
    photo = make_photo()
    sampler = Sampler(stack)
    sampler.start()
    idle_mb = stack.rss_mb()
    results: list[LevelResult] = []
    limits = httpx.Limits(max_connections=256)
    async with httpx.AsyncClient(timeout=120, limits=limits) as http:
        direct = DirectClient(stack.base_url, os.environ.get("KIMI_API_KEY", ""))
        work = await workload(args, stack.base_url)
        try:
            await direct.ask(work)  # warm-up of both paths
            await app_ask(stack, http, photo, work)
            for kind in args.kinds:
                for chats in args.levels:
                    result = await sweep_level(
                        stack,
                        direct,
                        http,
                        sampler,
                        chats,
                        photo if kind == "photo" else None,
                        args.pairs,
                        work,
                        args.think_s,
                    )
                    results.append(result)
                    print(sweep_table([result]).splitlines()[-1], flush=True)
        finally:
            await direct.aclose()
            await sampler.stop()
    server = (
        f"Server: {args.server}, model `{work.model}`, answers of {work.tokens} tokens"
        if args.server
        else "Scripted server: `paced` (200 pieces at 10 ms, 100 tokens/s per chat)"
    )
    report.add(
        f"App idle RSS {idle_mb:.0f} MB, ready in {stack.ready_s:.1f} s. {server}; photo: "
        f"{len(photo) / 1e6:.2f} MB 2000x1500 JPEG. At least {args.pairs} interleaved pairs "
        "per row.",
        sweep_table(results),
    )
    plot = f"load_{args.name}.png"
    if not args.no_plot:
        RESULTS.mkdir(parents=True, exist_ok=True)
        sweep_plot(results, str(RESULTS / plot))
        report.add(f"![plot]({plot})")
    return {
        "idle_rss_mb": idle_mb,
        "ready_s": stack.ready_s,
        "photo_bytes": len(photo),
        "server": args.server or "scripted",
        "workload": asdict(work),
        "results": [asdict(r) for r in results],
    }


async def workload(args: argparse.Namespace, base_url: str) -> Workload:
    """The scripted ``paced`` answer, or for ``--server`` a photo question answered in
    ``--tokens`` tokens by the server's first served model."""
    if not args.server:
        return PACED
    key = os.environ.get("KIMI_API_KEY", "")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(timeout=30, headers=headers) as http:
        models = (await http.get(f"{base_url}/models")).raise_for_status().json()
    return Workload(
        "Describe this picture in detail.",
        tokens=args.tokens,
        answer_s=args.tokens / 100,
        end="",
        max_tokens=args.tokens,
        model=models["data"][0]["id"],
        uses_budget=True,
    )


def replot(name: str) -> None:
    """Draw ``artifacts/bench/load_<name>.png`` from its JSON (for a run made with --no-plot)."""
    data = json.loads((RESULTS / f"load_{name}.json").read_text())
    sweep_plot([LevelResult(**r) for r in data["results"]], str(RESULTS / f"load_{name}.png"))


# --------------------------------------------------------------------------- soak


async def soak(args: argparse.Namespace, stack: Target, report: Report) -> dict[str, Any]:
    """Mode ``soak``: ``--sessions`` tabs x ``--turns`` turns, then RSS for ``--wait-s``."""
    photo = make_photo()
    sampler = Sampler(stack, interval_s=2)
    sampler.start()
    idle_mb = stack.rss_mb()
    timings: list[tuple[int, int, bool, Timing]] = []
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=256)) as http:
        await app_ask(stack, http, photo)  # warm-up: every code path loaded
        await asyncio.sleep(2)
        baseline_mb = stack.rss_mb()
        soak_started = sampler.now()
        cpu0 = stack.cpu_s()

        async def session(i: int) -> None:
            await asyncio.sleep(i * PACED.answer_s / args.sessions)
            tab = stack.tab(http)
            await tab.open()
            try:
                for turn in range(args.turns):
                    with_photo = turn % args.photo_every == 0
                    file_ids = [await tab.upload(photo)] if with_photo else []
                    timings.append(
                        (i, turn, with_photo, await tab.ask(question("paced"), file_ids))
                    )
            finally:
                await tab.close()

        outcomes = await asyncio.gather(
            *(session(i) for i in range(args.sessions)), return_exceptions=True
        )
        closed_at = sampler.now()
        soak_cpu = stack.cpu_s() - cpu0
        peak_mb = sampler.peak_since(soak_started)
        closed_mb = stack.rss_mb()
        print(f"sessions closed; RSS {closed_mb:.0f} MB; waiting {args.wait_s:.0f} s", flush=True)
        await asyncio.sleep(args.wait_s)
        after_mb = stack.rss_mb()
    await sampler.stop()
    crashed = [repr(o) for o in outcomes if isinstance(o, BaseException)]
    errors = [
        f"tab {i} turn {turn} ({t.first_s:.1f} s after sending): {t.error}"
        for i, turn, _, t in timings
        if t.error
    ]
    incomplete = sum(not t.complete for *_, t in timings)
    expected = args.sessions * args.turns
    within = after_mb <= baseline_mb * 1.2
    ttft = [t.first_s * 1000 for *_, t in timings]
    ttft_photo = [t.first_s * 1000 for *_, p, t in timings if p]
    passed = not crashed and not errors and incomplete == 0 and len(timings) == expected
    rows = [
        ("answers (complete / expected)", f"{len(timings) - incomplete} / {expected}", ""),
        ("errors (sessions crashed / answers with an error)", f"{len(crashed)} / {len(errors)}",
         "0 / 0"),
        ("TTFT through the app p50 / p95 (ms)",
         f"{percentile(ttft, 50):.0f} / {percentile(ttft, 95):.0f}", ""),
        ("TTFT with a photo p50 / p95 (ms)",
         f"{percentile(ttft_photo, 50):.0f} / {percentile(ttft_photo, 95):.0f}", ""),
        ("tokens/s per chat through the app (median)", f"{tok_s([t for *_, t in timings]):.1f}",
         "100 scripted"),
        ("app CPU per answer (ms)", f"{soak_cpu / max(1, len(timings)) * 1000:.0f}", ""),
        ("app RSS idle / baseline after warm-up (MB)", f"{idle_mb:.0f} / {baseline_mb:.0f}", ""),
        ("app RSS peak / when the tabs closed (MB)", f"{peak_mb:.0f} / {closed_mb:.0f}", ""),
        (f"app RSS {args.wait_s:.0f} s after the tabs closed (MB)",
         f"{after_mb:.0f} ({(after_mb / baseline_mb - 1) * 100:+.0f}% of baseline)", "<= +20%"),
    ]  # fmt: skip
    plot = f"load_{args.name}.png"
    fig = figure((8, 4))
    ax = fig.subplots()
    ax.plot([t for t, _ in sampler.samples], [mb for _, mb in sampler.samples])
    ax.axvline(closed_at, color="grey", linestyle=":", label="tabs closed")
    ax.axhline(baseline_mb * 1.2, color="red", linestyle="--", label="baseline + 20%")
    ax.set_xlabel("seconds")
    ax.set_ylabel("app RSS (MB)")
    ax.set_title(f"soak: {args.sessions} tabs x {args.turns} turns")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / plot, dpi=100)
    report.add(
        f"**{'PASS' if passed and within else 'FAIL'}**. {args.sessions} tabs x {args.turns} "
        f"turns, a photo ({len(photo) / 1e6:.2f} MB JPEG) every {args.photo_every} turns, "
        f"scripted server `paced` (100 tokens/s per chat); tabs started "
        f"{PACED.answer_s / args.sessions * 1000:.0f} ms apart; RSS followed for "
        f"{args.wait_s:.0f} s after they closed.",
        table(["measure", "value", "target"], rows),
        *([f"First errors: {errors[:3]}"] if errors else []),
        *([f"Crashed sessions: {crashed[:3]}"] if crashed else []),
        f"![RSS]({plot})",
    )
    return {
        "sessions": args.sessions,
        "turns": args.turns,
        "photo_every": args.photo_every,
        "wait_s": args.wait_s,
        "answers": len(timings),
        "expected": expected,
        "incomplete": incomplete,
        "errors": errors,
        "crashed": crashed,
        "idle_rss_mb": idle_mb,
        "baseline_rss_mb": baseline_mb,
        "peak_rss_mb": peak_mb,
        "closed_rss_mb": closed_mb,
        "after_wait_rss_mb": after_mb,
        "app_cpu_s": soak_cpu,
        "ttft_ms": {f"p{q}": percentile(ttft, q) for q in (50, 90, 95)},
        "passed": passed and within,
        "rss_samples": sampler.samples,
    }


# --------------------------------------------------------------------------- tabs


async def tabs(args: argparse.Namespace, stack: Target, report: Report) -> dict[str, Any]:
    """Mode ``tabs``: ``--tabs`` tabs opened, used once with a photo, closed."""
    photo = make_photo()
    idle_mb = stack.rss_mb()
    curve: list[tuple[int, float]] = [(0, idle_mb)]
    done = 0
    errors: list[str] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(args.tabs):
        queue.put_nowait(i)
    t0 = time.perf_counter()
    async with httpx.AsyncClient(timeout=120) as http:

        async def worker() -> None:
            nonlocal done
            while not queue.empty():
                queue.get_nowait()
                tab = stack.tab(http)
                try:
                    await tab.open()
                    timing = await tab.ask(question("quick"), [await tab.upload(photo)])
                    if timing.error or not timing.complete:
                        errors.append(timing.error or "incomplete answer")
                except Exception as exc:  # a failed tab is counted, the run goes on
                    errors.append(f"{type(exc).__name__}: {exc}")
                finally:
                    await tab.close()
                done += 1
                if done % args.every == 0:
                    curve.append((done, stack.rss_mb()))
                    print(f"{done} tabs closed: RSS {curve[-1][1]:.0f} MB", flush=True)

        await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    elapsed = time.perf_counter() - t0
    closed_mb = stack.rss_mb()
    await asyncio.sleep(args.wait_s)
    after_mb = stack.rss_mb()
    per_tab_kb = (closed_mb - idle_mb) / args.tabs * 1024
    rows = [
        ("tabs opened, used with one photo, closed", f"{done} ({len(errors)} with an error)", ""),
        ("app RSS idle (MB)", f"{idle_mb:.0f}", ""),
        (f"app RSS after {done} closed tabs (MB)", f"{closed_mb:.0f}", "<= 250"),
        (f"app RSS {args.wait_s:.0f} s later (MB)", f"{after_mb:.0f}", ""),
        ("RSS kept per closed tab (KB)", f"{per_tab_kb:.0f}", ""),
        ("time (s)", f"{elapsed:.0f}", ""),
    ]
    plot = f"load_{args.name}.png"
    fig = figure((7, 4))
    ax = fig.subplots()
    ax.plot([n for n, _ in curve], [mb for _, mb in curve], "-o", markersize=3)
    ax.axhline(250, color="red", linestyle="--", label="target 250 MB")
    ax.set_xlabel("tabs closed")
    ax.set_ylabel("app RSS (MB)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(RESULTS / plot, dpi=100)
    report.add(
        f"{args.tabs} tabs, {args.concurrency} at a time, each: open, attach a "
        f"{len(photo) / 1e6:.2f} MB JPEG, ask (scripted `quick`: 200 pieces at once), close.",
        table(["measure", "value", "target"], rows),
        *([f"First errors: {errors[:3]}"] if errors else []),
        f"![RSS]({plot})",
    )
    return {
        "tabs": done,
        "concurrency": args.concurrency,
        "errors": errors,
        "idle_rss_mb": idle_mb,
        "closed_rss_mb": closed_mb,
        "after_wait_rss_mb": after_mb,
        "elapsed_s": elapsed,
        "curve": curve,
    }


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    p = modes.add_parser("sweep", help="1/8/32/64 concurrent chats, text and photo")
    p.add_argument("--levels", type=int, nargs="+", default=[1, 8, 32, 64])
    p.add_argument("--kinds", nargs="+", choices=["text", "photo"], default=["text", "photo"])
    p.add_argument("--pairs", type=int, default=30, help="least measured asks per side and row")
    p.add_argument(
        "--server",
        help="a running OpenAI-compatible server's /v1 URL (a real vLLM; "
        "key in KIMI_API_KEY) instead of the scripted one",
    )
    p.add_argument("--tokens", type=int, default=512, help="answer length with --server")
    p.add_argument(
        "--think-s",
        type=float,
        default=1.0,
        help="seconds between attaching the photo and Enter (a person typing the question; "
        "the app prepares the photo meanwhile); 0 = Enter at once",
    )
    p.add_argument("--no-plot", action="store_true", help="no PNG (no matplotlib here)")
    p = modes.add_parser("replot", help="draw a sweep's PNG from its JSON")
    p = modes.add_parser("soak", help="many tabs x many turns, then RSS after they close")
    p.add_argument("--sessions", type=int, default=64)
    p.add_argument("--turns", type=int, default=20)
    p.add_argument("--photo-every", type=int, default=4, help="a photo on every Nth turn")
    p.add_argument("--wait-s", type=float, default=600, help="seconds to follow RSS afterwards")
    p = modes.add_parser("tabs", help="many tabs opened, used once with a photo, closed")
    p.add_argument("--tabs", type=int, default=1000)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--every", type=int, default=50, help="sample RSS every N tabs")
    p.add_argument("--wait-s", type=float, default=60, help="seconds before the last RSS")
    for sub in modes.choices.values():
        sub.add_argument("--name", help="results file name (default load_<mode>)")
        add_target_options(sub)
    args = parser.parse_args(argv)
    args.name = args.name or args.mode
    return args


def main(argv: list[str] | None = None) -> None:
    """Start the stack, run the chosen mode, print and write the results."""
    args = parse_args(argv)
    if args.mode == "replot":
        replot(args.name)
        return
    runners = {"sweep": sweep, "soak": soak, "tabs": tabs}
    titles = {"sweep": "Load sweep", "soak": "Soak", "tabs": "Closed tabs and memory"}
    report = Report(titles[args.mode], f"load_{args.name}")
    with measured_app(args, getattr(args, "server", None)) as target:
        data = asyncio.run(runners[args.mode](args, target, report))
        report.add(target.about(args))
    command = " ".join(["python -m bench.bench_load", *(argv or sys.argv[1:])])
    report.finish({"command": command, "args": vars(args), **data})


if __name__ == "__main__":
    main()
