"""Helpers for tests that run ``launch.sh`` as a subprocess."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import free_port

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = ROOT / "launch.sh"


def launch_env(log_dir: Path, **extra: str) -> dict[str, str]:
    """Environment for launch.sh: vLLM on a free port, its files in ``log_dir``.

    The files: ``llm.log``, the run-state directory ``run/`` and the env file
    ``env`` that launch.sh writes its generated secrets into (the repository's
    ``.env`` is never touched).
    """
    return {
        **os.environ,
        "KIMI_VLLM_PORT": str(free_port()),
        "KIMI_LLM_LOG": str(log_dir / "llm.log"),
        "KIMI_RUN_DIR": str(log_dir / "run"),
        "KIMI_ENV_FILE": str(log_dir / "env"),
        **extra,
    }


def live_processes_in_group(pgid: int) -> list[str]:
    """Command names of the processes in group ``pgid`` that are not zombies.

    Zombies are left out: a dead engine process reparented to PID 1 lingers as
    ``<defunct>`` until PID 1 reaps it, and it holds no memory or port.
    """
    alive = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :]
        state, _ppid, group = rest.split()[:3]
        if int(group) == pgid and state != "Z":
            alive.append(name)
    return alive
