"""Size on disk and resume time of a stored 20-turn chat with a photo in every turn.

Usage (from the repository root):
    .venv/bin/python -m bench.bench_store                       # SQLite in a temp folder
    .venv/bin/python -m bench.bench_store --database-url postgresql+asyncpg://...

Each turn is written as the app writes it: the person's message, one 12-megapixel
phone photo (astronaut.png scaled to 4000x3000 with noise, JPEG quality 92,
different noise each turn) stored as uploaded through Chainlit's
data layer and our storage client, its prepared copy for Thinking-2506's budget
(16384 patches), a reasoning step of 1.6 KB and an answer of 300 bytes, and the
turn row. Then the table: bytes of the database (with its WAL), of the uploads
and of the prepared copies; and the median over 5 runs of what a resume reads:
Chainlit's thread query (``get_thread``: steps and elements, URLs of the files)
and our turns with their image files, rebuilt into a conversation.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import chainlit as cl
from chainlit.context import init_http_context
from PIL import Image
from sqlalchemy import text

from backend.conversation import Turn
from backend.images import prepare_image
from backend.record import TurnRecord
from backend.settings import Settings
from backend.store.core import Store
from backend.store.resume import restore
from backend.timings import Timings
from bench.harness import Report, table
from ui.datalayer import KimiDataLayer
from ui.files import FilesStorageClient

DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
TURNS = 20
RUNS = 5
REASONING = "Let me look at the photo carefully and think about what it shows. " * 24
ANSWER = "The photo shows a cup of coffee on a saucer, seen from above. " * 5


def phone_photo(path: Path) -> Path:
    """A 4000x3000 "phone photo": astronaut.png scaled up with fresh noise, JPEG quality 92."""
    size = (4000, 3000)
    base = Image.open(DATA / "astronaut.png").convert("RGB").resize(size, Image.Resampling.BILINEAR)
    Image.blend(base, Image.effect_noise(size, 24).convert("RGB"), 0.15).save(path, quality=92)
    return path


def folder_bytes(path: Path) -> int:
    """Total bytes of the files under ``path``."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


async def write_chat(layer: KimiDataLayer, store: Store, photos: list[Path]) -> str:
    """Store a chat of one turn per photo, as the app does; returns its thread id."""
    user = await layer.create_user(cl.User(identifier="alice"))
    assert user is not None
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)
    await layer.update_thread(thread_id, name="bench", user_id=user.id, tags=["kimi"])
    for i, photo in enumerate(photos):
        stamp = f"2026-12-01T10:{i:02d}:00.000Z"
        message_id, answer_id = str(uuid.uuid4()), str(uuid.uuid4())

        async def step(step_id: str, name: str, kind: str, output: str, at: str = stamp) -> None:
            await layer.create_step(
                {"id": step_id, "threadId": thread_id, "name": name, "type": kind,
                 "output": output, "streaming": False, "metadata": {}, "createdAt": at}
            )  # fmt: skip

        await step(message_id, "alice", "user_message", f"What is in photo {i}?")
        image = cl.Image(path=str(photo), name=photo.name, mime="image/jpeg")
        image.for_id, image.thread_id = message_id, thread_id
        await layer.create_element(image)
        await step(str(uuid.uuid4()), "Thought for 4.2s", "llm", REASONING)
        await step(answer_id, "Kimi-VL", "assistant_message", ANSWER)
        prepared = await asyncio.to_thread(prepare_image, photo, 16384, photo.name)
        turn = Turn(f"What is in photo {i}?", [prepared], ANSWER, REASONING, "done")
        timings = Timings(ttft_s=0.4, reasoning_s=4.2, elapsed_s=6.0, completion_tokens=300)
        record = TurnRecord(i, message_id, turn, answer_id, timings, "kimi-vl", {})
        await store.turns.save(thread_id, record)
    assert layer.failed_statements == 0
    return thread_id


async def table_bytes(store: Store) -> int:
    """PostgreSQL: bytes of the app's tables with their indexes and TOAST data."""
    tables = ("kimi_page_users", "kimi_threads", "kimi_steps", "kimi_elements", "kimi_feedback",
              "kimi_users", "kimi_turns", "kimi_images", "kimi_compared",
              "kimi_schema")  # fmt: skip
    async with store.engine.connect() as db:
        sizes = [
            (await db.execute(text("SELECT pg_total_relation_size(:t)"), {"t": t})).scalar()
            for t in tables
        ]
    return sum(int(size or 0) for size in sizes)


async def resume_once(layer: KimiDataLayer, store: Store, thread_id: str) -> tuple[float, float]:
    """Seconds for Chainlit's thread read and for our turns rebuilt into a conversation."""
    start = time.perf_counter()
    thread = await layer.get_thread(thread_id)
    middle = time.perf_counter()
    restored = restore(await store.turns.load(thread_id))
    end = time.perf_counter()
    assert thread is not None and len(restored.conversation.turns) == TURNS
    return middle - start, end - middle


async def run(database_url: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        photos = [phone_photo(root / f"photo-{i:02d}.jpg") for i in range(TURNS)]
        settings = Settings(data_dir=str(root / "data"), database_url=database_url)
        store = Store(settings)
        await store.check()
        layer = KimiDataLayer(store, FilesStorageClient(store.files))
        try:
            thread_id = await write_chat(layer, store, photos)
            chainlit_s, ours_s = zip(
                *[await resume_once(layer, store, thread_id) for _ in range(RUNS)], strict=True
            )
            tables = await table_bytes(store) if database_url else 0
        finally:
            await store.close()
        data = root / "data"
        database = tables or sum(p.stat().st_size for p in data.glob("chat.db*"))
        prepared = folder_bytes(data / "files" / "prepared")
        uploads = folder_bytes(data / "files") - prepared
        uploaded = sum(p.stat().st_size for p in photos)
        where = store.where.split("?")[0]
    kept = [
        ("database: SQLite file + WAL" if not database_url
         else "database: PostgreSQL tables with indexes (not in KIMI_DATA_DIR)", database),
        ("uploads as sent (files/<user>/...)", uploads),
        ("prepared copies (files/prepared/...)", prepared),
        ("total", database + uploads + prepared),
    ]  # fmt: skip
    resume = [
        ("Chainlit's get_thread (steps, elements)", chainlit_s),
        ("our turns + prepared images -> conversation", ours_s),
    ]
    report = Report(f"A {TURNS}-turn chat, one 12 MP photo a turn", "store")
    report.add(
        f"Stored in {where}; photos as uploaded: {uploaded:,} bytes.",
        table(["what", "bytes", "per turn"], [[w, f"{n:,}", f"{n // TURNS:,}"] for w, n in kept]),
        table(
            ["resume step", f"median of {RUNS} (ms)"],
            [[w, f"{statistics.median(seconds) * 1e3:.1f}"] for w, seconds in resume],
        ),
    )
    report.finish({"bytes": dict(kept), "resume_s": dict(resume), "uploaded": uploaded})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", default="", help="default: SQLite in a temp folder")
    asyncio.run(run(parser.parse_args().database_url))


if __name__ == "__main__":
    main()
