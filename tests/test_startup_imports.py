"""Start to ready: the app imports what a page load needs, the rest on first use.

Each package named here cost a tenth of a second or more of CPU at start
(``python -X importtime``, docs/benchmarks.md's start-to-ready section) and is not
needed to serve the first page of an app that runs open: the store only where chats
are stored (a user exists), the rest when the first chat uses it. The timing itself is
bench/bench_startup.py's; this keeps the import set from growing back.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STORE_ONLY = ("sqlalchemy", "aiosqlite", "asyncpg", "argon2", "chainlit.data.sql_alchemy")
"""Loaded only where chats are stored (ui/history.py opens the store)."""
FIRST_USE = ("openai", "av", "pypdfium2")
"""Loaded in a thread after the start, for a client's first model list (backend/client.py,
backend/resources.py), and with the first video or PDF upload (backend/uploads.py)."""


def imported_at_start(data_dir: Path) -> set[str]:
    """The modules loaded once ``app.py`` is imported (as ``chainlit run`` does) with its
    data in ``data_dir``, in a fresh interpreter."""
    code = "import json, sys, app; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "KIMI_DATA_DIR": str(data_dir)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def test_an_app_running_open_loads_no_database_code(tmp_path: Path) -> None:
    loaded = imported_at_start(tmp_path / "data")
    assert "app" in loaded and "chainlit" in loaded
    assert [name for name in STORE_ONLY if name in loaded] == []


def test_the_openai_sdk_and_the_media_decoders_wait_for_first_use(tmp_path: Path) -> None:
    loaded = imported_at_start(tmp_path / "data")
    assert "backend.client" in loaded and "backend.uploads" in loaded
    assert [name for name in FIRST_USE if name in loaded] == []
