"""Chainlit's sign-in page, as ours: it asks for a user name (not an e-mail address), a
wrong password gets a plain sentence, the picture beside the form is the app's own
(public/sign-in.svg), in English and Chinese."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from PIL import Image, ImageStat
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import (
    ANSWERS,
    ROOT,
    THINKING_MODEL,
    ask,
    new_context,
    screenshot,
    scripted_ui,
    wait_answer_done,
)

pytestmark = pytest.mark.browser

PASSWORD = "ada-password-1"


@pytest.fixture(scope="module")
def signed_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A UI with sign-in on (one user, ``ada``) in front of the scripted server."""
    workdir = tmp_path_factory.mktemp("sign-in-ui")
    env = {"KIMI_DATA_DIR": str(workdir / "data"), "CHAINLIT_AUTH_SECRET": "s" * 64}
    made = subprocess.run(
        [sys.executable, "-m", "backend.cli", "user", "add", "ada", "--password-stdin"],
        input=PASSWORD + "\n", text=True, cwd=ROOT, capture_output=True, timeout=120,
        env={**os.environ, **env},  # the tests' environment: no checkout .env
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    with scripted_ui(workdir, (THINKING_MODEL,), **env) as url:
        yield url


def sign_in_page(chromium: Browser, url: str, locale: str) -> Page:
    context = new_context(chromium, locale=locale)
    page = context.new_page()
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(url)
    expect(page.locator("#email")).to_be_visible()
    return page


@pytest.mark.parametrize(
    ("locale", "label", "wrong"),
    [
        ("en-US", "User name", "That user name and password do not match"),
        ("zh-CN", "用户名", "用户名或密码不正确"),
    ],
    ids=["en-US", "zh-CN"],
)
def test_the_sign_in_page_asks_for_a_user_name_and_says_a_wrong_password_plainly(
    chromium: Browser, signed_ui: str, locale: str, label: str, wrong: str
) -> None:
    page = sign_in_page(chromium, signed_ui, locale)
    expect(page.locator('label[for="email"]')).to_have_text(label)
    placeholder = page.locator("#email").get_attribute("placeholder") or ""
    assert "@" not in placeholder, placeholder
    picture = page.locator("img[alt]").last
    expect(picture).to_have_attribute("src", "/public/sign-in.svg")
    assert picture.evaluate("img => img.complete && img.naturalWidth > 0")
    screenshot(page, f"sign-in-{locale}")
    page.locator("#email").fill("ada")
    page.locator("#password").fill("not her password")
    page.locator('button[type="submit"]').click()
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text(wrong)
    toast = page.locator("[data-sonner-toast]")  # Chainlit's toast of the HTTP error
    expect(toast).to_be_attached()
    assert not toast.is_visible(), toast.inner_text()
    for jargon in ("Unauthorized", "credentials", "signin"):
        expect(alert).not_to_contain_text(jargon)
    screenshot(page, f"sign-in-wrong-password-{locale}")
    page.locator("#password").fill(PASSWORD)
    page.locator('button[type="submit"]').click()
    expect(page.locator("#chat-settings-open-modal")).to_be_visible()
    page.context.close()


THUMBS = "button:has(svg.lucide-thumbs-up), button:has(svg.lucide-thumbs-down)"
"""Chainlit's feedback buttons under a message (shown once chats are stored: signed in)."""


def test_an_error_note_carries_no_thumbs_but_an_answer_does(
    chromium: Browser, signed_ui: str
) -> None:
    """Issue 47: errors carried thumbs up/down; a note is the app's, not the model's."""
    page = sign_in_page(chromium, signed_ui, "en-US")
    page.locator("#email").fill("ada")
    page.locator("#password").fill(PASSWORD)
    page.locator('button[type="submit"]').click()
    expect(page.locator("#chat-settings-open-modal")).to_be_visible()
    ask(page, "Hello #scenario=plain")
    wait_answer_done(page)
    page.wait_for_url("**/thread/*")  # stored: the page is mounted again there
    expect(page.locator(ANSWERS)).to_have_count(1)
    ask(page, "Again #scenario=error-500")
    wait_answer_done(page)
    answer = page.locator('.step:has(> div > [id^="step-"]:not([id$="00000000a003"]))').filter(
        has=page.locator(".message-content", has_text="A rocket stands")
    )
    error = page.locator('.step:has([id$="00000000a003"])')
    expect(error).to_contain_text("failed while answering")
    expect(answer.locator(THUMBS)).to_have_count(2)  # the answer can be rated
    expect(answer.locator(THUMBS).first).to_be_visible()
    expect(error.locator(THUMBS).locator("visible=true")).to_have_count(0)
    expect(error.get_by_role("button", name="Retry")).to_be_visible()
    screenshot(page, "error-note-without-thumbs")
    page.context.close()


def test_a_chat_begun_by_a_starter_is_titled_by_the_starter(
    chromium: Browser, signed_ui: str
) -> None:
    """Issue 47: starters became sidebar titles with their instructions ("Where should I
    click to turn on dark mode? Answer with pyautogui.click…")."""
    page = sign_in_page(chromium, signed_ui, "en-US")
    page.locator("#email").fill("ada")
    page.locator("#password").fill(PASSWORD)
    page.locator('button[type="submit"]').click()
    page.locator('[id="starter-where-should-i-click?"]').click()
    wait_answer_done(page)
    titles = page.locator("#thread-history")
    expect(titles.get_by_text("Where should I click?", exact=True).first).to_be_visible()
    expect(titles).not_to_contain_text("pyautogui")
    page.context.close()


def test_the_page_is_dark_before_its_scripts_run(chromium: Browser, signed_ui: str) -> None:
    """Issue 47: the phone sign-in page flashed white: until Chainlit's script sets its
    (default dark) theme, the page was painted white. Scripts off, the first paint stays."""
    context = chromium.new_context(
        viewport={"width": 390, "height": 844}, java_script_enabled=False
    )
    page = context.new_page()
    page.goto(f"{signed_ui}/login")
    page.wait_for_load_state("load")
    shot = Image.open(io.BytesIO(page.screenshot())).convert("L")
    brightness = ImageStat.Stat(shot).mean[0]
    context.close()
    assert brightness < 80, brightness  # Chainlit's dark background is 13 % lightness
