"""bench/_common.py: the apps a benchmark starts have the app's defaults."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from backend.settings import Settings
from bench._common import ROOT, hermetic_environ

READ_SETTINGS = (
    "import chainlit\n"  # Chainlit loads CHAINLIT_ENV_FILE (default ./.env) into os.environ
    "from backend.settings import Settings\n"
    "settings = Settings()\n"
    "print(repr(settings.model), settings.api_key.get_secret_value())\n"
)


def test_a_benchmarked_app_reads_neither_the_env_file_nor_the_callers_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's ``.env`` and exported ``KIMI_*`` stay out of a benchmark's app (a
    ``KIMI_MODEL`` of theirs made every tab of bench_burst wait for a model the scripted
    server does not serve); the names kept, a real server's key, come through."""
    (tmp_path / ".env").write_text("KIMI_MODEL=from-dotenv\nKIMI_API_KEY=dotenv-key\n")
    (tmp_path / "kimi.env").write_text("KIMI_MODEL=from-kimi-env-file\n")
    monkeypatch.setenv("KIMI_ENV_FILE", str(tmp_path / "kimi.env"))
    monkeypatch.setenv("KIMI_MODEL", "exported")
    monkeypatch.setenv("KIMI_API_KEY", "exported-key")
    env = {**hermetic_environ(("KIMI_API_KEY",)), "PYTHONPATH": str(ROOT)}
    shown = subprocess.run(
        [sys.executable, "-c", READ_SETTINGS], cwd=tmp_path, env=env,
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.split()  # fmt: skip
    assert shown == [repr(Settings.model_fields["model"].default), "exported-key"]
