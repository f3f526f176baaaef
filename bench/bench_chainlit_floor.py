"""What Chainlit's own page adds to the first words: a bare Chainlit app in the same tab probe.

Chainlit 2.12's page renders the question and each socket frame before the first
words reach its script (docs/benchmarks.md, "The frames before the first words in
the tab"). This measures that floor apart from this app: a Chainlit app of a dozen
lines (:data:`BARE_APP`: no sign-in, Chainlit's default configuration, the answer
streamed token by token into one message with ``stream_token``) in front of the
scripted server, asked the short answer of ``bench/bench_tab.py`` in a fresh page
each round, beside a direct call (httpx) to the same server. The times are the ones
``bench/bench_tab.py`` reports as "reached the tab": from the question leaving the
tab to the socket frame with the first word reaching the page's script
(``bench/tab_probe.js``).

Prints the medians of ``--rounds`` rounds (after one warm-up) and writes
``artifacts/bench/chainlit_floor.md``/``.json``. Run from the repository root on a quiet
machine: ``.venv/bin/python -m bench.bench_chainlit_floor [--rounds 12]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

from bench.harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    END,
    INSTRUCT,
    SHORT_ANSWER,
    Report,
    direct_first_words,
    free_port,
    hermetic_environ,
    new_page,
    scripted_server,
    started,
    table,
    type_question,
    wait_mark,
    wait_ready,
)

BARE_APP = f'''
import os

import chainlit as cl
import openai

client = openai.AsyncOpenAI(base_url=os.environ["BARE_BASE_URL"], api_key="none")


@cl.on_message
async def on_message(message: cl.Message) -> None:
    reply = cl.Message(content="")
    stream = await client.chat.completions.create(
        model="{INSTRUCT}",
        stream=True,
        messages=[{{"role": "user", "content": message.content}}],
    )
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            await reply.stream_token(chunk.choices[0].delta.content)
    await reply.send()
'''
"""The bare app: Chainlit's own streaming example, against the scripted server."""


@contextmanager
def bare_chainlit(base_url: str) -> Iterator[str]:
    """The bare app, running from a temporary folder (Chainlit writes its default
    configuration there); yields its URL."""
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "app.py").write_text(BARE_APP)
        port = free_port()
        command = [sys.executable, "-m", "chainlit", "run", "app.py", "--headless"]
        command += ["--host", "127.0.0.1", "--port", str(port)]
        env = hermetic_environ(BARE_BASE_URL=base_url)
        with started(command, env, cwd=Path(folder)) as app:
            wait_ready(f"http://127.0.0.1:{port}/", app)
            yield f"http://127.0.0.1:{port}/"


def rounds(url: str, base_url: str, count: int) -> list[tuple[float, float]]:
    """(direct, bare tab) seconds to the first word, per round after one warm-up."""
    seen: list[tuple[float, float]] = []
    with httpx.Client(timeout=60) as http, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = new_page(browser)
        for i in range(count + 1):
            page.goto(url)
            page.locator("#chat-input").wait_for()
            time.sleep(0.5)  # the page settles, as bench_tab's settle()
            direct = direct_first_words(http, base_url, SHORT_ANSWER, INSTRUCT)
            type_question(page, SHORT_ANSWER, {"words": r"\ba0\b", "end": END})
            wait_mark(page, "end")
            dump = page.evaluate("() => window.__probe.dump()")
            tab = (dump["socketMarks"]["words"] - dump["leftAt"]) / 1000
            if i:
                seen.append((direct, tab))
        browser.close()
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    report = Report("Chainlit's own page: the first words in a bare Chainlit tab", "chainlit_floor")
    with scripted_server([INSTRUCT]) as base_url, bare_chainlit(base_url) as url:
        seen = rounds(url, base_url, args.rounds)
    direct = statistics.median(d for d, _ in seen) * 1000
    tab = statistics.median(t for _, t in seen) * 1000
    added = statistics.median(t - d for d, t in seen) * 1000
    report.add(
        table(
            [
                "side",
                "first words reached the page's script (sent to message event)",
                "added (median of rounds)",
            ],
            [
                ["direct", f"{direct:.1f} ms", ""],
                ["bare Chainlit 2.12", f"{tab:.1f} ms", f"+{added:.1f} ms"],
            ],
        ),
        f"{len(seen)} rounds after one warm-up, a fresh page each.",
    )
    report.finish({"rounds": seen})


if __name__ == "__main__":
    main()
