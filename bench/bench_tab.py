"""A long answer in a real browser tab: does the page keep up? This app and Open WebUI side by side.

Starts the scripted Kimi-VL server (``python -m tests.fakes.kimi_server``, serving
Thinking and Instruct), this app in front of it (signed in, so chats are stored and
can be resumed) and, with ``--openwebui``, Open WebUI 0.12.4 against the same server
(``bench/openwebui.py``; it reads the same Kimi-VL markers). Debian's chromium
(headless, Playwright) opens each app; ``bench/tab_probe.js`` is installed before the
page's own scripts (a context with ``bypass_csp``) and records every animation frame,
every Long Task (PerformanceObserver ``longtask``: main-thread tasks over 50 ms),
Event Timing for clicks (from the click to the next paint), and the first frame in
which given words are on the page. Cases, streamed at 200 tokens/s by the scripted
server's ``long-*`` scenarios:

``open``     10,000 reasoning tokens then a 2,000-token markdown answer, the step open.
``folded``   the same, the step folded as soon as it shows.
``code``     a 10,000-token answer, one Python code block, no reasoning (this app's
             Instruct profile: a Thinking answer without markers streams as reasoning).
             The scripted code tokens are token-sized (``tests/fakes/kimi_server.py``,
             ``CODE_LINE``): 10,000 are about 34,000 characters.
``toggle``   the ``open`` stream; the step is clicked closed and open again at 50 % and
             90 % of the reasoning.
``resume``   (this app) the stored ``open`` chat opened from the sidebar, then its step.

Reported per case and app, from Enter to the answer's last words on screen: lag at the
end (the tab showed the last words, minus when the server sent them), Long Task total,
worst and count, frame gap p50/p99/max, the toggles; and the time to the first visible
words added to a direct call (httpx straight to the scripted server, the same short
stream, the request written as the app writes it), median of ``--pairs`` interleaved
rounds, for a reasoning (this app shows its words; Open WebUI shows a folded
"Thinking..." block, whose appearance is counted) and for an answer, three ways: when
the frame with the words reached the tab (chromium's network layer, from its NetLog,
``bench/netlog.py``: the tab's first write after Enter to that frame), when the page's
script got it (after whatever the page's main thread was doing), and on screen; and
through socket clients without a browser. ``--pin`` runs the first-words rounds with
chromium and this driver on one CPU and the servers on the others. Targets (project
brief): lag <= 1 s, no Long Task over 100 ms, frame gap p99 <= 50 ms, a toggle within
100 ms, a resumed step open within 1 s, first visible words <= 8 ms added.

Writes ``artifacts/bench/tab_<name>.md``/``.json`` and a PNG of the frame gaps over each
stream. Run from the repository root when the load average is low (2 cores here):
``.venv/bin/python -m bench.bench_tab [--cases open code] [--openwebui] [--tokens R A C]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import math
import os
import secrets
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import httpx
import psutil
from playwright.sync_api import Browser, Locator, Page, Playwright, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from backend.settings import Settings
from backend.store.core import open_store
from bench.harness import (
    CHROMIUM,
    CHROMIUM_ARGS,
    END,
    INSTRUCT,
    PACED_END,
    RATE,
    SHORT_ANSWER,
    SHORT_THINK,
    THINKING,
    Cores,
    DirectClient,
    Report,
    Tab,
    Workload,
    direct_first_words,
    new_page,
    percentile,
    pin_threads,
    pin_tree,
    running_stack,
    scripted_server,
    settle,
    split_cores,
    type_question,
    wait_mark,
)
from bench.netlog import CLOCK_SLACK_MS, NetLog

USER, PASSWORD = "bench", "bench-password-1"
TIMEOUT_MS = 300_000
CLICK_TIMEOUT_MS = 60_000
"""The longest a click waits for its target to stand still, in ms."""


@dataclass(frozen=True)
class Case:
    """One stream and what the tab does during it.

    Attributes:
        name: the case's name on the command line and in the table.
        question: what is typed (its tags choose the scripted stream).
        model: the served model asked (this app: its chat profile).
        step_open: the reasoning step's wanted state once it shows (clicked if it
            differs); None for a stream without reasoning.
        reasoning_s: how long the reasoning streams (for the toggle clicks).
        toggles: fractions of ``reasoning_s`` at which the step is clicked closed and open.
    """

    name: str
    question: str
    model: str = THINKING
    step_open: bool | None = True
    reasoning_s: float = 0.0
    toggles: tuple[float, ...] = ()


def think(reasoning: int, answer: int) -> str:
    """The question of a ``long-think`` stream of these sizes (tokens)."""
    sizes = f"#reasoning={reasoning} #answer={answer} #rate={RATE}"
    return f"Think it through. #scenario=long-think {sizes}"


def code(answer: int) -> str:
    """The question of a ``long-code`` stream of ``answer`` tokens."""
    return f"Write it. #scenario=long-code #answer={answer} #rate={RATE}"


def cases(
    reasoning: int = 10_000, answer: int = 2_000, code_tokens: int = 10_000
) -> dict[str, Case]:
    """The cases (module docstring) at these stream sizes."""
    seconds = reasoning / RATE
    return {
        "open": Case("open", think(reasoning, answer), reasoning_s=seconds),
        "folded": Case("folded", think(reasoning, answer), step_open=False, reasoning_s=seconds),
        "code": Case("code", code(code_tokens), INSTRUCT, step_open=None),
        "toggle": Case("toggle", think(reasoning, answer), reasoning_s=seconds, toggles=(0.5, 0.9)),
    }


class ChatApp(Protocol):
    """A chat web app as the benchmark drives it (this one, or Open WebUI)."""

    name: str
    url: str
    reasoning_first: str
    """A regex of the first thing a person sees of a short ``long-think`` reasoning."""

    def new_chat(self, page: Page, model: str) -> None:
        """Show an empty chat with ``model``, ready for a question."""

    def step(self, page: Page) -> Locator:
        """The reasoning step's toggle (its title) in the newest answer."""


def step_open(page: Page, app: ChatApp) -> bool:
    """Whether ``app``'s reasoning step is open now (both say it with ``aria-expanded``)."""
    return app.step(page).get_attribute("aria-expanded") == "true"


@dataclass
class KimiApp:
    """This app, signed in as :data:`USER`."""

    url: str
    name: str = "Kimi-VL Chat"
    reasoning_first: str = r"\br0\b"  # the step opens and shows the words

    def sign_in(self, page: Page) -> None:
        page.goto(self.url)
        page.locator("#email").fill(USER)
        page.locator("#password").fill(PASSWORD)
        page.locator('button[type="submit"]').click()
        page.locator("#chat-settings-open-modal").wait_for()

    def new_chat(self, page: Page, model: str) -> None:
        page.goto(self.url)
        page.locator("#chat-settings-open-modal").wait_for()
        wanted = "Kimi-VL Instruct" if model == INSTRUCT else "Kimi-VL Thinking"
        picker = page.locator("#mode-picker-trigger-model")  # ui/model_picker.py, the message box's
        if wanted not in picker.inner_text():
            picker.click()
            page.locator("#mode-picker-popover-model").get_by_text(wanted, exact=True).click()
            picker.filter(has_text=wanted).wait_for()

    def step(self, page: Page) -> Locator:
        # Its title, not one of its blocks' (ui/blocks.py names them "block"; hidden).
        return page.locator('[data-step-type="llm"] button[id^="step-"]:not(#step-block)').last


@dataclass
class OpenWebUIApp:
    """Open WebUI in a context signed in as its admin (``bench.openwebui.Peer``)."""

    url: str
    name: str = "Open WebUI 0.12.4"
    reasoning_first: str = r"Thinking\.\.\."  # a folded block; no words until unfolded

    def new_chat(self, page: Page, model: str) -> None:
        page.goto(self.url)
        page.locator("#chat-input").wait_for()

    def step(self, page: Page) -> Locator:
        return page.locator("#response-content-container button[aria-expanded]").last


@dataclass
class TabRun:
    """What the tab did during one stream, from Enter to the last words (ms unless ``_s``)."""

    app: str
    case: str
    lag_end_s: float
    long_total: float
    long_worst: float
    long_count: int
    gap_p50: float
    gap_p99: float
    gap_max: float
    toggles: list[float] = field(default_factory=list)
    """Each click on the step's title to its paint; ``math.inf``: it could not be clicked."""
    gaps: list[tuple[float, float]] = field(default_factory=list)
    """(seconds since Enter, gap in ms): the plot."""
    load: str = ""


QUIET_CPU_PERCENT = 15.0
"""The most the machine's CPUs may be busy (mean over one second) when a stream starts."""


def wait_quiet(limit_s: float = 30.0) -> float:
    """Wait until the CPUs are at most :data:`QUIET_CPU_PERCENT` busy over a second (the
    other app's tab, or its server, may still be working after its stream), at most
    ``limit_s`` seconds; the percent seen last (``psutil.cpu_percent``, all CPUs)."""
    deadline = time.monotonic() + limit_s
    while True:
        busy = float(psutil.cpu_percent(interval=1.0))
        if busy <= QUIET_CPU_PERCENT or time.monotonic() >= deadline:
            return busy


def load_average() -> str:
    """The 1-minute load average now, for the table."""
    return f"{os.getloadavg()[0]:.2f}"


def server_sent(server_root: str) -> dict[str, Any]:
    """The scripted server's send times of its latest stream (``/debug/sent``)."""
    sent: list[dict[str, Any]] = httpx.get(f"{server_root}/debug/sent").json()["sent"]
    return sent[-1]


def click_timing(page: Page, target: Locator, give_up: bool = False) -> float:
    """Click ``target``; the Event Timing duration of that click (click to next paint, ms).

    When ``target`` cannot be clicked within :data:`CLICK_TIMEOUT_MS` (Playwright clicks
    an element once it stands still): ``math.inf`` with ``give_up``; without, that raises.
    """
    before = page.evaluate("() => window.__probe.events.length")
    try:
        target.click(timeout=CLICK_TIMEOUT_MS)
    except PlaywrightTimeout:
        if not give_up:
            raise
        return math.inf
    page.wait_for_function(
        "(n) => window.__probe.events.slice(n).some(e => e[0] === 'click')",
        arg=before,
        timeout=TIMEOUT_MS,
    )
    events = page.evaluate("(n) => window.__probe.events.slice(n)", before)
    return float(max(duration for name, _, duration in events if name == "click"))


def toggle(page: Page, app: ChatApp) -> float:
    """Click the step's title; how long until that click was painted (ms), or ``math.inf``
    when it could not be clicked within :data:`CLICK_TIMEOUT_MS` (Playwright clicks an
    element once it stands still; Open WebUI's title moved for a whole minute as its
    reasoning streamed, 2026-12-05)."""
    was_open = step_open(page, app)
    duration = click_timing(page, app.step(page), give_up=True)
    if math.isinf(duration):
        return duration
    assert step_open(page, app) != was_open, f"{app.name}: the step did not toggle"
    return duration


def stream_once(page: Page, app: ChatApp, case: Case, server_root: str) -> TabRun:
    """Ask ``case``'s question in a fresh chat and measure the tab until the last words show."""
    app.new_chat(page, case.model)
    settle(page)
    busy = wait_quiet()
    load = f"{load_average()}, CPU {busy:.0f} %"
    type_question(page, case.question, {"end": END})
    sent_at = time.monotonic()
    toggles: list[float] = []
    if case.step_open is not None:
        app.step(page).wait_for(timeout=TIMEOUT_MS)
        if step_open(page, app) != case.step_open:
            app.step(page).click()
    for at in case.toggles:
        time.sleep(max(0.0, sent_at + at * case.reasoning_s - time.monotonic()))
        toggles += [toggle(page, app), toggle(page, app)]
    wait_mark(page, "end")
    time.sleep(0.5)  # the frames after the end
    dump = page.evaluate("() => window.__probe.dump()")
    return summarize(app.name, case.name, dump, server_sent(server_root), toggles, load)


def summarize(
    app: str,
    case: str,
    dump: dict[str, Any],
    sent: dict[str, Any],
    toggles: list[float],
    load: str,
) -> TabRun:
    """The figures of one stream from the probe's record and the server's send times."""
    start, end = dump["sentAt"], dump["marks"]["end"]
    frames = [t for t in dump["frames"] if start <= t <= end]
    pairs = list(itertools.pairwise(frames))
    gaps = [b - a for a, b in pairs]
    tasks = [d for begin, d in dump["longTasks"] if start <= begin + d and begin <= end]
    return TabRun(
        app=app,
        case=case,
        lag_end_s=(end - sent["last"] * 1000) / 1000,
        long_total=sum(tasks),
        long_worst=max(tasks, default=0.0),
        long_count=len(tasks),
        gap_p50=percentile(gaps, 50),
        gap_p99=percentile(gaps, 99),
        gap_max=max(gaps, default=0.0),
        toggles=toggles,
        gaps=[((b - start) / 1000, b - a) for a, b in pairs],
        load=load,
    )


def resume_once(page: Page, app: KimiApp, last_word: str) -> dict[str, float]:
    """Open the newest stored chat from the sidebar, then its step; times in ms.

    ``shown``: the click on the chat to its step's title on screen; ``opened``: the
    click on the title to its paint (Event Timing); ``last_word``: that click to
    the step's last reasoning word on screen.
    """
    app.new_chat(page, THINKING)
    page.evaluate("(p) => window.__probe.watch(p)", {"step": "Thought for", "last": last_word})
    clicked = page.evaluate("() => performance.timeOrigin + performance.now()")
    page.locator("#thread-history a").first.click()
    wait_mark(page, "step")
    shown = page.evaluate("() => window.__probe.marks.step") - clicked
    opened_at = page.evaluate("() => performance.timeOrigin + performance.now()")
    opened = click_timing(page, app.step(page))
    wait_mark(page, "last")
    last = page.evaluate("() => window.__probe.marks.last") - opened_at
    return {"shown": shown, "opened": opened, "last_word": last}


class Seen(NamedTuple):
    """One round's seconds to the first visible words: at the tab's network layer
    (chromium's NetLog; a socket client's arrival in the socket rounds), at the page's
    script, and on screen; a direct call has its one time in all three; None: not timed
    that way."""

    network: float
    script: float | None = None
    screen: float | None = None


@dataclass(frozen=True)
class TabWords:
    """One tab round as the probe saw it, page clock (Unix ms): Enter, the first words'
    message event, and their paint; ``count``: that message was the ``count``-th on the
    socket of ``socket_url`` since it opened (how :meth:`seen` finds its frame in the
    NetLog); ``origin``: the app's URL."""

    origin: str
    enter_ms: float
    script_ms: float
    screen_ms: float
    socket_url: str
    count: int

    def seen(self, log: NetLog) -> Seen:
        """The round's :class:`Seen`: from the tab's first write after Enter (the NetLog's:
        this app's question frame, Open WebUI's first POST) to the words' frame reaching
        the network layer, and to its message event; Enter to paint.

        Raises:
            LookupError: the frames are not in ``log`` (see :class:`bench.netlog.NetLog`),
                or the frame found is not between the question and the page's event (a
                count that does not match the log's).
        """
        left = log.first_write(self.origin, self.enter_ms)
        arrived = log.nth_message(self.socket_url, self.enter_ms, self.count)
        if not left <= arrived <= self.script_ms + CLOCK_SLACK_MS:
            raise LookupError(f"the words' frame at {arrived}: not between {left} and the script")
        return Seen(
            (arrived - left) / 1000,
            (self.script_ms - left) / 1000,
            (self.screen_ms - self.enter_ms) / 1000,
        )


def tab_first_words(
    page: Page, app: ChatApp, text: str, words: str, shown: str, model: str
) -> TabWords:
    """Ask ``text`` (a short stream) in a fresh chat; the probe's marks of the first
    ``words`` (a regex) reaching the page's script and of ``shown`` (a regex) on screen."""
    app.new_chat(page, model)
    settle(page)
    type_question(page, text, {"words": words, "shown": shown, "end": END})
    wait_mark(page, "end")
    dump = page.evaluate("() => window.__probe.dump()")
    return TabWords(
        app.url,
        dump["sentAt"],
        dump["socketMarks"]["words"],
        dump["marks"]["shown"],
        dump["socketUrls"]["words"],
        dump["socketCounts"]["words"],
    )


Sides = dict[str, list[Seen]]
"""Per side (direct, or an app's name): each round's :class:`Seen`."""


def first_words(
    apps: list[tuple[Page, ChatApp]], base_url: str, pairs: int
) -> dict[str, dict[str, list[Seen | TabWords]]]:
    """Interleaved rounds (direct, then each app) of the short reasoning and the short
    answer, ``pairs`` times after one warm-up round; the tabs' rounds as the probe saw
    them (:meth:`TabWords.seen` times them once the browser's NetLog is written)."""
    out: dict[str, dict[str, list[Seen | TabWords]]] = {"reasoning": {}, "answer": {}}
    with httpx.Client(timeout=60) as http:  # made once: a new client's TLS set-up is ~0.2 s
        for i in range(pairs + 1):
            for stream, text in (("reasoning", SHORT_THINK), ("answer", SHORT_ANSWER)):
                model = THINKING if stream == "reasoning" else INSTRUCT
                direct = direct_first_words(http, base_url, text, model)
                seen: dict[str, Seen | TabWords] = {"direct": Seen(direct, direct, direct)}
                for page, app in apps:
                    words = r"\br0\b" if stream == "reasoning" else r"\ba0\b"
                    shown = app.reasoning_first if stream == "reasoning" else words
                    seen[app.name] = tab_first_words(page, app, text, words, shown, model)
                if i:  # the first round warms up
                    for side, rounds in seen.items():
                        out[stream].setdefault(side, []).append(rounds)
    return out


def playwright_driver() -> int:
    """The pid of Playwright's driver (the node process this one started; the browsers it
    launches run under it).

    Raises:
        LookupError: no driver running under this process.
    """
    for child in psutil.Process().children():
        with contextlib.suppress(psutil.Error):  # a child that has ended meanwhile
            if "run-driver" in child.cmdline():
                return int(child.pid)
    raise LookupError("no Playwright driver under this process")


def first_words_logged(
    pw: Playwright,
    args: argparse.Namespace,
    base_url: str,
    ours: KimiApp,
    peer: Any | None,
    cores: Cores | None,
) -> dict[str, Sides]:
    """:func:`first_words` in a browser of its own that writes chromium's NetLog, each tab
    round then timed from it. With ``cores``, these rounds and the socket rounds after them
    run with chromium and this driver on the client's CPUs and the servers on theirs
    (:func:`split_cores`)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "netlog.json"
        if cores:
            client, servers = cores
            pin_tree(os.getpid(), servers)  # the servers (and Playwright's driver, until below)
        browser = pw.chromium.launch(
            executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, f"--log-net-log={path}"]
        )
        if cores:
            pin_tree(playwright_driver(), client)  # chromium is under it
            pin_threads(os.getpid(), client)
        rounds = first_words(open_apps(browser, args, ours, peer), base_url, args.pairs)
        browser.close()
        log = NetLog.load(path)
    return {
        stream: {
            side: [r if isinstance(r, Seen) else r.seen(log) for r in seen]
            for side, seen in sides.items()
        }
        for stream, sides in rounds.items()
    }


async def socket_first_words(
    base_url: str, ui_url: str, peer: Any | None, pairs: int, sign_in: bool
) -> dict[str, Sides]:
    """Interleaved rounds of the short reasoning (this app and direct) and the short answer
    (with Open WebUI too) through socket clients, as the project's load benchmarks measure
    (no browser): straight to the server (``bench.harness.DirectClient``), this app
    (``bench.harness.Tab``, a fresh session each) and Open WebUI (``peer``:
    ``bench.openwebui.OpenWebUITab``, a fresh chat each); seconds to the first visible
    words (``Timing.words_s``: a marker, or the step opening alone, is not a word), per
    stream; Open WebUI's tab client times its first text (``first_s``), which for an
    Instruct answer is its first words. Open WebUI shows no reasoning words until its block
    is unfolded, so it has no reasoning side here."""
    streams = {
        "reasoning (socket clients)": Workload(SHORT_THINK, 60, 0.1, PACED_END),
        "answer (socket clients)": Workload(SHORT_ANSWER, 20, 0.1, PACED_END, model=INSTRUCT),
    }
    out: dict[str, Sides] = {name: {} for name in streams}
    async with httpx.AsyncClient(timeout=120) as http:
        cookies: dict[str, str] = {}
        if sign_in:
            form = {"username": USER, "password": PASSWORD}
            answer = await http.post(f"{ui_url}/login", data=form, headers={"Origin": ui_url})
            answer.raise_for_status()
            cookies = dict(answer.cookies.items())
        direct = DirectClient(base_url)
        try:
            for i, (name, work) in itertools.product(range(pairs + 1), streams.items()):
                seen = {"direct": (await direct.ask(work)).words_s}
                tab = Tab(ui_url, http, cookies=dict(cookies))
                await tab.open()
                try:
                    asked = await tab.ask(work.text, marker=work.end, model=work.model)
                    seen["Kimi-VL Chat"] = asked.words_s
                finally:
                    await tab.close()
                if peer is not None and work.model == INSTRUCT:
                    from bench.openwebui import OpenWebUITab

                    owui = OpenWebUITab(peer, http)
                    await owui.open()
                    try:
                        seen["Open WebUI 0.12.4"] = (await owui.ask(work.text, work.end)).first_s
                    finally:
                        await owui.close()
                if i:  # the first round warms up
                    for side, seconds in seen.items():
                        assert seconds is not None, f"{side}: no visible words in {name}"
                        out[name].setdefault(side, []).append(Seen(seconds))
        finally:
            await direct.aclose()
    return out


def add_user(data_dir: Path) -> None:
    """The store in ``data_dir`` with the benchmark's user (sign-in on: chats are stored)."""
    store, _ = open_store(Settings(data_dir=str(data_dir), database_url=""))

    async def add() -> None:
        await store.users.add(USER, PASSWORD)
        await store.close()

    asyncio.run(add())


@contextmanager
def our_app(data_dir: Path, base_url: str, sign_in: bool = True) -> Iterator[str]:
    """This app in front of ``base_url``, its data in ``data_dir``, with sign-in (chats are
    stored) or open (nothing stored); yields its URL."""
    if sign_in:
        add_user(data_dir)
    env = {
        "KIMI_DATA_DIR": str(data_dir),
        "KIMI_DATABASE_URL": "",
        "KIMI_MODEL": THINKING,
        "CHAINLIT_AUTH_SECRET": secrets.token_urlsafe(48),
    }
    with running_stack(env, server_url=base_url) as stack:
        yield stack.ui_url


def fmt(value: float, digits: int = 0) -> str:
    """A number for the table."""
    return f"{value:,.{digits}f}"


def json_run(run: TabRun) -> dict[str, Any]:
    """``run`` for the results file: without the plot's gaps, a click that could not be
    made as null (JSON has no infinity)."""
    kept = {k: v for k, v in asdict(run).items() if k != "gaps"}
    kept["toggles"] = [None if math.isinf(t) else t for t in run.toggles]
    return kept


def fmt_click(ms: float) -> str:
    """A toggle's click-to-paint time for the table; a click that could not be made says so."""
    return f"not clickable in {CLICK_TIMEOUT_MS // 1000} s" if math.isinf(ms) else f"{ms:,.0f} ms"


def runs_table(runs: list[TabRun]) -> list[str]:
    """The markdown rows of the streams."""
    lines = [
        "| case | app | lag at end | Long Tasks total / worst / count | frame gap p50 / p99 / max"
        " | toggles (click to paint) | load, CPUs busy before |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        toggles = " / ".join(fmt_click(t) for t in r.toggles) if r.toggles else ""
        lines.append(
            f"| {r.case} | {r.app} | {r.lag_end_s:.2f} s | {fmt(r.long_total)} / "
            f"{fmt(r.long_worst)} ms / {r.long_count} | {fmt(r.gap_p50, 1)} / "
            f"{fmt(r.gap_p99, 1)} / {fmt(r.gap_max, 1)} ms | {toggles} | {r.load} |"
        )
    return lines


def words_table(words: dict[str, Sides]) -> list[str]:
    """The markdown rows of the first-words rounds: medians, and added to direct's."""
    lines = [
        "| first visible | side | reached the tab (its network layer, question sent to frame)"
        " | reached the page's script (question sent to message event)"
        " | on screen (Enter to paint) |",
        "|---|---|---|---|---|",
    ]
    for stream, sides in words.items():
        if not sides:
            continue
        direct = statistics.median(s.network for s in sides["direct"])
        for side, rounds in sides.items():
            if side == "direct":
                lines.append(f"| {stream} | direct | {direct * 1000:.1f} ms | | |")
                continue
            cells = []
            for column in zip(*rounds, strict=True):
                times = [t for t in column if t is not None]
                median = statistics.median(times) if times else None
                cells.append(
                    "" if median is None
                    else f"{median * 1000:.1f} ms ({(median - direct) * 1000:+.1f})"
                )  # fmt: skip
            lines.append(f"| {stream} | {side} | {' | '.join(cells)} |")
    return lines


def summary(runs: list[TabRun], words: dict[str, Sides], resume: dict[str, float]) -> list[str]:
    """The results' tables and lines: streams, first words, resume."""
    parts = ["\n".join(runs_table(runs))]
    if any(words.values()):
        parts.append("\n".join(words_table(words)))
    if resume:
        parts.append(
            f"Resume ({THINKING}, the stored `open` chat): the chat clicked to its step "
            f"shown {resume['shown']:.0f} ms; the step clicked open to painted "
            f"{resume['opened']:.0f} ms, to its last reasoning word {resume['last_word']:.0f} ms."
        )
    return parts


def plot(runs: list[TabRun], path: Path) -> None:
    """Frame gaps over each stream, one panel per case (requirements-bench.txt); none
    without streams."""
    if not runs:
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(dict.fromkeys(r.case for r in runs))
    fig, axes = plt.subplots(len(names), 1, figsize=(10, 2.6 * len(names)), squeeze=False)
    for ax, name in zip(axes[:, 0], names, strict=True):
        for r in (r for r in runs if r.case == name):
            xs = [x for x, _ in r.gaps]
            ys = [y for _, y in r.gaps]
            ax.plot(xs, ys, linewidth=0.7, label=r.app)
        ax.axhline(50, color="grey", linestyle=":", linewidth=0.8)
        ax.set_yscale("log")
        ax.set_ylabel("frame gap (ms)")
        ax.set_title(name, fontsize=9)
        ax.legend(fontsize=8)
    axes[-1, 0].set_xlabel("seconds since Enter")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def open_apps(
    browser: Browser, args: argparse.Namespace, ours: KimiApp, peer: Any | None
) -> list[tuple[Page, ChatApp]]:
    """A page of this app (signed in with ``--sign-in``) and, with a ``peer``, one of
    Open WebUI in ``browser``."""
    page = new_page(browser)
    if args.sign_in:
        ours.sign_in(page)
    apps: list[tuple[Page, ChatApp]] = [(page, ours)]
    if peer is not None:
        apps.append((new_page(browser, peer.storage_state()), OpenWebUIApp(peer.url)))
    return apps


def blank_others(apps: list[tuple[Page, ChatApp]], measured: Page) -> None:
    """Send every page but ``measured`` to ``about:blank``: the other app's last long chat
    (and whatever its page still animates) renders nothing while this one is measured.
    Each case's ``new_chat`` loads its app again."""
    for page, _app in apps:
        if page is not measured and page.url != "about:blank":
            page.goto("about:blank")


def in_browser(
    args: argparse.Namespace, base_url: str, ours: KimiApp, peer: Any | None, cores: Cores | None
) -> tuple[list[TabRun], dict[str, Sides], dict[str, float]]:
    """The streams, the resume and the first-words rounds in chromium (those on ``cores``:
    :func:`first_words_logged`)."""
    server_root = base_url.removesuffix("/v1")
    runs: list[TabRun] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        apps = open_apps(browser, args, ours, peer)
        for app_page, app in apps:  # a warm-up stream each
            tab_first_words(app_page, app, SHORT_THINK, r"\br0\b", app.reasoning_first, THINKING)
        chosen = [cases(*args.tokens)[name] for name in args.cases]
        for case in chosen:
            for app_page, app in apps:
                blank_others(apps, app_page)
                run = stream_once(app_page, app, case, server_root)
                print(runs_table([run])[-1], flush=True)
                runs.append(run)
        last = rf"\br{args.tokens[0] - 1}\b"
        resumed = args.resume and args.sign_in and any(c.name == "open" for c in chosen)
        resume: dict[str, float] = {}
        if resumed:
            blank_others(apps, apps[0][0])
            resume = resume_once(apps[0][0], ours, last)
        browser.close()
        words = first_words_logged(pw, args, base_url, ours, peer, cores) if args.pairs else {}
    return runs, words, resume


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", nargs="*", default=list(cases()), choices=list(cases()))
    p.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--sign-in", action=argparse.BooleanOptionalAction, default=True,
        help="this app with sign-in (chats stored: resume) or open",
    )  # fmt: skip
    p.add_argument("--pairs", type=int, default=16, help="first-words rounds (0: none)")
    p.add_argument(
        "--pin", action="store_true",
        help="first-words rounds: chromium and this driver on one CPU, the servers on the rest",
    )  # fmt: skip
    p.add_argument("--openwebui", action="store_true", help="also Open WebUI (bench/openwebui.py)")
    p.add_argument("--name", default="long_stream", help="results file: tab_<name>")
    p.add_argument(
        "--tokens", nargs=3, type=int, default=[10_000, 2_000, 10_000],
        metavar=("REASONING", "ANSWER", "CODE"), help="stream sizes (default 10000 2000 10000)",
    )  # fmt: skip
    args = p.parse_args()
    cores = split_cores() if args.pin else None
    report = Report("A long answer in a tab", f"tab_{args.name}")
    with ExitStack() as exits:
        base_url = exits.enter_context(scripted_server([THINKING, INSTRUCT]))
        data_dir = Path(exits.enter_context(tempfile.TemporaryDirectory()))
        ours = KimiApp(exits.enter_context(our_app(data_dir, base_url, args.sign_in)))
        peer = None
        if args.openwebui:
            from bench.openwebui import running_openwebui

            peer = exits.enter_context(running_openwebui(base_url))
        runs, words, resume = in_browser(args, base_url, ours, peer, cores)
        if args.pairs:  # after the browser: Playwright's sync API holds an event loop
            socket = socket_first_words(base_url, ours.url, peer, args.pairs, args.sign_in)
            words.update(asyncio.run(socket))
    if cores:
        client, servers = cores
        report.add(
            f"First-words rounds (`--pin`): chromium and the driver on CPU {sorted(client)}, "
            f"the servers (scripted, apps) on CPU(s) {sorted(servers)}."
        )
    report.add(*summary(runs, words, resume))
    kept = [json_run(r) for r in runs]
    md = report.finish({"sizes": args.tokens, "runs": kept, "first_words": words,
                        "resume": resume})  # fmt: skip
    plot(runs, md.with_suffix(".png"))


if __name__ == "__main__":
    main()
