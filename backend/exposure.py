"""Where the app may run without sign-in: the facts the app and the launcher share.

Standard library only, so ``serving/`` can import it without loading the app's
packages (argon2, SQLAlchemy) on every launch.
"""

from __future__ import annotations

from typing import Final

LOOPBACK_HOSTS: Final = ("localhost", "::1")
ADD_USER: Final = ".venv/bin/python -m backend.cli user add NAME --password-stdin"
"""The command that adds a user, as the refusals to run open beyond loopback name it."""


def is_loopback(host: str) -> bool:
    """True for ``127.x.y.z``, ``localhost`` and ``::1``: where the app may run without
    sign-in (the launcher and the app itself refuse anything else without a user)."""
    return host in LOOPBACK_HOSTS or host.startswith("127.")
