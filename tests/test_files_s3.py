"""Files in S3-compatible object storage (``KIMI_FILES_S3_BUCKET``), against a real SeaweedFS
started by the test run (``tests/s3.py``), with the store on SQLite.

The same guarantees as files in a folder (tests/test_store.py's file tests run here again,
imported): uploads are served by the app's route to their owner only, or to anyone once the
chat is shared; prepared images come back byte for byte; deleting a chat removes its
objects; nothing lands in the data folder; a bucket that cannot be used stops the start
with one sentence.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from backend.conversation import Turn
from backend.settings import Settings
from backend.store.core import Store, StoreError
from backend.store.files import StorageUnavailable
from backend.store.s3 import S3Files
from backend.store.turns import ThreadTurns
from tests.s3 import ACCESS_KEY, SECRET_KEY, SeaweedFS, start_seaweedfs
from tests.test_store import (  # noqa: F401  (the file tests, run on a bucket)
    files_app,
    photo,
    record,
    test_a_file_is_served_to_its_owner_only,
    test_a_shared_chats_files_are_served_to_anyone,
    test_prepared_copies_are_never_served,
)
from ui.datalayer import KimiDataLayer


@pytest.fixture(scope="module")
def seaweedfs() -> Iterator[SeaweedFS]:
    server = start_seaweedfs()
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def aws_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The server's key in boto3's standard variables, and no caller's AWS files."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    for name in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.setenv(name, str(tmp_path / "no-such-aws-file"))
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def settings(tmp_path: Path, seaweedfs: SeaweedFS) -> Settings:
    """SQLite in ``tmp_path``, files in a new bucket (overrides tests/conftest.py's)."""
    return Settings(
        data_dir=str(tmp_path / "data"), database_url="", files_s3_bucket=seaweedfs.create_bucket(),
        files_s3_endpoint_url=seaweedfs.endpoint_url, files_s3_region="us-east-1",
    )  # fmt: skip


def keys(seaweedfs: SeaweedFS, bucket: str) -> list[str]:
    found: Any = seaweedfs.client()
    listed = found.list_objects_v2(Bucket=bucket)
    return sorted(str(item["Key"]) for item in listed.get("Contents", []))


async def test_turns_keep_their_prepared_images_in_the_bucket_and_nowhere_else(
    store: Store, layer: KimiDataLayer, settings: Settings, seaweedfs: SeaweedFS
) -> None:
    assert isinstance(store.files, S3Files)
    thread_id = str(uuid.uuid4())
    images = [photo("rocket.jpg"), photo("page.png")]
    await store.turns.save(thread_id, record(0, "m1", Turn(text="compare", images=images)))
    (back,) = await store.turns.load(thread_id)
    assert [i.data_url for i in back.turn.images] == [i.data_url for i in images]
    stored = keys(seaweedfs, settings.files_s3_bucket)
    assert sorted(k.rsplit(".", 1)[-1] for k in stored) == ["jpg", "png"]
    assert all(k.startswith(f"prepared/{thread_id}/") for k in stored)
    assert not (Path(settings.data_dir) / "files").exists()  # the folder is not used

    other = str(uuid.uuid4())
    await store.turns.save(other, record(0, "m2", Turn(text="q", images=[photo()])))
    await store.turns.delete_thread(thread_id)
    assert [k.split("/")[1] for k in keys(seaweedfs, settings.files_s3_bucket)] == [other]


async def test_the_bucket_answers_as_the_folder_does(store: Store) -> None:
    files = store.files
    await asyncio.to_thread(files.write, "a/b/one.jpg", b"one")
    assert await asyncio.to_thread(files.read, "a/b/one.jpg") == b"one"
    assert await asyncio.to_thread(files.exists, "a/b/one.jpg")
    assert await asyncio.to_thread(files.delete, "a/b/one.jpg")
    assert not await asyncio.to_thread(files.delete, "a/b/one.jpg")
    assert not await asyncio.to_thread(files.exists, "a/b/one.jpg")
    with pytest.raises(FileNotFoundError):
        await asyncio.to_thread(files.read, "a/b/one.jpg")
    with pytest.raises(ValueError):
        await asyncio.to_thread(files.write, "a/../../etc/passwd", b"x")


async def test_a_bucket_that_refuses_the_key_stops_the_start_with_one_sentence(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    store = Store(settings)
    try:
        with pytest.raises(StoreError) as stopped:
            await store.check()
    finally:
        await store.close()
    message = str(stopped.value)
    bucket = settings.files_s3_bucket
    assert message.startswith(f"The file store cannot be used (s3://{bucket} at http")
    assert "\n" not in message and "KIMI_FILES_S3_BUCKET" in message
    assert "not-the-secret" not in message
    with pytest.raises(StorageUnavailable):
        S3Files(bucket, settings.files_s3_endpoint_url).read("anything")


async def test_a_turn_saved_while_the_bucket_is_down_is_held_and_written_once_it_is_back(
    store: Store, seaweedfs: SeaweedFS, caplog: pytest.LogCaptureFixture
) -> None:
    thread_id = str(uuid.uuid4())
    turns = ThreadTurns(store.turns, store.pending, thread_id)
    image = photo()
    seaweedfs.pause()
    try:
        saving = await turns.record(record(0, "m1", Turn(text="q", images=[image])))
        assert saving.held and not saving.lost
        assert await store.turns.load(thread_id) == []  # nothing half-written
    finally:
        seaweedfs.resume()
    deadline = time.monotonic() + 30
    while store.pending.holding:
        assert time.monotonic() < deadline, "the held turn was never written"
        await asyncio.sleep(0.2)
    (back,) = await store.turns.load(thread_id)
    assert [i.data_url for i in back.turn.images] == [image.data_url]
    said = [r.getMessage() for r in caplog.records if "cannot take writes" in r.getMessage()]
    assert said and "the file store cannot be written (StorageUnavailable: s3://" in said[0]
