"""The tests are hermetic: a person's ``.env`` and exported ``KIMI_*`` never reach them.

``./launch.sh`` writes ``.env`` (generated secrets), and people edit it (another model,
other ports, a smaller log) or export ``KIMI_*`` in their shell; the suite must pass
all the same, in either order with ``./launch.sh``. This test copies the checkout,
writes such a ``.env`` into the copy, exports such variables and runs
``tests/hermetic_probe.py`` there: settings read in the test process after Chainlit's
import (Chainlit loads a ``.env`` into ``os.environ`` itself), in a child process, and
through ``launch.sh``. ``.ci/either-order`` runs README's two commands in both orders.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import free_port
from tests.launching import ROOT

HOSTILE = "edited-by-a-person"
"""In every value of the hostile file and shell, and in none the suite uses."""


def copy_checkout(to: Path) -> Path:
    """The tracked and new (not ignored) files of the checkout, with its ``.venv``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, (n.decode() for n in listed)):
        source = ROOT / name
        if source.is_file():
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)
    (to / ".venv").symlink_to(Path(sys.prefix).resolve())
    return to


def test_the_suite_ignores_a_hostile_env_file_and_exported_kimi_settings(tmp_path: Path) -> None:
    clone = copy_checkout(tmp_path / "checkout")
    hostile = {
        "KIMI_MODEL": f"{HOSTILE}-model",
        "KIMI_BASE_URL": f"http://{HOSTILE}.invalid:1/v1",
        "KIMI_API_KEY": f"{HOSTILE}-key",
        "KIMI_VLLM_PORT": str(free_port()),
        "KIMI_UI_PORT": str(free_port()),
        "KIMI_LOG_MAX_MB": "1",
        "KIMI_DATA_DIR": f"/nonexistent/{HOSTILE}-data",
        "KIMI_DATABASE_URL": f"postgresql+asyncpg://{HOSTILE}@127.0.0.1:1/{HOSTILE}",
        "CHAINLIT_AUTH_SECRET": f"{HOSTILE}-secret",
    }
    (clone / ".env").write_text("".join(f"{k}={v}\n" for k, v in hostile.items()))
    exported = {k: v.replace(HOSTILE, f"{HOSTILE}-exported") for k, v in hostile.items()}
    exported.pop("CHAINLIT_AUTH_SECRET")  # a KIMI_* setting of the shell, not the file's
    env = {**os.environ, **exported, "HERMETIC_PROBE_HOSTILE": HOSTILE}
    for name in ("KIMI_ENV_FILE", "CHAINLIT_ENV_FILE"):  # as in a person's shell
        env.pop(name, None)
    pytest = [
        str(clone / ".venv" / "bin" / "python"),
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
    ]
    out = subprocess.run(
        [*pytest, "tests/hermetic_probe.py"],
        cwd=clone,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "3 passed" in out.stdout
