"""Attachments judged on attach: a file the app cannot use is refused in one plain
sentence before anything is sent, a kept message's text is really kept, and a dragged
file shows where to drop it (desktop and phone, English and Chinese)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, ViewportSize, expect

from tests.browser.conftest import ANSWERS, Stack, functional_context, screenshot
from tests.conftest import DATA

pytestmark = pytest.mark.browser

USER_MESSAGES = '[data-step-type="user_message"]'
PHONE: ViewportSize = {"width": 390, "height": 844}
DESKTOP: ViewportSize = {"width": 1100, "height": 800}


@pytest.fixture(params=["en-US", "zh-CN"])
def chat(request: pytest.FixtureRequest, chromium: Browser, stack: Stack) -> Iterator[Page]:
    """A started chat in English or Chinese."""
    context = functional_context(chromium, request.param, DESKTOP)
    page = context.new_page()
    page.goto(stack.ui_url)
    expect(page.locator("#chat-settings-open-modal")).to_be_visible()
    yield page
    context.close()


def chinese(page: Page) -> bool:
    return bool(page.evaluate("navigator.language").startswith("zh"))


def toast(page: Page) -> str:
    """The text of the newest toast, once one is shown."""
    shown = page.locator("[data-sonner-toast]").last
    expect(shown).to_be_visible()
    return shown.inner_text()


def test_a_broken_photo_is_refused_on_attach_in_one_sentence(chat: Page, tmp_path: Path) -> None:
    broken = tmp_path / "broken.jpg"
    broken.write_bytes((DATA / "rocket.jpg").read_bytes()[:300])  # the header, then nothing
    chat.locator("#chat-input").fill("What is in this photo?")
    chat.locator("#upload-button-input").set_input_files(str(broken))
    said = toast(chat)
    if chinese(chat):
        assert said.startswith("上传失败 broken.jpg") and "图片已损坏" in said, said
    else:
        assert said.startswith("Failed to upload broken.jpg: the image is damaged"), said
    # Our sentence only: the decoder's own words go to app.log (issue 47).
    assert not re.search(r"[()（）]", said), said
    assert said.count("broken.jpg") == 1  # named once
    expect(chat.locator("#attachments")).to_have_count(0)  # the attachment is gone
    expect(chat.locator("#chat-input")).to_have_value("What is in this photo?")
    expect(chat.locator(USER_MESSAGES)).to_have_count(0)  # nothing was sent
    screenshot(chat, f"attach-broken-photo-{chat.evaluate('navigator.language')}")


def test_a_photo_over_the_limit_and_a_text_file_are_refused_on_attach(
    chat: Page, tmp_path: Path
) -> None:
    big = tmp_path / "holiday.jpg"
    with big.open("wb") as out:  # a real JPEG start, 27 MB long
        out.write((DATA / "rocket.jpg").read_bytes())
        out.truncate(27_000_000)
    chat.locator("#upload-button-input").set_input_files(str(big))
    said = toast(chat)
    assert "holiday.jpg" in said and "27.0 MB" in said and "20 MB" in said, said
    screenshot(chat, f"attach-too-large-{chat.evaluate('navigator.language')}")

    notes = tmp_path / "notes.txt"
    notes.write_text("milk, eggs, coffee\n")
    chat.locator("#upload-button-input").set_input_files(str(notes))
    expect(chat.locator("[data-sonner-toast]", has_text="notes.txt")).to_be_visible()
    said = chat.locator("[data-sonner-toast]", has_text="notes.txt").inner_text()
    assert "File type must be" not in said and "image/jpeg" not in said, said  # no MIME list
    wanted = "只能附加这几类文件" if chinese(chat) else "only those can be attached"
    assert wanted in said, said
    expect(chat.locator("#attachments")).to_have_count(0)
    expect(chat.locator(USER_MESSAGES)).to_have_count(0)
    screenshot(chat, f"attach-text-file-{chat.evaluate('navigator.language')}")


def test_a_message_kept_back_puts_its_text_back_in_the_message_box(
    chat: Page, stack: Stack, tmp_path: Path
) -> None:
    """A PDF is read with its message (its pages share the message's budget): one that
    turns out damaged keeps the message back, and its text is really there to send again."""
    report = tmp_path / "report.pdf"
    report.write_bytes(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n")
    sent_before = len(stack.requests())
    chat.locator("#upload-button-input").set_input_files(str(report))
    expect(chat.locator("#attachments")).to_contain_text("report.pdf")
    chat.locator("#chat-input").fill("Summarise this report")
    chat.locator("#chat-submit").click()
    note = chat.locator(ANSWERS).last
    expect(note).to_contain_text("report.pdf")
    back = "您的文字已放回输入框" if chinese(chat) else "Your text is back in the message box"
    expect(note).to_contain_text(back)
    expect(chat.locator("#chat-input")).to_have_value("Summarise this report")
    send = "不带这些文件发送" if chinese(chat) else "Send without them"
    expect(chat.get_by_role("button", name=re.compile(send))).to_be_visible()
    assert len(stack.requests()) == sent_before  # the model saw nothing
    screenshot(chat, f"attach-text-kept-{chat.evaluate('navigator.language')}")


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_a_dragged_file_shows_where_to_drop_it(
    chromium: Browser, stack: Stack, viewport: ViewportSize
) -> None:
    for locale, words in (("en-US", "Drop images, PDFs, or videos here"), ("zh-CN", "拖放到这里")):
        context = functional_context(chromium, locale, viewport)
        page = context.new_page()
        page.goto(stack.ui_url)
        expect(page.locator("#chat-settings-open-modal")).to_be_visible()
        files = page.evaluate_handle(
            "() => { const d = new DataTransfer();"
            " d.items.add(new File(['x'], 'cat.png', {type: 'image/png'})); return d; }"
        )
        page.dispatch_event("#chat-input", "dragenter", {"dataTransfer": files})
        expect(page.locator("body")).to_have_class(re.compile("kimi-dragging"))
        zone = page.locator('div:has(> input[id="\\#upload-drop-input"])')
        content = zone.evaluate("z => getComputedStyle(z, '::after').content")
        assert words in content, content
        box = zone.bounding_box()
        assert box is not None and box["width"] > viewport["width"] * 0.8  # the chat area
        screenshot(page, f"drop-zone-{locale}-{viewport['width']}")
        page.dispatch_event("#chat-input", "drop", {"dataTransfer": files})
        expect(page.locator("body")).not_to_have_class(re.compile("kimi-dragging"))
        context.close()


def test_a_file_over_the_page_limit_is_named_and_the_text_waits(chat: Page, tmp_path: Path) -> None:
    """A file over Chainlit's max_size_mb (100 MB, .chainlit/config.toml) never leaves the
    page: one sentence in the chat's language names it and the limit, a photo attached with
    it stays, and the typed text waits in the message box, unsent."""
    big = tmp_path / "survey.mp4"
    with big.open("wb") as out:  # sparse: 101 MB long, nothing written
        out.truncate(101_000_000)
    chat.locator("#chat-input").fill("Compare these two")
    chat.locator("#upload-button-input").set_input_files([str(big), str(DATA / "rocket.jpg")])
    notice = chat.get_by_role("alert").filter(has_text="survey.mp4")
    expect(notice).to_be_visible()
    said = notice.inner_text()
    box = notice.bounding_box()  # drawn on screen, over the chat (public/style.css)
    assert box is not None and box["y"] + box["height"] <= DESKTOP["height"], box
    assert box["width"] < DESKTOP["width"], box
    if chinese(chat):
        assert said == "survey.mp4 未附加：它超过了应用可接受的 100 MB。", said
    else:
        assert (
            said == "survey.mp4 was not attached: it is larger than the 100 MB the app accepts."
        ), said
    expect(chat.locator('#attachments img[alt="rocket.jpg"]')).to_be_visible()  # kept
    expect(chat.locator("#attachments > *")).to_have_count(1)  # and only it
    expect(chat.locator("[data-sonner-toast]", has_text="larger than")).to_have_count(0)
    expect(chat.locator("#chat-input")).to_have_value("Compare these two")
    expect(chat.locator(USER_MESSAGES)).to_have_count(0)  # nothing was sent
    screenshot(chat, f"attach-over-page-limit-{chat.evaluate('navigator.language')}")


def test_a_dropped_file_over_the_page_limit_is_named_and_the_rest_attaches(chat: Page) -> None:
    chat.locator("#chat-input").fill("What changed?")
    files = chat.evaluate_handle(
        """async () => {
          const canvas = document.createElement("canvas");
          canvas.width = canvas.height = 16;
          const png = await new Promise((done) => canvas.toBlob(done, "image/png"));
          const d = new DataTransfer();
          d.items.add(new File([new Uint8Array(100_000_001)], "scan.tif"));
          d.items.add(new File([png], "dot.png", {type: "image/png"}));
          return d;
        }"""
    )
    chat.dispatch_event("#chat-input", "dragenter", {"dataTransfer": files})
    chat.dispatch_event("#chat-input", "drop", {"dataTransfer": files})
    expect(chat.get_by_role("alert")).to_contain_text("scan.tif")
    expect(chat.get_by_role("alert")).to_contain_text("100 MB")
    expect(chat.locator('#attachments img[alt="dot.png"]')).to_be_visible()
    expect(chat.locator("#attachments > *")).to_have_count(1)
    expect(chat.locator("body")).not_to_have_class(re.compile("kimi-dragging"))
    expect(chat.locator("#chat-input")).to_have_value("What changed?")
    expect(chat.locator(USER_MESSAGES)).to_have_count(0)
