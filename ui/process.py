"""The chat UI process's settings and shared resources: one of each per process.

``SETTINGS`` is read from the environment and ``.env`` when the app is imported (tests
put their own in its place before :func:`resources` makes anything). The shared
resources (``backend.resources.AppResources``: the model servers' HTTP clients and
served-model caches, the media workers, the answer queues) are made once, by the app's
start or their first use, borrowed by every chat, and closed by :func:`close` at the
app's stop.
"""

from __future__ import annotations

from backend.client import ServedModel
from backend.logs import configure as configure_logging
from backend.resources import AppResources
from backend.settings import Settings

SETTINGS = Settings()
_resources: AppResources | None = None


def resources() -> AppResources:
    """The process's shared resources (made on first use, with the log configured)."""
    global _resources
    if _resources is None:
        configure_logging(SETTINGS.app_log, SETTINGS.log_max_mb, SETTINGS.log_keep)
        _resources = AppResources.start(SETTINGS)
    return _resources


async def close() -> None:
    """Close the shared resources (the next :func:`resources` makes new ones)."""
    global _resources
    if _resources is not None:
        await _resources.aclose()
        _resources = None


async def served_models() -> list[ServedModel]:
    """Every model the app's servers serve now (from the caches; a stale one is waited
    for, briefly)."""
    return [model for model, _ in await resources().served()]


def served_known(*, refresh: bool = True) -> list[ServedModel]:
    """Every model the app's servers serve, as the caches know it now (no wait: a stale
    cache refreshes for the next caller, unless not to ``refresh``)."""
    return [model for model, _ in resources().known(refresh=refresh)]
