"""A room that presses Enter at once: N fresh tabs connect, then all ask in the same instant.

The steady load (``bench/bench_load.py sweep``) starts its chats a fraction of an
answer apart, so N answers are always streaming. This is the other load a demo
room makes: everyone opens the page, then everyone presses Enter together. Each
round, per side and in an order that rotates from round to round:

``direct``
    N requests at once straight to the scripted server (httpx).
``app``
    N fresh tabs of the app (Chainlit's socket.io protocol, as
    :class:`bench.harness.Tab`) connect together and each runs ``on_chat_start``;
    then all N send their first question in the same event-loop tick.
``Open WebUI``
    The same with N tabs of Open WebUI 0.12.4 (:class:`bench.openwebui.OpenWebUITab`),
    each signed in as a user of its own (as N people would be; users are made
    before the round, outside its CPU).

Reported per level: added time to first visible words p50/p95 (a side's
percentile minus the direct one's), tokens/s relayed per chat as a share of
direct, and each UI's process CPU per chat: a fresh tab through one answer of
``--tokens`` pieces (connect, chat start, the question, the answer, the close), the
process's user + system seconds over the round divided by N, both UIs measured
in the same run. With ``--photo`` each app tab also attaches a 1.5 MB photo,
uploaded as the browser does when it is attached, ``--think-s`` before Enter; with
``--kinds text photo`` each level runs both, round by round, and a second table gives the
app's CPU per chat with a photo against without (issue 53's target: at most 1.3x, with
``--tokens 512``). Open WebUI's tabs
attach no photo: it runs only in the text rounds. With ``--profile``, py-spy records the
app meanwhile and the stages of a chat are summed (:mod:`bench.pyspy`). With
``--spread-ms`` the N questions go evenly over that span instead of in one tick, alike
for every side and kind: a photo's larger request reaches the server later than a text
one, so in one tick the text chats' answers stream in step and the photo chats' do
not, which costs the app more per chat whatever the chat carries (docs/benchmarks.md,
"Photo against text").

Before the bursts, the first question's CPU before its request reaches the server:
after ``--first-asks`` questions asked together to warm the process, one fresh tab
at a time asks a question the scripted server answers 1.5 s after it has read it
(scenario ``queued``: no status, no header, no token before); the app's CPU (every
thread, ``/proc/<pid>/task/*/schedstat``, nanoseconds) over the 0.3 s after Enter,
less as long with no question just before, the median over ``--first-asks`` tabs
(each printed). By then the request is with the server and the app only waits for
the response to start (its notice of a slow start comes at 3 s), so what is counted
is the question's work before its request is with the server.

Then, unless ``--no-steady``, the steady load at the same levels on the same app
(:func:`bench.bench_load.sweep_level`, as many pairs as chats), printed beside it.

Run from the repository root (Open WebUI installed: ``python -m bench.openwebui install``)::

    .venv/bin/python -m bench.bench_burst                       # 8/32/64, 3 rounds, both UIs
    .venv/bin/python -m bench.bench_burst --levels 64 --sides app --rounds 2   # a quick look
    .venv/bin/python -m bench.bench_burst --photo --sides app   # with a photo each
    .venv/bin/python -m bench.bench_burst --levels 16 --kinds text photo --tokens 512 \
        --profile --no-steady

Several app processes behind HAProxy: start them as ``bench/bench_load.py``'s
docstring says, then ``--app-url http://127.0.0.1:8300 --base-url ...``. Writes
``artifacts/bench/<name>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import statistics
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

from backend.client import KEEPALIVE_EXPIRY_S
from bench.bench_load import LevelResult, sweep_level, sweep_table
from bench.harness import (
    PACED,
    PACED_512,
    RESULTS,
    DirectClient,
    Report,
    Sampler,
    Target,
    Timing,
    Workload,
    add_target_options,
    cpu_s,
    measured_app,
    percentile,
    pin_threads,
    question,
    rotated,
    split_cores,
    tok_s,
)
from bench.media import make_photo
from bench.openwebui import VERSION, OpenWebUITab, Peer, running_openwebui
from bench.pyspy import recording, stage_table

APP, PEER, DIRECT = "app", f"Open WebUI {VERSION}", "direct"
ANSWERS = {PACED.tokens: PACED, PACED_512.tokens: PACED_512}
"""The scripted answers ``--tokens`` picks, by their pieces."""

QUEUED = question("queued")
"""The question of the scripted ``queued`` answer: the server starts its response 1.5 s
after the request."""


def threads_cpu_s(pid: int) -> float:
    """CPU seconds the live threads of ``pid`` have used, to the nanosecond (the first
    field of each ``/proc/<pid>/task/<tid>/schedstat``; psutil's figures are in ticks of
    10 ms, too coarse for a few milliseconds)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
            continue
    return total / 1e9


Closer = Callable[[], Awaitable[None]]
"""Closes a tab (its socket goes, as when the browser tab closes)."""
Ask = Callable[[], Awaitable[Timing]]
"""An open tab's question: send it, wait for the whole answer."""
Opener = Callable[[httpx.AsyncClient, int, bytes | None, float], Awaitable[tuple[Ask, Closer]]]
"""``(http, tab number, photo or None, think_s)``: a fresh tab, open (its photo attached
``think_s`` before): its :data:`Ask` and how to close it."""


@dataclass
class Side:
    """One UI under the burst: how to open a tab, whose processes' CPU is its."""

    name: str
    pids: list[int]
    open: Opener

    def cpu_s(self) -> float:
        """The CPU seconds the side's processes have used so far, summed."""
        return sum(cpu_s(pid) for pid in self.pids)


@dataclass
class Round:
    """One side's burst: its measured asks and the CPU its processes used meanwhile."""

    side: str
    timings: list[Timing]
    cpu_s: float


async def burst(
    side: Side,
    http: httpx.AsyncClient,
    n: int,
    photo: bytes | None,
    think_s: float,
    spread_s: float = 0.0,
) -> Round:
    """``n`` tabs open together; once all are open, all ask, tab ``i`` of those open
    ``i * spread_s / n`` seconds after the first (0: all in the same tick); all close."""
    cpu0 = side.cpu_s()
    opened = await asyncio.gather(
        *(side.open(http, i, photo, think_s) for i in range(n)), return_exceptions=True
    )
    tabs = [t for t in opened if not isinstance(t, BaseException)]

    async def ask_after(ask: Ask, delay_s: float) -> Timing:
        await asyncio.sleep(delay_s)
        return await ask()

    asks = (ask_after(ask, i * spread_s / n) for i, (ask, _) in enumerate(tabs))
    try:
        answers = await asyncio.gather(*asks, return_exceptions=True)
    finally:
        await asyncio.gather(*(close() for _, close in tabs), return_exceptions=True)
    timings = [Timing.failed(t) if isinstance(t, BaseException) else t for t in answers]
    timings += [Timing.failed(t) for t in opened if isinstance(t, BaseException)]
    return Round(side.name, timings, side.cpu_s() - cpu0)


def app_side(target: Target, work: Workload) -> Side:
    """The app: a fresh :class:`bench.harness.Tab` per ask of ``work``."""

    async def open_tab(
        http: httpx.AsyncClient, _: int, photo: bytes | None, think_s: float
    ) -> tuple[Ask, Closer]:
        tab = target.tab(http)
        await tab.open()
        files = [await tab.upload(photo)] if photo is not None else []
        if files:
            await asyncio.sleep(think_s)
        return lambda: tab.ask(work.text, files, marker=work.end), tab.close

    return Side(APP, target.pids, open_tab)


def peer_side(peer: Peer, tokens: list[str], work: Workload) -> Side:
    """Open WebUI: a fresh :class:`bench.openwebui.OpenWebUITab` per ask of ``work``, as
    user ``i``."""

    async def open_tab(
        http: httpx.AsyncClient, i: int, _: bytes | None, __: float
    ) -> tuple[Ask, Closer]:
        tab = OpenWebUITab(peer, http, token=tokens[i])
        await tab.open()
        return lambda: tab.ask(work.text, work.end), tab.close

    return Side(PEER, [peer.pid], open_tab)


def direct_side(direct: DirectClient, work: Workload) -> Side:
    """Straight to the server: no tab; ``work``'s request goes at the round's instant."""

    async def nothing() -> None:
        return None

    async def open_tab(
        _: httpx.AsyncClient, __: int, photo: bytes | None, ___: float
    ) -> tuple[Ask, Closer]:
        return lambda: direct.ask(work, photo), nothing

    return Side(DIRECT, [], open_tab)


@dataclass
class Level:
    """One level's rounds, per side: every measured ask and the CPU per chat."""

    chats: int
    photo: bool
    rounds: dict[str, list[Round]] = field(default_factory=dict)
    load_avg: float = math.nan
    """The machine's 1-minute load average at the end of the level (2 cores here)."""

    def timings(self, side: str) -> list[Timing]:
        """Every ask of ``side`` in this level."""
        return [t for r in self.rounds.get(side, []) for t in r.timings]

    def first_ms(self, side: str, q: float) -> float:
        """The ``q``-th percentile of ``side``'s time to first visible words (ms)."""
        return percentile([t.first_s * 1000 for t in self.timings(side) if not t.error], q)

    def added_ms(self, side: str, q: float) -> float:
        """``side``'s percentile less the direct one's (ms)."""
        return self.first_ms(side, q) - self.first_ms(DIRECT, q)

    def relayed_pct(self, side: str) -> float:
        """Tokens/s per chat through ``side`` as a share of direct (%)."""
        return tok_s(self.timings(side)) / tok_s(self.timings(DIRECT)) * 100

    def cpu_ms_per_chat(self, side: str) -> float:
        """``side``'s process CPU per chat (ms): a fresh tab through one answer."""
        rounds = self.rounds.get(side, [])
        chats = sum(len(r.timings) for r in rounds)
        return sum(r.cpu_s for r in rounds) / chats * 1000 if chats else math.nan

    def faults(self, side: str) -> str:
        """``errors / incomplete`` asks of ``side``."""
        timings = self.timings(side)
        errors = sum(bool(t.error) for t in timings)
        return f"{errors} / {sum(not t.complete and not t.error for t in timings)}"


async def run_round(
    level: Level, sides: list[Side], http: httpx.AsyncClient, photo: bytes | None, args: Any, r: int
) -> None:
    """Round ``r`` of ``level``: a burst of ``level.chats`` per side, the sides' order
    rotated by ``r``."""
    for side in rotated(sides, r):
        done = await burst(side, http, level.chats, photo, args.think_s, args.spread_ms / 1000)
        level.rounds.setdefault(side.name, []).append(done)
        await asyncio.sleep(args.pause_s)  # the last round's closed tabs settle


def _cells(level: Level, side: str) -> tuple[str, str, str, str]:
    """``side``'s added p50 / p95, relayed share, CPU per chat and faults ("-": not run)."""
    if not level.rounds.get(side):
        return "-", "-", "-", "-"
    added = f"{level.added_ms(side, 50):+.0f} / {level.added_ms(side, 95):+.0f}"
    relayed, cpu = f"{level.relayed_pct(side):.1f}%", f"{level.cpu_ms_per_chat(side):.0f}"
    return added, relayed, cpu, level.faults(side)


def burst_table(levels: list[Level]) -> str:
    """The burst, both UIs side by side, as a Markdown table."""
    lines = [
        f"| chats | photo | asks per side | {APP}: added p50 / p95 (ms) | {PEER}: added p50 / p95 "
        f"(ms) | direct first words p50 (ms) | relayed {APP} / {PEER} | CPU per chat {APP} / "
        f"{PEER} (ms) | errors / incomplete {APP} / {PEER} | load avg |",
        "| ---: | :---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for lv in levels:
        ours, peer = _cells(lv, APP), _cells(lv, PEER)
        lines.append(
            f"| {lv.chats} | {'yes' if lv.photo else 'no'} | {len(lv.timings(APP))} "
            f"| {ours[0]} | {peer[0]} | {lv.first_ms(DIRECT, 50):.0f} | {ours[1]} / {peer[1]} "
            f"| {ours[2]} / {peer[2]} | {ours[3]} / {peer[3]} | {lv.load_avg:.1f} |"
        )
    return "\n".join(lines)


PHOTO_TO_TEXT_TARGET = 1.3
"""Issue 53: the app's CPU per chat with a 1.5 MB photo at most this many times a text chat's."""


def photo_vs_text_table(levels: list[Level]) -> str:
    """The app's CPU per chat with a photo against without, per number of chats that ran
    both (and Open WebUI's text chat beside it), as a Markdown table."""
    lines = [
        f"| chats | {APP} text (ms) | {APP} photo (ms) | photo / text | target <= "
        f"{PHOTO_TO_TEXT_TARGET}x | {PEER} text (ms) |",
        "| ---: | ---: | ---: | ---: | :---: | ---: |",
    ]
    for chats in sorted({lv.chats for lv in levels}):
        text = next((lv for lv in levels if lv.chats == chats and not lv.photo), None)
        photo = next((lv for lv in levels if lv.chats == chats and lv.photo), None)
        if text is None or photo is None:
            continue
        ratio = photo.cpu_ms_per_chat(APP) / text.cpu_ms_per_chat(APP)
        peer = _cells(text, PEER)[2]
        lines.append(
            f"| {chats} | {text.cpu_ms_per_chat(APP):.0f} | {photo.cpu_ms_per_chat(APP):.0f} "
            f"| {ratio:.2f} | {'met' if ratio <= PHOTO_TO_TEXT_TARGET else 'not met'} | {peer} |"
        )
    return "\n".join(lines)


QUESTION_WINDOW_S = 0.3
"""Seconds after Enter in which the first question's CPU is counted: its request is with
the scripted server within tens of milliseconds, and scenario ``queued`` starts the
response 1.5 s after it, so nothing of the response falls in it; shorter than a second, so that less
of what is not the question's (a socket.io ping, housekeeping) does."""


def first_question_summary(each_ms: list[float]) -> str:
    """``each_ms`` (ms per fresh tab) as a sentence's end: the median, then every value."""
    if not each_ms:
        return "not measured (--first-asks 0)"
    values = ", ".join(f"{ms:.1f}" for ms in each_ms)
    return (
        f"median {statistics.median(each_ms):.1f} ms of {len(each_ms)} fresh tabs, every "
        f"thread (each: {values})"
    )


async def first_question_cpu_ms(target: Target, http: httpx.AsyncClient, asks: int) -> list[float]:
    """The app's CPU (ms, every thread) from Enter until its request is with the server,
    for each of ``asks`` fresh tabs, after as many questions asked together to warm the
    process: :data:`QUESTION_WINDOW_S` after Enter less as long idle just before.

    Either window may also hold work that is not the question's (a full garbage
    collection at a quiet moment, ``backend/collector.py``; a closed tab's chat end),
    so read the median."""
    spent: list[float] = []

    def now() -> float:
        return sum(threads_cpu_s(pid) for pid in target.pids)

    # Warm: a process's very first questions run cold code (CPython's adaptive
    # interpreter specializes it as it runs), which a room's process has long left.
    await burst(app_side(target, PACED), http, asks, None, 0)
    for _ in range(asks):
        tab = target.tab(http)
        await tab.open()
        try:
            await asyncio.sleep(1.0)  # what the chat start left to do is done
            idle0 = now()
            await asyncio.sleep(QUESTION_WINDOW_S)
            idle = now() - idle0
            asked0 = now()
            asking = asyncio.create_task(tab.ask(QUEUED, marker=""))
            await asyncio.sleep(QUESTION_WINDOW_S)
            spent.append(now() - asked0 - idle)
            await asking  # its answer ends before the next tab's idle second
        finally:
            await tab.close()
    return [ms * 1000 for ms in spent]


def app_cores(pin: bool) -> set[int] | None:
    """With ``pin``: keep this process and what it starts from now on (the scripted server,
    Open WebUI) to the first CPU it may use, and return the others, for the app (as in a
    deployment, where the browsers are elsewhere and vLLM has cores of its own); without,
    None (everything shares every CPU).

    Raises:
        SystemExit: ``pin`` on a machine that lets this process use only one CPU.
    """
    if not pin:
        return None
    driver, app = split_cores()
    os.sched_setaffinity(0, driver)
    return app


async def measure(args: argparse.Namespace, target: Target, peer: Peer | None) -> dict[str, Any]:
    """Every level of the burst, then the first question's CPU; the steady table too."""
    photo = make_photo() if "photo" in args.kinds else None
    # Idle connections expire before the app's uvicorn closes them (5 s), as the app's own
    # client does (backend.client.KEEPALIVE_EXPIRY_S): at 5 s both, a tab's request written
    # as the server closed its connection failed ("Server disconnected without sending a
    # response", once in about 1,500 tab opens on 2026-12-04).
    limits = httpx.Limits(
        max_connections=512, max_keepalive_connections=512, keepalive_expiry=KEEPALIVE_EXPIRY_S
    )
    async with httpx.AsyncClient(timeout=600, limits=limits) as http:
        direct = DirectClient(target.base_url)
        tokens = (
            [await peer.add_user(http, f"burst{i}") for i in range(max(args.levels, default=0))]
            if (peer)
            else []
        )
        work = ANSWERS[args.tokens]
        sides = [direct_side(direct, work), app_side(target, work)]
        try:
            await direct.ask(work)  # warm-up of every path
            await (await sides[1].open(http, 0, photo, 0))[1]()
            # Before the bursts: the chats they leave end a minute after their tabs close,
            # a full collection's work grows with them, and both fall in these seconds.
            first_ms = await first_question_cpu_ms(target, http, args.first_asks)
            levels, profiles = [], {}
            for chats in args.levels:
                here = sides + ([peer_side(peer, tokens, work)] if peer else [])
                for kind, level, stages in await run_kinds(here, http, chats, photo, args, target):
                    levels.append(level)
                    if stages is not None:
                        profiles[f"{chats} chats, {kind}"] = (stages, len(level.timings(APP)))
                    print(burst_table(levels[-1:]).splitlines()[-1], flush=True)
            steady = []
            if not args.no_steady:
                steady = await steady_levels(target, direct, http, photo, work, args)
        finally:
            await direct.aclose()
    profile = stage_table(profiles) if profiles else ""
    if args.profile and not profiles:
        profile = "Not profiled: py-spy is not installed (requirements-bench.txt)."
    return {
        "levels": levels,
        "first_question_cpu_ms": first_ms,
        "steady": steady,
        "profile": profile,
    }


async def run_kinds(
    sides: list[Side],
    http: httpx.AsyncClient,
    chats: int,
    photo: bytes | None,
    args: argparse.Namespace,
    target: Target,
) -> list[tuple[str, Level, Counter[str] | None]]:
    """(kind, its level, its profile) for each kind of ``args.kinds`` (text, photo).

    Their rounds are interleaved, the kinds' order rotated each round: the chats a round
    leaves behind (they end a minute after their tabs close) then weigh on every kind
    alike, not only on the later one (run one after the other, the later kind cost
    10-25 ms more per chat on 2026-12-07). Open WebUI (a side named :data:`PEER`) runs
    only in the text rounds of ``args.peer_levels``. The profile: with ``args.profile``
    and py-spy installed, the kind's py-spy samples by stage, summed over its rounds;
    else None."""
    levels = {kind: Level(chats, kind == "photo") for kind in args.kinds}
    stages: dict[str, Counter[str]] = {}
    for r in range(args.rounds):
        for kind in rotated(args.kinds, r):
            with_peer = chats in args.peer_levels and kind == "text"
            here = sides if with_peer else [s for s in sides if s.name != PEER]
            attached = photo if kind == "photo" else None
            spy = RESULTS / f"{args.name}-{chats}-{kind}-{r}.spy"
            with recording(target.pids if args.profile else [], spy) as rec:
                await run_round(levels[kind], here, http, attached, args, r)
            if rec is not None:
                stages[kind] = stages.get(kind, Counter()) + rec.stages()
    for level in levels.values():
        level.load_avg = os.getloadavg()[0]
    return [(kind, levels[kind], stages.get(kind)) for kind in args.kinds]


async def steady_levels(
    target: Target,
    direct: DirectClient,
    http: httpx.AsyncClient,
    photo: bytes | None,
    work: Workload,
    args: argparse.Namespace,
) -> list[LevelResult]:
    """The steady load at the same levels, on the same app (``bench/bench_load.py sweep``:
    chats started a fraction of an answer apart, each level's pairs as many as its chats)."""
    sampler = Sampler(target)
    sampler.start()
    try:
        return [
            await sweep_level(target, direct, http, sampler, n, photo, n, work, args.think_s)
            for n in args.levels
        ]
    finally:
        await sampler.stop()


def asked_when(spread_ms: float) -> str:
    """When a burst's questions go, in words for the report."""
    return f"evenly over {spread_ms:g} ms" if spread_ms else "in the same instant"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--levels", type=int, nargs="*", default=[8, 32, 64])
    parser.add_argument("--rounds", type=int, default=3, help="bursts per side and level")
    parser.add_argument(
        "--sides", nargs="+", choices=[APP, "openwebui"], default=[APP, "openwebui"]
    )
    parser.add_argument(
        "--peer-levels", type=int, nargs="+", default=[8, 32], help="levels Open WebUI runs"
    )
    parser.add_argument("--photo", action="store_true", help="each app tab attaches a photo")
    parser.add_argument(
        "--kinds",
        nargs="+",
        choices=["text", "photo"],
        help="chats per level: text, photo or both (default: --photo's choice)",
    )
    parser.add_argument(
        "--profile", action="store_true", help="py-spy records the app; stages summed"
    )
    parser.add_argument(
        "--tokens",
        type=int,
        choices=sorted(ANSWERS),
        default=200,
        help="pieces of each scripted answer (512: issue 53's photo-against-text chat)",
    )
    parser.add_argument("--think-s", type=float, default=1.0, help="attach to Enter (s)")
    parser.add_argument(
        "--spread-ms",
        type=float,
        default=0.0,
        help="a burst's questions go evenly over this span, alike for every side and kind "
        "(0: all in one tick)",
    )
    parser.add_argument("--pause-s", type=float, default=1.0, help="between two bursts (s)")
    parser.add_argument(
        "--first-asks", type=int, default=10, help="tabs for the first-question CPU"
    )
    add_target_options(parser)
    parser.add_argument("--no-steady", action="store_true", help="no steady-load table")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the app on CPUs of its own, this driver and the servers on the first CPU",
    )
    parser.add_argument("--name", default="burst", help="results file name")
    args = parser.parse_args(argv)
    args.kinds = list(dict.fromkeys(args.kinds or (["photo"] if args.photo else ["text"])))
    if args.app_url and args.pin:
        parser.error("--pin places the app this run starts, not one at --app-url")
    return args


def main(argv: list[str] | None = None) -> None:
    """Start the stack (and Open WebUI), run the bursts, print and write the table."""
    args = parse_args(argv)
    report, started = Report("A burst of first questions", args.name), time.monotonic()
    with ExitStack() as running:
        target = running.enter_context(measured_app(args, app_cpus=app_cores(args.pin)))
        app_cpus = os.sched_getaffinity(target.pids[0]) if args.pin else None
        peer = None
        if "openwebui" in args.sides:
            peer = running.enter_context(running_openwebui(target.base_url))
            if app_cpus is not None:  # the same cores as the app, not the driver's
                pin_threads(peer.pid, app_cpus)
        result = asyncio.run(measure(args, target, peer))
    levels: list[Level] = result["levels"]
    steady: list[LevelResult] = result["steady"]
    report.add(
        f"Scripted server ({args.tokens} tokens at 100 tokens/s per chat); each chat a fresh tab "
        f"that connects, then all ask {asked_when(args.spread_ms)}; {args.rounds} rounds per "
        "level, "
        "sides in rotating order; added = a side's percentile of time to first visible words "
        "less the same burst's sent directly. " + target.about(args),
        burst_table(levels),
        "The first question's CPU in the app before its request is with the server: "
        f"{first_question_summary(result['first_question_cpu_ms'])}. Run time "
        f"{time.monotonic() - started:.0f} s; load average "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())} at the end.",
    )
    if app_cpus is not None:
        report.add(
            f"`--pin`: the app on CPU(s) {sorted(app_cpus)}, this driver and the scripted "
            f"server on CPU {sorted(os.sched_getaffinity(0))}."
        )
    if steady:
        report.add(
            "## The steady load beside it (the same app, `bench/bench_load.py sweep`)",
            sweep_table(steady),
        )
    if len(args.kinds) > 1:
        report.add("## CPU per chat, photo against text", photo_vs_text_table(levels))
    if args.profile:
        report.add(
            "## Where the app's time goes (py-spy --gil at 100 Hz: ms per chat)", result["profile"]
        )
    report.finish({
        "args": vars(args),
        "first_question_cpu_ms": result["first_question_cpu_ms"],
        "levels": [asdict(lv) for lv in levels],
        "steady": [asdict(r) for r in steady],
        "profile": result["profile"],
    })  # fmt: skip


if __name__ == "__main__":
    main()
