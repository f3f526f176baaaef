"""Chainlit's sign-in page, as ours: it asks for a user name (not an e-mail address), a
wrong password gets a plain sentence, the picture beside the form is the app's own
(public/sign-in.svg), in English and Chinese."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import (
    ROOT,
    THINKING_MODEL,
    new_context,
    screenshot,
    scripted_ui,
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
