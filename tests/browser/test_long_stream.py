"""A long reasoning in a real browser: it streams in blocks that stop changing, folds and
unfolds at once, survives Stop and a resume whole and in order, and is exported whole.

CI-sized (2,000 reasoning tokens at 200 tokens/s, the scripted server's ``long-think``
stream of numbered words: ``r0 r1 ...``, then ``a0 a1 ...``). The browser's speed is
measured by ``bench/bench_tab.py`` at full size (10,000 tokens); here only what stays
true on a loaded two-core machine is asserted: every word once and in order, markdown
rendered, a paragraph already shown is never rendered again (so an update costs the
same at any length), generous bounds on the lag at the end and on the longest task.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.browser.conftest import (
    ANSWERS,
    REASONING_STEP,
    REASONING_TEXT,
    UNDER_ANSWERS,
    copy_app,
    new_context,
    screenshot,
    wait_answer_done,
)
from tests.browser.test_persistence import PASSWORDS, App
from tests.browser.test_persistence import scripted as scripted  # the scripted server
from tests.fakes.kimi_server import LONG_END

pytestmark = [pytest.mark.browser, pytest.mark.serial]

REASONING_TOKENS, ANSWER_TOKENS = 2_000, 400
QUESTION = (
    f"Think at length #scenario=long-think #reasoning={REASONING_TOKENS} #answer={ANSWER_TOKENS}"
)
TITLE = f'{REASONING_STEP} button[id^="step-"]:not(#step-block)'
"""The reasoning step's own title (its blocks have hidden titles of their own)."""

WATCH = """
window.__longTasks = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) window.__longTasks.push(e.duration);
}).observe({ type: "longtask", buffered: true });
window.__endAt = null;
new MutationObserver(() => {
  if (window.__endAt === null && document.body.textContent.includes("(end of answer)")) {
    window.__endAt = Date.now();
  }
}).observe(document, { childList: true, subtree: true, characterData: true });
"""
"""Long Tasks, and when the answer's last words were first on the page (wall clock)."""

SENT_BACK = """
window.__liveSentBack = 0;
const PageSocket = window.WebSocket;
window.WebSocket = class extends PageSocket {
  send(data) {
    if (typeof data === "string" && data.includes('"kind":"live')) window.__liveSentBack += 1;
    super.send(data);
  }
};
"""
"""Counts the frames the page sends its server that carry live text back (Chainlit's page
forwards every window message it sees)."""


ABOVE_THE_BOTTOM = """
window.__aboveTheBottom = [];
const measure = () => {
  const last = [...document.querySelectorAll(".kimi-live")].at(-1);
  const view = last?.closest(".overflow-y-auto");
  if (view) {
    const room = parseFloat(view.lastElementChild.style.height || "0") || 0;
    const above = view.getBoundingClientRect().bottom - last.getBoundingClientRect().bottom;
    if (room === 0 && view.scrollHeight > view.clientHeight) window.__aboveTheBottom.push(above);
  }
  requestAnimationFrame(measure);
};
requestAnimationFrame(measure);
"""
"""At every frame where the messages fill the view (Chainlit's spacer under them is gone),
how far above the view's bottom the last live text ends (px)."""


def words(text: str, prefix: str) -> list[int]:
    """The numbers of the words ``{prefix}N`` in ``text``, in order."""
    return [int(n) for n in re.findall(rf"\b{prefix}(\d+)\b", text)]


def reasoning_text(page: Page) -> str:
    """All of the reasoning as shown, block after block (``textContent``: a block off
    screen, but for the last, is not laid out, public/style.css, so it has no ``innerText``)."""
    return "\n".join(page.locator(REASONING_TEXT).all_text_contents())


@pytest.fixture
def app(tmp_path: Path, scripted: str) -> Iterator[App]:
    """The app signed in (chats stored, so they resume), on SQLite."""
    copy_app(tmp_path)
    running = App(tmp_path, scripted, "", "sqlite")
    running.add_users()
    running.start()
    yield running
    running.stop()


def signed_in(chromium: Browser, app: App, *watches: str) -> tuple[BrowserContext, Page]:
    """Alice signed in, in a context that records Long Tasks, the end of the answer, live
    text sent back and what ``watches`` record (``bypass_csp``: the test's own scripts run
    in the page)."""
    context = new_context(chromium, bypass_csp=True)
    for script in (WATCH, SENT_BACK, *watches):
        context.add_init_script(script)
    page = context.new_page()
    page.goto(app.url)
    page.locator("#email").fill("alice")
    page.locator("#password").fill(PASSWORDS["alice"])
    page.locator('button[type="submit"]').click()
    expect(page.locator("#chat-settings-open-modal")).to_be_visible()
    return context, page


def at_least(page: Page, selector: str, count: int) -> None:
    """Wait until ``selector`` matches at least ``count`` elements."""
    page.wait_for_function(
        "([sel, n]) => document.querySelectorAll(sel).length >= n",
        arg=[selector, count],
        timeout=60_000,
    )


def mark_first_paragraph(page: Page) -> None:
    """Tag the reasoning's first rendered paragraph; a re-render would replace it."""
    page.evaluate(
        "(sel) => document.querySelector(sel + ' [role=article]').setAttribute('data-seen', '1')",
        REASONING_STEP,
    )


def first_paragraph_kept(page: Page) -> bool:
    return bool(page.evaluate("() => !!document.querySelector('[role=article][data-seen]')"))


def test_a_long_reasoning_streams_folds_resumes_and_exports_whole(
    chromium: Browser, app: App, scripted: str
) -> None:
    context, page = signed_in(chromium, app)
    page.locator("#chat-input").fill(QUESTION)
    page.locator("#chat-input").press("Enter")
    title = page.locator(TITLE)
    expect(title).to_have_attribute("aria-expanded", "true")  # open while it streams
    expect(page.locator(REASONING_TEXT).first).to_contain_text("r0 r1 r2")
    at_least(page, REASONING_TEXT, 3)
    mark_first_paragraph(page)  # of the first block, which is complete now

    # Mid-stream: fold, the stream goes on (more blocks come), unfold: all there at once.
    title.click()
    expect(title).to_have_attribute("aria-expanded", "false")
    expect(page.locator(REASONING_TEXT).first).to_be_hidden()
    before = page.locator(REASONING_TEXT).count()
    expect(page.locator(REASONING_TEXT)).not_to_have_count(before, timeout=60_000)
    title.click()
    expect(title).to_have_attribute("aria-expanded", "true")
    expect(page.locator(REASONING_TEXT).first).to_be_visible()
    screenshot(page, "long-reasoning-streaming")

    wait_answer_done(page)
    expect(title).to_have_attribute("aria-expanded", "false")  # folded when it ended
    assert first_paragraph_kept(page), "a paragraph already shown was rendered again"
    ended_at = page.evaluate("() => window.__endAt")
    sent = httpx.get(f"{scripted}/debug/sent").json()["sent"][-1]
    lag_s = ended_at / 1000 - sent["last"]
    longest = max(page.evaluate("() => window.__longTasks"), default=0.0)
    print(f"lag at the end {lag_s:.2f} s, longest task {longest:.0f} ms")  # bench: 1 s, 100 ms
    assert lag_s < 3.0 and longest < 1000  # bounds a loaded CI machine keeps

    title.click()
    shown = reasoning_text(page)
    assert words(shown, "r") == list(range(REASONING_TOKENS))  # each word once, in order
    assert "**" not in shown and page.locator(f"{REASONING_STEP} .font-bold").count() > 10
    answer = "\n".join(page.locator(ANSWERS).all_text_contents())
    assert words(answer, "a") == list(range(ANSWER_TOKENS)) and LONG_END in answer
    assert page.locator(f"{ANSWERS} pre").last.inner_text().strip().endswith("print('done')")
    context.close()

    # Resumed from the sidebar: folded, then open with every block, in order.
    context, page = signed_in(chromium, app)
    page.locator("#thread-history").get_by_text("Think at length").click()
    title = page.locator(TITLE)
    expect(title).to_have_attribute("aria-expanded", "false")
    title.click()
    # public/stream.js opens the resumed blocks one per frame: wait for the last word.
    expect(page.locator(REASONING_STEP)).to_contain_text(f"r{REASONING_TOKENS - 1}")
    assert words(reasoning_text(page), "r") == list(range(REASONING_TOKENS))
    screenshot(page, "long-reasoning-resumed")

    # The export holds the reasoning whole, every word once and in order (rendered as the
    # chat shows it: its Markdown is HTML there), and the answer's end.
    with page.expect_download() as download:
        page.locator(".command-buttons-container button", has_text="Export").click()
    exported = download.value.path().read_text(encoding="utf-8")
    text = html.unescape(re.sub(r"<[^>]+>", " ", exported))
    assert words(text, "r") == list(range(REASONING_TOKENS))
    assert words(text, "a") == list(range(ANSWER_TOKENS)) and LONG_END in text
    context.close()


SAMPLE = """
(reasoningText) => new Promise((done) => requestAnimationFrame(() => {
  const boxes = [...document.querySelectorAll(".kimi-live")];
  const last = boxes.at(-1);
  const scroller = last?.closest(".overflow-y-auto");
  let below = null;  // px of the live text's last line under the view's bottom edge
  if (last && scroller) {
    below = last.getBoundingClientRect().bottom - scroller.getBoundingClientRect().bottom;
  }
  const reasoning = [...document.querySelectorAll(reasoningText)].map((e) => e.textContent);
  done({
    live: boxes.map((box) => box.textContent),
    inAnswer: boxes.some((box) => box.closest('[data-step-type="assistant_message"]') !== null),
    reasoning: reasoning.join("\\n"),
    below,
    thread: location.pathname.startsWith("/thread/"),
  });
}))
"""
"""What the page shows at one frame: the live texts (public/live.js), whether one is in an
answer, the reasoning's text, and how far the last live text ends under the visible chat.
Taken in an animation frame, so after the scroll that live.js asked for at each change of
the text made before the sample was asked (it follows in the next frame): taken at any
moment, a fresh-clone run caught the text grown and not yet followed (2026-12-07)."""


def test_the_open_block_streams_as_raw_text_once_and_in_view(chromium: Browser, app: App) -> None:
    context, page = signed_in(chromium, app, ABOVE_THE_BOTTOM)
    page.locator("#chat-input").fill(QUESTION)
    page.locator("#chat-input").press("Enter")
    expect(page.locator("#stop-button")).to_be_visible()  # the turn is running: sample it
    samples = []
    while page.locator("#stop-button").count():
        samples.append(page.evaluate(SAMPLE, REASONING_TEXT))
        if len(samples) == 25:
            screenshot(page, "long-reasoning-live")
        time.sleep(0.2)
    wait_answer_done(page)
    live = [sample for sample in samples if sample["live"]]
    assert len(live) > 20, f"{len(live)} of {len(samples)} moments showed live text"
    # The chat was stored and Chainlit's page mounted again at /thread/<id>: it goes on live.
    assert any(sample["thread"] for sample in live)
    assert any("**" in text for sample in live for text in sample["live"])  # raw markdown
    assert any(sample["inAnswer"] for sample in live)  # the answer streams live too
    for sample in samples:  # every word once, in order, at every moment
        shown = words(sample["reasoning"], "r")
        assert shown == list(range(len(shown)))
    # The view follows the text (the person never scrolled): the live text's end in view,
    # and at every frame once the text fills the view, at the view's bottom, over the run's
    # loading dot at most (a new block is laid out from its first frame: no blank under it).
    placed = [s for s in live if s["below"] is not None]
    assert placed and all(s["below"] <= 60 for s in placed), placed
    above = page.evaluate("window.__aboveTheBottom")
    assert len(above) > 100 and max(above) <= 120, sorted(above)[-5:]
    assert page.evaluate("window.__liveSentBack") == 0  # kept in the page
    # Every block but the last of its run may be skipped off screen: its computed
    # content-visibility (public/style.css; the rule reads Chainlit's .step > div > #step-<id>).
    skipped = page.evaluate(
        """(sel) => [...document.querySelectorAll(sel)].map(
             (e) => getComputedStyle(e.closest('[id^="step-"]')).contentVisibility)""",
        REASONING_TEXT,
    )
    assert len(skipped) > 3 and skipped == ["auto"] * (len(skipped) - 1) + ["visible"], skipped
    expect(page.locator(".kimi-live")).to_have_count(0)  # each block ended drawn as markdown
    expect(page.locator("[data-kimi-live]")).to_have_count(0)
    assert "**" not in reasoning_text(page)
    context.close()


def test_stop_mid_long_reasoning_keeps_every_block_shown(chromium: Browser, app: App) -> None:
    context, page = signed_in(chromium, app)
    page.locator("#chat-input").fill(QUESTION.replace("2000", "6000"))
    page.locator("#chat-input").press("Enter")
    at_least(page, REASONING_TEXT, 3)
    page.locator("#stop-button").click()
    title = page.locator(TITLE)
    expect(title).to_have_text(re.compile(r"^\s*Thought for \d+\.\ds \(stopped\)\s*$"))
    expect(page.locator(UNDER_ANSWERS, has_text="Stopped while thinking")).to_be_visible()
    if title.get_attribute("aria-expanded") == "false":
        title.click()
    time.sleep(0.5)  # nothing more comes
    shown = words(reasoning_text(page), "r")
    assert len(shown) > 500 and shown == list(range(len(shown)))  # a prefix, whole, in order
    expect(page.locator(".kimi-live")).to_have_count(0)  # the open block ended drawn
    screenshot(page, "long-reasoning-stopped")
    context.close()
