"""Typed settings from the environment and ``.env`` (pydantic-settings).

Every setting is an environment variable with the prefix ``KIMI_`` (for example
``KIMI_BASE_URL``); ``.env.example`` documents each one. The launcher reads these
and its own (:class:`serving.settings.LaunchSettings`, a subclass) and hands them to
the app as ``KIMI_*`` variables, so the app, the CLI and the launcher never disagree.

Model profiles hold what differs between the served models (sampling defaults
and the image token budget); sources are cited per profile.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from backend.i18n import msg
from backend.reasoning import THINK_OPEN


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
        dev_shaped: the dev model standing in for Thinking-2506: with dev mode on,
            the app shapes its output into "◁think▷ … ◁/think▷ answer" with vLLM
            structured outputs and reads it as a Thinking model's (backend.planning).
    """

    served_name: str
    hf_id: str
    label: str
    thinking: bool
    temperature: float
    max_tokens: int
    in_token_limit: int
    dev_shaped: bool = False

    @property
    def reply_start(self) -> str:
        """What a request writes of the reply itself (``ChatRequest.prefill``): the
        opening marker for a Thinking model, nothing for others.

        Kimi-VL-A3B-Thinking begins every reply with ``◁think▷``, and vLLM sends a
        stream's first token at once and the next ones ``stream_interval`` tokens a chunk
        (``vllm/v1/engine/output_processor.py``), so a reply that writes the marker itself
        would show its first words only a chunk later. Written by the request, the marker
        is not generated: the first token is a reasoning word, sent at once, and later
        chunks can carry several tokens. Kimi-VL's chat template renders an assistant
        message as written (docs/facts.md), so the model reads the same prompt it would
        have written; the reasoning parser (``serving/kimi_reasoning.py``) reads a
        prompt whose last assistant turn opened its reasoning as still reasoning.
        The dev model's profile is not a Thinking one (dev mode's shape,
        ``backend.planning.DEV_SHAPE_REGEX``, writes its marker), so its requests write
        none.
        """
        return THINK_OPEN if self.thinking else ""


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
    hf_id="(tiny random-weights model built by serving.devmodel)",
    label=msg("Dev model (random weights: answers are noise)"),  # shown: translated
    thinking=False,  # random weights write no markers; dev mode shapes them in
    dev_shaped=True,
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
    """What the app and the CLI read (launch.sh's own settings are in ``serving.settings``).

    Read from environment variables ``KIMI_*`` and from ``.env`` in the working
    directory, or the file ``KIMI_ENV_FILE`` names (read when this module is imported).
    Errors: pydantic's ``ValidationError`` on a malformed value.
    """

    model_config = SettingsConfigDict(
        env_prefix="KIMI_", env_file=os.environ.get("KIMI_ENV_FILE") or ".env", extra="ignore"
    )

    # Where the app finds vLLM.
    base_url: str = Field("http://127.0.0.1:8100/v1", description="vLLM OpenAI API base URL")
    api_key: SecretStr = Field(SecretStr("EMPTY"), description="API key vLLM expects")
    model: str = Field("", description="served model name; empty = first one /v1/models lists")
    servers: str = Field(
        "", description="comma-separated base URLs of several vLLM servers (launch.sh --both)"
    )
    request_timeout_s: float = Field(
        600.0, gt=0, description="httpx read timeout: longest silence between two chunks, seconds"
    )
    connect_timeout_s: float = Field(5.0, gt=0, description="seconds to wait for a connection")
    first_token_timeout_s: float = Field(
        300.0, gt=0, description="give up when no text came this long after sending, seconds"
    )
    idle_timeout_s: float = Field(
        120.0, gt=0, description="give up when a started answer is silent this long, seconds"
    )
    server_back_wait_s: float = Field(
        600.0,
        ge=0,
        description="how long a message sent while the model server cannot be reached "
        "(restarting, loading) waits for it, then is answered by itself, seconds",
    )
    plan_timeout_s: float = Field(
        2.0,
        gt=0,
        description="longest wait for the server's exact count of a prompt near the limit "
        "before its request is sent, seconds; then the estimate is used",
    )
    stream_interval: int = Field(
        0,
        ge=0,
        description="tokens per streamed chunk asked of vLLM >= 0.32 (its stream_interval "
        "field); 0 = one UI update's worth at the measured speed (40 tokens/s assumed "
        "until an answer is timed; every token for a "
        "request whose first token would be the opening marker alone: dev mode's "
        "shape), 1 = every token",
    )

    # The server's limits, when it does not say (vLLM's /v1/models gives max_model_len).
    max_model_len: int = Field(32768, gt=0, description="max model length in tokens")
    max_images_per_prompt: int = Field(64, gt=0, description="vLLM --limit-mm-per-prompt image")

    # The UI.
    app_log: str = Field("app.log", description="the app's request log; empty = stderr only")
    log_max_mb: int = Field(50, gt=0, description="app.log and llm.log rotate at this size (MB)")
    log_keep: int = Field(5, ge=1, description="rotated logs kept (.1 ... .N)")
    allow_anonymous: bool = Field(
        False, description="let the UI listen beyond 127.0.0.1 with no user to sign in"
    )
    dev_mode: bool = Field(False, description="launch.sh --dev: the UI says answers are noise")
    show_stats: bool = Field(
        True,
        description="new chats show the timings under each answer (TTFT, tokens/s); "
        "the settings panel switches it per chat",
    )
    max_upload_mb: int = Field(20, gt=0, description="largest accepted upload in MB")
    upload_session_mb: int = Field(
        300, gt=0, description="most MB of uploads one chat session may hold (sent or not)"
    )
    upload_user_mb: int = Field(
        1000,
        gt=0,
        description="most MB of uploads one user (in open mode: one browser) may hold in "
        "all their open chats together",
    )
    chat_queue: int = Field(
        2,
        ge=0,
        description="answers that may wait behind the one a chat is giving; more are "
        "refused with a sentence",
    )
    user_answers: int = Field(
        3,
        gt=0,
        description="answers one user (in open mode: one browser) may have running or "
        "waiting at once in all their tabs; more are refused with a sentence",
    )
    allowed_origins: str = Field(
        "",
        description="origins allowed to drive the UI besides its own (comma-separated), "
        "e.g. https://chat.example.com behind a proxy that rewrites Host",
    )

    @property
    def base_urls(self) -> list[str]:
        """The model servers' OpenAI base URLs: ``servers`` if set, else ``base_url``."""
        listed = [url.strip() for url in self.servers.split(",") if url.strip()]
        return listed or [self.base_url]

    # Where chats, users and files are kept (backend/store).
    data_dir: str = Field(
        "data", description="folder of the SQLite database and stored files (git-ignored)"
    )
    database_url: str = Field(
        "",
        description="SQLAlchemy async URL; empty = SQLite file chat.db in data_dir; "
        "postgresql+asyncpg://USER:PASSWORD@HOST/DB switches to PostgreSQL",
    )
    unsaved_mb: int = Field(
        64,
        gt=0,
        description="most MB of chat kept in memory while the database cannot be written "
        "(stopped, read-only, full); written once it can be again",
    )
    save_every_s: float = Field(
        3.0,
        gt=0,
        description="an answer is stored this often while it streams, seconds: a crash "
        "loses at most this much of it",
    )
