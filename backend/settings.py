"""Typed settings from the environment and ``.env`` (pydantic-settings).

Every setting is an environment variable with the prefix ``KIMI_`` (for example
``KIMI_BASE_URL``); ``.env.example`` documents each one. The launcher reads these
and its own (:class:`serving.settings.LaunchSettings`, a subclass) and hands them to
the app as ``KIMI_*`` variables, so the app, the CLI and the launcher never disagree.

What differs between the served models is in :mod:`backend.families`.
"""

from __future__ import annotations

import os

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


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
    user_store_mb: int = Field(
        500,
        gt=0,
        description="most MB one user's stored chats may hold (their messages, answers and "
        "reasoning, and their images' files); a message beyond is refused with a sentence",
    )
    chat_queue: int = Field(
        2,
        ge=0,
        description="answers that may wait behind the one a chat is giving; more are "
        "refused with a sentence",
    )
    max_message_chars: int = Field(
        1_000_000,
        gt=0,
        description="longest message in characters; a longer one is refused with a sentence "
        "before it is stored or priced (1,000,000 is several times the longest context "
        "Kimi-VL takes, 131,072 tokens)",
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
    files_s3_bucket: str = Field(
        "",
        description="S3 bucket for uploads and prepared images; empty = the folder "
        "data_dir/files (local, or a shared volume); credentials from the standard AWS "
        "variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) or files",
    )
    files_s3_endpoint_url: str = Field(
        "", description="endpoint of an S3-compatible server (SeaweedFS, MinIO); empty = AWS"
    )
    files_s3_region: str = Field("", description="S3 region; empty = boto3's default")
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
