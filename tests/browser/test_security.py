"""The app exposed to a hostile web: what model output, other pages and other people can do.

One UI (with a 3-second ``session_timeout``, so a closed tab is released within
the test) in front of the scripted server; a local HTTP listener stands in for a
server that a prompt injection wants the browser to call.
"""

from __future__ import annotations

import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import psutil
import pytest
from PIL import Image
from playwright.sync_api import Browser, BrowserContext, Dialog, Page, expect

from tests.browser.conftest import (
    ANSWERS,
    REASONING_TEXT,
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
    avatar = page.locator('img[alt="Avatar for Kimi-VL"]').first
    assert avatar.evaluate("img => img.complete && img.naturalWidth > 0")  # avatars load
    assert violations(page) == []  # the app itself needs nothing the policy refuses
    screenshot(page, "heic-avif-sent")
    context.close()


def test_images_in_model_output_fetch_nothing_and_links_are_safe(
    chromium: Browser, guarded: Guarded, listener: Listener
) -> None:
    context, page = open_chat(chromium, guarded)
    ask(page, f"Summarise the attached page. #scenario=exfiltrate #url={listener.url}")
    reasoning = page.locator(REASONING_TEXT).last
    expect(reasoning).to_contain_text("The page says to show")  # the image is in the open step
    wait_answer_done(page)
    answer = page.locator(ANSWERS).last
    expect(answer).to_contain_text("Here is the chart")
    time.sleep(0.5)  # any fetch the page started has reached the listener by now
    assert listener.hits == []
    blocked = violations(page)
    assert blocked, "the streaming images were in the page and refused by the policy"
    assert all(v.startswith("img-src") and listener.url in v for v in blocked), blocked
    # The finished answer shows links instead of images, opening in a new tab safely.
    expect(page.locator(f'img[src^="{listener.url}"]')).to_have_count(0)
    for source, text in (("answer", "chart"), ("bare", "image"), ("link", "the report")):
        link = answer.locator(f'a[href="{listener.url}?from={source}"]')
        expect(link).to_have_text(text)
        expect(link).to_have_attribute("target", "_blank")
        expect(link).to_have_attribute("rel", "noopener noreferrer")
    inert = answer.get_by_text("click me")
    assert "javascript:" not in (inert.get_attribute("href") or "")
    dialogs: list[str] = []

    def record(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", record)
    inert.click()
    page.wait_for_timeout(300)
    assert dialogs == []
    screenshot(page, "model-images-become-links")
    context.close()


def websocket_status(guarded: Guarded, origin: str) -> int:
    """HTTP status of a socket.io websocket upgrade sent with ``Origin: origin``."""
    host, port = guarded.host.split(":")
    request = (
        "GET /ws/socket.io/?EIO=4&transport=websocket HTTP/1.1\r\n"
        f"Host: {guarded.host}\r\nOrigin: {origin}\r\nUpgrade: websocket\r\n"
        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        "Sec-WebSocket-Version: 13\r\n\r\n"
    )
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(request.encode())
        status_line = conn.recv(4096).split(b"\r\n", 1)[0]
    return int(status_line.split()[1])


def test_other_web_sites_cannot_drive_the_app(guarded: Guarded) -> None:
    own = guarded.url
    assert websocket_status(guarded, FOREIGN) == 403
    assert websocket_status(guarded, own) == 101
    polling = f"{guarded.url}/ws/socket.io/?EIO=4&transport=polling"
    refused = httpx.get(polling, headers={"Origin": FOREIGN})
    assert refused.status_code == 403
    assert refused.json() == {"detail": "Requests from other web sites are refused."}
    handshake = httpx.get(polling, headers={"Origin": own})
    assert handshake.status_code == 200 and '"sid"' in handshake.text
    cookie, body = f"{guarded.url}/set-session-cookie", {"session_id": "x"}
    assert httpx.post(cookie, json=body, headers={"Origin": FOREIGN}).status_code == 403
    assert httpx.post(cookie, json=body, headers={"Origin": own}).status_code == 200
    # CORS: no other site may read the app's answers with the person's cookies.
    preflight = httpx.options(
        f"{guarded.url}/project/settings",
        headers={"Origin": FOREIGN, "Access-Control-Request-Method": "GET"},
    )
    assert "access-control-allow-origin" not in preflight.headers


def socket_connect(guarded: Guarded, session_id: str, cookies: dict[str, str]) -> str:
    """Open socket.io (HTTP polling) naming ``session_id``; the server's first reply packet."""
    with httpx.Client(base_url=guarded.url, cookies=cookies, timeout=10) as client:
        path = "/ws/socket.io/?EIO=4&transport=polling"
        handshake = client.get(path).text
        sid = json.loads(handshake[1:])["sid"]
        auth = {"sessionId": session_id, "clientType": "webapp", "userEnv": "{}",
                "chatProfile": "", "threadId": ""}  # fmt: skip
        client.post(f"{path}&sid={sid}", content=f"40{json.dumps(auth)}")
        return client.get(f"{path}&sid={sid}").text


def test_a_session_id_opens_nothing_in_another_browser(chromium: Browser, guarded: Guarded) -> None:
    context, page = open_chat(chromium, guarded)
    ask(page, "What is this? #scenario=plain", DATA / "rocket.jpg")
    wait_answer_done(page)
    src = page.locator('[data-step-type="user_message"] img[alt="rocket.jpg"]').get_attribute("src")
    assert src is not None and "session_id=" in src
    url, session_id = urljoin(guarded.url, src), parse_qs(urlsplit(src).query)["session_id"][0]
    mine = {c["name"]: c["value"] for c in context.cookies()}
    assert httpx.get(url, cookies=mine).content == (DATA / "rocket.jpg").read_bytes()
    assert httpx.get(url).status_code == 404  # curl with the URL alone
    assert httpx.get(url, cookies={"kimi_browser": "another-browser"}).status_code == 404
    action = {"sessionId": session_id, "action": {"name": "retry", "payload": {}, "id": "1",
              "forId": "1", "label": "Retry"}}  # fmt: skip
    assert httpx.post(f"{guarded.url}/project/action", json=action).status_code == 404

    for cookies in ({}, {"kimi_browser": "another-browser"}):
        reply = socket_connect(guarded, session_id, cookies)
        assert reply.startswith("44") and "This chat is open in another browser." in reply
    # A script (no cookie) is bound to no browser, but gets one socket at a time.
    scripted = str(uuid.uuid4())
    assert socket_connect(guarded, scripted, {}).startswith("40")
    assert "This chat is open in another browser." in socket_connect(guarded, scripted, {})
    # The person's tab was not taken over: it still answers.
    ask(page, "And again? #scenario=plain")
    wait_answer_done(page)
    expect(page.locator(ANSWERS)).to_have_count(2)
    context.close()


def test_a_closed_tab_leaves_no_files_behind(chromium: Browser, guarded: Guarded) -> None:
    context, page = open_chat(chromium, guarded)
    ask(page, "What is this? #scenario=plain", DATA / "rocket.jpg")
    wait_answer_done(page)
    src = page.locator('[data-step-type="user_message"] img[alt="rocket.jpg"]').get_attribute("src")
    assert src is not None
    url, session_id = urljoin(guarded.url, src), parse_qs(urlsplit(src).query)["session_id"][0]
    cookies = {c["name"]: c["value"] for c in context.cookies()}
    files = guarded.workdir / ".files" / session_id
    assert any(files.iterdir()) and httpx.get(url, cookies=cookies).status_code == 200
    context.close()
    deadline = time.monotonic() + GRACE_S + 10
    while files.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not files.exists()
    assert httpx.get(url, cookies=cookies).status_code == 404


def test_a_too_large_photo_or_an_svg_is_named_and_the_message_kept(
    chromium: Browser, guarded: Guarded, tmp_path: Path
) -> None:
    big = tmp_path / "scan.jpg"  # over KIMI_MAX_UPLOAD_MB (20), under Chainlit's 100
    with big.open("wb") as out:
        out.write((DATA / "rocket.jpg").read_bytes())
        out.truncate(21_500_000)
    drawing = tmp_path / "logo.svg"
    drawing.write_text('<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"/>')
    context, page = open_chat(chromium, guarded)
    sent_before = len(guarded.requests())
    page.locator("#upload-button-input").set_input_files([str(big), str(drawing)])
    for name in (big.name, drawing.name):  # both attached: no browser toast, no drop
        expect(page.locator(f'#attachments img[alt="{name}"]')).to_have_count(1)
    ask(page, "What do these show?")
    note = page.locator(ANSWERS).last
    expect(note).to_contain_text("scan.jpg: 21.5 MB is over the 20 MB limit for one file")
    expect(note).to_contain_text("logo.svg: an SVG drawing")
    expect(note).to_contain_text("Your message is kept")
    assert len(guarded.requests()) == sent_before  # the model never saw the message
    screenshot(page, "too-large-and-svg-named")
    context.close()


def test_an_over_size_upload_is_refused_before_it_is_read(guarded: Guarded) -> None:
    ui = psutil.Process(guarded.pid)
    before = ui.memory_info().rss
    size = 400 * 1024 * 1024
    host, port = guarded.host.split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(
            f"POST /project/file?session_id=x HTTP/1.1\r\nHost: {guarded.host}\r\n"
            "Content-Type: multipart/form-data; boundary=b\r\n"
            f"Content-Length: {size}\r\n\r\n".encode()
        )
        try:
            for _ in range(64):  # 64 MB of the 400 announced, if the server reads them
                conn.sendall(b"\0" * (1024 * 1024))
        except OSError:
            pass  # refused and closed before the body was read: what should happen
        reply = conn.recv(4096).decode("latin-1")
    assert reply.startswith("HTTP/1.1 413"), reply
    assert "larger than the 100 MB the app accepts" in reply
    assert ui.memory_info().rss - before < 20 * 1024 * 1024


TYPE_INTO_CHAT = """(text) => {
  const input = document.querySelector("#chat-input");
  const setter = Object.getOwnPropertyDescriptor(HTMLTextAreaElement.prototype, "value").set;
  setter.call(input, text);  // as a paste would: one input event, not 2 million key presses
  input.dispatchEvent(new Event("input", { bubbles: true }));
}"""


def test_a_message_over_a_megabyte_is_answered_with_its_token_count(
    chromium: Browser, guarded: Guarded
) -> None:
    text = "#scenario=plain " + "lorem ipsum dolor sit amet " * 45_000
    assert len(text.encode()) > 1_200_000  # over socket.io's default 1 MB frame limit
    context, page = open_chat(chromium, guarded)
    page.evaluate(TYPE_INTO_CHAT, text)
    page.locator("#chat-submit").click()
    note = page.locator(ANSWERS).last
    expect(note).to_contain_text(re.compile(r"This message needs about \d+ tokens"))
    expect(note).to_contain_text("the model takes 32768 tokens")
    user = page.locator('[data-step-type="user_message"]').last
    expect(user).to_contain_text("lorem ipsum dolor sit amet lorem")  # the text is still there
    context.close()
