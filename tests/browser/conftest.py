"""Browser fixtures: the scripted server, ``chainlit run app.py`` and headless chromium.

The scripted Kimi-VL server and the Chainlit app run as real subprocesses, as
they do in production; Playwright drives Debian's chromium (facts.md: flags,
selectors, CDN requests blocked). Each test gets a fresh browser context, so a
fresh Chainlit session, and saves a screenshot under ``artifacts/screenshots/``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit
from weakref import WeakKeyDictionary

import httpx
import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Frame,
    Page,
    Playwright,
    Request,
    Response,
    Route,
    ViewportSize,
    WebSocket,
    expect,
    sync_playwright,
)

from serving.ui_main import ui_command
from tests.conftest import free_port
from tests.live_app import LOGS as LOGS
from tests.live_app import Process as Process
from tests.live_app import add_users
from tests.live_app import copy_app as copy_app  # what chainlit run needs, copied
from tests.live_app import spawn as spawn
from tests.live_app import wait_http as wait_http

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
THINKING_MODEL = "kimi-vl-thinking-2506"
INSTRUCT_MODEL = "kimi-vl"
DESKTOP: ViewportSize = {"width": 1440, "height": 900}
PHONE: ViewportSize = {"width": 390, "height": 844}
"""The two viewports of the layout tests: a laptop and a phone (iPhone 12-15 size)."""
TIMEOUT_MS = 30_000
"""Generous: two cores run chromium, Chainlit and the scripted server at once."""
expect.set_options(timeout=TIMEOUT_MS)

pytestmark = pytest.mark.browser


def start_scripted_server(port: int, *models: str) -> Process:
    """The scripted Kimi-VL server on ``port``, serving ``models`` (first is the default)."""
    args = [sys.executable, "-m", "tests.fakes.kimi_server", "--port", str(port)]
    for model in models:
        args += ["--model", model]
    server = spawn(f"scripted-{port}", args)
    wait_http(f"http://127.0.0.1:{port}/health", server)
    return server


def start_ui(
    port: int,
    base_url: str,
    workdir: Path,
    edit_config: Callable[[str], str] | None = None,
    **env: str,
) -> Process:
    """``chainlit run app.py --headless`` on ``port``, talking to ``base_url``.

    It runs in ``workdir``, where the app's files are copied: Chainlit keeps
    uploads in ``./.files`` and deletes that folder when it stops, so two UIs
    (or a developer's UI) sharing the repository root would break each other
    (:func:`copy_app`). ``edit_config`` rewrites the copy's ``.chainlit/config.toml``
    text (a test's own limits, e.g. a short ``session_timeout``).
    """
    copy_app(workdir)
    if edit_config is not None:
        config = workdir / ".chainlit" / "config.toml"
        config.write_text(edit_config(config.read_text()))
    ui = spawn(
        f"chainlit-{port}",
        ui_command("127.0.0.1", port),
        {"KIMI_BASE_URL": base_url, "PYTHONPATH": str(workdir), **env},
        cwd=workdir,
    )
    wait_http(f"http://127.0.0.1:{port}/", ui)
    return ui


@contextlib.contextmanager
def scripted_ui(workdir: Path, models: Sequence[str], **env: str) -> Iterator[str]:
    """The scripted server serving ``models`` and a UI in front of it (run in ``workdir``,
    ``env`` added to its environment); yields the UI's URL and stops both after."""
    server_port, ui_port = free_port(), free_port()
    server = start_scripted_server(server_port, *models)
    try:
        ui = start_ui(ui_port, f"http://127.0.0.1:{server_port}/v1", workdir, None, **env)
    except BaseException:
        server.stop()
        raise
    try:
        yield f"http://127.0.0.1:{ui_port}"
    finally:
        ui.stop()
        server.stop()


@dataclass
class Stack:
    """The running UI and the scripted server behind it."""

    ui_url: str
    server_url: str
    processes: list[Process] = field(default_factory=list)
    app_log: Path | None = None
    """The UI's own app.log."""

    def requests(self) -> list[dict[str, object]]:
        """Chat completion request bodies the scripted server received."""
        body = httpx.get(f"{self.server_url}/debug/requests").json()
        requests: list[dict[str, object]] = body["requests"]
        return requests

    def clear_requests(self) -> None:
        """Forget recorded requests."""
        httpx.delete(f"{self.server_url}/debug/requests")


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Scripted server serving Thinking and Instruct, and the UI in front of it."""
    server_port, ui_port = free_port(), free_port()
    server = start_scripted_server(server_port, THINKING_MODEL, INSTRUCT_MODEL)
    ui_dir = tmp_path_factory.mktemp("ui")
    app_log = ui_dir / "app.log"
    try:
        ui = start_ui(
            ui_port, f"http://127.0.0.1:{server_port}/v1", ui_dir, KIMI_APP_LOG=str(app_log)
        )
    except BaseException:
        server.stop()
        raise
    urls = f"http://127.0.0.1:{ui_port}", f"http://127.0.0.1:{server_port}"
    yield Stack(*urls, [server, ui], app_log)
    ui.stop()
    server.stop()


SIGNED_USER = ("kim", "kim-password-1")
"""The one person of :func:`signed_stack`, (name, password)."""


@pytest.fixture(scope="session")
def signed_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """The scripted server (Thinking and Instruct) and a UI with sign-in on and chats
    stored (SQLite in its own folder), for tests that resume a chat; one person,
    :data:`SIGNED_USER`. Tests that count the person's chats need a UI of their own."""
    server_port, ui_port = free_port(), free_port()
    server = start_scripted_server(server_port, THINKING_MODEL, INSTRUCT_MODEL)
    workdir = tmp_path_factory.mktemp("signed-ui")
    env = {"KIMI_DATA_DIR": str(workdir / "data"), "CHAINLIT_AUTH_SECRET": "s" * 64}
    add_users(workdir, {**os.environ, **env, "PYTHONPATH": str(ROOT)}, dict([SIGNED_USER]))
    try:
        ui = start_ui(ui_port, f"http://127.0.0.1:{server_port}/v1", workdir, None, **env)
    except BaseException:
        server.stop()
        raise
    yield Stack(f"http://127.0.0.1:{ui_port}", f"http://127.0.0.1:{server_port}", [server, ui])
    ui.stop()
    server.stop()


@pytest.fixture(scope="session")
def playwright() -> Iterator[Playwright]:
    """Playwright's driver, once per session."""
    with sync_playwright() as pw:
        yield pw


@pytest.fixture(scope="session")
def chromium(playwright: Playwright) -> Iterator[Browser]:
    """Debian's chromium, headless (never a downloaded browser)."""
    browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
    yield browser
    browser.close()


def block_cdn(route: Route) -> None:
    """Refuse requests that leave the machine (web fonts, KaTeX CSS from CDNs)."""
    route.abort()


QUESTION_FRAMES = ('42["client_message"', '42["edit_message"')
"""Socket.io frames a page sends for a question typed or edited; Chainlit answers each with
a ``task_start`` frame as it takes it (chainlit/socket.py, ``process_message``)."""
TASK_START_WAIT_S = 10.0
"""How long :func:`wait_answer_done` waits for a sent question's ``task_start``; one refused
before Chainlit takes it (the app's bounds) gets none."""


@dataclass
class QuestionsOut:
    """Questions one page has sent that the server has not yet taken (no ``task_start``),
    and the tasks it runs for the page (a ``task_start`` without its ``task_end`` yet, on
    the page's socket now: a new socket's tasks are all there is)."""

    pending: int = 0
    sent_at: float = 0.0
    running: int = 0

    def watch(self, socket: WebSocket) -> None:
        self.running = 0
        socket.on("framesent", self._sent)
        socket.on("framereceived", self._received)

    def _sent(self, payload: str | bytes) -> None:
        if isinstance(payload, str) and payload.startswith(QUESTION_FRAMES):
            self.pending += 1
            self.sent_at = time.monotonic()

    def _received(self, payload: str | bytes) -> None:
        if not isinstance(payload, str):
            return
        if payload.startswith('42["task_start"'):
            self.pending = max(0, self.pending - 1)
            self.running += 1
        elif payload.startswith('42["task_end"'):  # Chainlit sends one unpaired as it connects
            self.running = max(0, self.running - 1)


QUESTIONS_OUT: WeakKeyDictionary[Page, QuestionsOut] = WeakKeyDictionary()

FRAMES: deque[str] = deque(maxlen=400)
EVENTS: deque[str] = deque(maxlen=200)
"""What the current test's pages did, one line each: socket frames (cut to
:data:`TRAIL_CHARS`) in :data:`FRAMES`; in :data:`EVENTS`, which streamed frames cannot
push out, navigations, the socket's polling posts and Chainlit's ``/set-session-cookie``
(each connection's first requests), console errors and warnings, and HTTP answers of 400
and up. A failed test's report shows both, in time order: its pages are closed by then."""
TRAIL_CHARS = 160
CONNECTING = ("/ws/socket.io/", "/set-session-cookie")


def _trail(lines: deque[str], page: Page, what: str, chars: int = TRAIL_CHARS) -> None:
    lines.append(f"{time.monotonic():.3f} page {id(page) % 10_000:04d} {what[:chars]}")


def _trail_page(page: Page) -> None:
    def frames(socket: WebSocket) -> None:
        socket.on("framesent", lambda payload: _trail(FRAMES, page, ">> " + _cut(payload)))
        socket.on("framereceived", lambda payload: _trail(FRAMES, page, "<< " + _cut(payload)))

    def console(message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            _trail(EVENTS, page, f"console {message.type}: {message.text}")

    def request(asked: Request) -> None:
        if asked.method == "POST" and any(part in asked.url for part in CONNECTING):
            body = (asked.post_data_buffer or b"").decode(errors="replace")
            # Whole: a connect packet's auth names the chat to resume (threadId).
            _trail(EVENTS, page, f"POST {urlsplit(asked.url).path} {body}", chars=1_000)

    def response(answer: Response) -> None:
        if answer.status >= 400:
            _trail(EVENTS, page, f"HTTP {answer.status} {answer.request.method} {answer.url}")

    def navigated(frame: Frame) -> None:
        if frame.parent_frame is None:
            _trail(EVENTS, page, f"at {frame.url}")

    page.on("websocket", frames)
    page.on("console", console)
    page.on("request", request)
    page.on("response", response)
    page.on("framenavigated", navigated)


def _when(line: str) -> float:
    return float(line.split(" ", 1)[0])


def _cut(payload: str | bytes) -> str:
    return payload[:TRAIL_CHARS] if isinstance(payload, str) else f"<{len(payload)} bytes>"


def _watch_questions(page: Page) -> None:
    QUESTIONS_OUT[page] = out = QuestionsOut()
    page.on("websocket", out.watch)
    _trail_page(page)


def watch_questions(context: BrowserContext) -> BrowserContext:
    """``context``, whose pages say to :func:`wait_answer_done` which questions the server
    has not taken yet and keep a trail for a failed test's report (:data:`EVENTS`). Every
    context the browser tests make is watched from its creation."""
    context.on("page", _watch_questions)
    return context


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Each test's trail (:data:`FRAMES`, :data:`EVENTS`) starts empty."""
    FRAMES.clear()
    EVENTS.clear()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """A failed browser test's report carries its pages' trail."""
    report = yield
    if report.failed and (FRAMES or EVENTS):
        report.sections.append(("page trail", "\n".join(sorted([*FRAMES, *EVENTS], key=_when))))
    return report


def new_context(
    chromium: Browser, locale: str = "en-US", bypass_csp: bool = False
) -> BrowserContext:
    """A fresh browser context (a fresh Chainlit session) with CDN requests blocked.

    ``bypass_csp``: for a functional test whose own script runs in the page (never
    for the security tests, which test the policy).
    """
    context = chromium.new_context(
        locale=locale,
        viewport={"width": 1100, "height": 800},
        device_scale_factor=1,
        bypass_csp=bypass_csp,
    )
    context.set_default_timeout(TIMEOUT_MS)
    context.route(lambda url: not url.startswith("http://127.0.0.1"), block_cdn)
    return watch_questions(context)


def functional_context(
    chromium: Browser, locale: str = "en-US", viewport: ViewportSize | None = None
) -> BrowserContext:
    """As :func:`new_context` (``viewport`` default 1100x800), but the test's own
    predicates may run despite the page's CSP (``bypass_csp``): for tests of the page's
    behaviour, never of its policy."""
    context = chromium.new_context(
        locale=locale,
        viewport=viewport or {"width": 1100, "height": 800},
        device_scale_factor=1,
        bypass_csp=True,
    )
    context.set_default_timeout(TIMEOUT_MS)
    context.route(lambda url: not url.startswith("http://127.0.0.1"), block_cdn)
    return watch_questions(context)


@pytest.fixture
def page(chromium: Browser, stack: Stack) -> Iterator[Page]:
    """A page on the UI, loaded, its chat session started."""
    context = new_context(chromium)
    page = context.new_page()
    page.goto(stack.ui_url)
    page.wait_for_load_state("networkidle")
    # The settings button appears once on_chat_start has run: the session exists on
    # the server, so uploads (which name the session) are accepted.
    expect(page.locator("#chat-settings-open-modal")).to_be_visible()
    yield page
    context.close()


def sign_in(context: BrowserContext, url: str, name: str, password: str) -> Page:
    """A new page of ``context`` on which ``name`` signed in on Chainlit's page at ``url``."""
    page = context.new_page()
    page.goto(url)
    page.locator("#email").fill(name)
    page.locator("#password").fill(password)
    page.locator('button[type="submit"]').click()
    expect(page.locator("#chat-settings-open-modal")).to_be_visible()
    return page


def signed_in_page(
    chromium: Browser, url: str, name: str, password: str
) -> tuple[BrowserContext, Page]:
    """A fresh browser context in which ``name`` signed in on Chainlit's page at ``url``."""
    context = new_context(chromium)
    return context, sign_in(context, url, name, password)


def stored_chat(page: Page, url: str, name: str) -> str:
    """The id of the signed-in person's chat named ``name`` (its first message), once the
    sidebar's list has it (the chat's writes wait for its first words: ui/first_words.py)."""
    body = {"pagination": {"first": 20}, "filter": {}}
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while True:
        listed = page.request.post(f"{url}/project/threads", data=body).json()["data"]
        found = [str(chat["id"]) for chat in listed if chat.get("name") == name]
        if found:
            return found[0]
        assert time.monotonic() < deadline, f"no stored chat named {name!r}"
        page.wait_for_timeout(200)


PHONE_WIDTH_PX = 768
"""Chainlit's page is laid out for a phone below this width, its sidebar shut
(``frontend/src/hooks/use-mobile.tsx``)."""


def reopen_from_sidebar(page: Page, url: str, name: str, chat: str) -> Page:
    """Close ``page`` and open the signed-in person's stored chat ``chat`` (its id, from
    :func:`stored_chat`), named ``name``, as a person does: a new tab on the app's page at
    ``url``, then, once its chat session has started, the chat in the sidebar's list
    (opened first on a phone-sized page). Returns the new tab, the same size as ``page``,
    at the chat's address; the caller waits for what the chat shows.

    Not ``page.goto(url + "/thread/<id>")``: a full load of a chat's address at times opened
    a new chat instead and showed a spinner for good (docs/facts.md, "A chat's address
    loaded afresh can open a new chat")."""
    context, size = page.context, page.viewport_size
    page.close()
    tab = context.new_page()
    if size is not None:
        tab.set_viewport_size(size)
    tab.goto(url)
    # The settings button comes with on_chat_start: the tab's socket is open and kept.
    expect(tab.locator("#chat-settings-open-modal")).to_be_visible()
    if size is not None and size["width"] < PHONE_WIDTH_PX:
        tab.locator("#sidebar-trigger-button").click()
    tab.locator("#thread-history").get_by_text(name, exact=True).click()
    tab.wait_for_url(f"**/thread/{chat}")
    return tab


def screenshot(page: Page, name: str) -> Path:
    """Save a screenshot of the page as ``artifacts/screenshots/<name>.png``."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), animations="disabled")
    return path


ANSWERS = '[data-step-type="assistant_message"] .message-content'
UNDER_ANSWERS = '[data-step-type="system_message"] .message-content'
"""What the app says under an answer (how it ended, the stats line; ui/answer_view.py)."""
REASONING_STEP = '[data-step-type="llm"]'
REASONING_TEXT = f'{REASONING_STEP} [data-step-type="undefined"] .message-content'
"""The reasoning's text: one block each (ui/blocks.py), in order; the step's own output is empty."""


def attach(page: Page, *files: Path) -> None:
    """Attach files with the paperclip input and wait for their previews."""
    page.locator("#upload-button-input").set_input_files([str(f) for f in files])
    for f in files:
        expect(page.locator(f'#attachments img[alt="{f.name}"]')).to_be_visible()


def ask(page: Page, text: str, *files: Path) -> None:
    """Attach ``files`` (if any), type ``text`` and send it."""
    if files:
        attach(page, *files)
    page.locator("#chat-input").fill(text)
    submit = page.locator("#chat-submit")
    expect(submit).to_be_enabled()
    submit.click()


def wait_answer_done(page: Page) -> None:
    """Wait until the answer has ended: the server has taken every question the page sent
    (its ``task_start`` came, or :data:`TASK_START_WAIT_S` passed) and ended the tasks it
    started (their ``task_end`` came, within :data:`TIMEOUT_MS`), the Stop button is gone
    and Send is back. Without the first two, a question sent a moment before looked
    answered (no Stop yet, or not drawn yet on a busy machine, while the app had not even
    sent its request). An answer started by an action (Regenerate, Compare) is watched
    only once its ``task_start`` has come: wait first for something it draws."""
    out = QUESTIONS_OUT.get(page)
    while out and out.pending and time.monotonic() - out.sent_at < TASK_START_WAIT_S:
        page.wait_for_timeout(20)
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while out and out.running and time.monotonic() < deadline:
        page.wait_for_timeout(20)
    expect(page.locator("#stop-button")).to_have_count(0)
    expect(page.locator("#chat-submit")).to_be_visible()
