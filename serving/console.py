"""What the launcher says on the terminal: one ``launch.sh: ...`` line each, on stderr.

Standard library only: the launcher's first steps (``--help``, making ``.venv``) run on
the system's ``python3`` before the app's environment exists.
"""

from __future__ import annotations

import sys

PREFIX = "launch.sh"
"""What every line starts with: people typed ``./launch.sh`` (tests/run.sh sets its own)."""


def say(text: str) -> None:
    """Print ``launch.sh: text`` on stderr."""
    print(f"{PREFIX}: {text}", file=sys.stderr, flush=True)


def banner(text: str) -> None:
    """Print ``==== text ====`` between blank lines on stderr (dev mode, no GPU)."""
    print(f"\n  ==== {text} ====\n", file=sys.stderr, flush=True)


def on_terminal() -> bool:
    """True if stderr is a terminal (a progress line may then be rewritten in place)."""
    return sys.stderr.isatty()


def progress(text: str) -> None:
    """Rewrite the current terminal line with ``launch.sh: text`` (no newline)."""
    print(f"\r\033[K{PREFIX}: {text}", end="", file=sys.stderr, flush=True)


def end_progress() -> None:
    """End a line that :func:`progress` wrote."""
    print(file=sys.stderr, flush=True)
