"""The database goes away under a running chat: a real PostgreSQL stopped and started
again, a SQLite data folder made read-only, a disk that fills up.

Each test runs the real app (tests/live_app.py) with sign-in on, in front of the
scripted server, and drives it over raw socket.io as a browser tab does (bench/harness.py):
a signed-in person keeps chatting through the outage, is told once that the chat is not
being saved, and finds everything said meanwhile stored once the database is back (read
back by resuming the chat in a new tab: the model is sent the whole conversation). A
sign-in during the outage gets a sentence; the log names the real cause.

The read-only and full disks are small tmpfs mounts (root only; skipped otherwise).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest
import socketio
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import create_async_engine

from backend.presenter import NOT_SAVED_NOTE, SAVED_AGAIN_NOTE
from backend.store.db import create_engine
from backend.store.export import INTERRUPTED_NOTE
from backend.store.pending import cause, retryable
from bench.harness import Tab, frame_text
from tests.conftest import DATA, stored
from tests.fakes.kimi_server import conversation
from tests.live_app import LiveApp, requests_seen, scripted_server, signed_in
from tests.pg import PgServer, start_postgres
from ui.history import NOT_ALL_SAVED
from ui.signin import NO_DATABASE, UNCHECKED

PASSWORD = "alice-password-1"
THINKING = "kimi-vl-thinking-2506"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with scripted_server(THINKING) as url:
        yield url


@pytest.fixture
def pg() -> Iterator[PgServer]:
    """A PostgreSQL cluster of this test's own: it is stopped and started again."""
    running = start_postgres()
    yield running
    running.stop()


@contextmanager
def small_disk(size_mb: int) -> Iterator[Path]:
    """A tmpfs of ``size_mb`` MB mounted on a new folder (unmounted after)."""
    folder = Path(tempfile.mkdtemp(prefix="kimi-disk-"))
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0700", "tmpfs", str(folder)],
        check=True,
    )
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
        folder.rmdir()


class ReadOnly:
    """``folder`` made read-only under a running app: a read-only bind mount of it over
    itself. Files the app has open already stay writable (as after a ``chmod`` or a
    remount the kernel makes while the app runs); nothing new can be written there."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def on(self) -> None:
        # The read-only view is made aside and then put over the folder in one step: a
        # remount of the folder itself fails (EBUSY) when the app opened a file for writing
        # in between. A bind mount keeps the read-only flag of the mount it copies.
        aside = Path(tempfile.mkdtemp(prefix="kimi-ro-"))
        try:
            subprocess.run(["mount", "--bind", str(self.folder), str(aside)], check=True)
            subprocess.run(["mount", "-o", "remount,bind,ro", str(aside)], check=True)
            subprocess.run(["mount", "--bind", str(aside), str(self.folder)], check=True)
        finally:
            subprocess.run(["umount", "--lazy", str(aside)], check=False)
            aside.rmdir()

    def off(self) -> None:
        # Lazily: what the app opened meanwhile (read-only) stays open, on the old view.
        subprocess.run(["umount", "--lazy", str(self.folder)], check=True)


@asynccontextmanager
async def live(app: LiveApp) -> AsyncIterator[httpx.AsyncClient]:
    app.start()
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            yield http
    finally:
        app.stop()


async def turn(tab: Tab, question: str, file_ids: tuple[str, ...] = ()) -> list[str]:
    """Ask ``question`` in ``tab``; every message and step text the turn showed."""
    timing = await tab.ask(f"{question} #scenario=quick", file_ids, marker="", timeout_s=60)
    assert timing.text, f"no answer to {question!r}: {timing.error or tab.texts()}"
    return tab.texts()


def notes(shown: list[str], sentence: str) -> int:
    return sum(sentence in text for text in shown)


def wait_for_log(app: LiveApp, line: str, timeout_s: float = 40) -> None:
    deadline = time.monotonic() + timeout_s
    while line not in app.app_log.read_text():
        assert time.monotonic() < deadline, f"never logged {line!r}:\n{app.app_log.read_text()}"
        time.sleep(0.2)


async def app_stored_chat(app: LiveApp, timeout_s: float = 20) -> None:
    """Wait until the app has stored the chat's owner and first message."""
    first = (
        'SELECT s.id FROM kimi_steps s JOIN kimi_threads t ON t.id = s."threadId" '
        """WHERE s.type = 'user_message' AND t."userId" IS NOT NULL"""
    )
    async with asyncio.timeout(timeout_s):
        while not await stored(app.database_url, first):
            await asyncio.sleep(0.1)


async def said_saved_again(tab: Tab, timeout_s: float = 10) -> list[str]:
    """Wait until the idle ``tab`` is told that its chat is saved again (no question
    asked meanwhile); what it showed since its last question."""
    async with asyncio.timeout(timeout_s):
        while not notes(tab.texts(), SAVED_AGAIN_NOTE):
            await asyncio.sleep(0.1)
    return tab.texts()


async def resumed_history(
    app: LiveApp, http: httpx.AsyncClient, server: str, url: str
) -> tuple[int, int]:
    """Open the stored chat in a new tab and ask once: how many messages, and how many
    photos among them, the model is sent."""
    [(thread_id,)] = await stored(url, "SELECT id FROM kimi_threads")
    tab = Tab(app.url, http, cookies=signed_in(app.url, "alice", PASSWORD), thread_id=thread_id)
    await tab.open()
    await turn(tab, "and now?")
    await tab.close()
    sent = conversation(requests_seen(server)[-1])
    photos = [
        part
        for message in sent
        if isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image_url"
    ]
    return len(sent), len(photos)


async def outage_then_back(
    app: LiveApp,
    http: httpx.AsyncClient,
    down: Callable[[], object],
    up: Callable[[], object],
    photo: bool = False,
    reopen_from: str = "",
    database_down: bool = False,
    sign_in_refused: bool = True,
) -> list[str]:
    """One turn, the outage (``down()``), two turns (the first with a photo if ``photo``)
    and a sign-in attempt, the store back (``up()``), one turn; returns everything the
    chat showed. A token signed out before the outage stays refused. With ``reopen_from``
    (the database URL), the chat is also opened in a
    second tab during the outage, which must say that not all of it is shown. With
    ``database_down`` (it cannot be read either), any request whose token cannot be checked
    gets a sentence; else tokens are checked as usual. A sign-in meanwhile gets a sentence
    either way, unless not ``sign_in_refused``: where the store may still take its write
    (a read-only folder leaves connections opened before it writable, :class:`ReadOnly`)."""
    signed_out = signed_in(app.url, "alice", PASSWORD)
    assert (await http.post(f"{app.url}/logout", cookies=signed_out)).status_code == 200
    cookies = signed_in(app.url, "alice", PASSWORD)
    tab = Tab(app.url, http, cookies=cookies, load_page=True)
    await tab.open()
    shown = await turn(tab, "before")
    await app_stored_chat(app)  # the page's writes go after the first words (ui/first_words.py)
    down()
    ids = (await tab.upload((DATA / "rocket.jpg").read_bytes(), "rocket.jpg"),) if photo else ()
    shown += await turn(tab, "during the outage", ids)
    shown += await turn(tab, "still during the outage")
    if sign_in_refused:
        login = {"username": "alice", "password": PASSWORD}
        signing_in = await http.post(f"{app.url}/login", data=login)
        # Refused even where the database can be read: its attempt cannot be counted (the
        # throttle counts in the store, backend/store/bounds.py), so it is not checked.
        assert signing_in.status_code == 503
        assert signing_in.json()["detail"] == NO_DATABASE
    for browser in (cookies, signed_out):
        user = await http.get(f"{app.url}/user", cookies=browser)
        if database_down:  # a token that cannot be checked is refused, in a sentence
            assert (user.status_code, user.json()["detail"]) == (503, UNCHECKED)
        else:
            assert user.status_code == (200 if browser is cookies else 401)
    if database_down:
        stale = Tab(app.url, http, cookies=signed_out)
        with pytest.raises(socketio.exceptions.ConnectionError):
            await stale.open(ready_timeout_s=10)
    if reopen_from:
        [(thread_id,)] = await stored(reopen_from, "SELECT id FROM kimi_threads")
        other = Tab(app.url, http, cookies=cookies, thread_id=thread_id)
        await other.open()
        assert notes(other.texts(), NOT_ALL_SAVED) == 1, other.texts()
        await other.close()
    up()
    wait_for_log(app, "the store takes writes again")
    shown += await said_saved_again(tab)
    shown += await turn(tab, "after")
    await tab.close()
    assert notes(shown, NOT_SAVED_NOTE) == 1, shown
    assert notes(shown, SAVED_AGAIN_NOTE) == 1, shown
    return shown


async def test_a_postgresql_outage_is_said_once_and_what_was_said_is_stored_when_it_is_back(
    tmp_path: Path, server: str, pg: PgServer
) -> None:
    url = pg.create_database()
    app = LiveApp(tmp_path, server, database_url=url, users={"alice": PASSWORD})
    async with live(app) as http:
        await outage_then_back(app, http, pg.pause, pg.resume, database_down=True)
        turns = await stored(url, 'SELECT text, status FROM kimi_turns ORDER BY "position"')
        assert [(t.split(" #")[0], s) for t, s in turns] == [
            ("before", "done"),
            ("during the outage", "done"),
            ("still during the outage", "done"),
            ("after", "done"),
        ]
        # Resumed, the chat is whole: four turns and the new question go to the model.
        assert await resumed_history(app, http, server, url) == (9, 0)
    log, database = app.app_log.read_text(), url.split("@/")[1].split("?")[0]
    assert (
        f"the store cannot take writes: PostgreSQL at postgresql+asyncpg://kimi@/{database}" in log
    )
    assert "does not answer (FileNotFoundError: [Errno 2]" in log  # the socket went with it
    assert "saving turn" not in log
    assert "Task exception was never retrieved" not in app.output
    assert "Exception in ASGI application" not in app.output


async def test_a_chat_started_during_a_postgresql_outage_is_stored_as_its_owners(
    tmp_path: Path, server: str, pg: PgServer
) -> None:
    """A tab open before PostgreSQL stops starts its chat during the outage: once the
    database is back, the chat is stored with its owner (in her sidebar) and opens again
    with everything said in it."""
    url = pg.create_database()
    app = LiveApp(tmp_path, server, database_url=url, users={"alice": PASSWORD})
    async with live(app) as http:
        cookies = signed_in(app.url, "alice", PASSWORD)
        tab = Tab(app.url, http, cookies=cookies, load_page=True)
        await tab.open()
        pg.pause()
        shown = await turn(tab, "started during the outage")
        shown += await turn(tab, "still during the outage")
        pg.resume()
        wait_for_log(app, "the store takes writes again")
        shown += await said_saved_again(tab)
        await tab.close()
        assert notes(shown, SAVED_AGAIN_NOTE) == 1, shown
        assert notes(shown, NOT_SAVED_NOTE) == 1, shown
        owners = await stored(
            url,
            'SELECT t."userIdentifier", u.identifier FROM '
            'kimi_threads t JOIN kimi_page_users u ON u.id = t."userId"',
        )
        assert owners == [("alice", "alice")]
        sidebar = await http.post(
            f"{app.url}/project/threads",
            json={"pagination": {"first": 20}, "filter": {}},
            cookies=cookies,
        )
        assert sidebar.status_code == 200, sidebar.text
        assert len(sidebar.json()["data"]) == 1
        # Opened again, the chat is whole: two turns and the new question go to the model.
        assert await resumed_history(app, http, server, url) == (5, 0)
    assert "Author not found" not in app.output + app.app_log.read_text()


async def test_a_postgresql_shutting_down_is_named_as_not_answering(pg: PgServer) -> None:
    """A write that meets PostgreSQL between "stop" and stopped (a smart shutdown waits
    for a client that stays) is named as PostgreSQL not answering, and held."""
    url = pg.create_database()
    where = url.split("?")[0]
    staying, engine = create_async_engine(url), create_engine(url)
    try:
        async with staying.connect():
            pg.pause("smart", wait=False)
            with pytest.raises(SQLAlchemyError) as refused:
                async with engine.connect():
                    pass
    finally:
        await engine.dispose()
        await staying.dispose()
    assert "shutting down" in str(refused.value)
    assert retryable(refused.value)
    assert cause(refused.value, where).startswith(f"PostgreSQL at {where} does not answer (")


@needs_root
async def test_a_read_only_data_folder_is_said_once_and_the_photo_turn_is_stored_once_writable(
    tmp_path: Path, server: str
) -> None:
    data = tmp_path / "data"
    url = f"sqlite+aiosqlite:///{data / 'chat.db'}"
    app = LiveApp(tmp_path / "app", server, data_dir=data, users={"alice": PASSWORD})
    folder = ReadOnly(data)
    try:
        async with live(app) as http:
            # The sign-in's attempt goes through whichever pooled connection it gets: one
            # opened before the folder turned read-only still writes (seen: 200 or 503).
            await outage_then_back(
                app, http, folder.on, folder.off, photo=True, sign_in_refused=False
            )
            turns = await stored(url, 'SELECT text FROM kimi_turns ORDER BY "position"')
            assert len(turns) == 4
            assert await stored(url, "SELECT name FROM kimi_images") == [("rocket.jpg",)]
            assert await resumed_history(app, http, server, url) == (9, 1)
    finally:
        subprocess.run(["umount", "--lazy", str(data)], capture_output=True, check=False)
    # SQLite says it as the OS's EROFS or as its own error, depending on which write met it.
    assert re.search(
        r"the database or its folder is read-only \((OSError: \[Errno 30\]|OperationalError: "
        r"attempt to write a readonly database)",
        app.app_log.read_text(),
    )


@needs_root
async def test_a_full_disk_is_said_once_the_photo_turn_is_kept_and_a_resume_does_not_pretend(
    tmp_path: Path, server: str
) -> None:
    with small_disk(16) as disk:
        data = disk / "data"
        url = f"sqlite+aiosqlite:///{data / 'chat.db'}"
        app = LiveApp(tmp_path, server, data_dir=data, users={"alice": PASSWORD})
        filler = disk / "filler"

        def fill() -> None:
            # Unbuffered, and the file closed inside suppress: a buffered file's last flush,
            # at close, meets the full disk again (ENOSPC out of the test itself).
            with suppress(OSError), filler.open("wb", buffering=0) as out:
                while True:
                    out.write(b"\0" * 65536)

        async with live(app) as http:
            await outage_then_back(app, http, fill, filler.unlink, photo=True, reopen_from=url)
            turns = await stored(url, 'SELECT text FROM kimi_turns ORDER BY "position"')
            assert len(turns) == 4
            assert await stored(url, "SELECT name FROM kimi_images") == [("rocket.jpg",)]
            assert await resumed_history(app, http, server, url) == (9, 1)
        assert "the disk is full" in app.app_log.read_text()


async def test_an_app_killed_mid_answer_keeps_what_had_streamed_but_the_last_second(
    tmp_path: Path, server: str
) -> None:
    """``kill -9`` of the app while an answer streams (saved every second here), a restart,
    and the chat opened again: its page has the answer up to at most the last save before
    the kill, marked interrupted, and the model is sent that partial answer as history."""
    app = LiveApp(tmp_path, server, users={"alice": PASSWORD}, env={"KIMI_SAVE_EVERY_S": "1"})
    url = f"sqlite+aiosqlite:///{app.data_dir / 'chat.db'}"
    async with live(app) as http:
        tab = Tab(app.url, http, cookies=signed_in(app.url, "alice", PASSWORD))
        await tab.open()
        streamed: list[str] = []
        drawn = tab.sio.handlers["/"]["window_message"]

        async def on_text(payload: dict[str, Any]) -> None:
            streamed.append(frame_text(payload))  # an open block's live text
            await drawn(payload)

        tab.sio.on("window_message", on_text)
        asking = asyncio.create_task(tab.ask("Tell me at length #scenario=slow-answer"))
        deadline = time.monotonic() + 60
        while "a40 " not in "".join(streamed):
            assert time.monotonic() < deadline, "the answer never streamed"
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.5)  # a save after a40 has landed by now
        app.kill()
        on_screen = "".join(streamed)
        asking.cancel()
        await tab.close()

        app.start()
        [(thread_id,)] = await stored(url, "SELECT id FROM kimi_threads")
        resumed: list[dict[str, Any]] = []
        again = Tab(app.url, http, cookies=signed_in(app.url, "alice", PASSWORD))
        again.thread_id = thread_id
        again.sio.on("resume_thread", lambda thread: resumed.append(thread))
        await again.open()
        async with asyncio.timeout(30):  # sent after on_chat_resume returns
            while not resumed:
                await asyncio.sleep(0.05)
        [thread] = resumed
        outputs = [str(step.get("output") or "") for step in thread["steps"]]
        answer = next(o for o in outputs if o.startswith("a0 a1 "))
        kept = [int(word) for word in re.findall(r"\ba(\d+) ", answer)]
        assert kept == list(range(len(kept))), "the answer as it streamed, in order"
        assert kept[-1] >= 40, "what had streamed 1.5 s before the kill (saves: every 1 s)"
        assert kept[-1] <= max(int(w) for w in re.findall(r"\ba(\d+) ", on_screen))
        assert any(INTERRUPTED_NOTE in o for o in outputs)
        assert "A short thought." in outputs, "the reasoning is kept too"
        await turn(again, "go on")
        sent = conversation(requests_seen(server)[-1])
        assert [m["role"] for m in sent] == ["user", "assistant", "user"]
        assert sent[1]["content"].strip() == answer.strip()


@needs_root
async def test_a_connection_opened_while_the_folder_is_read_only_is_not_kept_for_after(
    tmp_path: Path,
) -> None:
    """SQLite shares one WAL index per database file and process: one opened through a
    read-only folder is read-only, and every connection opened while it lives inherits it
    ("attempt to write a readonly database" after the folder is writable again). So no
    connection opened while the folder is read-only goes back into the pool."""
    data = tmp_path / "data"
    data.mkdir()
    engine = create_engine(f"sqlite+aiosqlite:///{data / 'chat.db'}")
    folder = ReadOnly(data)
    try:
        async with engine.begin() as db:
            await db.execute(text("CREATE TABLE t (x INTEGER)"))
        folder.on()
        await engine.dispose()  # the pool turns over during the outage

        async def read() -> None:
            async with engine.connect() as db:
                await db.execute(text("SELECT count(*) FROM t"))
                await asyncio.sleep(0.1)  # both are open at once: two connections

        await asyncio.gather(read(), read())  # reads work while it is read-only
        folder.off()
        for x in (1, 2):  # the first write after, and the next
            async with engine.begin() as db:
                await db.execute(text("INSERT INTO t VALUES (:x)"), {"x": x})
        assert await stored(str(engine.url), "SELECT x FROM t ORDER BY x") == [(1,), (2,)]
    finally:
        await engine.dispose()
        subprocess.run(["umount", "--lazy", str(data)], capture_output=True, check=False)
