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

Users who may sign in to the chat UI (:mod:`backend.auth`), in the database of
``KIMI_DATA_DIR`` / ``KIMI_DATABASE_URL``::

    python -m backend.cli user add NAME --password-stdin   # password: first line of stdin
    python -m backend.cli user passwd NAME --password-stdin
    python -m backend.cli user remove NAME
    python -m backend.cli user list                        # one name per line

Passwords are never taken as arguments (they would show in ``ps`` and shell
history). Without ``--password-stdin`` on a terminal, the password is asked
twice without echo. Exit status 0 on success, 1 with a one-line message.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from contextlib import aclosing
from dataclasses import asdict
from pathlib import Path
from typing import TextIO

from backend.auth import AuthError, check_name
from backend.chat import ChatSession
from backend.client import ChatClient
from backend.errors import ChatError, ImageError
from backend.events import Done
from backend.panel import option_changes, panel_fields
from backend.render import AnswerText, Note, ReasoningText, RenderEvent, TurnEnded
from backend.resources import Server
from backend.settings import Settings
from backend.store.core import Store, StoreError, open_store
from backend.turn_runner import TurnRunner
from backend.uploads import MediaWorkers, Upload

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
    user = commands.add_parser("user", help="manage who may sign in to the chat UI")
    actions = user.add_subparsers(dest="action", required=True)
    for name, helptext in (("add", "add a user"), ("passwd", "change a user's password")):
        command = actions.add_parser(name, help=helptext)
        command.add_argument("name", metavar="NAME")
        command.add_argument(
            "--password-stdin", action="store_true", help="read the password from stdin"
        )
    actions.add_parser("remove", help="remove a user").add_argument("name", metavar="NAME")
    actions.add_parser("list", help="print every user name, one per line")
    return parser


def read_password(from_stdin: bool, stdin: TextIO) -> str:
    """The new password: the first line of ``stdin``, or asked twice on the terminal.

    Raises:
        AuthError: no password given, or the two entries differ.
    """
    if from_stdin or not stdin.isatty():
        line = stdin.readline().rstrip("\r\n")
        if not line:
            raise AuthError("No password on stdin; pipe it in, e.g. from a password manager.")
        return line
    first = getpass.getpass("Password: ")
    if getpass.getpass("Password again: ") != first:
        raise AuthError("The two passwords differ.")
    return first


async def user_command(args: argparse.Namespace, store: Store, stdin: TextIO, out: TextIO) -> str:
    """Run ``user add|passwd|remove|list``; returns a line for stderr ("" for list).

    Raises:
        AuthError: bad name or password, name taken, no such user.
    """
    try:
        if args.action == "list":
            for name in await store.users.names():
                out.write(f"{name}\n")
            return ""
        if args.action == "remove":
            await store.users.remove(args.name)
            return f"removed user {args.name}"
        if args.action == "add":
            check_name(args.name)  # before asking for a password
        password = read_password(args.password_stdin, stdin)
        if args.action == "add":
            await store.users.add(args.name, password)
            return f"added user {args.name}; restart the app if this is the first user"
        await store.users.set_password(args.name, password)
        return f"changed the password of {args.name}"
    finally:
        await store.close()


async def ask(args: argparse.Namespace, settings: Settings, out: TextIO, err: TextIO) -> None:
    """Run ``ask`` through a :class:`backend.turn_runner.TurnRunner`, as the chat UI does.

    Raises:
        ChatError: any failure a person can act on (printed by :func:`main`).
    """
    settings = settings.model_copy(update={"base_url": args.base_url})
    client, workers = ChatClient.from_settings(settings), MediaWorkers()  # owned here
    session = ChatSession.create(settings, Server.of(client, settings), workers)
    try:
        await session.connect(args.model or None)
        uploads = [Upload(name=Path(p).name, path=Path(p)) for p in args.image]
        prepared = await session.prepare_uploads(uploads)
        if prepared.problems:
            raise ImageError(" ".join(prepared.problems))
        for notice in prepared.notices:
            err.write(f"note: {notice}\n")
        if args.temperature is not None:  # checked as the settings panel's value is
            assert session.options is not None  # connect() set them
            fields = panel_fields(session.profile, session.options, session.max_model_len)
            session.with_options(**option_changes({"temperature": args.temperature}, fields))
        turn = TurnRunner(session).new_turn("cli", args.question, prepared.images, args.max_tokens)
        printer = Printer(args.jsonl, out, err)
        async with aclosing(turn) as events:
            async for event in events:
                printer.show(event)
        await session.settled()
    finally:
        await session.aclose()
        await client.aclose()
        workers.close()


class Printer:
    """Prints render events: reasoning (dimmed on a terminal) on ``err``, the answer on
    ``out``; with ``jsonl``, one JSON object per event on ``out``.

    Raises (from :meth:`show`):
        ChatError: the turn failed; its message is the error note's.
    """

    def __init__(self, jsonl: bool, out: TextIO, err: TextIO) -> None:
        self.jsonl, self.out, self.err = jsonl, out, err
        self.dim = err.isatty()
        self.answered = False
        self.error = ""

    def show(self, event: RenderEvent) -> None:
        """Print one event (see the class docstring)."""
        if isinstance(event, ReasoningText):
            if event.text:  # an empty one opens the step, which a terminal does not draw
                self._part("reasoning", event.text, self.err, dim=self.dim)
        elif isinstance(event, AnswerText):
            if not self.answered and not self.jsonl:
                self.err.write("\n")
            self.answered = True
            self._part("answer", event.text, self.out)
        elif isinstance(event, Note) and event.level == "error":
            self.error = event.text
        elif isinstance(event, Note) and not event.buttons:
            self.err.write(f"note: {event.text}\n")
        elif isinstance(event, TurnEnded):
            self._ended(event)

    def _part(self, kind: str, text: str, stream: TextIO, dim: bool = False) -> None:
        if self.jsonl:
            self.out.write(json.dumps({"kind": kind, "text": text}) + "\n")
        else:
            stream.write(f"{DIM}{text}{RESET}" if dim else text)
            stream.flush()

    def _ended(self, ended: TurnEnded) -> None:
        if ended.status == "failed" or ended.done is None:
            raise ChatError(self.error or ended.status)
        if ended.done.answer_in_reasoning and not self.jsonl:
            self.out.write(ended.answer)  # streamed as reasoning: it was the answer
        report_done(ended.done, ended.reasoning, ended.answer, self.jsonl, self.out, self.err)
        self.out.flush()


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
    if args.command == "user":
        try:
            store, _ = open_store(settings)
            said = asyncio.run(user_command(args, store, sys.stdin, sys.stdout))
        except (StoreError, AuthError) as exc:
            sys.stderr.write(f"error: {exc}\n")
            return 1
        if said:
            sys.stderr.write(f"{said}\n")
        return 0
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
