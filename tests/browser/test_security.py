"""The app exposed to a hostile web: what model output, other pages and other people can do.

One UI (with a 3-second ``session_timeout``, so a closed tab is released within
the test) in front of the scripted server; a local HTTP listener stands in for a
server that a prompt injection wants the browser to call.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from PIL import Image
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.browser.conftest import (
    ANSWERS,
    THINKING_MODEL,
    ask,
    new_context,
    screenshot,
    start_scripted_server,
    start_ui,
    wait_answer_done,
)
from tests.conftest import DATA, free_port

pytestmark = pytest.mark.browser

GRACE_S = 3
"""The test UI's ``session_timeout``: seconds a closed tab's session is kept."""
FOREIGN = "http://evil.example"

COLLECT_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.effectiveDirective} ${e.blockedURI}`);
});
"""


@dataclass
class Guarded:
    """The UI under test: its address, its working directory, its process id."""

    url: str
    server_url: str
    workdir: Path
    pid: int

    @property
    def host(self) -> str:
        """``host:port`` of the UI."""
        return urlsplit(self.url).netloc

    def requests(self) -> list[dict[str, object]]:
        """Chat completion request bodies the scripted server received."""
        body = httpx.get(f"{self.server_url}/debug/requests").json()
        requests: list[dict[str, object]] = body["requests"]
        return requests


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Guarded]:
    """Scripted server and a UI whose closed sessions go after :data:`GRACE_S` seconds."""
    server_port, ui_port = free_port(), free_port()
    server = start_scripted_server(server_port, THINKING_MODEL)
    workdir = tmp_path_factory.mktemp("guarded-ui")
    try:
        ui = start_ui(
            ui_port,
            f"http://127.0.0.1:{server_port}/v1",
            workdir,
            edit_config=lambda text: re.sub(
                r"(?m)^session_timeout = \d+", f"session_timeout = {GRACE_S}", text
            ),
        )
    except BaseException:
        server.stop()
        raise
    yield Guarded(
        f"http://127.0.0.1:{ui_port}", f"http://127.0.0.1:{server_port}", workdir, ui.popen.pid
    )
    ui.stop()
    server.stop()


def open_chat(chromium: Browser, guarded: Guarded) -> tuple[BrowserContext, Page]:
    """A new browser context on the UI, its chat started, CSP violations collected."""
    context = new_context(chromium)
    context.add_init_script(COLLECT_VIOLATIONS)
    page = context.new_page()
    page.goto(guarded.url)
    expect(page.locator("#chat-settings-open-modal")).to_be_visible()
    return context, page


def violations(page: Page) -> list[str]:
    """Content-Security-Policy violations the page reported so far."""
    found: list[str] = page.evaluate("window.__csp")
    return found


@dataclass
class Listener:
    """An HTTP server on a free port that records every request it gets."""

    url: str
    hits: list[str] = field(default_factory=list)


@pytest.fixture
def listener() -> Iterator[Listener]:
    """A local stand-in for the attacker's server."""
    hits: list[str] = []

    class Record(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "image/gif")
            self.end_headers()
            self.wfile.write(b"GIF89a\x01\x00\x01\x00\x00\x00\x00;")

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Record)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield Listener(f"http://127.0.0.1:{server.server_port}/leak", hits)
    server.shutdown()
    server.server_close()


def make_heic_and_avif(folder: Path) -> tuple[Path, Path]:
    """An iPhone-style HEIC photo and an AVIF one, encoded here (pillow-heif, Pillow)."""
    from pillow_heif import register_heif_opener

    register_heif_opener()
    with Image.open(DATA / "chelsea.png") as source:
        photo = source.convert("RGB")
    heic, avif = folder / "iphone.heic", folder / "phone.avif"
    photo.save(heic, quality=60)
    photo.save(avif, quality=60)
    return heic, avif


def test_heic_and_avif_are_sent_and_the_page_works_under_its_policy(
    chromium: Browser, guarded: Guarded, tmp_path: Path
) -> None:
    heic, avif = make_heic_and_avif(tmp_path)
    context, page = open_chat(chromium, guarded)
    policy = httpx.get(guarded.url).headers["content-security-policy"]
    assert "img-src 'self' data: blob:" in policy
    page.locator("#upload-button-input").set_input_files([str(heic), str(avif)])
    for name in ("iphone.heic", "phone.avif"):  # picked: config.toml accepts both types
        expect(page.locator(f'#attachments img[alt="{name}"]')).to_have_count(1)
    ask(page, "Which cat is cuter? #scenario=thinking")
    wait_answer_done(page)
    answer = page.locator(ANSWERS).last
    expect(answer.locator(".katex").first).to_be_visible()  # KaTeX still renders
    content = guarded.requests()[-1]["messages"][-1]["content"]  # type: ignore[index]
    assert [part["type"] for part in content] == ["image_url", "image_url", "text"]
    assert all(p["image_url"]["url"].startswith("data:image/") for p in content[:2])
    assert violations(page) == []  # the app itself needs nothing the policy refuses
    screenshot(page, "heic-avif-sent")
    context.close()
