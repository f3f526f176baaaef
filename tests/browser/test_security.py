"""The app exposed to a hostile web: what model output, other pages and other people can do.

One UI (with a 3-second ``session_timeout``, so a closed tab is released within
the test) in front of the scripted server; a local HTTP listener stands in for a
server that a prompt injection wants the browser to call.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import cast
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx
import psutil
import pytest
from PIL import Image
from playwright.sync_api import Browser, BrowserContext, Dialog, FilePayload, Page, expect

from tests.browser.conftest import (
    ANSWERS,
    REASONING_STEP,
    REASONING_TEXT,
    ROOT,
    THINKING_MODEL,
    ask,
    copy_app,
    new_context,
    screenshot,
    signed_in_page,
    start_scripted_server,
    start_ui,
    wait_answer_done,
)
from tests.conftest import DATA, free_port
from tests.fakes.kimi_server import conversation

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
    content = conversation(guarded.requests()[-1])[-1]["content"]
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
    # While a block streams it is raw text (public/live.js), and once closed its remote
    # images are links: the page never asked for one, so the policy had nothing to refuse.
    assert violations(page) == []
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
    # Should a foreign image ever reach the page, the policy refuses it.
    page.evaluate(
        "(url) => { const img = new Image(); img.src = url; document.body.append(img); }",
        f"{listener.url}?from=probe",
    )
    deadline = time.monotonic() + 5
    while not (blocked := violations(page)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert blocked and all(v.startswith("img-src") and listener.url in v for v in blocked)
    assert listener.hits == []
    context.close()


def foreign_images_and_script_links(page: Page, url: str) -> list[str]:
    """Elements of the page that would fetch ``url`` (img, video, source) or run a
    ``javascript:`` link, as ``tag src`` lines (read from the DOM, not by evaluation)."""
    found = []
    for selector in (f'img[src^="{url}"]', f'video[src^="{url}"]', f'source[src^="{url}"]'):
        for element in page.locator(selector).all():
            found.append(f"{selector.split('[')[0]} {element.get_attribute('src')}")
    for element in page.locator('a[href^="javascript:" i]').all():
        found.append(f"a {element.get_attribute('href')}")
    return found


def test_markdown_the_page_reads_as_images_becomes_links_in_answers_and_notes(
    chromium: Browser, guarded: Guarded, listener: Listener
) -> None:
    """The page (react-markdown with remark-gfm, -math and -directive) and the rewrite
    must agree: a reference image after a ``javascript:`` definition, images in code
    spans that math, a directive or an autolink end early, and a file named as an image
    in the note that it could not be used, all end as text or links, never an image."""
    context, page = open_chat(chromium, guarded)
    ask(page, f"Tricky markdown #scenario=markdown-paths #url={listener.url}")
    wait_answer_done(page)
    answer = page.locator(ANSWERS).last
    expect(answer).to_contain_text("The chart:")
    expect(answer.locator(f'a[href="{listener.url}?from=reference"]')).to_have_text("chart")
    for source in ("math", "directive", "autolink"):
        expect(answer.locator(f'a[href="{listener.url}?from={source}"]')).to_have_count(1)
    page.locator(f"{REASONING_STEP} button").first.click()  # open the folded step
    expect(page.locator(f'a[href="{listener.url}?from=reasoning"]')).to_have_count(1)
    # A PDF passes the check on attach (it is read with its message), so the damaged one
    # is named in the note under the message.
    named = f"![x]({listener.url}?from=file-name).pdf"
    damaged = b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n"
    not_a_document = FilePayload(name=named, mimeType="application/pdf", buffer=damaged)
    page.locator("#upload-button-input").set_input_files([not_a_document])
    expect(page.locator("#attachments")).to_contain_text(named)
    ask(page, "And this one?")
    note = page.locator(ANSWERS).last
    expect(note).to_contain_text(f"{named}: ")
    expect(note).to_contain_text("Your text is back in the message box")
    time.sleep(0.5)  # any fetch the page started has reached the listener by now
    assert foreign_images_and_script_links(page, listener.url) == []
    assert listener.hits == []
    screenshot(page, "markdown-paths-become-links")
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


class Socket:
    """A socket.io client over engine.io's HTTP long-polling, raw, as a script would be.

    ``reply`` is the server's answer to the connect: ``40...`` accepted, ``44...`` refused.
    """

    def __init__(
        self,
        url: str,
        session_id: str,
        cookies: dict[str, str],
        headers: dict[str, str] | None = None,
    ) -> None:
        self.client = httpx.Client(base_url=url, cookies=cookies, headers=headers, timeout=30)
        path = "/ws/socket.io/?EIO=4&transport=polling"
        handshake = self.client.get(path).text
        self.path = f"{path}&sid={json.loads(handshake[1:])['sid']}"
        auth = {"sessionId": session_id, "clientType": "webapp", "userEnv": "{}",
                "chatProfile": "", "threadId": ""}  # fmt: skip
        self.client.post(self.path, content=f"40{json.dumps(auth)}")
        self.reply = self.client.get(self.path).text

    def emit(self, event: str, data: object) -> None:
        """Send socket.io event ``event`` with ``data``."""
        self.client.post(self.path, content="42" + json.dumps([event, data]))

    def listen(self, seconds: float) -> str:
        """Everything the server sends for ``seconds`` (answering its pings); a poll the
        server holds open past then is given up (it would wait for the next ping, 25 s)."""
        received = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                packets = self.client.get(self.path, timeout=left).text.split("\x1e")
            except httpx.TimeoutException:
                break
            received += packets
            if "2" in packets:
                self.client.post(self.path, content="3")
        return "\x1e".join(received)

    def close(self) -> None:
        """Leave (engine.io close packet) and close the HTTP client."""
        self.client.post(self.path, content="1")
        self.client.close()


def socket_connect(guarded: Guarded, session_id: str, cookies: dict[str, str]) -> str:
    """Open socket.io (HTTP polling) naming ``session_id``; the server's first reply packet."""
    socket = Socket(guarded.url, session_id, cookies)
    socket.client.close()
    return socket.reply


def upload(url: str, session_id: str, cookies: dict[str, str], name: str = "rocket.jpg") -> str:
    """``POST /project/file`` of a photo into ``session_id``; the file's id."""
    answer = httpx.post(
        f"{url}/project/file?session_id={session_id}", cookies=cookies,
        files={"file": (name, (DATA / name).read_bytes(), "image/jpeg")},
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    file_id: str = answer.json()["id"]
    return file_id


def test_a_repeated_session_id_reads_and_writes_nothing_of_another_browser(
    guarded: Guarded,
) -> None:
    victim, attacker = {"kimi_browser": "victim-" + "v" * 30}, {"kimi_browser": "att-" + "a" * 30}
    victim_session, own_session = str(uuid.uuid4()), str(uuid.uuid4())
    victim_socket = Socket(guarded.url, victim_session, victim)
    attacker_socket = Socket(guarded.url, own_session, attacker)
    assert victim_socket.reply.startswith("40") and attacker_socket.reply.startswith("40")
    photo = upload(guarded.url, victim_session, victim)
    assert httpx.get(f"{guarded.url}/project/file/{photo}?session_id={victim_session}",
                     cookies=victim).content == (DATA / "rocket.jpg").read_bytes()  # fmt: skip
    both = f"session_id={own_session}&session_id={victim_session}"
    read = httpx.get(f"{guarded.url}/project/file/{photo}?{both}", cookies=attacker)
    assert read.status_code == 400
    assert read.json() == {"detail": "This request names more than one chat; it is refused."}
    written = httpx.post(f"{guarded.url}/project/file?{both}", cookies=attacker,
                         files={"file": ("x.jpg", b"\xff\xd8\xff", "image/jpeg")})  # fmt: skip
    assert written.status_code == 400
    assert httpx.get(f"{guarded.url}/project/file/{photo}?session_id={victim_session}",
                     cookies=attacker).status_code == 404  # fmt: skip
    victim_socket.close()
    attacker_socket.close()


def test_another_apps_malformed_cookie_leaves_the_uploads_private(guarded: Guarded) -> None:
    # Any app on this host (another port: cookies ignore ports) may set such a cookie.
    header = {"Cookie": 'prefs={"theme": "dark"}; kimi_browser=victim-' + "m" * 30}
    session_id = str(uuid.uuid4())
    with httpx.Client(base_url=guarded.url, headers=header) as victim:
        opened = Socket(guarded.url, session_id, {}, headers=header)
        assert opened.reply.startswith("40")
        answer = victim.post(f"/project/file?session_id={session_id}",
                             files={"file": ("rocket.jpg", (DATA / "rocket.jpg").read_bytes(),
                                             "image/jpeg")})  # fmt: skip
        url = f"/project/file/{answer.json()['id']}?session_id={session_id}"
        assert victim.get(url).content == (DATA / "rocket.jpg").read_bytes()
    assert httpx.get(f"{guarded.url}{url}").status_code == 404  # the URL alone
    assert httpx.get(f"{guarded.url}{url}", cookies={"prefs": "x"}).status_code == 404
    assert "This chat is open in another browser." in socket_connect(guarded, session_id, {})
    opened.close()


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


def test_a_too_large_photo_or_an_svg_is_named_on_attach(
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
    # The page lets both through (no browser toast, no drop); the app names each at once.
    toasts = page.locator("[data-sonner-toast]")
    expect(toasts.filter(has_text="scan.jpg")).to_contain_text(
        "21.5 MB is over the 20 MB limit for one file"
    )
    expect(toasts.filter(has_text="logo.svg")).to_contain_text("an SVG drawing")
    expect(page.locator("#attachments")).to_have_count(0)
    assert len(guarded.requests()) == sent_before  # the model never saw them
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


@pytest.mark.serial  # a 1.2 MB message keeps chromium busy for seconds
def test_a_message_over_a_megabyte_is_answered_with_its_token_count(
    chromium: Browser, guarded: Guarded
) -> None:
    # Three bytes a character in UTF-8: over socket.io's default 1 MB frame limit, while
    # under the app's limit of characters a message may have (KIMI_MAX_MESSAGE_CHARS,
    # whose refusal tests/test_bounds.py holds), so the message is priced and refused.
    text = "#scenario=plain " + "天地玄黄宇宙洪荒 " * 50_000
    assert len(text.encode()) > 1_200_000
    assert len(text) < 1_000_000
    context, page = open_chat(chromium, guarded)
    page.evaluate(TYPE_INTO_CHAT, text)
    page.locator("#chat-submit").click()
    note = page.locator(ANSWERS).last
    expect(note).to_contain_text(re.compile(r"This message needs about \d+ tokens"))
    expect(note).to_contain_text("the model takes 32768 tokens")
    user = page.locator('[data-step-type="user_message"]').last
    expect(user).to_contain_text("天地玄黄宇宙洪荒 天地玄黄")  # the text is still there
    context.close()


# --- signed in: tokens, cookies, other users' chats, shared chats, titles ----------------

ROCKET, CAT = DATA / "rocket.jpg", DATA / "chelsea.png"
USERS = {name: f"{name}-password-{n}" for n, name in enumerate(
    ("alice", "bob", "dora", "erin", "frank", "henry"), start=1)}  # fmt: skip


@dataclass
class SignedIn:
    """A UI with sign-in on (SQLite in ``workdir/data``) in front of the scripted server."""

    url: str
    env: dict[str, str]
    workdir: Path

    def cli(self, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
        """``python -m backend.cli`` on this UI's data."""
        return subprocess.run(
            [sys.executable, "-m", "backend.cli", *args], input=stdin, text=True, cwd=ROOT,
            env={**os.environ, **self.env}, capture_output=True, timeout=120,  # no checkout .env
        )  # fmt: skip

    def sign_in(self, name: str, password: str = "", **headers: str) -> httpx.Response:
        """Chainlit's sign-in form, posted as its page posts it."""
        form = {"username": name, "password": password or USERS[name]}
        return httpx.post(f"{self.url}/login", data=form, headers=headers)

    def cookies(self, name: str) -> dict[str, str]:
        """The cookies of a fresh sign-in of ``name``."""
        answer = self.sign_in(name)
        assert answer.status_code == 200, answer.text
        return dict(answer.cookies)


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SignedIn]:
    server_port, ui_port = free_port(), free_port()
    server = start_scripted_server(server_port, THINKING_MODEL)
    workdir = tmp_path_factory.mktemp("signed-ui")
    env = {"KIMI_DATA_DIR": str(workdir / "data"), "CHAINLIT_AUTH_SECRET": "s" * 64}
    running = SignedIn(f"http://127.0.0.1:{ui_port}", env, workdir)
    for name, password in USERS.items():
        made = running.cli("user", "add", name, "--password-stdin", stdin=password + "\n")
        assert made.returncode == 0, made.stderr
    try:
        ui = start_ui(ui_port, f"http://127.0.0.1:{server_port}/v1", workdir, None, **env)
    except BaseException:
        server.stop()
        raise
    yield running
    ui.stop()
    server.stop()


def test_signing_out_or_a_new_password_ends_the_token_everywhere(signed: SignedIn) -> None:
    threads = {"pagination": {"first": 5}, "filter": {}}

    def works(cookies: dict[str, str]) -> list[bool]:
        user = httpx.get(f"{signed.url}/user", cookies=cookies)
        listed = httpx.post(f"{signed.url}/project/threads", json=threads, cookies=cookies)
        socket = Socket(signed.url, str(uuid.uuid4()), cookies)
        socket.close()
        return [user.status_code == 200, listed.status_code == 200, socket.reply.startswith("40")]

    first = signed.cookies("dora")
    assert works(first) == [True, True, True]
    out = httpx.post(f"{signed.url}/logout", json={}, cookies=first)
    assert out.json() == {"success": True}
    assert works(first) == [False, False, False]  # the old cookie, replayed
    second = signed.cookies("dora")
    assert works(second) == [True, True, True]
    changed = signed.cli("user", "passwd", "dora", "--password-stdin", stdin="a fresh passphrase\n")
    assert changed.returncode == 0, changed.stderr
    assert works(second) == [False, False, False]
    assert signed.sign_in("dora", "a fresh passphrase").status_code == 200


def test_the_sign_in_cookie_is_secure_behind_tls(signed: SignedIn) -> None:
    def set_cookies(answer: httpx.Response) -> dict[str, str]:
        found = [v for k, v in answer.headers.multi_items() if k == "set-cookie"]
        return {value.split("=", 1)[0]: value for value in found}

    behind_tls = set_cookies(signed.sign_in("erin", **{"X-Forwarded-Proto": "https"}))
    assert {"access_token", "kimi_browser"} <= set(behind_tls)
    for cookie in behind_tls.values():
        assert "Secure" in [part.strip() for part in cookie.split(";")], cookie
    plain = set_cookies(signed.sign_in("erin"))
    assert "Secure" not in plain["access_token"] and "HttpOnly" in plain["access_token"]


def test_a_sign_in_that_must_wait_says_so_on_the_sign_in_page(
    chromium: Browser, signed: SignedIn
) -> None:
    away = {"X-Forwarded-For": "203.0.113.50"}  # a client of its own (uvicorn trusts loopback)
    context = new_context(chromium)
    context.set_extra_http_headers(away)
    page = context.new_page()
    page.goto(signed.url)
    page.locator("#email").fill("grace")
    page.locator("#password").fill("wrong guess")
    for n in range(7):  # after the 5th failure the next attempt waits 1 s, then 2, then 4
        assert signed.sign_in("grace", "wrong guess", **away).status_code == 401
        time.sleep({4: 1.0, 5: 2.0}.get(n, 0.0))  # each wait over; after the 7th: 4 s
    with page.expect_response(lambda r: r.url.endswith("/login")) as tried:
        page.locator('button[type="submit"]').click()
    assert tried.value.status == 429
    expect(page.get_by_role("alert")).to_contain_text("Too many failed sign-ins: wait a little")
    screenshot(page, "sign-in-must-wait")
    context.close()


def stored_chat(signed: SignedIn, cookies: dict[str, str]) -> dict[str, object]:
    """The signed-in user's most recent chat, as Chainlit's thread route gives it."""
    listed = httpx.post(f"{signed.url}/project/threads", cookies=cookies,
                        json={"pagination": {"first": 1}, "filter": {}}).json()  # fmt: skip
    thread: dict[str, object] = httpx.get(
        f"{signed.url}/project/thread/{listed['data'][0]['id']}", cookies=cookies
    ).json()
    return thread


def asked(
    chromium: Browser, signed: SignedIn, name: str, text: str, photo: Path
) -> tuple[dict[str, object], dict[str, str]]:
    """``name`` signs in, asks ``text`` with ``photo`` and waits for the answer; the stored
    chat and a signed-in cookie jar of ``name``."""
    context, page = signed_in_page(chromium, signed.url, name, USERS[name])
    ask(page, text, photo)
    wait_answer_done(page)
    context.close()
    cookies = signed.cookies(name)
    # The answer's row is written just after it shows, the line under it after that: the
    # stored chat is taken once it has the answer and has not changed for half a second.
    # (Taken at the answer alone, a fresh-clone run at 437acd5 missed the line under it.)
    earlier: dict[str, object] | None = None
    for _ in range(40):
        chat = stored_chat(signed, cookies)
        steps = cast(list[dict[str, object]], chat["steps"])
        if chat == earlier and any(s["type"] == "assistant_message" and s["output"] for s in steps):
            break
        earlier = chat
        time.sleep(0.5)
    return chat, cookies


def test_messages_and_feedback_under_another_users_ids_change_nothing_of_theirs(
    chromium: Browser, signed: SignedIn
) -> None:
    before, alice = asked(chromium, signed, "alice", "What is this? #scenario=plain", ROCKET)
    steps = {str(s["id"]): s for s in before["steps"]}  # type: ignore[attr-defined]
    mine = [i for i, s in steps.items() if s["type"] in ("user_message", "assistant_message")]
    bob = Socket(signed.url, str(uuid.uuid4()), signed.cookies("bob"))
    assert bob.reply.startswith("40")
    for step_id in mine:  # Bob learnt the ids (from a share link, say)
        message = {"id": step_id, "threadId": "", "output": "bob was here", "name": "bob",
                   "type": "user_message", "createdAt": "2026-12-01T10:00:00Z"}  # fmt: skip
        bob.emit("client_message", {"message": message, "fileReferences": []})
    bob.listen(4)
    bob.close()
    answer = next(i for i in mine if steps[i]["type"] == "assistant_message")
    attack = {"feedback": {"forId": answer, "threadId": before["id"], "value": 0,
                           "comment": "bob was here"}, "sessionId": "x"}  # fmt: skip
    refused = httpx.put(f"{signed.url}/feedback", json=attack, cookies=signed.cookies("bob"))
    assert refused.status_code == 404
    after = stored_chat(signed, alice)
    assert after["id"] == before["id"]
    assert [(s["id"], s["output"]) for s in after["steps"]] == [  # type: ignore[attr-defined]
        (s["id"], s["output"])
        for s in before["steps"]  # type: ignore[attr-defined]
    ]
    assert not any(s.get("feedback") for s in after["steps"])  # type: ignore[attr-defined]


def test_a_share_link_is_a_public_page_and_signing_in_from_it_lands_on_the_chat(
    chromium: Browser, signed: SignedIn
) -> None:
    chat, frank = asked(chromium, signed, "frank", "Which cat is this? #scenario=thinking", CAT)
    thread_id = str(chat["id"])
    share = {"threadId": thread_id, "isShared": True}
    assert httpx.put(f"{signed.url}/project/thread/share", json=share, cookies=frank).is_success

    visitor = new_context(chromium)  # nobody signed in, the page's own policy
    page = visitor.new_page()
    page.goto(f"{signed.url}/share/{thread_id}")
    expect(page.locator(".user .text")).to_have_text("Which cat is this? #scenario=thinking")
    expect(page.locator("details summary")).to_contain_text("Thought for")
    photo = page.locator('img[alt="chelsea.png"]')
    expect(photo).to_have_attribute("src", re.compile(r"^data:image/"))
    assert photo.evaluate("img => img.complete && img.naturalWidth > 0")
    screenshot(page, "shared-public-page")
    page.get_by_role("link", name="Sign in").click()
    page.locator("#email").fill("bob")
    page.locator("#password").fill(USERS["bob"])
    page.locator('button[type="submit"]').click()
    expect(page).to_have_url(f"{signed.url}/share/{thread_id}")
    shown = page.locator('[data-step-type="user_message"]').first
    expect(shown).to_contain_text("Which cat is this?")  # Chainlit's shared view, signed in
    visitor.close()

    share["isShared"] = False
    assert httpx.put(f"{signed.url}/project/thread/share", json=share, cookies=frank).is_success
    gone = httpx.get(f"{signed.url}/share/{thread_id}")
    assert gone.status_code == 404 and "This chat is not shared." in gone.text


def test_a_shared_chat_with_hostile_answers_shows_links_not_remote_images(
    chromium: Browser, signed: SignedIn, listener: Listener
) -> None:
    """The public share page is as clean as the chat: the answer's and the reasoning's
    remote images are links (before: 8 remote ``<img>`` in its HTML, stopped only by CSP)."""
    text = f"Summarise the attached page. #scenario=exfiltrate #url={listener.url}"
    chat, henry = asked(chromium, signed, "henry", text, CAT)
    thread_id = str(chat["id"])
    share = {"threadId": thread_id, "isShared": True}
    assert httpx.put(f"{signed.url}/project/thread/share", json=share, cookies=henry).is_success
    html = httpx.get(f"{signed.url}/share/{thread_id}").text
    assert "Here is the chart" in html
    assert not re.search(r"<img[^>]+src=\"(?!data:)", html), "a remote image in the page"
    visitor = new_context(chromium)  # nobody signed in, the page's own policy
    page = visitor.new_page()
    page.goto(f"{signed.url}/share/{thread_id}")
    expect(page.locator(f'img[src^="{listener.url}"]')).to_have_count(0)
    for source, name in (("answer", "chart"), ("bare", "image"), ("reasoning", "step")):
        link = page.locator(f'a[href="{listener.url}?from={source}"]')
        expect(link).to_have_text(name)
        expect(link).to_have_attribute("rel", "noopener noreferrer")
    expect(page.locator('img[alt="chelsea.png"]')).to_have_attribute(
        "src", re.compile(r"^data:image/")
    )
    page.wait_for_timeout(300)
    assert listener.hits == []
    visitor.close()


@pytest.mark.serial  # a 0.9 MB message keeps chromium busy for seconds
def test_the_sidebar_lists_a_giant_first_message_as_a_short_title(
    chromium: Browser, signed: SignedIn
) -> None:
    context, page = signed_in_page(chromium, signed.url, "erin", USERS["erin"])
    # About 0.9 MB, under KIMI_MAX_MESSAGE_CHARS: a longer one is refused unstored.
    text = "Describe this " + "very long pasted text " * 40_000
    page.evaluate(TYPE_INTO_CHAT, text)
    page.locator("#chat-submit").click()
    expect(page.locator(ANSWERS).last).to_contain_text("This message needs about")
    listing = httpx.post(f"{signed.url}/project/threads", cookies=signed.cookies("erin"),
                         json={"pagination": {"first": 20}, "filter": {}})  # fmt: skip
    assert listing.is_success and len(listing.content) < 20_000  # not megabytes of title
    page.reload()  # the sidebar, as it lists after sign-in
    entry = page.locator("#thread-history").get_by_text("Describe this very long")
    expect(entry).to_be_visible()
    assert len(entry.inner_text()) <= 100
    context.close()


def test_chainlit_run_beyond_loopback_with_no_user_refuses_to_start(tmp_path: Path) -> None:
    copy_app(tmp_path)
    chainlit = str(Path(sys.executable).with_name("chainlit"))
    port = free_port()
    started = subprocess.run(
        [chainlit, "run", "app.py", "--headless", "--host", "0.0.0.0", "--port", str(port)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "KIMI_DATA_DIR": str(tmp_path / "data"), "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    assert started.returncode != 0
    said = [line for line in started.stderr.splitlines() if "cannot start" in line]
    assert said == [
        "Kimi-VL Chat cannot start: it would listen on 0.0.0.0 with no user to sign in; add one "
        "with `.venv/bin/python -m backend.cli user add NAME --password-stdin`, or listen on "
        "127.0.0.1."
    ]
    assert "Traceback" not in started.stderr
