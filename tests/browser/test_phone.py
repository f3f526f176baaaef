"""On a phone (390x844), and a desktop where it matters: the composer's commands keep
their names, the model's description fits the screen, the image viewer's close button
is off the picture, and dev mode's notice leaves the
header (its model picker) and the composer free."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, BrowserContext, FloatRect, Page, ViewportSize, expect

from tests.browser.conftest import (
    INSTRUCT_MODEL,
    THINKING_MODEL,
    Stack,
    functional_context,
    screenshot,
    scripted_ui,
    wait_answer_done,
)

pytestmark = pytest.mark.browser

PICKER = "#mode-picker-trigger-model"
"""The model picker in the message box (ui/model_picker.py)."""

PHONE: ViewportSize = {"width": 390, "height": 844}
DESKTOP: ViewportSize = {"width": 1440, "height": 900}


def open_ui(chromium: Browser, url: str, viewport: ViewportSize, locale: str = "en-US") -> Page:
    context: BrowserContext = functional_context(chromium, locale=locale, viewport=viewport)
    page = context.new_page()
    page.goto(url)
    expect(page.locator("#chat-settings-open-modal")).to_be_attached()
    return page


def inside(inner: FloatRect | None, outer: ViewportSize) -> bool:
    assert inner is not None
    return (
        inner["x"] >= 0
        and inner["y"] >= 0
        and inner["x"] + inner["width"] <= outer["width"]
        and inner["y"] + inner["height"] <= outer["height"]
    )


def overlap(a: FloatRect | None, b: FloatRect | None) -> bool:
    assert a is not None and b is not None
    return not (
        a["x"] + a["width"] <= b["x"]
        or b["x"] + b["width"] <= a["x"]
        or a["y"] + a["height"] <= b["y"]
        or b["y"] + b["height"] <= a["y"]
    )


@pytest.mark.parametrize(
    ("locale", "names"), [("en-US", ("Server", "Export")), ("zh-CN", ("服务器", "导出"))]
)
def test_the_commands_keep_their_names_on_a_phone(
    chromium: Browser, stack: Stack, locale: str, names: tuple[str, str]
) -> None:
    page = open_ui(chromium, stack.ui_url, PHONE, locale)
    for name in names:
        button = page.get_by_role("button", name=name)
        expect(button).to_be_visible()
        expect(button).to_contain_text(name)
        assert inside(button.bounding_box(), PHONE)
    screenshot(page, f"phone-commands-{locale}")
    page.context.close()


def test_the_models_description_fits_a_phone(chromium: Browser, stack: Stack) -> None:
    page = open_ui(chromium, stack.ui_url, PHONE)
    page.locator(PICKER).click()
    models = page.locator("#mode-picker-popover-model")  # each model with its description
    expect(models).to_be_visible()
    expect(models).to_contain_text("Kimi-VL Thinking")
    page.wait_for_timeout(300)  # the popover's opening animation
    assert inside(models.bounding_box(), PHONE), models.bounding_box()
    screenshot(page, "phone-model-description")
    page.context.close()


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["phone", "desktop"])
def test_the_viewers_close_button_is_off_the_picture(
    chromium: Browser, stack: Stack, viewport: ViewportSize
) -> None:
    page = open_ui(chromium, stack.ui_url, viewport)
    page.locator('[id="starter-where-should-i-click?"]').click()
    wait_answer_done(page)
    page.locator('img[alt="settings (marked).png"]').click()
    close = page.get_by_role("button", name="Close lightbox")
    picture = page.locator('[role="dialog"] img[alt="settings (marked).png"]')
    expect(picture).to_be_visible()
    page.wait_for_timeout(300)  # the viewer's zoom-in animation
    assert not overlap(close.bounding_box(), picture.bounding_box())
    assert inside(close.bounding_box(), viewport) and inside(picture.bounding_box(), viewport)
    screenshot(page, f"viewer-close-{'phone' if viewport is PHONE else 'desktop'}")
    close.click()
    expect(picture).to_have_count(0)
    page.context.close()


@pytest.fixture(scope="module")
def dev_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A UI in dev mode (KIMI_DEV_MODE=1) in front of the scripted server."""
    workdir = tmp_path_factory.mktemp("dev-ui")
    with scripted_ui(workdir, (THINKING_MODEL, INSTRUCT_MODEL), KIMI_DEV_MODE="1") as url:
        yield url


def test_dev_modes_notice_leaves_the_model_picker_and_composer_free_on_a_phone(
    chromium: Browser, dev_ui: str
) -> None:
    page = open_ui(chromium, dev_ui, PHONE)
    toast = page.locator("[data-sonner-toast]", has_text="Dev mode")
    expect(toast).to_be_visible()
    page.wait_for_timeout(400)  # the toast's entrance
    screenshot(page, "phone-dev-notice")
    picker = page.locator(PICKER)
    for other in (picker, page.locator("#message-composer"), page.locator("#starters")):
        assert not overlap(toast.bounding_box(), other.bounding_box()), other
    assert inside(toast.bounding_box(), PHONE)
    page.context.close()
