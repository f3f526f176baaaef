"""What the chat app adds to a direct call to the same OpenAI-compatible server.

Starts the scripted Kimi-VL stream server (``python -m tests.fakes.kimi_server``,
a subprocess) and the app (``chainlit run app.py --headless``) against it, then
asks the same question N times directly (httpx, SSE) and N times through the app
(a fresh tab per ask, Chainlit's socket.io protocol as the browser speaks it;
see facts.md "Chainlit's wire protocol" and :mod:`bench._common`), alternating.

Measured: time to first token (TTFT: request sent -> first visible reasoning or
answer text; through the app: ``client_message`` sent -> ``stream_start``), p50
and p90, the share of the direct tokens per second the app relays (same text
over the time from the first to the last visible piece), the app's idle memory
(RSS) and its start time (process start -> ``GET /`` answers). Prints a table;
targets from the project brief: <= 8 ms added TTFT, >= 99.5% relayed, < 300 MB
idle, ready in 3 s. The load driver (:mod:`bench.bench_load`) measures the same
under concurrency.

Run from the repository root: ``.venv/bin/python -m bench.bench_app_overhead [--runs 30]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

import httpx

from bench._common import (
    DirectClient,
    Tab,
    Workload,
    percentile,
    rss_mb,
    running_stack,
    scripted,
)


async def measure(base_url: str, ui_url: str, runs: int, work: Workload) -> dict[str, list[float]]:
    """Alternate direct and app runs (``runs`` pairs), after one warm-up of each.

    Returns TTFTs in seconds (``direct``, ``app``) and relay rates in answers
    per second (``d_rate``, ``a_rate``: 1 / (last - first visible text)).
    """
    direct = DirectClient(base_url)
    out: dict[str, list[float]] = {"direct": [], "app": [], "d_rate": [], "a_rate": []}
    async with httpx.AsyncClient(timeout=120) as http:

        async def through_app() -> tuple[float, float]:
            tab = Tab(ui_url, http)
            await tab.open()
            try:
                timing = await tab.ask(work.text, marker=work.end)
            finally:
                await tab.close()
            return timing.first_s, timing.last_s

        try:
            await direct.ask(work)
            await through_app()
            for _ in range(runs):
                d = await direct.ask(work)
                a_first, a_last = await through_app()
                out["direct"].append(d.first_s)
                out["app"].append(a_first)
                # Relay: the same text over the time from the first to the last visible piece.
                out["d_rate"].append(1 / (d.last_s - d.first_s))
                out["a_rate"].append(1 / (a_last - a_first))
        finally:
            await direct.aclose()
    return out


def ms(values: list[float], q: float) -> float:
    """The ``q``-th percentile of ``values`` (seconds), in ms."""
    return percentile(values, q) * 1000


def main() -> None:
    """Start both processes, measure, print the table, stop both."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="interleaved pairs")
    parser.add_argument(
        "--scenario", default="steady", help="scripted stream (tests/fakes/kimi_server.py)"
    )
    args = parser.parse_args()
    with running_stack() as stack:
        idle_mb = rss_mb(stack.app_pid)
        out = asyncio.run(measure(stack.base_url, stack.ui_url, args.runs, scripted(args.scenario)))
        busy_mb = rss_mb(stack.app_pid)
    added = {q: ms(out["app"], q) - ms(out["direct"], q) for q in (50, 90)}
    relayed = statistics.median(out["a_rate"]) / statistics.median(out["d_rate"]) * 100
    rows = [
        ("TTFT direct p50 / p90 (ms)", f"{ms(out['direct'], 50):.1f} / {ms(out['direct'], 90):.1f}",
         ""),
        ("TTFT through the app p50 / p90 (ms)",
         f"{ms(out['app'], 50):.1f} / {ms(out['app'], 90):.1f}", ""),
        ("TTFT added by the app p50 / p90 (ms)", f"{added[50]:.1f} / {added[90]:.1f}", "<= 8"),
        ("tokens/s relayed (% of direct, median)", f"{relayed:.1f}", ">= 99.5"),
        ("app idle RSS (MB)", f"{idle_mb:.0f}", "< 300"),
        (f"app RSS after {args.runs + 1} chats (MB)", f"{busy_mb:.0f}", ""),
        ("app start to ready (s)", f"{stack.ready_s:.2f}", "<= 3"),
    ]  # fmt: skip
    print(f"| measure ({args.runs} interleaved pairs, scenario {args.scenario}) | value | target |")
    print("| --- | ---: | ---: |")
    for name, value, target in rows:
        print(f"| {name} | {value} | {target} |")


if __name__ == "__main__":
    main()
