"""What the app process owns: one client per server, housekeeping, one close."""

from __future__ import annotations

import asyncio

import pytest

from backend.errors import ClientClosed
from backend.resources import AppResources
from backend.settings import Settings
from backend.uploads import hand_back_large_blocks
from tests.conftest import RunningFake


async def test_servers_come_from_kimi_servers_and_close_once(
    fake: RunningFake, instruct_server: RunningFake
) -> None:
    shared = AppResources.start(Settings(servers=f"{fake.base_url},{instruct_server.base_url}"))
    served = [(model.id, server.client.base_url) for model, server in await shared.served()]
    assert served == [
        ("kimi-vl-thinking-2506", fake.base_url),
        ("kimi-vl", instruct_server.base_url),
    ]
    assert (await shared.server_for("kimi-vl")).client.base_url == instruct_server.base_url
    await shared.aclose()
    with pytest.raises(ClientClosed):
        await shared.client.list_models()


async def test_housekeeping_hands_freed_memory_back_until_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shared = AppResources.start(Settings())
    trims: list[int] = []
    monkeypatch.setattr(shared.workers, "release_memory", lambda: trims.append(1))
    shared.start_housekeeping(every_s=0.05)
    await asyncio.sleep(0.3)
    await shared.aclose()
    seen = len(trims)
    assert seen >= 3
    await asyncio.sleep(0.15)
    assert len(trims) == seen  # stopped with the app


def test_large_blocks_are_handed_back_by_glibc() -> None:
    """mallopt(M_MMAP_THRESHOLD) succeeds on this glibc (returns 1)."""
    assert hand_back_large_blocks()
