"""The store on SQLite and on a real PostgreSQL: migrations, Chainlit's data layer, turns,
resume, the file route's ownership checks, users, start-up errors.

Every test that touches the database runs on both backends (the ``settings``
fixture of tests/conftest.py); PostgreSQL is a throwaway cluster this session
starts (``tests/pg.py``).
Rows are read back with plain SQL: Chainlit's data layer only logs failed writes.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import chainlit as cl
import httpx
import pytest
from chainlit.context import init_http_context
from chainlit.step import StepDict
from chainlit.types import Pagination, ThreadFilter
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from sqlalchemy import inspect, text

import ui.files
from backend.auth import AuthError, Users
from backend.blocks import block_texts
from backend.chat import SamplingOptions
from backend.cli import main
from backend.conversation import Budget, Turn
from backend.images import prepare_image
from backend.record import ComparedAnswer, TurnRecord
from backend.safety import link_remote_images
from backend.settings import Settings
from backend.store import schema
from backend.store.core import Store
from backend.store.db import create_engine
from backend.store.export import ChatExport, export_html
from backend.store.files import FileStore
from backend.store.pending import PendingWrites, Write
from backend.store.resume import restore
from backend.store.schema import LATEST, migrate
from backend.store.turns import ThreadTurns, TurnStore, image_file
from backend.timings import Timings
from backend.turn_runner import TurnRunner
from tests.conftest import DATA, RunningFake, SessionFactory, rows
from tests.test_turn_runner import drain
from ui import history
from ui.datalayer import KimiDataLayer
from ui.files import FilesStorageClient, mount_file_route

ROOT = Path(__file__).resolve().parents[1]


def on_disk(store: Store) -> FileStore:
    """The store's files: a folder, as every store of these tests keeps them."""
    assert isinstance(store.files, FileStore)
    return store.files


def photo(name: str = "rocket.jpg") -> Any:
    return prepare_image(DATA / name, 1024, name)


# --- migrations -------------------------------------------------------------------------


async def test_migrations_apply_once_and_add_what_chainlit_writes(store: Store) -> None:
    assert await migrate(store.engine) == []  # check() applied them; again: nothing
    versions = await rows(store, "SELECT version FROM kimi_schema ORDER BY version")
    assert [r["version"] for r in versions] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]

    def columns(sync: Any) -> set[str]:
        return {c["name"] for c in inspect(sync).get_columns("kimi_steps")}

    async with store.engine.connect() as db:
        present = await db.run_sync(columns)
    assert {"autoCollapse", "defaultOpen", "command", "modes"} <= present


async def test_a_database_made_from_chainlits_documented_ddl_is_brought_up_to_date(
    settings: Settings,
) -> None:
    engine = create_engine(Store(settings).url)
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    async with engine.begin() as db:  # the docs' steps table, before 2.1
        await db.exec_driver_sql(
            'CREATE TABLE steps ("id" TEXT PRIMARY KEY, "name" TEXT NOT NULL, '
            '"type" TEXT NOT NULL, "threadId" TEXT NOT NULL, "streaming" BOOLEAN NOT NULL, '
            '"output" TEXT, "createdAt" TEXT)'
        )
        await db.exec_driver_sql(
            'INSERT INTO steps ("id", "name", "type", "threadId", "streaming", '
            "\"output\") VALUES ('s1', 'n', 'user_message', 't1', false, 'kept')"
        )
    try:
        assert await migrate(engine) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]
        async with engine.connect() as db:
            row = (await db.execute(text('SELECT output, "autoCollapse" FROM kimi_steps'))).one()
        assert tuple(row) == ("kept", None)
        assert LATEST == 12
    finally:
        await engine.dispose()


async def test_turns_stored_with_their_stats_line_as_text_read_back_after_migration_5(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows written before a turn's numbers were stored keep their stats line, shown as is."""
    engine = create_engine(Store(settings).url)
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    with monkeypatch.context() as before:  # the schema as it was at version 3
        before.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:3])
        before.setattr(schema, "LATEST", 3)
        assert await migrate(engine) == [1, 2, 3]
    async with engine.begin() as db:
        await db.execute(
            text(
                'INSERT INTO kimi_turns (thread_id, "position", message_id, answer_id, text, '
                "answer, reasoning, reasoning_s, stats, status, model, options, created_at, "
                "updated_at) VALUES ('t', 0, 'm', 'a', 'q', 'an answer', 'r', 2.5, "
                "'TTFT 0.41 s · thought 2.5 s · 64 tokens', 'done', 'kimi-vl', '{}', 'x', 'x')"
            )
        )
    try:
        assert await migrate(engine) == [4, 5, 6, 7, 8, 9, 10, 11, 12]
        (old,) = await TurnStore(engine, FileStore(Path(settings.data_dir) / "files")).load("t")
    finally:
        await engine.dispose()
    assert old.legacy_stats == "TTFT 0.41 s · thought 2.5 s · 64 tokens"
    assert old.timings == Timings(reasoning_s=2.5) and old.reasoning_s == 2.5
    document = export_html(ChatExport("q", "Kimi-VL", {}, [old], "now"))
    assert "TTFT 0.41 s · thought 2.5 s · 64 tokens" in document
    assert "Thought for 2.5s" in document


# --- Chainlit's data layer --------------------------------------------------------------


def test_the_data_layer_is_chainlits_public_base_class_whole() -> None:
    """Chainlit's public contract, every abstract method of it (a Chainlit that adds one
    fails here), and none of its SQL layer's code."""
    from chainlit.data.base import BaseDataLayer
    from chainlit.data.sql_alchemy import SQLAlchemyDataLayer

    assert issubclass(KimiDataLayer, BaseDataLayer)
    assert not getattr(KimiDataLayer, "__abstractmethods__", None)
    assert not issubclass(KimiDataLayer, SQLAlchemyDataLayer)


async def test_profile_tagged_thread_is_linked_to_its_user(
    layer: KimiDataLayer, store: Store
) -> None:
    init_http_context()
    user = await layer.create_user(cl.User(identifier="alice"))
    assert user is not None
    thread_id = str(uuid.uuid4())
    # What Chainlit does on the first message with a chat profile and auto_tag_thread.
    await layer.update_thread(thread_id, name="hello", user_id=user.id, tags=["kimi-vl"])
    stored = await rows(store, 'SELECT * FROM kimi_threads WHERE "id" = :id', id=thread_id)
    assert stored[0]["userIdentifier"] == "alice"
    assert json.loads(stored[0]["tags"]) == ["kimi-vl"]
    listed = await layer.get_all_user_threads(user_id=user.id)
    assert listed is not None
    assert [t["id"] for t in listed] == [thread_id]
    assert listed[0]["tags"] == ["kimi-vl"]
    assert layer.failed_statements == 0


async def test_a_stored_nan_setting_does_not_break_the_chat_list(
    layer: KimiDataLayer, store: Store
) -> None:
    """Chainlit keeps the panel's values as sent in the thread's metadata; a NaN or an
    Infinity stored by an older app made ``POST /project/threads`` answer 500."""
    init_http_context()
    user = await layer.create_user(cl.User(identifier="alice"))
    assert user is not None
    thread_id = str(uuid.uuid4())
    bad = {"temperature": float("nan"), "top_p": float("inf"), "max_tokens": 1e999}
    await layer.update_thread(
        thread_id, name="hi", user_id=user.id, metadata={"chat_settings": bad}
    )
    page = await layer.list_threads(Pagination(first=20), ThreadFilter(userId=user.id))
    body = json.loads(bytes(JSONResponse(content=page.to_dict()).body))  # what the route sends
    assert body["data"][0]["metadata"]["chat_settings"] == {
        "temperature": None,
        "top_p": None,
        "max_tokens": None,
    }


async def test_steps_with_modes_and_tags_are_stored_and_read_back_typed(
    layer: KimiDataLayer, store: Store
) -> None:
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)
    step: dict[str, Any] = {
        "id": str(uuid.uuid4()),
        "threadId": thread_id,
        "name": "alice",
        "type": "user_message",
        "output": "hi",
        "streaming": False,
        "isError": False,
        "metadata": {"k": 1},
        "tags": ["a", "b"],
        "modes": {"model": "kimi"},
        "createdAt": "2026-12-01T10:00:00.000Z",
        "defaultOpen": True,
        "autoCollapse": True,
    }
    await layer.create_step(StepDict(**step))  # type: ignore[typeddict-item]
    assert layer.failed_statements == 0
    stored = await rows(store, 'SELECT * FROM kimi_steps WHERE "id" = :id', id=step["id"])
    assert json.loads(stored[0]["modes"]) == {"model": "kimi"}
    thread = await layer.get_thread(thread_id)
    assert thread is not None
    back = thread["steps"][0]
    assert back["metadata"] == {"k": 1}
    assert back["tags"] == ["a", "b"]
    assert back["streaming"] is False
    assert back["isError"] is False
    assert isinstance(thread["metadata"], dict)


async def alices_search(
    layer: KimiDataLayer, thread_id: str
) -> Callable[[str], Awaitable[list[str]]]:
    """Give chat ``thread_id`` its owner, alice; her sidebar's search: the ids of her chats
    that show a text (any case)."""
    user = await layer.create_user(cl.User(identifier="alice"))
    assert user is not None
    await layer.update_thread(thread_id, name="a chat", user_id=user.id)

    async def found(words: str) -> list[str]:
        page = await layer.list_threads(
            Pagination(first=5), ThreadFilter(userId=user.id, search=words)
        )
        return [t["id"] for t in page.data]

    return found


@pytest.mark.parametrize("turn_first", [True, False], ids=["turn first", "step first"])
async def test_an_answers_text_is_kept_in_its_turn_only_and_drawn_from_it(
    layer: KimiDataLayer, store: Store, turn_first: bool
) -> None:
    """One record of an answer: its message's step keeps no copy, whichever is written
    first, and the page (a resume, a share, the sidebar's search) gets it from the turn,
    remote images made links as when it was drawn."""
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)
    answer = "A cat, see ![cat](https://elsewhere.example/cat.png) there."
    turn = Turn(text="what is it?", answer=answer, status="done")
    at = "2026-12-01T10:00:00.000Z"
    said = {"q1": ("user_message", "what is it?"), "a1": ("assistant_message", answer),
            "n1": ("system_message", "*2.0 s*")}  # fmt: skip
    steps: list[dict[str, Any]] = [
        {
            "id": step_id,
            "type": kind,
            "output": output,
            "createdAt": at,
            "threadId": thread_id,
            "name": "x",
            "streaming": False,
        }
        for step_id, (kind, output) in said.items()
    ]
    writes = [layer.create_step(StepDict(**step)) for step in steps]  # type: ignore[typeddict-item]
    if turn_first:
        await store.turns.save(thread_id, record(0, "q1", turn, answer_id="a1"))
    for write in writes:
        await write
    if not turn_first:
        await store.turns.save(thread_id, record(0, "q1", turn, answer_id="a1"))

    stored = await rows(
        store, 'SELECT id, output FROM kimi_steps WHERE "threadId" = :t', t=thread_id
    )
    assert {r["id"]: r["output"] for r in stored} == {"q1": None, "a1": "", "n1": "*2.0 s*"}
    thread = await layer.get_thread(thread_id)
    assert thread is not None
    outputs = {s["id"]: s["output"] for s in thread["steps"]}
    assert outputs["a1"].startswith("A cat, see ") and "there." in outputs["a1"]
    assert "![cat]" not in outputs["a1"] and "elsewhere.example/cat.png" in outputs["a1"]
    assert outputs["n1"] == "*2.0 s*"
    async with store.engine.begin() as db:  # a block stored before its turn named it
        await db.execute(text("UPDATE kimi_steps SET output = 'A cat' WHERE id = 'a1'"))
    thread = await layer.get_thread(thread_id)
    assert thread is not None
    assert {s["id"]: s["output"] for s in thread["steps"]}["a1"] == outputs["a1"]
    found = await alices_search(layer, thread_id)
    assert await found("SEE") == [thread_id]


QUESTIONS: dict[str, tuple[str, dict[str, str]]] = {
    # step id: (what the step shows, its metadata)
    "q1": ("what is the octopus doing?", {}),
    "q2": ("summarise it", {}),  # sent with a PDF's pages
    "q3": ("", {}),  # a photo alone
    "q4": ("and the sky?", {"kimi_turn": "v4"}),  # drawn again for version v4
    "q5": ("what is B?", {"kimi_turn": "v5"}),  # drawn for v5, then edited: a turn of its own
}
ASKED = {  # turn key: what the model was asked
    "q1": "what is the octopus doing?",
    "q2": "[report.pdf, page 1]\nRevenue grew.\nsummarise it",
    "q3": "",
    "v4": "and the sky?",
    "v5": "what is A?",
    "q5": "what is B?",
}
"""A chat's questions: only q1's text is its turn's as typed, by its own id (the others
keep their own: :func:`backend.store.pages.asked_as_its_own`)."""


def question_steps(thread_id: str) -> list[dict[str, Any]]:
    return [
        {
            "id": step_id,
            "type": "user_message",
            "output": shown,
            "metadata": metadata,
            "createdAt": f"2026-12-01T10:00:0{n}.000Z",
            "threadId": thread_id,
            "name": "alice",
            "streaming": False,
        }
        for n, (step_id, (shown, metadata)) in enumerate(QUESTIONS.items())
    ]


@pytest.mark.parametrize("turn_first", [True, False], ids=["turn first", "step first"])
async def test_a_question_asked_as_typed_is_kept_in_its_turn_only_and_drawn_from_it(
    layer: KimiDataLayer, store: Store, turn_first: bool
) -> None:
    """One record of a question: the person's message keeps no copy of the text its turn
    was asked with, whichever is written first, and the page (a resume, a share, the
    sidebar's search) gets it from the turn. A message whose turn was asked with more (PDF
    pages), with nothing typed, or that names another turn (drawn again for a version)
    keeps what it shows, and the search finds only what the page shows."""
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)

    async def save_turns() -> None:
        for n, (key, sent) in enumerate(ASKED.items()):
            await store.turns.save(thread_id, record(n, key, Turn(text=sent, status="done")))

    if turn_first:
        await save_turns()
    for step in question_steps(thread_id):
        await layer.create_step(StepDict(**step))  # type: ignore[typeddict-item]
    if not turn_first:
        await save_turns()

    stored = await rows(
        store, 'SELECT id, output FROM kimi_steps WHERE "threadId" = :t', t=thread_id
    )
    shown = {step_id: text for step_id, (text, _) in QUESTIONS.items()}
    assert {r["id"]: r["output"] for r in stored} == {**shown, "q1": None}
    thread = await layer.get_thread(thread_id)
    assert thread is not None
    assert {s["id"]: s["output"] for s in thread["steps"]} == shown
    found = await alices_search(layer, thread_id)
    assert await found("OCTOPUS") == [thread_id]
    assert await found("revenue") == await found("what is a?") == []  # not on the page


async def test_migration_11_leaves_a_question_asked_as_typed_in_its_turn_only(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chat of an earlier release (schema version 10): its questions' copies go where the
    page draws them from the turn again, and only there."""
    store = Store(settings)
    with monkeypatch.context() as before:  # the schema as it was at version 10
        before.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:10])
        before.setattr(schema, "LATEST", 10)
        await store.check()
    try:
        layer = KimiDataLayer(store, FilesStorageClient(store.files))
        thread_id = str(uuid.uuid4())
        init_http_context(thread_id=thread_id)
        for step in question_steps(thread_id):
            await layer.create_step(StepDict(**step))  # type: ignore[typeddict-item]
        for n, (key, sent) in enumerate(ASKED.items()):
            await store.turns.save(thread_id, record(n, key, Turn(text=sent, status="done")))
        shown = {step_id: text for step_id, (text, _) in QUESTIONS.items()}
        async with store.engine.begin() as db:  # as the earlier release stored it
            await db.execute(
                text("UPDATE kimi_steps SET output = :q WHERE id = 'q1'"), {"q": shown["q1"]}
            )
        assert await migrate(store.engine) == [11, 12]
        after = await rows(store, "SELECT id, output FROM kimi_steps")
        assert {r["id"]: r["output"] for r in after} == {**shown, "q1": None}
        thread = await layer.get_thread(thread_id)
        assert thread is not None
        assert {s["id"]: s["output"] for s in thread["steps"]} == shown
    finally:
        await store.close()


async def test_the_search_finds_what_the_page_shows_not_other_versions_or_hidden_reasoning(
    layer: KimiDataLayer, store: Store
) -> None:
    """The sidebar's search looks in the answers and reasonings the page shows: not in a
    version the person switched away from (its answer's message left the page), nor in a
    reasoning the settings hid (no reasoning step was drawn)."""
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)
    shown = Turn(text="q", answer="A wombat.", reasoning="Think of a quokka.", status="done")
    other = Turn(text="q", answer="A platypus.", reasoning="Think of a numbat.", status="done")
    hidden = Turn(text="r", answer="Fine.", reasoning="Think of a bilby.", status="done")
    on_page = {"q1": "user_message", "a1": "assistant_message", "t1": "llm",
               "q2": "user_message", "a3": "assistant_message"}  # fmt: skip
    for step_id, kind in on_page.items():
        step = {"id": step_id, "type": kind, "output": "", "threadId": thread_id, "name": "x",
                "streaming": False, "createdAt": "2026-12-01T10:00:00.000Z"}  # fmt: skip
        await layer.create_step(StepDict(**step))  # type: ignore[typeddict-item]
    await store.turns.save(thread_id, record(0, "q1", shown, answer_id="a1", reasoning_id="t1"))
    await store.turns.save(thread_id, record(1, "v2", other, answer_id="a2", reasoning_id="t2"))
    await store.turns.save(thread_id, record(2, "q2", hidden, answer_id="a3"))
    found = await alices_search(layer, thread_id)
    assert await found("WOMBAT") == await found("quokka") == [thread_id]
    for elsewhere in ("platypus", "numbat", "bilby"):
        assert await found(elsewhere) == [], elsewhere


def reasoning_text() -> str:
    """A reasoning of several blocks (backend/blocks.py), code cut in two among them."""
    prose = "".join(f"Step {i}: weigh the sky against the sea, then the hull. " for i in range(60))
    code = "".join(f"x = {i}\n" for i in range(400))
    return f"{prose}\n\n```python\n{code}```\n\nSo ![it](https://elsewhere.example/i.png).\n"


@pytest.mark.parametrize("turn_first", [True, False], ids=["turn first", "blocks first"])
async def test_an_ended_reasoning_is_kept_in_its_turn_only_and_its_blocks_drawn_from_it(
    layer: KimiDataLayer, store: Store, turn_first: bool
) -> None:
    """One record of a reasoning: once the answer ended, the blocks of its step (children
    of the step the turn names) keep no copy, whichever is written first, and a resume
    gets each block's text back as it streamed, remote images made links."""
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)
    reasoning = reasoning_text()
    shown = [link_remote_images(t) for t in block_texts(reasoning)]
    assert len(shown) >= 3
    turn = Turn(text="why?", answer="Because.", reasoning=reasoning, status="done")
    at = "2026-12-01T10:00:{:02d}.000Z"
    steps: list[dict[str, Any]] = [
        {"id": "r1", "type": "llm", "name": "Thought for 2.0s", "output": "", "parentId": None}
    ] + [
        {"id": f"b{i}", "type": "undefined", "name": "block", "output": out, "parentId": "r1"}
        for i, out in enumerate(shown)
    ]
    writes = [
        layer.create_step(StepDict(**step, threadId=thread_id, createdAt=at.format(i),  # type: ignore[typeddict-item]
                                   streaming=False))
        for i, step in enumerate(steps)
    ]  # fmt: skip
    recorded = record(0, "q1", turn, answer_id="a1", reasoning_id="r1")
    if turn_first:
        await store.turns.save(thread_id, recorded)
    for write in writes:
        await write
    if not turn_first:
        await store.turns.save(thread_id, recorded)

    stored = await rows(store, 'SELECT id, output FROM kimi_steps WHERE "parentId" = :r', r="r1")
    assert len(stored) == len(shown) and {r["output"] for r in stored} == {""}
    thread = await layer.get_thread(thread_id)
    assert thread is not None
    outputs = {s["id"]: s["output"] for s in thread["steps"]}
    assert [outputs[f"b{i}"] for i in range(len(shown))] == shown
    assert "elsewhere.example/i.png" in shown[-1] and "![it]" not in shown[-1]
    found = await alices_search(layer, thread_id)
    assert await found("AGAINST THE SEA") == [thread_id]


async def test_a_reasoning_still_streaming_keeps_its_blocks_text(
    layer: KimiDataLayer, store: Store
) -> None:
    """A turn saved while its answer streams (``pending``) holds the reasoning as it was
    then: its blocks keep their text, which a resume after a crash shows."""
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)
    block = {"id": "b0", "type": "undefined", "name": "block", "output": "Step 1 and step 2",
             "parentId": "r1", "threadId": thread_id, "createdAt": "2026-12-01T10:00:00.000Z",
             "streaming": False}  # fmt: skip
    await layer.create_step(StepDict(**block))  # type: ignore[typeddict-item]
    pending = Turn(text="why?", reasoning="Step 1", status="pending")
    await store.turns.save(thread_id, record(0, "q1", pending, reasoning_id="r1"))
    thread = await layer.get_thread(thread_id)
    assert thread is not None
    assert [s["output"] for s in thread["steps"]] == ["Step 1 and step 2"]


async def test_a_late_empty_write_never_blanks_a_step(layer: KimiDataLayer, store: Store) -> None:
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)
    base: dict[str, Any] = {
        "threadId": thread_id, "name": "Thinking…", "type": "llm", "streaming": False,
        "createdAt": "2026-12-01T10:00:00.000Z", "metadata": {},
    }  # fmt: skip
    ids = [str(uuid.uuid4()) for _ in range(20)]
    tasks = []
    for step_id in ids:  # send() then update() as Chainlit does: two tasks each
        tasks.append(asyncio.create_task(layer.create_step({**base, "id": step_id, "output": ""})))
        full = {**base, "id": step_id, "output": "the whole reasoning"}
        tasks.append(asyncio.create_task(layer.update_step(full)))
    await asyncio.gather(*tasks)
    stored = await rows(store, 'SELECT output FROM kimi_steps WHERE "threadId" = :t', t=thread_id)
    assert [r["output"] for r in stored] == ["the whole reasoning"] * 20


async def test_a_nul_character_in_a_step_is_stored_as_a_replacement_character(
    layer: KimiDataLayer, store: Store
) -> None:
    """PostgreSQL's text cannot hold U+0000 ("invalid byte sequence for encoding UTF8:
    0x00"), and a random-weights answer held one (tests/test_three_hosts.py): before, the
    store refused every later write of the app until it stopped."""
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)
    step = {"id": str(uuid.uuid4()), "threadId": thread_id, "name": "Kimi",
            "type": "assistant_message", "streaming": False, "output": "noise \x00 and more",
            "createdAt": "2026-12-01T10:00:00.000Z", "metadata": {"note": "a\x00b"}}  # fmt: skip
    await layer.create_step(step)
    stored = await rows(store, 'SELECT output FROM kimi_steps WHERE "threadId" = :t', t=thread_id)
    assert [r["output"] for r in stored] == ["noise \ufffd and more"]  # on SQLite too


async def test_two_writers_at_once_never_hit_a_locked_database(
    settings: Settings, store: Store
) -> None:
    """Two data layers on two engines (as two app processes would be) write 2 x 60 steps."""
    second = Store(settings)
    layers = [KimiDataLayer(s, FilesStorageClient(s.files)) for s in (store, second)]
    thread_ids = [str(uuid.uuid4()), str(uuid.uuid4())]
    init_http_context()

    async def write(layer: KimiDataLayer, thread_id: str) -> None:
        for i in range(60):
            await layer.create_step(
                {"id": str(uuid.uuid4()), "threadId": thread_id, "name": "n",
                 "type": "assistant_message", "output": f"answer {i}", "streaming": False,
                 "createdAt": f"2026-12-01T10:00:{i:02d}.000Z", "metadata": {}}
            )  # fmt: skip

    try:
        await asyncio.gather(
            *(write(layer, t) for layer, t in zip(layers, thread_ids, strict=True))
        )
    finally:
        await second.close()
    assert [layer.failed_statements for layer in layers] == [0, 0]
    for thread_id in thread_ids:
        count = await rows(
            store, 'SELECT COUNT(*) AS n FROM kimi_steps WHERE "threadId" = :t', t=thread_id
        )
        assert count[0]["n"] == 60


async def test_an_edit_removes_the_steps_after_the_edited_message(
    layer: KimiDataLayer, store: Store
) -> None:
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)
    names = ["q1", "run1", "thought1", "a1", "q2", "run2", "thought2", "a2", "edit-run"]
    for i, name in enumerate(names):
        step = {"id": name, "threadId": thread_id, "name": name, "type": "llm", "output": "",
                "streaming": False, "createdAt": f"2026-12-01T10:00:{i:02d}.000000Z"}  # fmt: skip
        await layer.create_step(step)
    removed = await layer.delete_steps_after(thread_id, "2026-12-01T10:00:00.000000Z", {"edit-run"})
    assert removed == 7
    left = await rows(
        store, 'SELECT "id" FROM kimi_steps WHERE "threadId" = :t ORDER BY "id"', t=thread_id
    )
    assert [r["id"] for r in left] == ["edit-run", "q1"]


# --- turns and resume -------------------------------------------------------------------


def record(position: int, message_id: str, turn: Turn, **extra: Any) -> TurnRecord:
    return TurnRecord(position=position, message_id=message_id, turn=turn, **extra)


async def test_turns_come_back_with_the_same_prepared_images(store: Store) -> None:
    thread_id = str(uuid.uuid4())
    images = [photo("rocket.jpg"), photo("page.png")]
    first = Turn(text="compare", images=images, answer="Both show things.", reasoning="hmm",
                 status="done")  # fmt: skip
    options = {"temperature": 0.3, "top_p": 0.9, "max_tokens": 777, "show_reasoning": True}
    saved = record(
        0, "m1", first, answer_id="a1", timings=Timings(0.1, 2.5, 3.0, 40), model="kimi-vl",
        options=options,
    )  # fmt: skip
    await store.turns.save(thread_id, saved)
    loaded = await store.turns.load(thread_id)
    assert len(loaded) == 1
    back = loaded[0]
    assert [i.data_url for i in back.turn.images] == [i.data_url for i in images]
    assert [(i.width, i.height, i.tokens) for i in back.turn.images] == [
        (i.width, i.height, i.tokens) for i in images
    ]
    assert (back.turn.answer, back.turn.reasoning, back.turn.status) == (
        "Both show things.", "hmm", "done",
    )  # fmt: skip
    assert (back.answer_id, back.timings, back.model, back.options) == (
        "a1", Timings(0.1, 2.5, 3.0, 40), "kimi-vl", options,
    )  # fmt: skip
    assert back.legacy_stats is None  # numbers, not the words shown
    files = list((on_disk(store).root / "prepared" / thread_id).iterdir())
    assert sorted(f.suffix for f in files) == [".jpg", ".png"]


async def test_a_turn_saved_again_without_its_numbers_keeps_them(store: Store) -> None:
    """Choosing a version (‹ n/m ›) or drawing it again saves its turn with what the chat
    holds, which has no measured numbers: the stored ones stay ("Thought for 2.5s" after
    a resume, the stats line in Export)."""
    thread_id = str(uuid.uuid4())
    turn = Turn(text="why?", answer="Because.", reasoning="hmm", status="done")
    numbers = Timings(0.1, 2.5, 3.0, 40)
    await store.turns.save(thread_id, record(0, "m1", turn, answer_id="a1", timings=numbers))
    await store.turns.save(thread_id, record(0, "m1", turn, answer_id="a2", chosen=7))
    (back,) = await store.turns.load(thread_id)
    assert (back.answer_id, back.chosen, back.timings) == ("a2", 7, numbers)
    assert back.turn.reasoning_s == 2.5


async def test_a_message_answered_again_in_place_gets_new_numbers_or_none(store: Store) -> None:
    """Retry or more tokens answer the same message again (one row): what was measured of
    the earlier answer, or an older release's stats line, does not stay on the new one."""
    thread_id = str(uuid.uuid4())
    cut = Turn(text="why?", reasoning="long", status="cut_off", reasoning_s=9.5)
    await store.turns.save(
        thread_id, record(0, "m1", cut, timings=Timings(0.1, 9.5, 30.0, 4096), legacy_stats="x")
    )
    await store.turns.save(thread_id, record(0, "m1", Turn(text="why?", status="pending")))
    stopped = Turn(text="why?", reasoning="short", status="stopped")
    await store.turns.save(thread_id, record(0, "m1", stopped))
    (back,) = await store.turns.load(thread_id)
    assert (back.timings, back.turn.reasoning_s, back.legacy_stats) == (None, None, None)
    done = Turn(text="why?", answer="A.", status="done")
    await store.turns.save(thread_id, record(0, "m1", done, timings=Timings(0.1, None, 2.0, 50)))
    (back,) = await store.turns.load(thread_id)
    assert (back.timings, back.legacy_stats) == (Timings(0.1, None, 2.0, 50), None)


def as_stored(answer: ComparedAnswer) -> tuple[object, ...]:
    """What a store keeps of another model's answer (a turn compares by identity)."""
    turn = answer.turn
    return answer.label, turn.answer, turn.reasoning, turn.reasoning_s, turn.status, answer.timings


async def test_other_models_answers_come_back_with_their_turn_oldest_first(store: Store) -> None:
    """Compare answers are the chat's record too: an export and a version drawn again show
    them after a resume and on another UI worker. The turn saved again as it was (a
    version chosen or drawn again) keeps them; deleting the chat removes them."""
    thread_id = str(uuid.uuid4())
    turn = Turn(text="why?", answer="Because.", status="done")
    await store.turns.save(thread_id, record(0, "m1", turn, answer_id="a1"))
    await store.turns.save(
        thread_id, record(1, "m2", Turn(text="and?", answer="So.", status="done"))
    )
    first = ComparedAnswer("Kimi-VL Instruct", Turn(text="", answer="Since.", status="done"),
                           Timings(0.2, None, 1.5, 12))  # fmt: skip
    second = ComparedAnswer("Kimi-VL Thinking", Turn(text="", answer="As.", reasoning="hm",
                            status="stopped"))  # fmt: skip
    await store.turns.save_compared(thread_id, "m1", first, "Because.")
    await store.turns.save_compared(thread_id, "m1", second, "Because.")
    await store.turns.save(thread_id, record(0, "m1", turn, chosen=9))  # drawn again
    one, two = await store.turns.load(thread_id)
    assert [as_stored(c) for c in one.compared] == [as_stored(first), as_stored(second)]
    assert two.compared == ()
    await store.turns.delete_thread(thread_id)
    assert await rows(store, "SELECT * FROM kimi_compared") == []


async def test_a_persons_stored_chats_count_their_compare_answers(store: Store) -> None:
    """``KIMI_USER_STORE_MB`` bounds what a person's chats hold: Compare answers too."""
    thread_id = str(uuid.uuid4())
    async with store.engine.begin() as db:
        await db.execute(
            text('INSERT INTO kimi_threads (id, "userIdentifier") VALUES (:t, :u)'),
            {"t": thread_id, "u": "erin"},
        )
    turn = Turn(text="why?", answer="Because.", status="done")  # 4 + 8 bytes
    await store.turns.save(thread_id, record(0, "m1", turn))
    assert await store.stored_chats.held("erin") == 12
    other = Turn(text="", answer="Weil.", reasoning="hm… ", status="done")  # 5 + 6 bytes
    await store.turns.save_compared(
        thread_id, "m1", ComparedAnswer("Kimi-VL Instruct", other), "Because."
    )
    assert await store.stored_chats.held("erin") == 23
    assert await store.stored_chats.held("frank") == 0


async def test_an_answer_replaced_in_place_drops_the_other_models_answers_beside_it(
    store: Store,
) -> None:
    """Retry on a stopped answer answers its message again in place: the Compare answers
    were beside the answer it replaces, as the chat shows (backend/record.py)."""
    thread_id = str(uuid.uuid4())
    stopped = Turn(text="why?", answer="Beca", status="stopped")
    await store.turns.save(thread_id, record(0, "m1", stopped))
    other = ComparedAnswer("Kimi-VL Instruct", Turn(text="", answer="Since.", status="done"))
    await store.turns.save_compared(thread_id, "m1", other, "Beca")
    await store.turns.save(thread_id, record(0, "m1", Turn(text="why?", status="pending")))
    (back,) = await store.turns.load(thread_id)
    assert back.compared == ()
    # Held while the store was away, the Compare's write comes after the Retry's: the
    # answer it stood beside is gone, so it is not stored beside the new one.
    await store.turns.save(
        thread_id, record(0, "m1", Turn(text="why?", answer="So.", status="done"))
    )
    await store.turns.save_compared(thread_id, "m1", other, "Beca")
    (back,) = await store.turns.load(thread_id)
    assert back.compared == ()
    await store.turns.save_compared(thread_id, "m1", other, "So.")
    (back,) = await store.turns.load(thread_id)
    assert [c.turn.answer for c in back.compared] == ["Since."]


async def test_a_stale_tab_choosing_a_version_keeps_the_newer_answer_and_its_compare(
    layer: KimiDataLayer, store: Store
) -> None:
    """Tab A answers m1 again in place and compares it; tab B, which still holds the first
    answer, then shows that version again (‹ n/m ›): the row keeps tab A's answer and the
    Compare answer beside it, and takes only B's choice and its newly drawn answer message,
    which keeps no copy (a resume draws the stored answer there)."""
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)
    first = Turn(text="why?", answer="Because.", status="done")
    await store.turns.save(thread_id, record(0, "m1", first, answer_id="a1", chosen=1))
    newer = Turn(text="why?", answer="Since the sky is blue.", status="done")
    await store.turns.save(thread_id, record(0, "m1", newer, answer_id="a2"))
    other = ComparedAnswer("Kimi-VL Instruct", Turn(text="", answer="Blue.", status="done"))
    await store.turns.save_compared(thread_id, "m1", other, newer.answer)
    await layer.create_step(StepDict(
        id="a3", type="assistant_message", name="Kimi", output=first.answer,
        threadId=thread_id, streaming=False, createdAt="2026-12-01T10:00:00.000Z",
    ))  # fmt: skip
    stale = record(0, "m1", first, answer_id="a3", chosen=7, restates=True)
    await store.turns.save(thread_id, stale)
    (back,) = await store.turns.load(thread_id)
    assert (back.turn.answer, back.answer_id, back.chosen) == (newer.answer, "a3", 7)
    assert [c.turn.answer for c in back.compared] == ["Blue."]
    drawn = await rows(store, "SELECT output FROM kimi_steps WHERE id = 'a3'")
    assert [r["output"] for r in drawn] == [""]


class AwayTurns(TurnStore):
    """The store's turns, refusing writes (as a stopped database does) while ``away``."""

    away = True

    async def save(self, thread_id: str, record: TurnRecord) -> None:
        if self.away:
            raise OSError("the database is away")
        await super().save(thread_id, record)


async def test_a_restatement_held_in_an_outage_never_replaces_a_held_answer(
    store: Store,
) -> None:
    """The answer's end is held while the store is away, then the tab shows that version
    again (‹ n/m ›): once the store is back the answer is stored, not lost behind the
    restatement that came after it."""
    thread_id = str(uuid.uuid4())
    first = Turn(text="why?", answer="Because.", status="done")
    await store.turns.save(thread_id, record(0, "m1", first, answer_id="a1"))
    turns = AwayTurns(store.engine, store.files)
    pending = PendingWrites("test", 10_000_000, retry_s=(0.01,))
    tab = ThreadTurns(turns, pending, thread_id)
    newer = Turn(text="why?", answer="Since the sky is blue.", status="done")
    assert (await tab.record(record(0, "m1", newer, answer_id="a2"))).held
    assert (await tab.record(record(0, "m1", newer, answer_id="a3", restates=True))).held
    turns.away = False
    await asyncio.wait_for(pending.written(thread_id), 5)
    (back,) = await store.turns.load(thread_id)
    assert (back.turn.answer, back.answer_id) == (newer.answer, "a3")


async def test_an_answer_held_after_a_held_restatement_is_not_overwritten_by_it(
    store: Store,
) -> None:
    """Held in an outage, in order: a turn's start, a restatement of it (drawn again as
    a2), then its end (answer message a3): the end names the turn's current page ids, so
    the older restatement is dropped, not replayed after it."""
    thread_id = str(uuid.uuid4())
    await store.turns.save(thread_id, record(0, "m1", Turn(text="why?", status="failed")))
    turns = AwayTurns(store.engine, store.files)
    pending = PendingWrites("test", 10_000_000, retry_s=(0.01,))
    tab = ThreadTurns(turns, pending, thread_id)
    start = Turn(text="why?", status="pending")
    assert (await tab.record(record(0, "m1", start, answer_id="a1"))).held
    assert (await tab.record(record(0, "m1", start, answer_id="a2", restates=True))).held
    end = Turn(text="why?", answer="Since.", status="done")
    assert (await tab.record(record(0, "m1", end, answer_id="a3"))).held
    turns.away = False
    await asyncio.wait_for(pending.written(thread_id), 5)
    (back,) = await store.turns.load(thread_id)
    assert (back.turn.answer, back.answer_id) == ("Since.", "a3")


async def test_a_write_superseded_while_the_closing_store_writes_it_is_not_dropped() -> None:
    """The app stops and the store, back, writes what was held: a restatement is being
    written when its turn's whole save comes (which supersedes it). Both are written, in
    that order, and closing ends without an error."""
    pending = PendingWrites("test", 1_000_000, retry_s=(60.0,))
    written: list[str] = []
    away, writing = True, asyncio.Event()

    async def restate() -> None:
        if away:
            raise OSError("the database is away")
        writing.set()
        await asyncio.sleep(0.05)
        written.append("restatement")

    async def whole() -> None:
        written.append("whole save")

    await pending.write(Write(run=restate, chat="c", what="r", size=1, key="chosen"))
    away = False
    closing = asyncio.create_task(pending.close(timeout_s=5))
    await writing.wait()
    whole_save = Write(run=whole, chat="c", what="w", size=1, key="turn", supersedes="chosen")
    assert (await pending.write(whole_save)).held
    await closing
    assert written == ["restatement", "whole save"]


async def test_a_read_that_fails_in_any_way_leaves_the_tabs_versions_as_they_are(
    store: Store,
) -> None:
    """What the store holds of a version is read before it is shown again; whatever that
    read meets (here a row it cannot decode), the version is shown as the tab holds it."""

    class Garbled(TurnStore):
        async def answers(self, thread_id: str, keys: Sequence[str]) -> list[TurnRecord]:
            raise ValueError("a row that cannot be read")

    tab = ThreadTurns(Garbled(store.engine, store.files), store.pending, str(uuid.uuid4()))
    assert await tab.stored(["m1"]) == []


async def test_a_turn_whose_save_is_held_is_not_read_back_as_stored(store: Store) -> None:
    """The store takes no writes but can be read (a read-only or full disk): this tab
    answered m1 again, its save held, so the stored row is older than the tab's copy and a
    version shown again keeps the tab's (:meth:`ThreadTurns.stored` leaves it out)."""
    thread_id = str(uuid.uuid4())
    await store.turns.save(thread_id, record(0, "m1", Turn(text="why?", answer="Because.")))
    await store.turns.save(thread_id, record(1, "m2", Turn(text="and?", answer="Fire.")))
    pending = PendingWrites("test", 10_000_000, retry_s=(60.0,))
    tab = ThreadTurns(AwayTurns(store.engine, store.files), pending, thread_id)
    newer = Turn(text="why?", answer="Since the sky is blue.", status="done")
    assert (await tab.record(record(0, "m1", newer))).held
    assert [r.message_id for r in await tab.stored(["m1", "m2"])] == ["m2"]
    await pending.close(timeout_s=0)


async def test_a_restatement_meeting_a_row_stored_meanwhile_restates_it(store: Store) -> None:
    """A restatement finds no row, and another tab's save stores the turn before it is
    written whole: it restates that row, not overwrites it."""
    thread_id = str(uuid.uuid4())
    newer = Turn(text="why?", answer="Since the sky is blue.", status="done")

    class Meanwhile(TurnStore):
        async def _restated(self, thread_id: str, restating: TurnRecord) -> bool:
            found = await super()._restated(thread_id, restating)
            await super().save(thread_id, record(0, "m1", newer, answer_id="a2"))
            return found

    stale = Turn(text="why?", answer="Because.", status="done")
    restating = record(0, "m1", stale, answer_id="a3", chosen=4, restates=True)
    await Meanwhile(store.engine, store.files).save(thread_id, restating)
    (back,) = await store.turns.load(thread_id)
    assert (back.turn.answer, back.answer_id, back.chosen) == (newer.answer, "a3", 4)


async def test_a_version_restated_before_it_was_stored_is_stored_whole(store: Store) -> None:
    """A restatement of a turn with no row yet (its first save still held, then lost)
    stores the turn as the tab has it."""
    thread_id = str(uuid.uuid4())
    turn = Turn(text="why?", answer="Because.", status="done")
    await store.turns.save(thread_id, record(0, "m1", turn, chosen=3, restates=True))
    (back,) = await store.turns.load(thread_id)
    assert (back.turn.answer, back.chosen) == ("Because.", 3)


@pytest.mark.parametrize("shown", [True, False], ids=["reasoning shown", "reasoning hidden"])
async def test_a_reasoning_answered_again_in_place_keeps_its_blocks_text(
    layer: KimiDataLayer, store: Store, shown: bool
) -> None:
    """Stopped while thinking, then Retry: the first attempt's reasoning step stays on the
    page, and once the row holds the second answer its blocks get their own text back
    (never empty, never the second attempt's)."""
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)
    first, second = reasoning_text(), "Second thoughts. " * 400
    stopped = Turn(text="why?", reasoning=first, status="stopped")
    await store.turns.save(thread_id, record(0, "q1", stopped, reasoning_id="s1"))
    drawn = [link_remote_images(t) for t in block_texts(first)]
    for i, out in enumerate(drawn):
        await layer.create_step(StepDict(
            id=f"s1-{i}", type="undefined", name="block", output=out, parentId="s1",
            threadId=thread_id, streaming=False, createdAt=f"2026-12-01T10:00:0{i}.000Z",
        ))  # fmt: skip
    await store.turns.save(thread_id, record(0, "q1", Turn(text="why?", status="pending")))
    done = Turn(text="why?", reasoning=second, answer="A.", status="done")
    again = record(0, "q1", done, answer_id="a2", reasoning_id="s2" if shown else None)
    await store.turns.save(thread_id, again)
    thread = await layer.get_thread(thread_id)
    assert thread is not None
    outputs = {s["id"]: s["output"] for s in thread["steps"]}
    assert [outputs[f"s1-{i}"] for i in range(len(drawn))] == drawn
    (back,) = await store.turns.load(thread_id)
    assert back.reasoning_id == ("s2" if shown else None)


async def test_an_interrupted_version_chosen_after_a_resume_keeps_its_reasoning_step(
    store: Store,
) -> None:
    """A turn stored ``pending`` reads back ``stopped``; chosen again it is the same
    answer, so its reasoning step stays named."""
    thread_id = str(uuid.uuid4())
    cut = Turn(text="why?", reasoning="so far", status="pending")
    await store.turns.save(thread_id, record(0, "m1", cut, reasoning_id="s1"))
    (loaded,) = await store.turns.load(thread_id)
    assert loaded.turn.status == "stopped"
    await store.turns.save(thread_id, record(0, "m1", loaded.turn, chosen=5))
    (back,) = await store.turns.load(thread_id)
    assert (back.reasoning_id, back.chosen) == ("s1", 5)


async def test_a_retry_with_the_same_reasoning_gives_the_earlier_blocks_their_text(
    layer: KimiDataLayer, store: Store
) -> None:
    """Saves held through an outage replace each other, so the first the database sees of
    a Retry may be its end; a reasoning that came out the same is still another answer."""
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)
    reasoning = "Same thoughts. " * 10
    stopped = Turn(text="why?", reasoning=reasoning, status="stopped")
    await store.turns.save(thread_id, record(0, "q1", stopped, reasoning_id="s1"))
    await layer.create_step(StepDict(
        id="s1-0", type="undefined", name="block", output=reasoning, parentId="s1",
        threadId=thread_id, streaming=False, createdAt="2026-12-01T10:00:00.000Z",
    ))  # fmt: skip
    done = Turn(text="why?", reasoning=reasoning, answer="A.", status="done")
    await store.turns.save(thread_id, record(0, "q1", done, answer_id="a2", reasoning_id="s2"))
    stored = await rows(store, "SELECT output FROM kimi_steps WHERE id = 's1-0'")
    assert [r["output"] for r in stored] == [reasoning]


async def test_a_webp_sent_as_uploaded_comes_back_as_webp(store: Store, tmp_path: Path) -> None:
    """A WebP the model gets as uploaded (backend/images.py ``_as_uploaded``) is stored as a
    ``.webp`` file and read back with its own type, not labelled JPEG."""
    from PIL import Image

    path = tmp_path / "sky.webp"
    Image.open(DATA / "chelsea.png").convert("RGB").save(path, "WEBP", quality=80)
    image = prepare_image(path, 1024, "sky.webp")
    assert image.data_url.startswith("data:image/webp;base64,")  # sent as uploaded
    thread_id = str(uuid.uuid4())
    await store.turns.save(thread_id, record(0, "m1", Turn(text="sky?", images=[image])))
    back = (await store.turns.load(thread_id))[0].turn.images[0]
    assert back.data_url == image.data_url
    files = list((on_disk(store).root / "prepared" / thread_id).iterdir())
    assert [f.suffix for f in files] == [".webp"]


async def test_a_webp_stored_as_bin_by_an_earlier_release_comes_back_as_webp(
    store: Store, tmp_path: Path
) -> None:
    """Releases before the suffix map stored a WebP sent as uploaded under a ``.bin`` key
    (JPEG and PNG had their suffixes already): such a chat still resumes, as WebP."""
    from PIL import Image

    path = tmp_path / "sky.webp"
    Image.open(DATA / "chelsea.png").convert("RGB").save(path, "WEBP", quality=80)
    image = prepare_image(path, 1024, "sky.webp")
    thread_id = str(uuid.uuid4())
    await store.turns.save(thread_id, record(0, "m1", Turn(text="sky?", images=[image])))
    [stored] = (on_disk(store).root / "prepared" / thread_id).iterdir()
    stored.rename(stored.with_suffix(".bin"))
    async with store.engine.begin() as db:
        await db.execute(
            text("UPDATE kimi_images SET object_key = replace(object_key, '.webp', '.bin')")
        )
    back = (await store.turns.load(thread_id))[0].turn.images[0]
    assert back.data_url == image.data_url


async def test_a_version_of_the_first_turn_is_a_first_turn_and_nothing_is_dropped(
    store: Store,
) -> None:
    """Turn 1 of three edited (a version ``beside`` it): it is stored as a first turn, not
    after the last stored turn; every turn and image stays; choosing turn 1 again (a
    record without an answer id) keeps its stored answer id."""
    thread_id = str(uuid.uuid4())
    for i in range(3):
        turn = Turn(text=f"q{i}", images=[photo()] if i == 2 else [], answer=f"a{i}", status="done")
        await store.turns.save(thread_id, record(i, f"m{i}", turn, answer_id=f"a{i}", chosen=i + 1))
    edited = Turn(text="q0 edited", answer="", status="pending")
    await store.turns.save(thread_id, record(3, "v0", edited, chosen=4, beside="m0"))
    loaded = await store.turns.load(thread_id)
    assert [(r.message_id, r.parent_id) for r in loaded] == [
        ("m0", None), ("m1", "m0"), ("m2", "m1"), ("v0", None),
    ]  # fmt: skip
    assert [t.text for t in restore(loaded).conversation.turns] == ["q0 edited"]
    assert (
        len(await rows(store, "SELECT * FROM kimi_images WHERE thread_id = :t", t=thread_id)) == 1
    )

    await store.turns.save(thread_id, replace(loaded[0], answer_id=None, chosen=5))
    loaded = await store.turns.load(thread_id)
    back = restore(loaded)
    assert [t.text for t in back.conversation.turns] == ["q0", "q1", "q2"]
    assert loaded[0].answer_id == "a0" and back.versions.place("v0") == (2, 2)


async def test_turns_asked_in_the_composer_follow_the_last_stored_turn(store: Store) -> None:
    """A turn recorded without a parent (every turn asked in the composer, from any tab)
    follows the chat's last stored turn: the chat resumes whole, in the order stored, and
    saving a turn again (its answer streaming) keeps its place."""
    thread_id = str(uuid.uuid4())
    for i in range(3):
        turn = Turn(text=f"q{i}", answer="", status="pending")
        await store.turns.save(thread_id, record(i, f"m{i}", turn))
    await store.turns.save(thread_id, record(1, "m1", Turn(text="q1", answer="a1", status="done")))
    back = restore(await store.turns.load(thread_id))
    assert [t.text for t in back.conversation.turns] == ["q0", "q1", "q2"]
    assert [t.answer for t in back.conversation.turns] == ["", "a1", ""]
    parents = await rows(
        store, 'SELECT parent_id FROM kimi_turns WHERE thread_id = :t ORDER BY "position"',
        t=thread_id,
    )  # fmt: skip
    assert [r["parent_id"] for r in parents] == [None, "m0", "m1"]


async def test_versions_of_a_turn_come_back_with_the_branch_that_was_shown(store: Store) -> None:
    """Turn 2 regenerated (a version beside it, its own later turns kept), then the
    first version chosen again: every version is stored, the branch shown comes back."""
    thread_id = str(uuid.uuid4())
    shown = [("m1", None, 1), ("m2", "m1", 2), ("m3", "m2", 3), ("m4", "m3", 4)]
    for position, (key, parent, chosen) in enumerate(shown):
        turn = Turn(text=f"q {key}", answer=f"a {key}", status="done")
        saved = record(position, key, turn, parent_id=parent, chosen=chosen, answer_id=f"a{key}")
        await store.turns.save(thread_id, saved)
    again = Turn(text="q m2", answer="a m2, again", status="done")
    await store.turns.save(thread_id, record(4, "v2", again, chosen=5, beside="m2"))
    back = restore(await store.turns.load(thread_id))
    assert [t.answer for t in back.conversation.turns] == ["a m1", "a m2, again"]
    assert back.last_answer_id is None  # the new version's answer id was not stored

    chose_first = (await store.turns.load(thread_id))[1]  # ‹ on turn 2: saved as chosen
    await store.turns.save(thread_id, replace(chose_first, chosen=6))
    back = restore(await store.turns.load(thread_id))
    assert [t.answer for t in back.conversation.turns] == ["a m1", "a m2", "a m3", "a m4"]
    assert back.versions.place("v2") == (2, 2) and back.last_answer_id == "am4"
    assert len(await store.turns.load(thread_id)) == 5  # nothing was dropped


async def test_turns_stored_before_versions_read_back_as_one_branch(store: Store) -> None:
    """Migration 7 on rows stored before it (no parent, no choice): each turn follows
    the one stored before it, in order."""
    thread_id = str(uuid.uuid4())
    for i in range(3):
        turn = Turn(text=f"q{i}", answer=f"a{i}", status="done")
        await store.turns.save(thread_id, record(i, f"m{i}", turn))
    async with store.engine.begin() as db:
        await db.execute(text("UPDATE kimi_turns SET parent_id = NULL, chosen = NULL"))
        await db.run_sync(schema.MIGRATIONS[6].apply)
    loaded = await store.turns.load(thread_id)
    assert [(r.message_id, r.parent_id) for r in loaded] == [
        ("m0", None), ("m1", "m0"), ("m2", "m1"),
    ]  # fmt: skip
    assert [t.text for t in restore(loaded).conversation.turns] == ["q0", "q1", "q2"]


async def test_one_chat_in_two_tabs_keeps_the_turns_of_both(
    store: Store, fake: RunningFake, make_session: SessionFactory
) -> None:
    """Two tabs resume the same stored chat and each adds a turn (real turn runners, one
    sink each on the same thread): both turns are stored, in the order they were added,
    and an edit in either tab is a version beside the edited turn (nothing dropped)."""
    thread_id = str(uuid.uuid4())
    settings = Settings(base_url=fake.base_url, data_dir=str(store.data_dir))
    first = TurnRunner(make_session(settings), ThreadTurns(store.turns, store.pending, thread_id))
    await drain(first.ask("m0", "first question #scenario=quick", []))
    tabs = []
    for _ in range(2):  # two tabs open the stored chat
        tab = TurnRunner(make_session(settings), ThreadTurns(store.turns, store.pending, thread_id))
        restored = restore(await store.turns.load(thread_id))
        tab.chat.restore(restored.versions, restored.message_turns)
        tabs.append(tab)
    await drain(tabs[0].ask("a1", "from tab A #scenario=quick", []))
    await drain(tabs[1].ask("b1", "from tab B #scenario=quick", []))
    await drain(tabs[0].ask("a2", "tab A again #scenario=quick", []))
    stored = await store.turns.load(thread_id)
    assert [r.message_id for r in stored] == ["m0", "a1", "b1", "a2"]
    assert all(r.turn.status == "done" and r.turn.answer for r in stored)

    # Tab B edits its own message: a version beside it, following what it follows as
    # stored (tab A's turn, which tab B never saw); nothing is rewritten or dropped.
    await drain(tabs[1].ask("b1", "from tab B, edited #scenario=quick", []))
    stored = await store.turns.load(thread_id)
    assert [r.message_id for r in stored][:4] == ["m0", "a1", "b1", "a2"] and len(stored) == 5
    assert (stored[4].turn.text, stored[4].parent_id) == (
        "from tab B, edited #scenario=quick",
        "a1",
    )
    shown = [t.text for t in restore(stored).conversation.turns]
    assert shown == [
        "first question #scenario=quick", "from tab A #scenario=quick",
        "from tab B, edited #scenario=quick",
    ]  # fmt: skip
    # Tab A edits the first message: a first turn beside it; every turn stays.
    await drain(tabs[0].ask("m0", "first, edited #scenario=quick", []))
    stored = await store.turns.load(thread_id)
    assert len(stored) == 6 and stored[5].parent_id is None
    assert [t.text for t in restore(stored).conversation.turns] == ["first, edited #scenario=quick"]


def asked(request: dict[str, Any]) -> list[str]:
    """The person's texts in a chat completion request, oldest first."""
    return [m["content"][0]["text"] for m in request["messages"] if m["role"] == "user"]


async def test_a_stale_tab_choosing_a_version_shows_and_keeps_what_another_tab_stored(
    store: Store, fake: RunningFake, make_session: SessionFactory
) -> None:
    """Two tabs hold a chat whose first turn has two versions. The other tab answers
    version 1 again and compares it (written here straight to the store); this tab,
    holding the old answer, shows version 1 (‹): it gets the stored answer and Compare
    answer, the store keeps them, and a resume shows them."""
    thread_id = str(uuid.uuid4())
    settings = Settings(base_url=fake.base_url, data_dir=str(store.data_dir))
    first = TurnRunner(make_session(settings), ThreadTurns(store.turns, store.pending, thread_id))
    await drain(first.ask("m1", "q1 #scenario=quick", []))
    await drain(first.rerun("m1"))
    tab = TurnRunner(make_session(settings), ThreadTurns(store.turns, store.pending, thread_id))
    restored = restore(await store.turns.load(thread_id))
    tab.chat.restore(restored.versions, restored.message_turns)
    newer = Turn(text="q1 #scenario=quick", answer="Since the sky is blue.", status="done")
    await store.turns.save(thread_id, record(0, "m1", newer, answer_id="a9"))
    other = ComparedAnswer("Kimi-VL Instruct", Turn(text="", answer="Blue.", status="done"))
    await store.turns.save_compared(thread_id, "m1", other, newer.answer)
    assert tab.chat.versions["m1"].turn.answer != newer.answer  # the tab is stale

    shown, _ = await tab.choose("m1")
    assert shown[0].turn.answer == newer.answer
    assert [c.turn.answer for c in tab.shown.compared("m1")] == ["Blue."]
    stored = {r.message_id: r for r in await store.turns.load(thread_id)}
    assert stored["m1"].turn.answer == newer.answer
    assert [c.turn.answer for c in stored["m1"].compared] == ["Blue."]
    back = restore(list(stored.values()))
    assert [t.answer for t in back.conversation.turns] == [newer.answer]


async def test_an_answer_held_in_an_outage_outlives_its_version_shown_again(
    store: Store, fake: RunningFake, make_session: SessionFactory
) -> None:
    """Version 1 is stored failed. The store stops taking writes (it can still be read),
    this tab answers version 1 again and its saves are held; ‹ › then shows version 1
    again: the tab keeps its answer (the older stored row does not replace it), and once
    the store is back that answer is what it stores."""
    thread_id = str(uuid.uuid4())
    failed = Turn(text="q1 #scenario=quick", status="failed")
    await store.turns.save(thread_id, record(0, "m1", failed, chosen=2))
    done = Turn(text="q1, edited #scenario=quick", answer="Other.", status="done")
    await store.turns.save(thread_id, record(1, "m1b", done, chosen=1, beside="m1"))
    turns = AwayTurns(store.engine, store.files)
    turns.away = False
    pending = PendingWrites("test", 10_000_000, retry_s=(0.05,))
    settings = Settings(base_url=fake.base_url, data_dir=str(store.data_dir))
    tab = TurnRunner(make_session(settings), ThreadTurns(turns, pending, thread_id))
    restored = restore(await store.turns.load(thread_id))
    tab.chat.restore(restored.versions, restored.message_turns)
    turns.away = True
    await drain(tab.rerun("m1"))  # in place: its answer is not in the model's history
    answer = tab.chat.versions["m1"].turn.answer
    assert answer and pending.holds(thread_id)
    await tab.choose("m1b")
    shown, _ = await tab.choose("m1")
    assert (shown[0].turn.answer, shown[0].turn.status) == (answer, "done")
    turns.away = False
    await asyncio.wait_for(pending.written(thread_id), 5)
    stored = {r.message_id: r for r in await store.turns.load(thread_id)}
    assert (stored["m1"].turn.answer, stored["m1"].turn.status) == (answer, "done")


async def test_the_stored_answers_of_some_turns_come_without_images(store: Store) -> None:
    thread_id = str(uuid.uuid4())
    with_photo = Turn(text="what?", images=[photo("rocket.jpg")], answer="A rocket.",
                      status="done")  # fmt: skip
    await store.turns.save(thread_id, record(0, "m1", with_photo, model="kimi-vl"))
    await store.turns.save(thread_id, record(1, "m2", Turn(text="and?", answer="Fire.")))
    other = ComparedAnswer("Kimi-VL Instruct", Turn(text="", answer="Flames.", status="done"))
    await store.turns.save_compared(thread_id, "m2", other, "Fire.")
    got = {r.message_id: r for r in await store.turns.answers(thread_id, ["m1", "m2", "m9"])}
    assert set(got) == {"m1", "m2"}
    assert (got["m1"].turn.answer, got["m1"].model, got["m1"].turn.images) == (
        "A rocket.", "kimi-vl", [],
    )  # fmt: skip
    assert [c.turn.answer for c in got["m2"].compared] == ["Flames."]
    assert await store.turns.answers(thread_id, []) == []


async def test_regenerate_on_turn_one_of_three_keeps_the_later_turns_with_version_one(
    store: Store, fake: RunningFake, make_session: SessionFactory
) -> None:
    """Regenerate on the first of three answers (a real turn runner on a stored chat): a
    second version of turn 1 is shown and asked alone; the next question is asked with
    that branch; choosing version 1 again (‹) brings turns 2 and 3 back, into the model's
    history too, and a resume shows the branch chosen. Nothing is dropped."""
    thread_id = str(uuid.uuid4())
    settings = Settings(base_url=fake.base_url, data_dir=str(store.data_dir))
    turns = TurnRunner(make_session(settings), ThreadTurns(store.turns, store.pending, thread_id))
    for n in (1, 2, 3):
        await drain(turns.ask(f"m{n}", f"q{n} #scenario=quick", []))
    fake.reset()
    await drain(turns.rerun("m1"))
    assert asked(fake.requests[-1]) == ["q1 #scenario=quick"]
    chat = turns.chat
    _, second = chat.versions.siblings("m1")
    assert second.key != "m1" and chat.conversation.turns == [second.turn]
    assert chat.versions.place(second.key) == (2, 2)
    await drain(turns.ask("m4", "q4 #scenario=quick", []))
    assert asked(fake.requests[-1]) == ["q1 #scenario=quick", "q4 #scenario=quick"]
    assert [r.message_id for r in await store.turns.load(thread_id)] == [
        "m1", "m2", "m3", second.key, "m4",
    ]  # fmt: skip

    shown, notes = await turns.choose("m1")  # ‹ under turn 1's answer
    assert [v.key for v in shown] == ["m1", "m2", "m3"] and notes == []
    await drain(turns.ask("m5", "q5 #scenario=quick", []))
    assert asked(fake.requests[-1]) == [f"q{n} #scenario=quick" for n in (1, 2, 3, 5)]
    back = restore(await store.turns.load(thread_id))
    assert [t.text for t in back.conversation.turns] == [
        f"q{n} #scenario=quick" for n in (1, 2, 3, 5)
    ]
    assert back.versions.place(second.key) == (2, 2) and len(back.versions) == 6

    await turns.choose(second.key)  # › again: stored, and resumed so
    back = restore(await store.turns.load(thread_id))
    assert [t.text for t in back.conversation.turns] == ["q1 #scenario=quick", "q4 #scenario=quick"]


async def test_resumed_conversation_sends_the_images_and_answers_without_reasoning(
    store: Store,
) -> None:
    thread_id = str(uuid.uuid4())
    images = [photo("rocket.jpg"), photo("chelsea.png")]
    first = Turn(text="what is this?", images=images, answer="A rocket and a cat.",
                 reasoning="I look at both.", status="done")  # fmt: skip
    options = {"temperature": 0.25, "max_tokens": 300}
    saved = record(0, "m1", first, answer_id="a1", model="kimi-vl", options=options)
    await store.turns.save(thread_id, saved)
    crashed = Turn(text="and now?", status="pending")
    await store.turns.save(thread_id, record(1, "m2", crashed))

    restored = restore(await store.turns.load(thread_id))
    assert [r.message_id for r in restored.interrupted] == ["m2"]
    assert set(restored.message_turns) == {"m1", "m2"}
    follow_up = restored.conversation.start_turn("the first photo again?", [])
    plan = restored.conversation.plan(follow_up, Budget(32768, 8, 512))
    first_user, first_answer, current = plan.messages
    assert [p["image_url"]["url"] for p in first_user["content"][:2]] == [
        i.data_url for i in images
    ]
    assert first_answer == {"role": "assistant", "content": "A rocket and a cat."}
    assert current["content"][-1]["text"] == "the first photo again?"
    back = SamplingOptions(0.8, 1.0, 2048).with_stored(restored.options)
    assert (back.temperature, back.top_p, back.max_tokens) == (0.25, 1.0, 300)


async def test_deleting_a_thread_removes_its_turns_and_prepared_files(
    layer: KimiDataLayer, store: Store
) -> None:
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)
    await store.turns.save(thread_id, record(0, "m", Turn(text="q", images=[photo()])))
    await layer.delete_thread(thread_id)
    assert await store.turns.load(thread_id) == []
    assert not (on_disk(store).root / "prepared" / thread_id).exists()


# --- files and who may read them --------------------------------------------------------


async def owned_file(layer: KimiDataLayer, owner: str, *, shared: bool = False) -> str:
    """A thread of ``owner`` with one uploaded photo; returns the photo's route URL."""
    user = await layer.create_user(cl.User(identifier=owner))
    assert user is not None
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)
    await layer.update_thread(thread_id, name="t", user_id=user.id,
                              metadata={"is_shared": True} if shared else None)  # fmt: skip
    image = cl.Image(path=str(DATA / "rocket.jpg"), name="../rocket <1>.jpg", mime="image/jpeg")
    image.for_id, image.thread_id = str(uuid.uuid4()), thread_id
    await layer.create_element(image)
    threads = await layer.get_all_user_threads(thread_id=thread_id)
    assert threads is not None
    elements = threads[0]["elements"]
    assert elements is not None
    url = elements[0]["url"]
    assert url is not None
    return url


@pytest.fixture
async def files_app(layer: KimiDataLayer, store: Store) -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    mount_file_route(app, store.engine, store.files)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        yield client


async def test_a_file_is_served_to_its_owner_only(
    layer: KimiDataLayer, files_app: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice_url = await owned_file(layer, "alice")
    bob_url = await owned_file(layer, "bob")
    assert ".." not in alice_url and "<" not in alice_url
    viewer: list[str | None] = ["alice"]

    async def signed_in(_: Any) -> str | None:
        return viewer[0]

    monkeypatch.setattr(ui.files, "_viewer", signed_in)
    own = await files_app.get(alice_url)
    assert own.status_code == 200
    assert own.content == (DATA / "rocket.jpg").read_bytes()
    assert own.headers["content-type"] == "image/jpeg"
    assert own.headers["x-content-type-options"] == "nosniff"
    assert (await files_app.get(bob_url)).status_code == 404
    viewer[0] = None
    assert (await files_app.get(alice_url)).status_code == 404
    viewer[0] = "bob"
    assert (await files_app.get(bob_url)).status_code == 200
    assert (await files_app.get("/kimi/files/../chat.db")).status_code == 404
    assert (await files_app.get("/kimi/files/prepared%2F..%2F..%2Fchat.db")).status_code == 404


async def test_a_shared_chats_files_are_served_to_anyone(
    layer: KimiDataLayer, files_app: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = await owned_file(layer, "carol", shared=True)

    async def anonymous(_: Any) -> str | None:
        return None

    monkeypatch.setattr(ui.files, "_viewer", anonymous)
    assert (await files_app.get(url)).status_code == 200


async def test_prepared_copies_are_never_served(store: Store, files_app: httpx.AsyncClient) -> None:
    thread_id = str(uuid.uuid4())
    image = photo()
    await store.turns.save(thread_id, record(0, "m", Turn(text="q", images=[image])))
    key, _ = image_file(thread_id, image)
    assert await asyncio.to_thread(store.files.exists, key)
    response = await files_app.get(f"/kimi/files/{key}")
    assert response.status_code == 404


# --- users ------------------------------------------------------------------------------


async def test_passwords_are_stored_as_argon2_hashes_and_checked(store: Store) -> None:
    users = Users(store.engine)
    await users.add("alice", "correct horse")
    stored = await rows(store, "SELECT password_hash FROM kimi_users")
    assert stored[0]["password_hash"].startswith("$argon2id$")
    assert "correct horse" not in stored[0]["password_hash"]
    assert await users.verify("alice", "correct horse")
    assert not await users.verify("alice", "wrong horse!")
    assert not await users.verify("nobody", "correct horse")
    with pytest.raises(AuthError, match="already exists"):
        await users.add("alice", "another pass")
    with pytest.raises(AuthError, match="not a usable user name"):
        await users.add("-rf", "another pass")
    await users.set_password("alice", "battery staple")
    assert await users.verify("alice", "battery staple")
    await users.remove("alice")
    assert await users.names() == []


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


def test_cli_manages_users_with_the_password_on_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The tests' environment (tests/conftest.py: no checkout .env, no caller KIMI_*) and
    # the data folder: a bare env would let the CLI read the checkout's .env.
    env = {**os.environ, "KIMI_DATA_DIR": str(tmp_path / "data")}
    added = subprocess.run(
        [sys.executable, "-m", "backend.cli", "user", "add", "alice", "--password-stdin"],
        input="s3cret-pass\n", text=True, capture_output=True, env=env, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr
    assert mode(tmp_path / "data") == 0o700  # the database the CLI made is private
    assert mode(tmp_path / "data" / "chat.db") == 0o600
    monkeypatch.setenv("KIMI_DATA_DIR", env["KIMI_DATA_DIR"])

    def cli(*args: str, stdin: str = "") -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
        status = main(["user", *args])
        out, err = capsys.readouterr()
        return status, out, err

    assert cli("add", "bob", "--password-stdin", stdin="other-pass\n")[0] == 0
    assert cli("list") == (0, "alice\nbob\n", "")
    status, _, err = cli("add", "bob", "--password-stdin", stdin="x-pass-123\n")
    assert status == 1
    assert err.count("\n") == 1 and "already exists" in err
    assert cli("add", "carol", "--password-stdin", stdin="\n")[0] == 1  # no password
    assert cli("remove", "bob")[0] == 0
    assert cli("list")[1] == "alice\n"
    assert b"s3cret-pass" not in (tmp_path / "data" / "chat.db").read_bytes()


async def test_the_database_and_the_stored_files_are_private_to_the_apps_account(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    (data / "chat.db").touch(mode=0o644)  # an install from before: readable by all
    opened = Store(Settings(data_dir=str(data), database_url=""))
    await opened.check()
    try:
        layer = KimiDataLayer(opened, FilesStorageClient(opened.files))
        await opened.users.add("alice", "correct horse")
        url = await owned_file(layer, "alice")
        thread_id = str(uuid.uuid4())
        await opened.turns.save(thread_id, record(0, "m", Turn(text="q", images=[photo()])))
        database = [data / "chat.db", data / "chat.db-wal", data / "chat.db-shm"]
        assert [mode(p) for p in database] == [0o600] * 3
        stored = [p for p in on_disk(opened).root.rglob("*")]
        upload = on_disk(opened).path(url.removeprefix("/kimi/files/"))
        prepared = next((on_disk(opened).root / "prepared" / thread_id).iterdir())
        assert upload in stored and prepared in stored
        assert {mode(p) for p in stored if p.is_file()} == {0o600}
        assert {mode(p) for p in [data, *stored] if p.is_dir()} == {0o700}
    finally:
        await opened.close()


# --- start-up errors --------------------------------------------------------------------


def one_line_exit(settings: Settings) -> str:
    with pytest.raises(SystemExit) as exc:
        history.setup(settings)
    message = str(exc.value.code)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_a_corrupt_database_stops_the_start_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "chat.db").write_bytes(b"this is not a database" * 100)
    message = one_line_exit(Settings(data_dir=str(tmp_path), database_url=""))
    assert message.startswith("Kimi-VL Chat cannot start: The database ")
    assert "move it away" in message


def test_a_data_folder_that_is_a_file_stops_the_start_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("in the way")
    message = one_line_exit(Settings(data_dir=str(tmp_path / "data"), database_url=""))
    assert "is a file" in message


def test_an_unreachable_postgresql_stops_the_start_with_one_line(tmp_path: Path) -> None:
    url = f"postgresql+asyncpg://kimi@/x?host={tmp_path}&port=1"
    message = one_line_exit(Settings(data_dir=str(tmp_path), database_url=url))
    assert "check KIMI_DATABASE_URL" in message


def test_no_user_means_nothing_is_created(tmp_path: Path) -> None:
    assert history.setup(Settings(data_dir=str(tmp_path / "data"), database_url="")) is None
    assert not (tmp_path / "data").exists()


def payload_of(data_url: str) -> bytes:
    return base64.b64decode(data_url.split(",", 1)[1])
