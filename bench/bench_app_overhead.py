"""What the chat app adds to a direct call to the same OpenAI-compatible server.

Starts the scripted Kimi-VL stream server (``tests/fakes/kimi_server.py``) and the
app (``chainlit run app.py --headless``) against it, then asks the same question
N times directly (httpx, SSE) and N times through the app (Chainlit's socket.io
protocol, as the browser speaks it; see facts.md "Chainlit's wire protocol").

Measured: time to first token (TTFT: request sent -> first visible reasoning or
answer text; through the app: ``client_message`` sent -> ``stream_start``), the
share of the direct tokens per second the app relays (same text over the time
from the first to the last visible piece), the app's idle memory (RSS) and its start
time (process start -> ``GET /`` answers). Prints a table; targets from the
project brief: <= 8 ms added TTFT, >= 99.5% relayed, < 300 MB idle, ready in 3 s.

Run from the repository root: ``.venv/bin/python -m bench.bench_app_overhead [--runs 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import socketio

from backend.reasoning import ReasoningSplitter
from tests.conftest import free_port, wait_for_200

ROOT = Path(__file__).resolve().parent.parent
QUESTION = "What is in this picture?"


def wait_http(url: str, timeout_s: float = 60) -> None:
    """Return once ``url`` answers 200 (polled every 20 ms, for the start time)."""
    if not wait_for_200(url, timeout_s, interval_s=0.02):
        raise RuntimeError(f"{url} not ready after {timeout_s} s")


def rss_mb(pid: int) -> float:
    """Resident memory of a process in MB (from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def direct(base_url: str, question: str) -> tuple[float, float, float]:
    """(first visible text, last text, end) in seconds, straight to the server.

    "Visible" text is what a client can show: the ◁think▷ markers split out by
    the same :class:`backend.reasoning.ReasoningSplitter` the app uses, so both
    sides wait for a marker split across chunks alike.
    """
    body = {
        "model": "kimi-vl-thinking-2506",
        "stream": True,
        "messages": [{"role": "user", "content": question}],
    }
    splitter = ReasoningSplitter(starts_in_reasoning=True)
    async with httpx.AsyncClient(timeout=60) as client:
        start = time.perf_counter()
        first = last = None
        async with client.stream("POST", f"{base_url}/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                choices = json.loads(line[6:])["choices"]
                if choices and splitter.feed(choices[0]["delta"].get("content") or ""):
                    last = time.perf_counter()
                    first = first or last
        end = time.perf_counter()
        return (first or end) - start, (last or end) - start, end - start


async def through_app(ui_url: str, question: str) -> tuple[float, float, float]:
    """(first text, last text, end of turn) in seconds, through the app's websocket."""
    session_id = str(uuid.uuid4())
    client = socketio.AsyncClient()
    done = asyncio.Event()
    seen: list[float] = []

    async def on_text(_: object) -> None:
        seen.append(time.perf_counter())

    async def on_task_end(_: object = None) -> None:
        done.set()

    client.on("stream_start", on_text)
    client.on("stream_token", on_text)
    client.on("task_end", on_task_end)
    await client.connect(
        ui_url,
        socketio_path="/ws/socket.io",
        transports=["websocket"],
        headers={"Cookie": f"X-Chainlit-Session-id={session_id}"},
        auth={
            "clientType": "webapp",
            "sessionId": session_id,
            "threadId": "",
            "userEnv": "{}",
            "chatProfile": "",
        },
    )
    await client.emit("connection_successful")
    await asyncio.sleep(0.5)  # on_chat_start: connect to the model server
    message = {
        "threadId": "",
        "id": str(uuid.uuid4()),
        "name": "User",
        "type": "user_message",
        "output": question,
        "createdAt": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
        "metadata": {},
    }
    done.clear()  # on_chat_start's own task_end may have come already
    seen.clear()
    start = time.perf_counter()
    await client.emit("client_message", {"message": message, "fileReferences": []})
    await asyncio.wait_for(done.wait(), timeout=120)
    end = time.perf_counter()
    await client.disconnect()
    return (seen[0] if seen else end) - start, (seen[-1] if seen else end) - start, end - start


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


async def measure(base_url: str, ui_url: str, runs: int, question: str) -> dict[str, list[float]]:
    """Alternate direct and app runs, after one warm-up of each."""
    await direct(base_url, question)
    await through_app(ui_url, question)
    out: dict[str, list[float]] = {"direct": [], "app": [], "d_rate": [], "a_rate": []}
    for _ in range(runs):
        d_first, d_last, _ = await direct(base_url, question)
        a_first, a_last, _ = await through_app(ui_url, question)
        out["direct"].append(d_first)
        out["app"].append(a_first)
        # Relay: the same text over the time from the first to the last visible piece.
        out["d_rate"].append(1 / (d_last - d_first))
        out["a_rate"].append(1 / (a_last - a_first))
    return out


def main() -> None:
    """Start both processes, measure, print the table, stop both."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument(
        "--scenario", default="steady", help="scripted stream (tests/fakes/kimi_server.py)"
    )
    args = parser.parse_args()
    server_port, ui_port = free_port(), free_port()
    base_url = f"http://127.0.0.1:{server_port}/v1"
    env = {**os.environ, "KIMI_BASE_URL": base_url, "KIMI_APP_LOG": ""}
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.kimi_server", "--port", str(server_port)],
        cwd=ROOT,
    )
    chainlit = str(Path(sys.executable).with_name("chainlit"))
    started = time.monotonic()
    ui = subprocess.Popen(
        [chainlit, "run", "app.py", "--headless", "--host", "127.0.0.1", "--port", str(ui_port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"http://127.0.0.1:{server_port}/health")
        wait_http(f"http://127.0.0.1:{ui_port}/")
        ready_s = time.monotonic() - started
        time.sleep(1)
        idle_mb = rss_mb(ui.pid)
        question = f"{QUESTION} #scenario={args.scenario}"
        out = asyncio.run(measure(base_url, f"http://127.0.0.1:{ui_port}", args.runs, question))
        busy_mb = rss_mb(ui.pid)
    finally:
        ui.terminate()
        server.terminate()
        ui.wait(timeout=30)
        server.wait(timeout=30)
    added = median_ms(out["app"]) - median_ms(out["direct"])
    relayed = statistics.median(out["a_rate"]) / statistics.median(out["d_rate"]) * 100
    rows = [
        ("TTFT direct (median ms)", f"{median_ms(out['direct']):.1f}", ""),
        ("TTFT through the app (median ms)", f"{median_ms(out['app']):.1f}", ""),
        ("TTFT added by the app (ms)", f"{added:.1f}", "<= 8"),
        ("tokens/s relayed (% of direct)", f"{relayed:.1f}", ">= 99.5"),
        ("app idle RSS (MB)", f"{idle_mb:.0f}", "< 300"),
        (f"app RSS after {args.runs + 1} chats (MB)", f"{busy_mb:.0f}", ""),
        ("app start to ready (s)", f"{ready_s:.2f}", "<= 3"),
    ]
    print(f"| measure ({args.runs} runs each, scenario {args.scenario}) | value | target |")
    print("| --- | ---: | ---: |")
    for name, value, target in rows:
        print(f"| {name} | {value} | {target} |")


if __name__ == "__main__":
    main()
