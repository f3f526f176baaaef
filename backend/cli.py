"""Terminal front end: ask a vLLM server one question, with images, from a shell.

Usage::

    python -m backend.cli ask [--image PATH]... [--base-url URL] [--model NAME]
        [--max-tokens N] [--temperature T] [--jsonl] QUESTION

Plain output: reasoning dimmed on stderr, the answer on stdout. ``--jsonl``: one
JSON object per line on stdout as events arrive (``{"kind": "reasoning"|"answer",
"text": ...}``), then ``{"kind": "done", "reasoning", "answer", "finish_reason",
"usage", "ttft_s", "elapsed_s"}``. Exit status 0 on success, 1 with a one-line
message on stderr for anything a person can fix (bad image, unreachable server,
rejected request), 130 on Ctrl-C. Same backend code as the chat UI.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from dataclasses import asdict
from typing import TextIO

from backend.client import ChatClient, ChatRequest
from backend.conversation import Budget, Conversation
from backend.errors import ChatError
from backend.events import AnswerDelta, Done, ReasoningDelta
from backend.images import prepare_image
from backend.settings import Settings, profile_for

DIM, RESET = "\033[2m", "\033[0m"


def build_parser(settings: Settings) -> argparse.ArgumentParser:
    """The argument parser; defaults come from ``settings``."""
    parser = argparse.ArgumentParser(
        prog="python -m backend.cli", description=__doc__.split("\n")[0]
    )
    commands = parser.add_subparsers(dest="command", required=True)
    ask = commands.add_parser("ask", help="ask one question and stream the answer")
    ask.add_argument("question", metavar="QUESTION")
    ask.add_argument("--image", action="append", default=[], metavar="PATH", help="repeatable")
    ask.add_argument("--base-url", default=settings.base_url, help="default: %(default)s")
    ask.add_argument("--model", default=settings.model, help="default: first of /v1/models")
    ask.add_argument("--max-tokens", type=int, default=None, help="default: the model's profile")
    ask.add_argument("--temperature", type=float, default=None, help="default: the model's profile")
    ask.add_argument("--jsonl", action="store_true", help="one JSON event per line on stdout")
    return parser


async def ask(args: argparse.Namespace, settings: Settings, out: TextIO, err: TextIO) -> None:
    """Run ``ask``: prepare images, stream the answer, print events.

    Raises:
        ChatError: any failure a person can act on (printed by :func:`main`).
    """
    client = ChatClient(
        args.base_url,
        settings.api_key.get_secret_value(),
        timeout_s=settings.request_timeout_s,
        connect_timeout_s=settings.connect_timeout_s,
    )
    try:
        models = await client.list_models()
        if not models:
            raise ChatError(f"The server at {args.base_url} serves no model.")
        served = next((m for m in models if m.id == args.model), None) if args.model else models[0]
        if served is None:
            names = ", ".join(m.id for m in models)
            raise ChatError(f"The server does not serve '{args.model}'; it serves: {names}.")
        profile = profile_for(served.id)
        images = [
            await asyncio.to_thread(prepare_image, path, profile.in_token_limit)
            for path in args.image
        ]
        conversation = Conversation()
        turn = conversation.start_turn(args.question, images)
        budget = Budget(
            max_model_len=served.max_model_len or settings.max_model_len,
            max_images=settings.max_images_per_prompt,
            max_tokens=args.max_tokens or profile.max_tokens,
        )
        plan = conversation.plan(turn, budget)
        request = ChatRequest(
            model=served.id,
            messages=plan.messages,
            max_tokens=plan.max_tokens,
            temperature=profile.temperature if args.temperature is None else args.temperature,
            thinking=profile.thinking,
            request_id=f"cli-{uuid.uuid4().hex}",
        )
        dim = err.isatty()
        async for event in client.stream(request):
            if isinstance(event, ReasoningDelta):
                turn.reasoning += event.text
                if args.jsonl:
                    out.write(json.dumps({"kind": "reasoning", "text": event.text}) + "\n")
                else:
                    err.write(f"{DIM}{event.text}{RESET}" if dim else event.text)
                    err.flush()
            elif isinstance(event, AnswerDelta):
                if not args.jsonl and not turn.answer and turn.reasoning:
                    err.write("\n")
                turn.answer += event.text
                out.write(
                    json.dumps({"kind": "answer", "text": event.text}) + "\n"
                    if args.jsonl
                    else event.text
                )
            else:
                report_done(event, turn.reasoning, turn.answer, args.jsonl, out, err)
            out.flush()
    finally:
        await client.aclose()


def report_done(
    done: Done, reasoning: str, answer: str, jsonl: bool, out: TextIO, err: TextIO
) -> None:
    """Print the end of a stream: the ``done`` JSON line, or a newline and a cut-off note."""
    if jsonl:
        record = {
            "kind": "done",
            "reasoning": reasoning,
            "answer": answer,
            "finish_reason": done.finish_reason,
            "usage": None if done.usage is None else asdict(done.usage),
            "ttft_s": done.ttft_s,
            "elapsed_s": done.elapsed_s,
        }
        out.write(json.dumps(record) + "\n")
        return
    out.write("\n")
    if done.finish_reason == "length":
        err.write(
            "[the answer was cut off: max tokens reached; retry with a larger --max-tokens]\n"
        )


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status (0 ok, 1 failure, 130 interrupted)."""
    settings = Settings()
    args = build_parser(settings).parse_args(argv)
    try:
        asyncio.run(ask(args, settings, sys.stdout, sys.stderr))
    except ChatError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
