"""Export in a real browser: an action that never enters the transcript (nor, signed in,
the list of chats), and a file that reads as the chat looked, opened offline on a desktop
and a phone: rendered Markdown, code and math, "Thought for N.Ns", the stats lines, the
Compare answer and the grounding overlay."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, ViewportSize, expect

from tests.browser.conftest import (
    ANSWERS,
    DESKTOP,
    INSTRUCT_MODEL,
    PHONE,
    ROOT,
    THINKING_MODEL,
    Stack,
    ask,
    functional_context,
    screenshot,
    signed_in_page,
    start_scripted_server,
    start_ui,
    wait_answer_done,
)
from tests.conftest import DATA, free_port

pytestmark = pytest.mark.browser

USER_MESSAGES = '[data-step-type="user_message"]'
COLUMNS = '[id^="step-"][id$="c0a1c0a1c01a"]'
"""A Compare pair's columns (ui/compare_view.py, COLUMN_ID_TAIL)."""


def export(page: Page, label: str, saved: Path) -> Path:
    """Click the Export button (``label``) and save the download to ``saved``."""
    with page.expect_download() as download:
        page.locator(".command-buttons-container button", has_text=label).click()
    download.value.save_as(saved)
    return saved


@pytest.mark.parametrize(
    ("locale", "viewport", "labels"),
    [
        (
            "en-US",
            DESKTOP,
            (
                "Export",
                "Compare with Kimi-VL Instruct",
                "Thought for",
                "Marked on",
                "TTFT",
            ),
        ),
        (
            "zh-CN",
            PHONE,
            ("导出", "与 Kimi-VL Instruct 对比", "思考了", "上标注", "首字延迟"),
        ),
    ],
    ids=["en-desktop", "zh-phone"],
)
def test_the_export_reads_as_the_chat_looked(
    chromium: Browser,
    stack: Stack,
    tmp_path: Path,
    locale: str,
    viewport: ViewportSize,
    labels: tuple[str, str, str, str, str],
) -> None:
    """Defect: answers were raw Markdown (``##``, ``**``, ``$$``, fences); open mode had no
    "Thought for N s" and no stats; no Compare answers, no grounding overlays."""
    button, compare, thought, marked, ttft = labels
    context = functional_context(chromium, locale, viewport)
    try:
        page = context.new_page()
        page.goto(stack.ui_url)
        expect(page.locator("#chat-settings-open-modal")).to_be_visible()
        ask(page, "Where is the spoon? #scenario=bbox", DATA / "coffee.png")
        wait_answer_done(page)
        expect(page.locator('img[alt="coffee (marked).jpg"]')).to_be_visible()
        ask(page, "What is in this picture?")
        wait_answer_done(page)
        page.get_by_role("button", name=compare).last.click()
        expect(page.locator(COLUMNS)).to_have_count(2)  # Compare's pair (ui/compare_view.py)
        wait_answer_done(page)
        answers = page.locator(ANSWERS).count()

        saved = export(page, button, tmp_path / "chat.html")
        # An action: no "Export" bubble, nothing new in the transcript.
        expect(page.locator(USER_MESSAGES)).to_have_count(2)
        assert page.locator(ANSWERS).count() == answers

        reader = chromium.new_context(locale=locale, viewport=viewport, offline=True)
        document = reader.new_page()  # as whoever gets the file opens it: offline
        document.goto(saved.as_uri())
        expect(document.locator("h2").first).to_have_text("What the picture shows")
        expect(document.locator(".answer strong").first).to_have_text("rocket")
        expect(document.locator("math[display=block]").first).to_be_visible()
        expect(document.locator("pre code.language-python").first).to_have_text(
            "print('liftoff')\n"
        )
        expect(document.locator("summary").first).to_contain_text(thought)
        expect(document.locator(".stats").first).to_contain_text(ttft)
        # Two columns, each labelled with its model at the top, as the chat shows them.
        expect(document.locator(".compared .column .label")).to_have_count(2)
        expect(document.locator(".compared .column .label").last).to_have_text("Kimi-VL Instruct")
        expect(document.locator(".compared .stats").last).to_contain_text(
            "Kimi-VL Instruct · " + ttft
        )
        expect(document.locator("figure figcaption")).to_contain_text(marked)
        expect(document.locator("figure img")).to_be_visible()
        body = document.locator("body").inner_text()
        assert "##" not in body and "**" not in body and "$$" not in body and "```" not in body
        document.evaluate("window.scrollTo(0, 0)")
        screenshot(document, f"export-top-{locale}")
        document.locator("h2").first.scroll_into_view_if_needed()
        screenshot(document, f"export-answer-{locale}")
        document.locator(".compared").scroll_into_view_if_needed()
        screenshot(document, f"export-compare-{locale}")
        reader.close()
    finally:
        context.close()


@pytest.fixture(scope="module")
def signed_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A UI with sign-in on (user ``ann``) in front of the scripted server."""
    server_port, ui_port = free_port(), free_port()
    server = start_scripted_server(server_port, THINKING_MODEL, INSTRUCT_MODEL)
    workdir = tmp_path_factory.mktemp("export-ui")
    env = {"KIMI_DATA_DIR": str(workdir / "data"), "CHAINLIT_AUTH_SECRET": "e" * 64}
    made = subprocess.run(
        [sys.executable, "-m", "backend.cli", "user", "add", "ann", "--password-stdin"],
        input="ann-password-1\n", text=True, cwd=ROOT, capture_output=True, timeout=120,
        env={**os.environ, **env},  # the tests' environment: no checkout .env
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    try:
        ui = start_ui(ui_port, f"http://127.0.0.1:{server_port}/v1", workdir, None, **env)
    except BaseException:
        server.stop()
        raise
    yield f"http://127.0.0.1:{ui_port}"
    ui.stop()
    server.stop()


def listed_chats(url: str, cookies: dict[str, str]) -> list[str]:
    """The names of the signed-in user's chats, as the sidebar lists them."""
    body = {"pagination": {"first": 20}, "filter": {}}
    listed = httpx.post(f"{url}/project/threads", json=body, cookies=cookies).json()
    return [str(thread.get("name")) for thread in listed["data"]]


def test_server_and_export_alone_leave_no_chat_in_the_list(
    chromium: Browser, signed_ui: str, tmp_path: Path
) -> None:
    """Defect: Server and Export were chat commands; a chat used only for them was
    stored and listed as "Untitled Conversation"."""
    context, page = signed_in_page(chromium, signed_ui, "ann", "ann-password-1")
    try:
        page.locator(".command-buttons-container button", has_text="Server").click()
        expect(page.locator("#side-view-content table")).to_be_visible()
        saved = export(page, "Export", tmp_path / "empty.html")
        assert "<h1>Kimi-VL chat</h1>" in saved.read_text()
        expect(page.locator(USER_MESSAGES)).to_have_count(0)
        page.reload()
        expect(page.locator("#chat-settings-open-modal")).to_be_visible()
        cookies = {c["name"]: c["value"] for c in context.cookies()}
        assert listed_chats(signed_ui, cookies) == []
        expect(page.get_by_text("Untitled Conversation")).to_have_count(0)
        screenshot(page, "export-signed-in-nothing-listed")

        ask(page, "What is in this picture?")  # a real question is a chat, and listed
        wait_answer_done(page)
        saved = export(page, "Export", tmp_path / "chat.html")
        assert "What the picture shows</h2>" in saved.read_text()
        expect(page.locator(USER_MESSAGES)).to_have_count(1)
        assert listed_chats(signed_ui, cookies) == ["What is in this picture?"]
    finally:
        context.close()
