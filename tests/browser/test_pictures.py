"""Photos chromium cannot decode (HEIC, TIFF) show as pictures: in the message box, in
the sent message and in the resumed chat (ui/previews.py, public/pictures.js), on a
desktop and a phone, under the app's own Content-Security-Policy (no ``bypass_csp``:
the predicates are Playwright's element evaluations, which the policy allows).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from PIL import Image
from playwright.sync_api import Browser, Locator, Page, ViewportSize, expect
from playwright.sync_api import Error as PlaywrightError

from tests.browser.conftest import (
    DESKTOP,
    PHONE,
    SIGNED_USER,
    TIMEOUT_MS,
    Stack,
    new_context,
    reopen_from_sidebar,
    screenshot,
    sign_in,
    stored_chat,
    wait_answer_done,
)
from tests.conftest import DATA
from tests.fakes.kimi_server import conversation

pytestmark = pytest.mark.browser

SENT = '[data-step-type="user_message"]'


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """An iPhone-style HEIC photo and a TIFF scan, encoded here (pillow-heif, Pillow)."""
    from pillow_heif import register_heif_opener

    register_heif_opener()
    folder = tmp_path_factory.mktemp("photos")
    heic, tiff = folder / "iphone.heic", folder / "scan.tiff"
    with Image.open(DATA / "chelsea.png") as cat:
        cat.convert("RGB").save(heic, quality=70)
    with Image.open(DATA / "coffee.png") as coffee:
        coffee.convert("RGB").save(tiff)
    return heic, tiff


def decoded(img: Locator) -> bool:
    """Whether the browser decoded the picture ``img`` shows (a broken one has no width)."""
    return bool(img.evaluate("img => img.complete && img.naturalWidth > 0"))


def shows_picture(img: Locator) -> None:
    """Wait until ``img`` shows a decoded picture (it may load lazily: scrolled to first)."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while True:
        expect(img).to_have_count(1)
        try:  # React may draw the message again meanwhile: ask the new element
            img.scroll_into_view_if_needed(timeout=1_000)
            if decoded(img):
                return
        except PlaywrightError:
            pass
        assert time.monotonic() < deadline, f"{img} shows no picture"
        time.sleep(0.1)


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_photos_the_browser_cannot_decode_show_as_pictures_everywhere(
    chromium: Browser, signed_stack: Stack, photos: tuple[Path, Path], viewport: ViewportSize
) -> None:
    context = new_context(chromium)
    try:
        page: Page = sign_in(context, signed_stack.ui_url, *SIGNED_USER)
        page.set_viewport_size(viewport)
        size = "desktop" if viewport == DESKTOP else "phone"
        page.locator("#upload-button-input").set_input_files([str(p) for p in photos])
        for photo in photos:
            shows_picture(page.locator(f'#attachments img[alt="{photo.name}"]'))
        screenshot(page, f"heic-composer-{size}")

        question = f"What is in these photos? ({size})"
        page.locator("#chat-input").fill(question)
        page.locator("#chat-submit").click()
        wait_answer_done(page)
        for photo in photos:
            shows_picture(page.locator(f'{SENT} img[alt="{photo.name}"]'))
        screenshot(page, f"heic-sent-{size}")
        # The model got both photos, prepared from the uploads themselves.
        sent = conversation(signed_stack.requests()[-1])[-1]["content"]
        assert [part["type"] for part in sent] == ["image_url", "image_url", "text"]

        chat = stored_chat(page, signed_stack.ui_url, question)
        page.wait_for_timeout(1_000)  # the rest of the chat's writes reach the database
        page = reopen_from_sidebar(page, signed_stack.ui_url, question, chat)
        expect(page.locator(SENT)).to_have_count(1)
        for photo in photos:
            shows_picture(page.locator(f'{SENT} img[alt="{photo.name}"]'))
        screenshot(page, f"heic-resumed-{size}")
    finally:
        context.close()
