"""bench/_common.py: the apps a benchmark starts have the app's defaults; the scripted
workloads the benchmarks stream are what they say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from backend.client import output_limit
from backend.settings import INSTRUCT, Settings
from bench._common import ROOT, hermetic_environ
from tests.fakes.kimi_server import long_code

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


def test_the_scripted_code_answer_is_token_sized_and_fits_an_instruct_answer() -> None:
    """Defect: the scripted code "tokens" were 10-14 characters each, so bench_tab's
    10,000-token code answer passed the 100,000 characters an Instruct answer may bring
    and was cut before its end (the case waited for an end that never came)."""
    pieces = long_code("a", 10_000)
    code = pieces[1:-1]  # between the opening sentence and the closing fence
    assert len([p for p in code if p != "\n"]) == 10_000
    assert max(len(p) for p in code) <= 8  # a BPE token of code, not a word and its comma
    assert len("".join(pieces)) < output_limit(INSTRUCT.max_tokens)
    assert "".join(pieces).startswith("Here is the whole program:\n\n```python\n")
    assert "total = step(total, a1427)\n" in "".join(pieces)
