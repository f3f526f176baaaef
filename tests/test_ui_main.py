"""serving/ui_main.py: the chat UI runs Chainlit's CLI on asyncio's C tasks and futures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from serving.ui_main import own_app_root
from tests.live_app import ROOT

TASK_KINDS = (
    "import asyncio\nloop = asyncio.new_event_loop()\n"
    "print(asyncio.Task.__module__, asyncio.Future.__module__, type(loop).__module__)\n"
)
"""Prints where asyncio's Task and Future come from (``_asyncio``: C; ``asyncio.*``: Python)
and the module of the event loops asyncio makes now."""


def kinds_after(code: str) -> list[str]:
    """What :data:`TASK_KINDS` prints after ``code`` ran, in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", code + TASK_KINDS], cwd=ROOT,
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    return done.stdout.split()[-3:]


def test_chainlit_cli_still_swaps_in_python_tasks() -> None:
    """Why serving/ui_main.py exists: importing Chainlit's CLI applies nest_asyncio, which
    puts asyncio's pure-Python Task and Future in place of the C ones. When this fails,
    Chainlit stopped doing it: remove serving/ui_main.py and run ``chainlit run`` again."""
    kinds = kinds_after("import chainlit.cli\n")
    assert kinds == ["asyncio.tasks", "asyncio.futures", "asyncio.unix_events"]


def test_the_ui_entry_point_keeps_asyncio_c_tasks() -> None:
    """The same CLI through serving/ui_main.py (``--version``: it imports everything a run
    does, then exits) leaves asyncio's C Task and Future in place, on uvloop's loop."""
    run_cli = (
        "import sys\nsys.argv = ['chainlit', '--version']\nfrom serving import ui_main\n"
        "try:\n    ui_main.main()\nexcept SystemExit:\n    pass\n"
    )
    assert kinds_after(run_cli) == ["_asyncio", "_asyncio", "uvloop"]


def test_each_ui_process_root_reads_the_app_folder_and_keeps_its_own_uploads(
    tmp_path: Path,
) -> None:
    root = tmp_path / "run" / "ui-1"
    root.mkdir(parents=True)
    (root / "chainlit_xx.md").write_text("a page the app folder no longer has")
    env = own_app_root(root)
    assert env == {"CHAINLIT_APP_ROOT": str(root.resolve())}
    assert own_app_root(root) == env  # made again at the next start
    for folder in (".chainlit", "public"):
        assert (root / folder).resolve() == ROOT / folder
    assert (root / ".chainlit" / "config.toml").read_bytes() == (
        ROOT / ".chainlit" / "config.toml"
    ).read_bytes()
    pages = sorted(p.name for p in ROOT.glob("chainlit*.md"))
    assert "chainlit_zh-CN.md" in pages
    assert sorted(p.name for p in root.glob("chainlit*.md")) == pages
    for name in pages:  # copies, not links: Chainlit takes a page only from inside its root
        assert not (root / name).is_symlink()
        assert (root / name).read_text() == (ROOT / name).read_text()
    # Chainlit, started with that environment, keeps its uploads there.
    probe = "import chainlit.config as c; print(c.FILES_DIRECTORY)"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        env={**env, "PATH": ""},
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(out.stdout.strip()) == root.resolve() / ".files"
