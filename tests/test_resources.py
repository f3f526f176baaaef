"""What the app process owns: one client per server, housekeeping, one close."""

from __future__ import annotations

import asyncio

import pytest
from PIL import Image, _imaging

from backend.errors import ClientClosed
from backend.resources import KEPT_BLOCKS_IDLE_S, AppResources
from backend.settings import Settings
from backend.uploads import MediaWorkers, hand_back_large_blocks
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
    trims: list[float] = []

    async def release_when_idle(idle_s: float) -> bool:
        trims.append(idle_s)
        return False

    monkeypatch.setattr(shared.workers, "release_when_idle", release_when_idle)
    shared.start_housekeeping(every_s=0.05)
    await asyncio.sleep(0.3)
    await shared.aclose()
    seen = len(trims)
    assert seen >= 3
    assert set(trims) == {KEPT_BLOCKS_IDLE_S}
    await asyncio.sleep(0.15)
    assert len(trims) == seen  # stopped with the app


def _decode_a_photo() -> None:
    """Allocate and free a 24 MB image, as decoding a 6-megapixel photo does."""
    Image.new("RGB", (3000, 2000), "white").resize((1500, 1000)).load()


async def test_pillow_keeps_freed_blocks_during_media_work_and_hands_them_back_when_idle() -> None:
    workers = MediaWorkers(1)
    try:
        await workers.run(_decode_a_photo)
        kept = _imaging.get_stats()["blocks_cached"]
        assert kept >= 1  # kept for the next photo
        assert not await workers.release_when_idle(idle_s=60)  # just used: a burst goes on
        assert _imaging.get_stats()["blocks_cached"] == kept
        await asyncio.sleep(0.05)
        assert await workers.release_when_idle(idle_s=0.02)
        assert _imaging.get_stats()["blocks_cached"] == 0
    finally:
        workers.close()


def test_large_blocks_are_handed_back_by_glibc() -> None:
    """mallopt(M_MMAP_THRESHOLD) succeeds on this glibc (returns 1)."""
    assert hand_back_large_blocks()
