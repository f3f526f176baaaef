"""Make ``tests/data/upgrade/``: chats stored by a release, for the upgrade test.

Run once with the release's code (made at 33b7f29, the release before one record of a
chat): ``python -m tests.make_upgrade_fixture``. It runs that release's app as people
use it (``chainlit run app.py`` against the scripted server, Debian's chromium), once on
SQLite and once on a throwaway PostgreSQL (``tests/pg.py``). In each, alice signs in,
asks about a small photo (a reasoning answer), asks a follow-up, gives the first answer
a thumbs-up with a comment, and shares the chat. What the app wrote is kept as it is:

* ``sqlite/chat.db`` and ``sqlite/files/`` (the data folder);
* ``postgresql/dump.sql`` (``pg_dump``, plain SQL) and ``postgresql/files/``;
* ``expected.json``: what each chat is (ids, texts, the feedback, the photo's bytes'
  SHA-256) as the release's own routes answered after it was made.

Nothing here writes SQL by hand: every row comes from the release's code paths.
"""

from __future__ import annotations

import hashlib
import io
import json
import secrets
import shutil
import sqlite3
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw
from playwright.sync_api import Browser, sync_playwright
from sqlalchemy.engine import make_url

from serving.ui_main import ui_command
from tests.browser.conftest import (
    CHROMIUM,
    CHROMIUM_ARGS,
    THINKING_MODEL,
    ask,
    signed_in_page,
    spawn,
    start_scripted_server,
    wait_answer_done,
    wait_http,
)
from tests.conftest import free_port
from tests.live_app import add_users, copy_app
from tests.pg import SUPERUSER, start_postgres

FIXTURE = Path(__file__).resolve().parent / "data" / "upgrade"
PASSWORD = "alice-password-1"
QUESTIONS = ("What is in this photo? #scenario=thinking", "And its colours? #scenario=plain")
COMMENT = "Right about the rocket"


def small_photo(folder: Path) -> Path:
    """A 96x64 JPEG drawn here (a couple of kilobytes): the fixture stays small."""
    image = Image.new("RGB", (96, 64), (30, 60, 140))
    ImageDraw.Draw(image).polygon([(48, 6), (60, 56), (36, 56)], fill=(230, 230, 230))
    out = io.BytesIO()
    image.save(out, "JPEG", quality=80)
    path = folder / "rocket-small.jpg"
    path.write_bytes(out.getvalue())
    return path


def make_chat(chromium: Browser, url: str, photo: Path) -> dict[str, Any]:
    """Alice's chat, as a person makes it; returns what the release's routes say of it."""
    context, page = signed_in_page(chromium, url, "alice", PASSWORD)
    ask(page, QUESTIONS[0], photo)
    wait_answer_done(page)
    page.wait_for_timeout(1000)  # the composer is ready again
    ask(page, QUESTIONS[1])
    wait_answer_done(page)
    page.wait_for_url("**/thread/*")
    thread_id = page.url.rsplit("/", 1)[-1]
    page.wait_for_timeout(2000)  # the page's last writes (the stats notes) land
    thread = context.request.get(f"{url}/project/thread/{thread_id}").json()
    answers = [s for s in thread["steps"] if s["type"] == "assistant_message" and s["output"]]
    first_answer = answers[0]["id"]
    feedback = {"forId": first_answer, "threadId": thread_id, "value": 1, "comment": COMMENT}
    answered = context.request.put(  # what the page's thumbs-up button sends
        f"{url}/feedback", data={"feedback": feedback, "sessionId": ""}
    )
    assert answered.status == 200, answered.text()
    shared = context.request.put(
        f"{url}/project/thread/share", data={"threadId": thread_id, "isShared": True}
    )
    assert shared.status == 200, shared.text()
    thread = context.request.get(f"{url}/project/thread/{thread_id}").json()
    context.close()
    return {
        "thread_id": thread_id,
        "name": thread["name"],
        "answer_id": first_answer,
        "steps": [
            {"id": s["id"], "type": s["type"], "output": s["output"]}
            for s in thread["steps"]
            if s["type"] in ("user_message", "assistant_message", "llm")
        ],
        "feedback": feedback,
        "photo": {"name": photo.name, "sha256": hashlib.sha256(photo.read_bytes()).hexdigest()},
    }


def run_release(
    chromium: Browser, server_url: str, database_url: str, workdir: Path, photo: Path
) -> dict[str, Any]:
    """The release's app in ``workdir`` on ``database_url`` (SQLite when empty)."""
    workdir.mkdir(parents=True)
    copy_app(workdir)
    port = free_port()
    env = {
        "KIMI_BASE_URL": f"{server_url}/v1",
        "KIMI_DATA_DIR": str(workdir / "data"),
        "KIMI_DATABASE_URL": database_url,
        "CHAINLIT_AUTH_SECRET": secrets.token_urlsafe(48),
        "PYTHONPATH": str(workdir),
    }
    add_users(workdir, {**env, "PATH": "/usr/bin:/bin"}, {"alice": PASSWORD})
    ui = spawn(f"upgrade-fixture-{port}", ui_command("127.0.0.1", port), env, cwd=workdir)
    try:
        wait_http(f"http://127.0.0.1:{port}/", ui)
        return make_chat(chromium, f"http://127.0.0.1:{port}", photo)
    finally:
        ui.stop()


def keep_files(data: Path, target: Path) -> None:
    shutil.copytree(data / "files", target / "files", ignore=shutil.ignore_patterns(".tmp-*"))


def main() -> None:
    shutil.rmtree(FIXTURE, ignore_errors=True)
    FIXTURE.mkdir(parents=True)
    expected: dict[str, Any] = {}
    server_port = free_port()
    server = start_scripted_server(server_port, THINKING_MODEL)
    postgres = start_postgres()
    work = Path(tempfile.mkdtemp(prefix="kimi-upgrade-"))
    try:
        photo = small_photo(work)
        with sync_playwright() as pw:
            chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            server_url = f"http://127.0.0.1:{server_port}"
            expected["sqlite"] = run_release(chromium, server_url, "", work / "sqlite", photo)
            database = postgres.create_database()
            expected["postgresql"] = run_release(
                chromium, server_url, database, work / "postgresql", photo
            )
            chromium.close()
        sqlite_out = FIXTURE / "sqlite"
        sqlite_out.mkdir()
        with sqlite3.connect(work / "sqlite" / "data" / "chat.db") as db:
            db.execute("VACUUM INTO ?", (str(sqlite_out / "chat.db"),))  # one file, no WAL
        keep_files(work / "sqlite" / "data", sqlite_out)
        pg_out = FIXTURE / "postgresql"
        pg_out.mkdir()
        name = str(make_url(database).database)
        dump = subprocess.run(
            [*postgres.run_as, str(postgres.bin / "pg_dump"), "-h", str(postgres.folder),
             "-p", str(postgres.port), "-U", SUPERUSER, "--no-owner", "--no-privileges", name],
            check=True, capture_output=True, timeout=60,
        )  # fmt: skip
        (pg_out / "dump.sql").write_bytes(dump.stdout)
        keep_files(work / "postgresql" / "data", pg_out)
        (FIXTURE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
        shutil.copy2(photo, FIXTURE / photo.name)
    finally:
        postgres.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
