"""Images prepared on upload, before their message is sent: what a chat may hold."""

from __future__ import annotations

import shutil
from pathlib import Path

from backend.uploads import MediaWorkers, Prefetched, Upload, UploadLimits, prepare_uploads
from tests.conftest import DATA

LIMITS = UploadLimits(in_token_limit=1024, images_per_prompt=8, max_model_len=8192, max_bytes=10**7)


def copies(tmp_path: Path, count: int) -> list[Upload]:
    """``count`` uploads of the same small photo under different paths (as Chainlit stores them)."""
    uploads = []
    for i in range(count):
        path = tmp_path / f"{i}.jpg"
        shutil.copy(DATA / "rocket.jpg", path)
        uploads.append(Upload(f"photo {i}.jpg", path))
    return uploads


async def test_a_chat_holds_a_bounded_number_of_early_images_the_oldest_going_first(
    tmp_path: Path,
) -> None:
    """Attachments removed from the message box are never announced: what is held early
    is bounded, and a dropped one is prepared again if its message is sent after all."""
    workers = MediaWorkers(1)
    try:
        early = Prefetched(limit=3)
        uploads = copies(tmp_path, 5)
        started = [early.start(upload, LIMITS, workers) for upload in uploads]
        assert started == [True] * 5 and len(early) == 3
        result = await prepare_uploads(uploads[:2], LIMITS, workers, early)  # dropped: redone
        assert result.problems == [] and [i.name for i in result.images] == [
            "photo 0.jpg",
            "photo 1.jpg",
        ]
        assert len(early) == 3  # the newest three stay until a message uses or drops them
        early.clear()
        assert len(early) == 0
    finally:
        workers.close()


async def test_a_message_with_more_images_than_are_held_early_gets_them_all(
    tmp_path: Path,
) -> None:
    workers = MediaWorkers(1)
    try:
        early = Prefetched(limit=2)
        uploads = copies(tmp_path, 4)
        for upload in uploads:
            early.start(upload, LIMITS, workers)
        result = await prepare_uploads(uploads, LIMITS, workers, early)
        assert [i.name for i in result.images] == [u.name for u in uploads]
        assert len(early) == 0
    finally:
        workers.close()
