"""What the app process owns: one client per server, housekeeping, one close."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace

import pytest
from PIL import Image, _imaging

from backend.client import ServedModel, load_sdk
from backend.errors import ClientClosed, ServerUnreachable
from backend.models import ModelDirectory
from backend.resources import KEPT_BLOCKS_IDLE_S, AppResources
from backend.settings import Settings
from backend.uploads import MediaWorkers, hand_back_large_blocks
from tests.conftest import RunningFake


async def test_servers_come_from_kimi_servers_and_close_once(
    fake: RunningFake, instruct_server: RunningFake
) -> None:
    shared = AppResources.start(Settings(servers=f"{fake.base_url},{instruct_server.base_url}"))
    await asyncio.to_thread(load_sdk)  # as the app's start has (start_housekeeping)
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


async def test_the_openai_sdk_and_the_translations_are_loaded_in_a_thread_after_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shared = AppResources.start(Settings())
    loads: list[tuple[float, bool]] = []
    started = time.monotonic()

    def load_sdk() -> None:
        loads.append(
            (time.monotonic() - started, threading.current_thread() is threading.main_thread())
        )

    monkeypatch.setattr("backend.resources.load_sdk", load_sdk)
    monkeypatch.setattr("backend.resources.load_catalogs", load_sdk)  # recorded alike
    shared.start_housekeeping(sdk_after_s=0.2)
    shared.start_housekeeping(sdk_after_s=0.2)  # once, however often called
    await asyncio.sleep(0.1)
    assert loads == []  # not before sdk_after_s
    await asyncio.sleep(0.4)
    await shared.aclose()
    assert len(loads) == 2  # the SDK, then the catalogs
    for after_s, on_main_thread in loads:
        assert after_s >= 0.2 and not on_main_thread


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


async def test_a_failed_model_list_keeps_the_last_answer_and_is_asked_first(
    fake: RunningFake, instruct_server: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that failed its last model list may serve what no other lists: a chat
    looking for that model is sent there (and retries), not to the first server."""
    shared = AppResources.start(Settings(servers=f"{fake.base_url},{instruct_server.base_url}"))
    clock = [0.0]
    client = shared.servers[1].client
    second_models = ModelDirectory(client, refresh_s=1.0, clock=lambda: clock[0])
    second = shared.servers[1] = replace(shared.servers[1], models=second_models)
    assert [m.id for m in await second_models.current()] == ["kimi-vl"]

    async def unreachable() -> list[ServedModel]:
        raise ServerUnreachable("down")

    monkeypatch.setattr(client, "list_models", unreachable)
    clock[0] = 5.0
    assert [m.id for m in await second_models.current()] == ["kimi-vl"]  # the last good one
    assert not second_models.answered
    assert await shared.server_for("kimi-vl") is second
    fresh = ModelDirectory(client)
    second = shared.servers[1] = replace(second, models=fresh)  # never answered: lists nothing
    assert await fresh.current() == [] and not fresh.answered
    assert await shared.server_for("kimi-vl") is second  # it may serve it: ask it
    assert await shared.server_for("kimi-vl-thinking-2506") is shared.servers[0]
    await shared.aclose()
