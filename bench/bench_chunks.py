"""The client's CPU per streamed chunk: the SDK's typed chunks against the raw stream.

A profile of the app during text chats put 71% of its CPU in
the OpenAI SDK and httpx, half of it SSE decoding and half a pydantic object
per chunk. This streams the same chat completion (scripted ``long``: 30,003
content chunks at once, plus role and usage chunks) from the scripted server
(a subprocess) several ways through one ``openai.AsyncOpenAI`` client, and
reports the client process's CPU time per chunk (``time.process_time``, so the
server's own CPU does not count):

* ``sdk``: ``chat.completions.create(stream=True)``, typed
  ``ChatCompletionChunk`` objects (what ``backend/client.py`` did before);
* ``raw-lines-json`` / ``raw-lines-orjson``: the SDK's raw-response interface
  (``with_streaming_response.create``), ``iter_lines()``, ``json.loads`` or
  ``orjson.loads`` on each ``data:`` line;
* ``raw-bytes-orjson``: ``iter_bytes()`` split on blank lines by hand, orjson on
  the bytes (no text decoding);
* ``client-every-token``: :meth:`backend.client.ChatClient.stream`, the app's
  own path (events out, reasoning split included), one chunk per token;
* ``client``: the same with the server pace's ``stream_interval`` (learnt from the
  first answer: one UI update's worth of tokens per chunk; the scripted server
  groups as vLLM does), the figure that matters.

CPU is divided by the stream's tokens (one chunk each without ``stream_interval``).

Each way also reports the text it got, which must be the same for all.
Run from the repository root: ``.venv/bin/python -m bench.bench_chunks [--repeats 5]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any, cast

import openai
import orjson

from backend.client import ChatClient, ChatRequest
from backend.events import AnswerDelta, Done, ReasoningDelta, ReasoningOpened
from backend.families import THINKING_2506
from backend.pacing import ServerPace
from bench.harness import THINKING, Report, question, scripted_server, table

BODY: dict[str, Any] = {
    "model": THINKING,
    "messages": [{"role": "user", "content": question("long")}],
    "stream": True,
    "stream_options": {"include_usage": True},
}
"""The request; ``--scenario`` replaces its question."""


def content_of(chunk: dict[str, Any]) -> str:
    """``choices[0].delta.content`` of a chunk dict, or ""."""
    choices = chunk.get("choices")
    if not choices:
        return ""
    return str(choices[0].get("delta", {}).get("content") or "")


async def way_sdk(client: openai.AsyncOpenAI) -> tuple[int, str]:
    """Typed chunks from the SDK."""
    n, parts = 0, []
    stream = await client.chat.completions.create(**cast(Any, BODY))
    async with stream:
        async for chunk in stream:
            n += 1
            if chunk.choices and chunk.choices[0].delta.content:
                parts.append(chunk.choices[0].delta.content)
    return n, "".join(parts)


def lines_way(loads: Callable[[str], Any]) -> Callable[[openai.AsyncOpenAI], Awaitable[Any]]:
    """The raw response read line by line, each ``data:`` line parsed with ``loads``."""

    async def way(client: openai.AsyncOpenAI) -> tuple[int, str]:
        n, parts = 0, []
        async with client.chat.completions.with_streaming_response.create(
            **cast(Any, BODY)
        ) as response:
            async for line in response.iter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                n += 1
                parts.append(content_of(loads(line[6:])))
        return n, "".join(parts)

    return way


async def way_bytes(client: openai.AsyncOpenAI) -> tuple[int, str]:
    """The raw response as bytes, events cut at blank lines, orjson on the bytes."""
    n, parts = 0, []
    buffer = b""
    async with client.chat.completions.with_streaming_response.create(
        **cast(Any, BODY)
    ) as response:
        async for data in response.iter_bytes():
            buffer += data
            *events, buffer = buffer.split(b"\n\n")
            for event in events:
                if not event.startswith(b"data: ") or event == b"data: [DONE]":
                    continue
                n += 1
                parts.append(content_of(orjson.loads(event[6:])))
    return n, "".join(parts)


async def way_client(pace: ServerPace) -> tuple[int, str]:
    """The app's ``ChatClient.stream``, asked as its server's pace asks (events, not
    chunks: ``n`` counts events); the pace learns from each answer, as the app's does."""
    request = ChatRequest(
        model=THINKING,
        messages=BODY["messages"],
        max_tokens=40000,
        temperature=0,
        thinking=True,
        prefill=THINKING_2506.reply_start,
    )
    n, parts = 0, []
    async for event in pace.client.stream(pace.request(request)):
        if isinstance(event, ReasoningOpened):  # the server took it: no chunk yet
            continue
        n += 1
        if isinstance(event, Done):
            pace.learn(event)
        if isinstance(event, ReasoningDelta | AnswerDelta):
            parts.append(event.text)
    return n, "".join(parts)


async def measure(base_url: str, repeats: int, concurrency: int) -> dict[str, dict[str, Any]]:
    """CPU microseconds per chunk of each way (median of ``repeats``), and its text length.

    Each repeat runs ``concurrency`` streams at once; chunks are counted over all.
    """
    client = openai.AsyncOpenAI(base_url=base_url, api_key="EMPTY", max_retries=0)
    app_client = ServerPace(ChatClient(base_url, "EMPTY"))
    every_token = ServerPace(ChatClient(base_url, "EMPTY"), stream_interval=1)
    ways: dict[str, Callable[[], Awaitable[tuple[int, str]]]] = {
        "sdk": lambda: way_sdk(client),
        "raw-lines-json": lambda: lines_way(json.loads)(client),
        "raw-lines-orjson": lambda: lines_way(orjson.loads)(client),
        "raw-bytes-orjson": lambda: way_bytes(client),
        "client-every-token": lambda: way_client(every_token),
        "client": lambda: way_client(app_client),
    }
    out: dict[str, dict[str, Any]] = {}
    chunks = 0
    for name, way in ways.items():
        await way()  # warm-up
        per_chunk: list[float] = []
        text = ""
        for _ in range(repeats):
            cpu0 = time.process_time()
            results = await asyncio.gather(*(way() for _ in range(concurrency)))
            elapsed = time.process_time() - cpu0
            n, text = results[0]
            chunks = chunks if name.startswith("client") else n * concurrency
            per_chunk.append(elapsed / chunks * 1e6)
        out[name] = {"us_per_chunk": statistics.median(per_chunk), "text_chars": len(text)}
    await client.close()
    await app_client.client.aclose()
    await every_token.client.aclose()
    return out


def main() -> None:
    """Start the scripted server, measure each way, print and write the table."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--scenario", default="long", help="long: 30,003 chunks at once; paced: 200 at 10 ms"
    )
    parser.add_argument("--concurrency", type=int, default=1, help="streams at once")
    args = parser.parse_args()
    BODY["messages"] = [{"role": "user", "content": question(args.scenario)}]
    with scripted_server() as base_url:
        out = asyncio.run(measure(base_url, args.repeats, args.concurrency))
    base = out["sdk"]["us_per_chunk"]
    rows = [
        [name, f"{row['us_per_chunk']:.1f}", f"{row['us_per_chunk'] / base:.0%}", row["text_chars"]]
        for name, row in out.items()
    ]
    report = Report("The client's CPU per streamed chunk", "chunks")
    report.add(
        f"Scripted `{args.scenario}`, {args.concurrency} stream(s) at once, median of "
        f"{args.repeats}.",
        table(["way", "client CPU per token (µs)", "vs sdk", "text chars"], rows),
    )
    report.finish({"args": vars(args), "ways": out})


if __name__ == "__main__":
    main()
