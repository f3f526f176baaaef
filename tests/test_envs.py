"""The quiet set-up (serving/envs.py): a few lines on screen, pip's output in the log
named on screen, shown whole when it fails."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def set_up(venv: Path, requirements: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "serving.envs", "--prefix", "set-up", str(venv), str(requirements)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_a_first_set_up_says_what_it_does_in_a_few_lines_and_logs_pip(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# nothing to install\n", encoding="utf-8")
    venv = tmp_path / "venv"
    done = set_up(venv, requirements)
    assert done.returncode == 0, done.stderr
    shown = (done.stdout + done.stderr).splitlines()
    log = venv / "install.log"
    assert 2 <= len(shown) <= 5, shown
    assert all(line.startswith("set-up: ") for line in shown), shown
    assert any(str(log) in line for line in shown), shown
    assert "pip install --progress-bar off -r" in log.read_text(encoding="utf-8")
    again = set_up(venv, requirements)  # a second run finds it done and says nothing
    assert (again.returncode, again.stdout + again.stderr) == (0, "")


def test_a_failing_pip_is_shown_whole_and_the_log_named(tmp_path: Path) -> None:
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("./no-such-package-here\n", encoding="utf-8")
    venv = tmp_path / "venv"
    failed = set_up(venv, requirements)
    log = venv / "install.log"
    assert failed.returncode == 1
    pip_said = log.read_text(encoding="utf-8")
    assert "no-such-package-here" in pip_said
    assert pip_said.strip() in failed.stdout + failed.stderr  # the whole log, on failure
    assert f"its whole output is above and in {log}" in failed.stdout + failed.stderr
