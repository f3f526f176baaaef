"""Upgrades keep people's chats: a database written by the release at 33b7f29, on SQLite
and on a real PostgreSQL, opened by this code (migrated on first start) resumes unchanged.

The fixture (``tests/data/upgrade/``) was made by that release's own app, in a browser
(``tests/make_upgrade_fixture.py``); ``expected.json`` is what its routes answered then.
Each test opens it with today's store, which migrates it on this first start (the release
stood at schema version 6; migration 8 moves the page's rows from Chainlit's table names
into the store's own, :mod:`backend.store.pages`), and checks, through Chainlit's
data-layer methods (what the page calls), the sidebar, the chat's steps, its photo, its
feedback and its share; then resumes it through ``app.py``'s handlers and asks a
follow-up, which must send the stored prepared photo and the stored answer.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import chainlit as cl
import chainlit.data as chainlit_data
import pytest
from chainlit.types import Pagination, ThreadFilter
from sqlalchemy import inspect
from sqlalchemy.engine import make_url

import app
from backend.settings import Settings
from backend.store.core import Store
from backend.store.schema import PAGE_TABLES, migrate
from tests.conftest import RunningFake, rows
from tests.fakes.kimi_server import conversation
from tests.make_upgrade_fixture import FIXTURE, PASSWORD, QUESTIONS
from tests.pg import SUPERUSER, PgServer
from tests.test_resume import open_page
from ui import history
from ui.datalayer import KimiDataLayer
from ui.files import FilesStorageClient

EXPECTED: dict[str, Any] = json.loads((FIXTURE / "expected.json").read_text())
PHOTO = FIXTURE / "rocket-small.jpg"


def restore_postgres(server: PgServer, dump: Path) -> str:
    """A new database on ``server`` holding ``dump`` (``psql -f``); returns its URL."""
    url = server.create_database()
    copy = server.folder / "upgrade.sql"  # readable by the cluster's own account
    shutil.copyfile(dump, copy)
    shutil.chown(copy, user=server.folder.owner())
    subprocess.run(
        [*server.run_as, str(server.bin / "psql"), "-h", str(server.folder), "-p",
         str(server.port), "-U", SUPERUSER, "-d", str(make_url(url).database), "-q",
         "-v", "ON_ERROR_STOP=1", "-f", str(copy)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return url


@pytest.fixture(params=["sqlite", "postgresql"])
async def upgraded(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[str, Store, KimiDataLayer]]:
    """The release's database and files in a new data folder, opened (and so migrated)."""
    kind = str(request.param)
    source, data = FIXTURE / kind, tmp_path / "data"
    shutil.copytree(source / "files", data / "files")
    url = ""
    if kind == "sqlite":
        shutil.copyfile(source / "chat.db", data / "chat.db")
    else:
        url = restore_postgres(request.getfixturevalue("postgres"), source / "dump.sql")
    store = Store(Settings(data_dir=str(data), database_url=url))
    assert await migrate(store.engine) == [
        7,
        8,
        9,
        10,
        11,
        12,
    ]  # the release stood at 6: migrated now
    await store.check()
    layer = KimiDataLayer(store, FilesStorageClient(store.files))
    monkeypatch.setattr(history, "_store", store)
    monkeypatch.setattr(chainlit_data, "_data_layer", layer)
    monkeypatch.setattr(chainlit_data, "_data_layer_initialized", True)
    yield kind, store, layer
    await store.close()


async def test_the_releases_chat_is_listed_and_read_back_unchanged(
    upgraded: tuple[str, Store, KimiDataLayer],
) -> None:
    kind, store, layer = upgraded
    expected = EXPECTED[kind]
    async with store.engine.connect() as db:
        tables = set(await db.run_sync(lambda sync: inspect(sync).get_table_names()))
    assert {ours for _, ours in PAGE_TABLES} <= tables  # the page's rows are the store's
    assert not {chainlits for chainlits, _ in PAGE_TABLES} & tables  # nothing of Chainlit's
    assert await migrate(store.engine) == []  # a second start migrates nothing
    assert await store.users.verify("alice", PASSWORD)
    user = await layer.get_user("alice")
    assert user is not None
    page = await layer.list_threads(Pagination(first=20), ThreadFilter(userId=user.id))
    assert [(t["id"], t["name"]) for t in page.data] == [(expected["thread_id"], expected["name"])]
    assert await layer.get_thread_author(expected["thread_id"]) == "alice"

    thread = await layer.get_thread(expected["thread_id"])
    assert thread is not None
    steps = [
        {"id": s["id"], "type": s["type"], "output": s["output"]}
        for s in thread["steps"]
        if s["type"] in ("user_message", "assistant_message", "llm")
    ]
    assert steps == expected["steps"]
    kept = await rows(  # one record: its turns hold the release's questions and answers
        store,
        "SELECT type, output FROM kimi_steps WHERE type IN ('user_message', 'assistant_message')",
    )
    assert {(r["type"], r["output"]) for r in kept} == {
        ("user_message", None),
        ("assistant_message", ""),
    }
    rated = next(s for s in thread["steps"] if s["id"] == expected["answer_id"])
    feedback = dict(rated.get("feedback") or {})
    assert (feedback.get("value"), feedback.get("comment")) == (1, expected["feedback"]["comment"])
    assert (thread.get("metadata") or {}).get("is_shared") is True

    (element,) = thread.get("elements") or []
    assert element["name"] == expected["photo"]["name"]
    assert element["forId"] == expected["steps"][0]["id"]
    stored = store.files.read(str(element["objectKey"]))
    assert hashlib.sha256(stored).hexdigest() == expected["photo"]["sha256"]


async def test_the_releases_chat_resumes_and_the_next_question_sends_its_photo(
    upgraded: tuple[str, Store, KimiDataLayer],
    fake: RunningFake,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kind, store, layer = upgraded
    expected = EXPECTED[kind]
    thread = await layer.get_thread(expected["thread_id"])
    assert thread is not None
    open_page(expected["thread_id"], monkeypatch, fake)
    await app.on_chat_resume(thread)
    await app.on_message(cl.Message(content="And now? #scenario=plain", type="user_message"))
    sent = conversation(fake.requests[-1])
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user"]
    first = sent[0]["content"]
    assert first[-1] == {"type": "text", "text": QUESTIONS[0]}
    photo_url = first[0]["image_url"]["url"]
    records = await store.turns.load(expected["thread_id"])
    prepared = base64.b64decode(photo_url.removeprefix("data:image/jpeg;base64,"))
    assert hashlib.sha256(prepared).hexdigest() == expected["photo"]["sha256"]  # as stored
    assert records[0].turn.images and records[0].turn.reasoning  # the reasoning is kept
    answers = [s["output"] for s in expected["steps"] if s["type"] == "assistant_message"]
    assert [sent[1]["content"], sent[3]["content"]] == answers
    assert sent[2]["content"] == [{"type": "text", "text": QUESTIONS[1]}]
