"""What the app process owns: one client per server, housekeeping, one close."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
from PIL import Image, _imaging

from backend.client import ServedModel, load_sdk
from backend.errors import ClientClosed, ServerUnreachable
from backend.logs import LOGGER_NAME
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


async def test_the_translations_and_the_openai_sdk_are_loaded_in_a_thread_after_the_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shared = AppResources.start(Settings())
    loads: list[tuple[str, float, bool]] = []
    started = time.monotonic()

    def recorder(name: str) -> Callable[[], None]:
        def load() -> None:
            on_main_thread = threading.current_thread() is threading.main_thread()
            loads.append((name, time.monotonic() - started, on_main_thread))

        return load

    monkeypatch.setattr("backend.resources.load_sdk", recorder("sdk"))
    monkeypatch.setattr("backend.resources.load_catalogs", recorder("catalogs"))
    shared.start_housekeeping(preload_after_s=0.2)
    shared.start_housekeeping(preload_after_s=0.2)  # once, however often called
    await asyncio.sleep(0.1)
    assert loads == []  # not before preload_after_s
    await asyncio.sleep(0.4)
    await shared.aclose()
    assert [name for name, _, _ in loads] == ["catalogs", "sdk"]
    for _, after_s, on_main_thread in loads:
        assert after_s >= 0.2 and not on_main_thread


async def test_a_failed_preload_is_logged_and_the_rest_still_loads(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A broken catalogue must not stop the SDK's import, nor the app's stop."""
    shared = AppResources.start(Settings())
    loaded: list[str] = []

    def broken() -> None:
        raise OSError("messages.po: unreadable")

    monkeypatch.setattr("backend.resources.load_catalogs", broken)
    monkeypatch.setattr("backend.resources.load_sdk", lambda: loaded.append("sdk"))
    with caplog.at_level(logging.ERROR, logger=LOGGER_NAME):
        shared.start_housekeeping(preload_after_s=0)
        await asyncio.sleep(0.3)
        await shared.aclose()  # does not raise
    assert loaded == ["sdk"]
    assert "preloading at the start failed (broken)" in caplog.text


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


async def test_the_known_models_come_at_once_and_a_stale_cache_refreshes_for_the_next_caller(
    fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a question reads before its request (Compare's models): never a wait for
    ``/v1/models``, even with a stale cache; its refresh serves the next caller."""
    shared = AppResources.start(Settings(base_url=fake.base_url))
    clock = [0.0]
    client = shared.servers[0].client
    models = ModelDirectory(client, refresh_s=10.0, clock=lambda: clock[0])
    shared.servers[0] = replace(shared.servers[0], models=models)
    assert [m.id for m in await models.current()] == ["kimi-vl-thinking-2506"]
    answered = asyncio.Event()

    async def slow_list() -> list[ServedModel]:
        await answered.wait()
        return [ServedModel("kimi-vl", 8192)]

    monkeypatch.setattr(client, "list_models", slow_list)
    clock[0] = 11.0  # stale
    assert [m.id for m, _ in shared.known()] == ["kimi-vl-thinking-2506"]  # at once
    answered.set()
    await asyncio.sleep(0.05)
    assert [m.id for m, _ in shared.known()] == ["kimi-vl"]  # the refresh it started
    await shared.aclose()
