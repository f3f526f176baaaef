"""Interchangeable UI workers, in a real browser: two ``chainlit run app.py`` workers behind
HAProxy (``serving/proxy.py``'s config, as ``--ui-workers 2`` writes it), one real
PostgreSQL, one shared data folder, the scripted server.

Alice signs in and asks about a photo; a second browser pinned to the other worker opens
that chat from the sidebar and sees the photo and the answer. Then alice's worker is
killed (``kill -9``) while her next answer streams: the page reconnects through HAProxy
to the other worker, the chat is there with its photo and the part of the answer stored
before the kill, and her next question is answered with the photo in context.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from backend.store.export import INTERRUPTED_NOTE
from serving import proxy
from serving.launcher import port_in_use
from serving.ui_main import ui_command
from tests.browser.conftest import (
    ANSWERS,
    THINKING_MODEL,
    Process,
    ask,
    new_context,
    screenshot,
    spawn,
    start_scripted_server,
    wait_answer_done,
    wait_http,
)
from tests.conftest import free_port
from tests.fakes.kimi_server import ANSWER, conversation
from tests.live_app import add_users, copy_app
from tests.pg import start_postgres

pytestmark = pytest.mark.browser

HAPROXY = proxy.find_haproxy()
PASSWORD = "alice-password-1"
PHOTO = Path(__file__).resolve().parents[1] / "data" / "rocket.jpg"


@dataclass
class Workers:
    """Two UI workers behind HAProxy; ``url`` is HAProxy's."""

    url: str
    server_url: str
    workers: dict[str, Process]
    ports: dict[str, int]

    def requests(self) -> list[dict[str, object]]:
        found: list[dict[str, object]] = httpx.get(f"{self.server_url}/debug/requests").json()[
            "requests"
        ]
        return found


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Workers]:
    if HAPROXY is None:
        pytest.skip("haproxy is not installed (Debian: apt-get install haproxy)")
    root = tmp_path_factory.mktemp("workers")
    server_port = free_port()
    server = start_scripted_server(server_port, THINKING_MODEL)
    postgres = start_postgres()
    processes: list[Process] = [server]
    try:
        plan = proxy.make_plan(
            host="127.0.0.1", port=free_port(), workers=2, app_log="", run_dir=root,
            in_use=port_in_use,
        )  # fmt: skip
        env = {
            "KIMI_BASE_URL": f"http://127.0.0.1:{server_port}/v1",
            "KIMI_DATA_DIR": str(root / "data"),  # shared: the files
            "KIMI_DATABASE_URL": postgres.create_database(),
            "CHAINLIT_AUTH_SECRET": secrets.token_urlsafe(48),
        }
        started: dict[str, Process] = {}
        for worker in plan.workers:
            workdir = root / worker.name
            workdir.mkdir()
            copy_app(workdir)
            own = {**env, "PYTHONPATH": str(workdir)}
            if not started:
                add_users(workdir, {**own, "PATH": "/usr/bin:/bin"}, {"alice": PASSWORD})
            started[worker.name] = spawn(
                f"workers-{worker.port}", ui_command("127.0.0.1", worker.port), own, cwd=workdir
            )
            processes.append(started[worker.name])
        for worker in plan.workers:
            wait_http(f"http://127.0.0.1:{worker.port}/", started[worker.name])
        plan.config_path.write_text(plan.config())
        haproxy = spawn(f"haproxy-{plan.port}", [str(HAPROXY), "-db", "-f", str(plan.config_path)])
        processes.append(haproxy)
        url = f"http://127.0.0.1:{plan.port}"
        wait_http(f"{url}/", haproxy)
        yield Workers(
            url, f"http://127.0.0.1:{server_port}", started, {w.name: w.port for w in plan.workers}
        )
    finally:
        for process in reversed(processes):
            process.stop()
        postgres.stop()
        shutil.rmtree(root, ignore_errors=True)


def signed_in(
    chromium: Browser, url: str, worker: str | None = None
) -> tuple[BrowserContext, Page]:
    """A new browser signed in as alice through HAProxy; ``worker`` pins it to that worker
    (HAProxy's cookie, as if its first request had gone there)."""
    context = new_context(chromium)
    if worker is not None:
        context.add_cookies([{"name": proxy.COOKIE, "value": worker, "url": url}])
    page = context.new_page()
    page.goto(url)
    page.locator("#email").fill("alice")
    page.locator("#password").fill(PASSWORD)
    page.locator('button[type="submit"]').click()
    expect(page.locator("#chat-settings-open-modal")).to_be_visible()
    return context, page


def worker_of(context: BrowserContext) -> str:
    (cookie,) = [c for c in context.cookies() if c["name"] == proxy.COOKIE]
    return cookie["value"]


def test_a_chat_goes_on_on_the_other_worker_after_its_worker_is_killed(
    chromium: Browser, workers: Workers
) -> None:
    context, page = signed_in(chromium, workers.url)
    ask(page, "What is in this photo? #scenario=thinking", PHOTO)
    wait_answer_done(page)
    first = workers.requests()[-1]
    (sent_photo,) = [
        p["image_url"]["url"]
        for p in conversation(first)[-1]["content"]
        if p["type"] == "image_url"
    ]
    home = worker_of(context)
    other = "w2" if home == "w1" else "w1"

    # A chat started on one worker opens from the sidebar on the other.
    elsewhere, look = signed_in(chromium, workers.url, worker=other)
    assert worker_of(elsewhere) == other
    look.locator("#thread-history").get_by_text("What is in this photo?").click()
    user = look.locator('[data-step-type="user_message"]').first
    expect(user.locator(f'img[alt="{PHOTO.name}"]')).to_be_visible()
    expect(look.locator(ANSWERS).first.locator("h2")).to_have_text("What the picture shows")
    elsewhere.close()

    # Its worker is killed while the next answer streams.
    ask(page, "Tell me at length #scenario=slow-answer")
    expect(page.locator(ANSWERS).last).to_contain_text("a60 ")
    page.wait_for_timeout(3500)  # one KIMI_SAVE_EVERY_S (3 s) and a little
    workers.workers[home].popen.kill()
    workers.workers[home].popen.wait()

    # The page is drawn again from the store by the other worker: the note only a resume
    # writes, under the answer as far as it was stored.
    expect(page.get_by_text(INTERRUPTED_NOTE)).to_be_visible(timeout=60_000)
    screenshot(page, "workers-after-kill")
    expect(page.locator("#stop-button")).to_have_count(0)
    expect(page.locator('[data-step-type="user_message"]').first.locator("img")).to_be_visible()
    expect(page.locator(ANSWERS).first.locator("h2")).to_have_text("What the picture shows")
    expect(page.locator(ANSWERS).filter(has_text="a0 a1 a2 ")).to_contain_text("a20 ")
    ask(page, "What was in the photo? #scenario=plain")
    wait_answer_done(page)
    assert worker_of(context) == other
    sent = conversation(workers.requests()[-1])
    images = [p["image_url"]["url"] for p in sent[0]["content"] if p["type"] == "image_url"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user", "assistant", "user"]
    assert images == [sent_photo]  # the stored prepared photo, as sent before
    assert sent[1]["content"] == ANSWER
    assert str(sent[3]["content"]).startswith("a0 a1 a2 ")  # what streamed before the kill
    assert sent[-1]["content"][-1]["text"] == "What was in the photo? #scenario=plain"
    context.close()
