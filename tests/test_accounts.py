"""Nothing crosses between users: sign-in and its throttling, tokens that sign-out and a
password change end, feedback, shared chats and files, and writes by id, on SQLite and on
a real PostgreSQL.

Requests go to Chainlit's own routes (``chainlit.server.router`` in a fresh FastAPI
app, Chainlit's real sign-in, feedback, share and user routes, with the app's
callbacks registered through Chainlit's decorators) behind the app's two guards
(ui/security.py, ui/signin.py) through httpx's ASGI transport; the data layer
is the app's on the real database. Rows are read back with plain SQL.
"""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chainlit as cl
import httpx
import pytest
from argon2 import PasswordHasher
from chainlit.context import init_http_context
from chainlit.element import CustomElement
from chainlit.step import StepDict
from chainlit.types import Pagination, ThreadFilter
from fastapi import FastAPI

import backend.auth
from backend.auth import MAX_PASSWORD_CHARS, AuthError, check_password
from backend.cli import main
from backend.conversation import Turn
from backend.images import prepare_image
from backend.record import ComparedAnswer, TurnRecord
from backend.settings import Settings
from backend.store.bounds import SignInThrottle
from backend.store.core import Store
from backend.timings import Timings
from tests.conftest import DATA, rows
from ui import history
from ui.datalayer import TITLE_MAX_CHARS, KimiDataLayer, readable_title
from ui.files import mount_file_route
from ui.security import Guard
from ui.signin import Accounts, SignInGuard

ROOT = Path(__file__).resolve().parents[1]
PASSWORDS = {"alice": "alice-password-1", "bob": "bob-password-22", "carol": "carol-password-3"}


@dataclass
class Clock:
    """A wall clock the test moves by hand (seconds)."""

    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class App:
    """Chainlit's routes behind the app's guards, on one store; a client per person."""

    asgi: Any
    store: Store
    layer: KimiDataLayer
    clock: Clock
    clients: list[httpx.AsyncClient] = field(default_factory=list)

    def client(self, address: str = "127.0.0.1") -> httpx.AsyncClient:
        """A new browser (its own cookies) connecting from ``address``."""
        transport = httpx.ASGITransport(app=self.asgi, client=(address, 50000))
        made = httpx.AsyncClient(transport=transport, base_url="http://ui")
        self.clients.append(made)
        return made

    async def signed_in(self, name: str, address: str = "127.0.0.1") -> httpx.AsyncClient:
        """A browser in which ``name`` signed in with their password."""
        browser = self.client(address)
        answer = await sign_in(browser, name, PASSWORDS[name])
        assert answer.status_code == 200, answer.text
        return browser


async def sign_in(browser: httpx.AsyncClient, name: str, password: str) -> httpx.Response:
    """Chainlit's sign-in form, as its page posts it."""
    return await browser.post("/login", data={"username": name, "password": password})


@pytest.fixture
async def app(
    store: Store, layer: KimiDataLayer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[App]:
    import chainlit.data as chainlit_data
    from chainlit.config import config
    from chainlit.server import router

    monkeypatch.setenv("CHAINLIT_AUTH_SECRET", "test-secret-" + "x" * 48)
    # Argon2id at its lightest: these tests count verifications, they do not time them
    # (tests/test_store.py checks the real parameters).
    monkeypatch.setattr(backend.auth, "_HASHER", PasswordHasher(time_cost=1, memory_cost=1024))
    backend.auth._dummy_hash.cache_clear()
    monkeypatch.setattr(chainlit_data, "_data_layer", layer)
    monkeypatch.setattr(chainlit_data, "_data_layer_initialized", True)
    for hook in ("password_auth_callback", "on_logout", "on_shared_thread_view"):
        monkeypatch.setattr(config.code, hook, None)  # restored after the test
    clock = Clock()
    accounts = Accounts(store.users, SignInThrottle(store.engine, clock=clock))
    cl.password_auth_callback(accounts.sign_in)  # what ui/signin.py install() registers
    cl.on_logout(accounts.sign_out)
    cl.on_shared_thread_view(history.may_view_shared)
    for name, password in PASSWORDS.items():
        await store.users.add(name, password)
    chainlit = FastAPI()
    chainlit.include_router(router)
    mount_file_route(chainlit, store.engine, store.files)
    asgi = Guard(SignInGuard(chainlit, accounts, store), (), upload_limit_mb=lambda: 100.0)
    running = App(asgi, store, layer, clock)
    yield running
    for client in running.clients:
        await client.aclose()
    backend.auth._dummy_hash.cache_clear()


# --- tokens -------------------------------------------------------------------------


async def test_signing_out_ends_every_token_of_the_user_at_once(app: App) -> None:
    laptop, phone = await app.signed_in("alice"), await app.signed_in("alice")
    bob = await app.signed_in("bob")
    threads = {"pagination": {"first": 20}, "filter": {}}
    for browser in (laptop, phone, bob):
        assert (await browser.get("/user")).status_code == 200
    token = laptop.cookies["access_token"]
    assert (await laptop.post("/logout", json={})).json() == {"success": True}
    stolen = app.client()  # the old cookie, replayed from anywhere
    stolen.cookies.set("access_token", token)
    for browser in (stolen, phone):
        assert (await browser.get("/user")).status_code == 401
        assert (await browser.post("/project/threads", json=threads)).status_code == 401
    bearer = await app.client().get("/user", headers={"Authorization": f"Bearer {token}"})
    assert bearer.status_code == 401
    assert (await bob.get("/user")).status_code == 200  # other users stay signed in
    again = await app.signed_in("alice")
    assert (await again.get("/user")).json()["identifier"] == "alice"


async def test_a_password_change_ends_the_users_tokens(app: App, settings: Settings) -> None:
    alice = await app.signed_in("alice")
    env = {
        **os.environ,
        "KIMI_DATA_DIR": settings.data_dir,
        "KIMI_DATABASE_URL": settings.database_url,
    }  # fmt: skip  (no checkout .env)
    passwd = [sys.executable, "-m", "backend.cli", "user", "passwd", "alice", "--password-stdin"]
    changed = subprocess.run(passwd, input="a new long password\n", text=True, env=env, cwd=ROOT,
                             capture_output=True, timeout=60)  # fmt: skip
    assert changed.returncode == 0, changed.stderr
    assert (await alice.get("/user")).status_code == 401
    assert (await sign_in(app.client(), "alice", "a new long password")).status_code == 200


async def test_a_removed_users_token_stops_working_at_once(app: App) -> None:
    dave = app.client()
    await app.store.users.add("dave", "dave-password")
    assert (await sign_in(dave, "dave", "dave-password")).status_code == 200
    assert (await dave.get("/user")).status_code == 200
    await app.store.users.remove("dave")
    assert (await dave.get("/user")).status_code == 401


# --- sign-in throttling ---------------------------------------------------------------


async def test_failed_sign_ins_make_the_next_ones_wait_longer_and_are_logged(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    guesser, elsewhere = app.client("203.0.113.7"), app.client("198.51.100.9")
    for _ in range(4):  # the free failures
        assert (await sign_in(guesser, "carol", "wrong-guess")).status_code == 401
    assert (await sign_in(guesser, "carol", "wrong-guess")).status_code == 401  # 5th: 1 s
    for browser in (guesser, elsewhere):  # the name waits, from any address
        early = await sign_in(browser, "carol", PASSWORDS["carol"])
        assert early.status_code == 429, "even the right password waits"
        assert early.json()["detail"].startswith("Too many failed sign-ins: wait a little")
        assert early.headers["retry-after"] == "1"
    app.clock.now += 1.0
    assert (await sign_in(guesser, "carol", "wrong-guess")).status_code == 401  # now 2 s
    # The guesser's address waits too, whatever name it tries next.
    assert (await sign_in(guesser, "alice", PASSWORDS["alice"])).status_code == 429
    app.clock.now += 1.5
    assert (await sign_in(elsewhere, "carol", PASSWORDS["carol"])).headers["retry-after"] == "1"
    app.clock.now += 0.5
    assert (await sign_in(elsewhere, "carol", PASSWORDS["carol"])).status_code == 200
    assert (await sign_in(elsewhere, "carol", "wrong-guess")).status_code == 401  # cleared
    failures = [r.getMessage() for r in caplog.records if "sign-in failed" in r.getMessage()]
    assert len(failures) == 7
    assert failures[0] == "sign-in failed for 'carol' from 203.0.113.7 (1 in a row)"
    assert failures[-2] == "sign-in failed for 'carol' from 203.0.113.7 (6 in a row)"
    assert failures[-1] == "sign-in failed for 'carol' from 198.51.100.9 (1 in a row)"
    assert not any("wrong-guess" in r.getMessage() or "password-3" in r.getMessage()
                   for r in caplog.records)  # fmt: skip


async def test_an_unknown_name_is_answered_and_counted_like_a_wrong_password(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    verified: list[str] = []
    hasher = backend.auth._HASHER

    class Counting:
        def hash(self, password: str) -> str:
            return hasher.hash(password)

        def verify(self, hashed: str, password: str) -> bool:
            verified.append(password)
            return hasher.verify(hashed, password)

    monkeypatch.setattr(backend.auth, "_HASHER", Counting())
    browser = app.client("192.0.2.1")
    known = await sign_in(browser, "alice", "not her password")
    unknown = await sign_in(app.client("192.0.2.2"), "nobody-here", "not her password")
    assert (known.status_code, known.json()) == (unknown.status_code, unknown.json())
    assert verified == ["not her password"] * 2  # one Argon2 verification each
    long = await sign_in(browser, "alice", "x" * (MAX_PASSWORD_CHARS + 5000))
    assert long.status_code == 401 and len(verified[-1]) == MAX_PASSWORD_CHARS
    for name in ("mallory", "alice"):  # both wait after the same number of failures
        for _ in range(5):
            await sign_in(app.client(str(uuid.uuid4())), name, "wrong-guess")
        assert (await sign_in(app.client("192.0.2.9"), name, "x")).status_code == 429


# --- what is whose: steps, elements, threads, feedback -----------------------------------


async def chat_of(layer: KimiDataLayer, owner: str) -> dict[str, str]:
    """A thread of ``owner`` with a question, an answer and a photo; their ids."""
    user = await layer.create_user(cl.User(identifier=owner))
    assert user is not None
    ids = {"thread": str(uuid.uuid4()), "question": str(uuid.uuid4()), "answer": str(uuid.uuid4())}
    init_http_context(thread_id=ids["thread"])
    await layer.update_thread(ids["thread"], name=f"{owner}'s chat", user_id=user.id)
    for kind, step_type in (("question", "user_message"), ("answer", "assistant_message")):
        step = {"id": ids[kind], "threadId": ids["thread"], "name": owner, "type": step_type,
                "output": f"{owner}'s {kind}", "streaming": False,
                "createdAt": f"2026-12-01T10:00:0{len(kind) % 10}.000000Z"}  # fmt: skip
        await layer.create_step(StepDict(**step))  # type: ignore[typeddict-item]
    image = cl.Image(path=str(DATA / "rocket.jpg"), name="rocket.jpg", mime="image/jpeg")
    image.for_id, image.thread_id = ids["question"], ids["thread"]
    await layer.create_element(image)
    ids["photo"] = image.id
    return ids


async def steps_of(store: Store, thread_id: str) -> list[tuple[str, str]]:
    found = await rows(
        store,
        'SELECT "id", "output" FROM kimi_steps WHERE "threadId" = :t ORDER BY "id"',
        t=thread_id,
    )
    return [(r["id"], r["output"]) for r in found]


async def test_writes_under_another_chats_ids_change_nothing_of_it(
    layer: KimiDataLayer, store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    alice = await chat_of(layer, "alice")
    before = await steps_of(store, alice["thread"])
    photo_rows = 'SELECT "threadId", "objectKey" FROM kimi_elements WHERE "id" = :id'
    photo = await rows(store, photo_rows, id=alice["photo"])
    bob = await chat_of(layer, "bob")
    init_http_context(thread_id=bob["thread"])  # Bob's session writes now
    for kind in ("question", "answer"):  # a client_message under Alice's step ids
        step = {"id": alice[kind], "threadId": bob["thread"], "name": "bob",
                "output": "bob was here", "type": "user_message", "streaming": False,
                "createdAt": "2026-12-01T11:00:00Z"}  # fmt: skip
        await layer.create_step(StepDict(**step))  # type: ignore[typeddict-item]
        await layer.delete_step(alice[kind])  # Bob's edit removing "his" later messages
    custom = CustomElement(id=alice["photo"], for_id=bob["question"], thread_id=alice["thread"],
                           name="x", props={"bob": "was here"})  # fmt: skip
    await layer.create_element(custom)  # PUT /project/element naming Alice's thread
    custom.thread_id = bob["thread"]
    await layer.create_element(custom)  # ... or Bob's, with her element's id
    await layer.delete_element(alice["photo"], alice["thread"])  # DELETE /project/element
    bob_user = await layer.get_user("bob")
    assert bob_user is not None
    await layer.update_thread(alice["thread"], user_id=bob_user.id)  # take the whole chat

    assert await steps_of(store, alice["thread"]) == before
    assert await rows(store, photo_rows, id=alice["photo"]) == photo
    assert store.files.read(photo[0]["objectKey"]) == (DATA / "rocket.jpg").read_bytes()
    owner = await rows(store, 'SELECT "userIdentifier" FROM kimi_threads WHERE "id" = :t',
                       t=alice["thread"])  # fmt: skip
    assert owner == [{"userIdentifier": "alice"}]
    assert [i for i, _ in await steps_of(store, bob["thread"])] == sorted(
        [bob["question"], bob["answer"]]
    )
    refused = [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused")]
    assert len(refused) == 8


async def test_only_the_chats_owner_gives_or_removes_feedback(app: App) -> None:
    alice_ids = await chat_of(app.layer, "alice")
    bob_ids = await chat_of(app.layer, "bob")
    alice, bob = await app.signed_in("alice"), await app.signed_in("bob")
    mine = {"forId": alice_ids["answer"], "threadId": alice_ids["thread"], "value": 1,
            "comment": "great"}  # fmt: skip
    given = await alice.put("/feedback", json={"feedback": mine, "sessionId": "s"})
    assert given.status_code == 200
    feedback_id = given.json()["feedbackId"]
    query = 'SELECT "forId", "value", "comment" FROM kimi_feedback'
    stored = await rows(app.store, query)
    bobs = {"threadId": bob_ids["thread"], "value": 0}
    attacks = [
        {**bobs, "forId": alice_ids["answer"], "comment": "bob was here"},
        {**bobs, "id": feedback_id, "forId": bob_ids["answer"], "comment": "moved"},
        {**bobs, "forId": bob_ids["answer"], "threadId": alice_ids["thread"]},
    ]
    for feedback in attacks:
        refused = await bob.put("/feedback", json={"feedback": feedback, "sessionId": "s"})
        assert refused.status_code == 404
        assert refused.json() == {"detail": "This message is not in your chats."}
    for feedback_id_named in (feedback_id, str(uuid.uuid4())):
        refused = await bob.request("DELETE", "/feedback", json={"feedbackId": feedback_id_named})
        assert refused.status_code == 404
    assert await rows(app.store, query) == stored
    own = {**bobs, "forId": bob_ids["answer"], "comment": "mine"}
    assert (await bob.put("/feedback", json={"feedback": own, "sessionId": "s"})).status_code == 200
    removed = await alice.request("DELETE", "/feedback", json={"feedbackId": feedback_id})
    assert removed.status_code == 200
    assert await rows(app.store, query) == [{"forId": bob_ids["answer"], "value": 0,
                                            "comment": "mine"}]  # fmt: skip


# --- shared chats -------------------------------------------------------------------------


async def shared_chat(app: App) -> dict[str, str]:
    """Alice's chat with a stored turn (photo, reasoning, answer); its ids and photo URL."""
    ids = await chat_of(app.layer, "alice")
    turn = Turn(text="What is in the photo?", images=[prepare_image(DATA / "rocket.jpg", 512,
                "rocket.jpg")], answer="A rocket on its pad.", reasoning="I look closely.",
                status="done")  # fmt: skip
    timings = Timings(reasoning_s=1.5)
    options = {"temperature": 0.8, "top_p": 0.95, "max_tokens": 4096, "show_stats": True}
    record = TurnRecord(position=0, message_id=ids["question"], turn=turn, timings=timings,
                        model="kimi-vl-thinking-2506", options=options)  # fmt: skip
    await app.store.turns.save(ids["thread"], record)
    threads = await app.layer.get_all_user_threads(thread_id=ids["thread"])
    assert threads is not None and threads[0]["elements"]
    ids["photo_url"] = str(threads[0]["elements"][0]["url"])
    return ids


async def test_a_shared_chat_shows_the_version_shown_with_its_compare_answers(app: App) -> None:
    """Defect: the public page showed every version of a turn, not the branch the chat
    shows (as Export does)."""
    chat = await shared_chat(app)
    regenerated = Turn(text="What is in the photo?", answer="A launch pad at dawn.",
                       status="done")  # fmt: skip
    again = TurnRecord(position=1, message_id="v2", turn=regenerated, chosen=99,
                       parent_id=None, beside=chat["question"])  # fmt: skip
    await app.store.turns.save(chat["thread"], again)
    other = Turn(text="", answer="Also a rocket, says Instruct.", status="done")
    await app.store.turns.save_compared(
        chat["thread"], "v2", ComparedAnswer("Kimi-VL Instruct", other), regenerated.answer
    )
    alice = await app.signed_in("alice")
    body = {"threadId": chat["thread"], "isShared": True}
    assert (await alice.put("/project/thread/share", json=body)).status_code == 200
    page = (await app.client().get(f"/share/{chat['thread']}")).text
    assert "A launch pad at dawn." in page and "Also a rocket, says Instruct." in page
    assert "A rocket on its pad." not in page  # the version not shown
    assert page.count("What is in the photo?") == 1


async def test_a_shared_chat_is_a_public_page_until_it_is_unshared(app: App) -> None:
    chat, secret = await shared_chat(app), await chat_of(app.layer, "alice")
    alice, bob, anyone = await app.signed_in("alice"), await app.signed_in("bob"), app.client()
    body = {"threadId": chat["thread"], "isShared": True}
    assert (await alice.put("/project/thread/share", json=body)).status_code == 200

    page = await anyone.get(f"/share/{chat['thread']}")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert page.headers["cache-control"] == "no-store"
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for shown in ("What is in the photo?", "A rocket on its pad.", "I look closely.",
                  "Thought for 1.5s", '<img src="data:image/jpeg;base64,',
                  f'href="/login?next=/share/{chat["thread"]}"'):  # fmt: skip
        assert shown in page.text
    # The model and the settings by the names the app shows, not their ids (issue 47).
    assert "<dd>Kimi-VL Thinking (2506)</dd>" in page.text and "kimi-vl-thinking" not in page.text
    assert "<dt>Temperature</dt><dd>0.8</dd><dt>Top p</dt>" in page.text
    assert "top_p" not in page.text and "show_stats" not in page.text
    assert (await anyone.get(chat["photo_url"])).status_code == 200
    assert (await bob.get(f"/project/share/{chat['thread']}")).status_code == 200
    signed_in_view = await bob.get(f"/share/{chat['thread']}")  # Chainlit's page, not ours
    assert "What is in the photo?" not in signed_in_view.text

    body["isShared"] = False
    assert (await alice.put("/project/thread/share", json=body)).status_code == 200
    for thread, photo in ((chat["thread"], chat["photo_url"]), (secret["thread"], None)):
        gone = await anyone.get(f"/share/{thread}")
        assert (gone.status_code, "This chat is not shared." in gone.text) == (404, True)
        assert (await bob.get(f"/project/share/{thread}")).status_code == 404
        if photo:
            assert (await anyone.get(photo)).status_code == 404
            assert (await bob.get(photo)).status_code == 404
            assert (await alice.get(photo)).status_code == 200


async def test_an_ownerless_chats_files_are_served_to_nobody(app: App) -> None:
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)
    await app.layer.update_thread(thread_id, name="made while the app ran open")
    image = cl.Image(path=str(DATA / "rocket.jpg"), name="rocket.jpg", mime="image/jpeg")
    image.for_id, image.thread_id = str(uuid.uuid4()), thread_id
    await app.layer.create_element(image)
    threads = await app.layer.get_all_user_threads(thread_id=thread_id)
    assert threads is not None and threads[0]["elements"]
    url = str(threads[0]["elements"][0]["url"])
    assert (await app.client().get(url)).status_code == 404  # no cookie at all
    assert (await (await app.signed_in("bob")).get(url)).status_code == 404


# --- titles and passwords ---------------------------------------------------------------


async def test_a_giant_first_message_makes_a_readable_title(
    layer: KimiDataLayer, store: Store
) -> None:
    user = await layer.create_user(cl.User(identifier="alice"))
    assert user is not None
    thread_id = str(uuid.uuid4())
    init_http_context(thread_id=thread_id)
    first = "Describe\nthis   photo " + "in great detail " * 130_000  # about 2 MB
    # What Chainlit does with a first message: the step, then the thread named after it.
    step = {"id": str(uuid.uuid4()), "threadId": thread_id, "name": "alice", "output": first,
            "type": "user_message", "streaming": False,
            "createdAt": "2026-12-01T10:00:00Z"}  # fmt: skip
    await layer.create_step(StepDict(**step))  # type: ignore[typeddict-item]
    await layer.update_thread(thread_id, name=first, user_id=user.id)
    [stored] = await rows(store, 'SELECT "name" FROM kimi_threads WHERE "id" = :t', t=thread_id)
    title, whole = stored["name"], " ".join(first.split())
    assert len(title) <= TITLE_MAX_CHARS and title.endswith("…")
    assert whole.startswith(title[:-1]) and whole[len(title) - 1] == " "  # cut between words
    listed = await layer.list_threads(Pagination(first=20), ThreadFilter(userId=user.id))
    sidebar = json.dumps(listed.to_dict())
    assert [t["name"] for t in listed.data] == [title] and len(sidebar) < 2_000
    assert readable_title("  short\n title ") == "short title"
    assert readable_title("x" * 500) == "x" * (TITLE_MAX_CHARS - 1) + "…"


@pytest.mark.parametrize(
    ("password", "says"),
    [
        ("p" * (1024 * 1024), "the sign-in takes at most 1024, so it could never be used"),
        ("password", "among the first ones guessed"),
        ("PassWord1", "among the first ones guessed"),
        (" " * 8, "one character repeated"),
        ("aaaaaaaaaaaa", "one character repeated"),
        ("carol-the-user", "among the first ones guessed"),  # the name itself
    ],
)
def test_passwords_that_cannot_sign_in_or_are_guessed_first_are_refused(
    password: str, says: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("KIMI_DATA_DIR", str(tmp_path / "data"))
    for command in ("add", "passwd"):
        monkeypatch.setattr(sys, "stdin", io.StringIO(password + "\n"))
        assert main(["user", command, "carol-the-user", "--password-stdin"]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and says in err
    with pytest.raises(AuthError):
        check_password(password, "carol-the-user")
    assert check_password("a long passphrase", "carol") == "a long passphrase"


async def test_the_throttle_forgets_and_keeps_short_keys(store: Store) -> None:
    clock = Clock()
    throttle = SignInThrottle(store.engine, free=2, first_delay_s=1, max_delay_s=8,
                              forget_after_s=60, clock=clock)  # fmt: skip
    waits: list[float] = []
    for _ in range(7):
        assert (await throttle.admit("eve", "10.0.0.1")).admitted
        (row,) = await rows(store, "SELECT until_at FROM kimi_signin_attempts WHERE \"key\" = "
                            "'name:eve'")  # fmt: skip
        waits.append(max(row["until_at"] - clock.now, 0))
        if waits[-1]:
            assert (await throttle.admit("eve", "10.0.0.9")).wait_s == waits[-1]
        clock.now += waits[-1]
    assert waits == [0, 1, 2, 4, 8, 8, 8]
    clock.now += 61
    assert (await throttle.admit("eve", "10.0.0.1")).run == 1
    for n in range(10):  # a megabyte typed as name
        await throttle.admit(f"name-{n}" + "x" * 1_000_000, "10.0.0.2")
    keys = await rows(store, 'SELECT "key" FROM kimi_signin_attempts')
    assert max(len(row["key"]) for row in keys) < 200
    clock.now += 61 + 8
    await SignInThrottle(store.engine, forget_after_s=60, clock=clock).admit("x", "10.0.0.3")
    assert len(await rows(store, 'SELECT "key" FROM kimi_signin_attempts')) == 2
