"""Chats that survive a restart, in a real browser, on SQLite and on a real PostgreSQL.

One flow per backend: alice signs in and asks about two photos (a reasoning
answer), starts a second answer and the app is killed (``kill -9``) while it
streams; the app starts again, alice signs in, opens the chat from the sidebar
and sees both photos, the collapsed "Thought for N.Ns" step and the interrupted
note; her follow-up sends the same prepared photos and the first answer without
its reasoning. Bob, signed in, sees none of it, not even by fetching the photo's
URL directly; nor does anyone signed out.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from backend.store.export import INTERRUPTED_NOTE
from serving.ui_main import ui_command
from tests.browser.conftest import (
    ANSWERS,
    LOGS,
    REASONING_STEP,
    REASONING_TEXT,
    THINKING_MODEL,
    Process,
    ask,
    screenshot,
    signed_in_page,
    spawn,
    start_scripted_server,
    wait_answer_done,
    wait_http,
)
from tests.conftest import DATA, free_port
from tests.fakes.kimi_server import ANSWER, REASONING, conversation
from tests.live_app import add_users, copy_app
from tests.pg import PgServer, start_postgres

pytestmark = pytest.mark.browser

PASSWORDS = {"alice": "alice-password-1", "bob": "bob-password-22"}
PHOTOS = [DATA / "rocket.jpg", DATA / "chelsea.png"]
THOUGHT = re.compile(r"^\s*Thought for \d+\.\ds\s*$")


@pytest.fixture(scope="module")
def scripted() -> Iterator[str]:
    port = free_port()
    server = start_scripted_server(port, THINKING_MODEL)
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture(scope="module")
def postgres() -> Iterator[PgServer]:
    server = start_postgres()
    yield server
    server.stop()


class App:
    """``chainlit run app.py`` in its own folder with its own data, restartable."""

    def __init__(self, workdir: Path, server_url: str, database_url: str, backend: str) -> None:
        self.workdir = workdir
        self.backend = backend
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            "KIMI_BASE_URL": f"{server_url}/v1",
            "KIMI_DATA_DIR": str(workdir / "data"),
            "KIMI_DATABASE_URL": database_url,
            "CHAINLIT_AUTH_SECRET": secrets.token_urlsafe(48),
            "PYTHONPATH": str(workdir),
        }
        self.process: Process | None = None
        self.starts = 0

    def add_users(self) -> None:
        add_users(self.workdir, {**self.env, "PATH": "/usr/bin:/bin"}, PASSWORDS)

    def start(self) -> None:
        self.starts += 1
        self.process = spawn(
            f"persistence-{self.port}-{self.starts}", ui_command("127.0.0.1", self.port),
            self.env, cwd=self.workdir,
        )  # fmt: skip
        wait_http(f"{self.url}/", self.process)

    def kill(self) -> None:
        """``kill -9``: no clean-up of any kind."""
        assert self.process is not None
        self.process.popen.kill()
        self.process.popen.wait()

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def app(request: pytest.FixtureRequest, tmp_path: Path, scripted: str) -> Iterator[App]:
    url = ""
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres").create_database()
    copy_app(tmp_path)
    running = App(tmp_path, scripted, url, request.param)
    running.add_users()
    running.start()
    yield running
    running.stop()


def sign_in(chromium: Browser, app: App, name: str) -> tuple[BrowserContext, Page]:
    return signed_in_page(chromium, app.url, name, PASSWORDS[name])


def requests(server_url: str) -> list[dict[str, object]]:
    body = httpx.get(f"{server_url}/debug/requests").json()
    found: list[dict[str, object]] = body["requests"]
    return found


def test_a_chat_survives_a_kill_and_comes_back_with_its_photos_and_reasoning(
    chromium: Browser, app: App, scripted: str
) -> None:
    httpx.delete(f"{scripted}/debug/requests")
    context, page = sign_in(chromium, app, "alice")
    ask(page, "Compare these photos #scenario=thinking", *PHOTOS)
    wait_answer_done(page)
    expect(page.locator(ANSWERS).last.locator("h2")).to_have_text("What the picture shows")
    first_request = requests(scripted)[-1]
    first_images = [
        part["image_url"]["url"]
        for part in conversation(first_request)[-1]["content"]
        if part["type"] == "image_url"
    ]
    assert len(first_images) == 2

    ask(page, "Think about it for long #scenario=slow")
    thinking = page.locator(f'{REASONING_STEP} button[id="step-Thinking…"]')
    expect(thinking).to_be_visible()
    # The second answer streams: its first words are out, so its turn and the page's
    # writes, which wait for them (ui/first_words.py), are on their way to the database.
    expect(page.locator(REASONING_TEXT).last).to_be_visible()
    page.wait_for_timeout(1_000)  # the chat's writes reach the database
    app.kill()  # mid-answer
    context.close()

    app.start()
    context, page = sign_in(chromium, app, "alice")
    page.locator("#thread-history").get_by_text("Compare these photos").click()
    user = page.locator('[data-step-type="user_message"]').first
    for photo in PHOTOS:
        expect(user.locator(f'img[alt="{photo.name}"]')).to_be_visible()
    expect(user.locator("img").first).to_have_attribute("alt", PHOTOS[0].name)  # upload order
    thought = page.locator(f'{REASONING_STEP} button[id^="step-Thought for"]').first
    expect(thought).to_have_text(THOUGHT)
    expect(thought).to_have_attribute("aria-expanded", "false")
    expect(page.locator(ANSWERS).first.locator("h2")).to_have_text("What the picture shows")
    expect(page.get_by_text(INTERRUPTED_NOTE)).to_be_visible()
    page.locator("#chat-input").focus()
    screenshot(page, f"resumed-{app.backend}")
    thread_id = page.url.rsplit("/", 1)[-1]
    photo_url = user.locator(f'img[alt="{PHOTOS[0].name}"]').get_attribute("src")
    assert photo_url is not None and photo_url.startswith("/kimi/files/")

    httpx.delete(f"{scripted}/debug/requests")
    ask(page, "What was in the first photo? #scenario=plain")
    wait_answer_done(page)
    sent = conversation(requests(scripted)[-1])
    assert isinstance(sent, list)
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]  # interrupted turn left out
    assert [p["image_url"]["url"] for p in sent[0]["content"][:2]] == first_images
    assert sent[1]["content"] == ANSWER
    assert REASONING[:40] not in json.dumps(sent)
    assert sent[2]["content"][-1]["text"] == "What was in the first photo? #scenario=plain"

    own = context.request.get(f"{app.url}{photo_url}")
    assert own.status == 200 and own.body() == PHOTOS[0].read_bytes()
    context.close()

    bob, page = sign_in(chromium, app, "bob")
    expect(page.locator("#thread-history")).not_to_contain_text("Compare these photos")
    assert bob.request.get(f"{app.url}{photo_url}").status == 404
    assert bob.request.get(f"{app.url}/project/thread/{thread_id}").status in (401, 403, 404)
    assert bob.request.get(f"{app.url}/project/share/{thread_id}").status == 404
    assert httpx.get(f"{app.url}{photo_url}").status_code == 404  # signed out

    # Alice shares the chat: a signed-in user with the link may read it and its photos.
    alice, page = sign_in(chromium, app, "alice")
    shared = alice.request.put(
        f"{app.url}/project/thread/share", data={"threadId": thread_id, "isShared": True}
    )
    assert shared.status == 200
    alice.close()
    view = bob.request.get(f"{app.url}/project/share/{thread_id}")
    assert view.status == 200 and view.json()["name"].startswith("Compare these photos")
    assert bob.request.get(f"{app.url}{photo_url}").status == 200
    page = bob.new_page()
    page.goto(f"{app.url}/share/{thread_id}")
    shown = page.locator('[data-step-type="user_message"]').first
    expect(shown.locator(f'img[alt="{PHOTOS[1].name}"]')).to_be_visible()
    screenshot(page, f"shared-{app.backend}")
    bob.close()
    log = (LOGS / f"persistence-{app.port}-2.log").read_text()
    assert "database statement failed" not in log and "database is locked" not in log
