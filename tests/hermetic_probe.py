"""Run by tests/test_hermetic.py in a copy of the checkout with a hostile ``.env`` and
hostile ``KIMI_*`` exported (never collected on its own: the name is no ``test_*.py``).

Each check reads settings the way the suite does (in this process after Chainlit's
import, in a child process, through launch.sh) and expects the defaults or what the
test itself set, never a value of ``HOSTILE``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

from dotenv import dotenv_values

from backend.settings import Settings
from serving.settings import load
from tests.launching import ROOT, fake_keys, fake_machine
from tests.test_launch_ops import launched, wait_for_text

HOSTILE = os.environ["HERMETIC_PROBE_HOSTILE"]
"""The word every hostile value contains."""


def leaks(environ: dict[str, str]) -> dict[str, str]:
    """The variables of ``environ`` with a hostile value (the marker itself aside)."""
    return {k: v for k, v in environ.items() if HOSTILE in v and k != "HERMETIC_PROBE_HOSTILE"}


def test_no_hostile_setting_reaches_this_process_even_after_chainlit_loads() -> None:
    assert (ROOT / ".env").read_text().count(HOSTILE) > 3  # the hostile file is there
    import chainlit  # noqa: F401  (it loads CHAINLIT_ENV_FILE into os.environ)

    assert leaks(dict(os.environ)) == {}
    settings = Settings()
    assert (settings.model, settings.base_url) == ("", "http://127.0.0.1:8100/v1")
    assert settings.api_key.get_secret_value() == "EMPTY"
    assert (settings.data_dir, settings.database_url) == ("data", "")
    launch = load()
    assert (launch.vllm_port, launch.ui_port, launch.log_max_mb) == (8100, 8300, 50)


def test_a_child_process_reads_no_hostile_setting() -> None:
    code = "from backend.settings import Settings; s = Settings(); print(s.model_dump_json())"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert HOSTILE not in out.stdout


def test_launch_sh_reads_only_the_settings_the_test_gives(tmp_path: Path) -> None:
    env, record = fake_machine(tmp_path, 1)
    out = tmp_path / "launch.out"
    with launched(["--server-only", "--dev", "--tp", "1"], env, out) as proc:
        text = wait_for_text(out, "is healthy after", 60, proc)
        key = dotenv_values(tmp_path / "env")["KIMI_API_KEY"]
        assert key and fake_keys(record) == [key]  # generated, not the hostile one
        assert f"--port {env['KIMI_VLLM_PORT']} " in text
        [pid] = re.findall(r"vLLM server pid (\d+)", text)
        environ = Path(f"/proc/{pid}/environ").read_text(errors="replace").split("\0")
        assert leaks(dict(line.split("=", 1) for line in environ if "=" in line)) == {}
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 128 + signal.SIGTERM
