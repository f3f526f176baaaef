"""What the chat app adds to a direct call to the same OpenAI-compatible server, one chat
at a time.

The scripted server and the app in front of it (:func:`bench.harness.running_stack`);
the same question asked ``--runs`` times directly (:class:`bench.harness.DirectClient`)
and as many times through the app (a fresh tab each, :class:`bench.harness.Tab`), in
rounds whose order rotates, after one warm-up of each. Measured: time to first token
(TTFT: question sent to the first visible text; through the app: ``client_message`` to
the first frame with text) p50 and p90, the share of the direct tokens per second the
app relays (the same text over the time from the first to the last visible piece), the
app's memory idle and after the chats, its start time. The load benchmarks
(:mod:`bench.bench_load`, :mod:`bench.bench_burst`) measure the same under concurrency.

Run from the repository root: ``.venv/bin/python -m bench.bench_app_overhead [--runs 30]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

import httpx

from bench.harness import (
    DirectClient,
    Report,
    Stack,
    Tab,
    Timing,
    Workload,
    percentile,
    rotated,
    rss_mb,
    running_stack,
    scripted,
    table,
)


async def measure(stack: Stack, runs: int, work: Workload) -> dict[str, list[Timing]]:
    """``runs`` rounds of one direct ask and one through a fresh tab, after a warm-up each."""
    direct = DirectClient(stack.base_url)
    out: dict[str, list[Timing]] = {"direct": [], "app": []}
    async with httpx.AsyncClient(timeout=120) as http:

        async def through_app() -> Timing:
            tab = Tab(stack.ui_url, http)
            await tab.open()
            try:
                return await tab.ask(work.text, marker=work.end)
            finally:
                await tab.close()

        sides = {"direct": lambda: direct.ask(work), "app": through_app}
        try:
            for r in range(runs + 1):
                for side in rotated(list(sides), r):
                    timing = await sides[side]()
                    if r:  # the first round warms up
                        out[side].append(timing)
        finally:
            await direct.aclose()
    return out


def main() -> None:
    """Start both processes, measure, print the table, stop both."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--runs", type=int, default=30, help="rounds of one ask per side")
    parser.add_argument(
        "--scenario", default="steady", help="the scripted stream (tests/fakes/kimi_server.py)"
    )
    args = parser.parse_args()
    with running_stack() as stack:
        idle_mb = rss_mb(stack.app_pid)
        out = asyncio.run(measure(stack, args.runs, scripted(args.scenario)))
        busy_mb = rss_mb(stack.app_pid)

    def ms(side: str, q: float) -> float:
        return percentile([t.first_s for t in out[side]], q) * 1000

    def rate(side: str) -> float:
        return statistics.median(1 / (t.last_s - t.first_s) for t in out[side])

    ttft = {side: f"{ms(side, 50):.1f} / {ms(side, 90):.1f}" for side in out}
    added = " / ".join(f"{ms('app', q) - ms('direct', q):+.1f}" for q in (50, 90))
    rows = [
        ["TTFT direct p50 / p90 (ms)", ttft["direct"]],
        ["TTFT through the app p50 / p90 (ms)", ttft["app"]],
        ["TTFT added p50 / p90 (ms)", added],
        ["tokens/s relayed (% of direct, median)", f"{rate('app') / rate('direct'):.1%}"],
        ["app idle RSS (MB)", f"{idle_mb:.0f}"],
        [f"app RSS after {args.runs + 1} chats (MB)", f"{busy_mb:.0f}"],
        ["app start to ready (s)", f"{stack.ready_s:.2f}"],
    ]
    report = Report("What the app adds to one chat", "app_overhead")
    report.add(
        f"{args.runs} rounds (sides in rotating order) after a warm-up, scripted "
        f"`{args.scenario}` stream.",
        table(["measure", "value"], rows),
    )
    ttfts = {side: [t.first_s for t in out[side]] for side in out}
    report.finish({"args": vars(args), "idle_mb": idle_mb, "busy_mb": busy_mb,
                   "ready_s": stack.ready_s, "ttft_s": ttfts})  # fmt: skip


if __name__ == "__main__":
    main()
