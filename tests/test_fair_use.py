"""Fair use of a shared box, against the real app over raw socket.io (bench/harness.py's
``Tab``) and real uploads: one tab flooding its chat with messages, one browser asking in
many tabs, tabs uploading more than they may hold.

The app runs open (no sign-in: a browser is known by its cookie) with its default answer
bounds, ``KIMI_CHAT_QUEUE=2`` and ``KIMI_USER_ANSWERS=3``, in front of the scripted server,
whose record of the requests it got is the measure: what is refused never reaches it. Its
upload bounds are small (``KIMI_UPLOAD_SESSION_MB=3``, ``KIMI_UPLOAD_USER_MB=5``) so that a
few files of 1.2 MB reach them.

An empty (0-byte) file: Chainlit's upload route alone refuses it with HTTP 500 (its
``persist_file`` takes no empty content), and the page says only "Upload failed". The app
refuses it as it is attached, as every file it cannot use, with the sentence the page
shows after the file's name (ui/attach.py ``judge_upload``).
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import httpx
import pytest
from PIL import Image

from backend.fair_use import NoRoom, UploadRoom
from bench.harness import PACED_END, Tab
from tests.fakes.kimi_server import conversation
from tests.live_app import LiveApp, requests_seen, scripted_server

CHAT_FULL = "This chat already has 3 answers running or waiting"
PERSON_FULL = "You already have 3 answers running or waiting in your chats"
CHAT_UPLOADS_FULL = (
    "This file would take this chat's uploads past the 3 MB one chat may hold; it was not "
    "uploaded. Start a new chat for more files."
)
PERSON_UPLOADS_FULL = (
    "This file would take your uploads past the 5 MB one person may hold in all their open "
    "chats; it was not uploaded. Close chats you no longer need, then try again."
)
EMPTY_REFUSAL = "the file is empty (0 bytes)"
"""What the upload of an empty file answers (the page puts it after "Failed to upload
empty.png:"), as every file the app cannot use is refused on attach (ui/attach.py judge_upload)."""


def _padded_jpeg(size: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), "teal").save(buffer, "JPEG")
    return buffer.getvalue() + bytes(size - buffer.tell())  # decoders stop at its end mark


FILE = _padded_jpeg(1_200_000)
"""1.2 MB: a real JPEG (uploads are judged on attach) padded after its end mark."""


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with scripted_server("kimi-vl-thinking-2506") as url:
        yield url


@pytest.fixture(scope="module")
async def app(tmp_path_factory: pytest.TempPathFactory, server: str) -> AsyncIterator[LiveApp]:
    quota = {"KIMI_UPLOAD_SESSION_MB": "3", "KIMI_UPLOAD_USER_MB": "5"}
    running = LiveApp(tmp_path_factory.mktemp("app"), server, env=quota)
    running.start()
    yield running
    running.stop()


def ended(tab: Tab, refusal: str) -> bool:
    """Whether ``tab`` shows an answer to its end, or ``refusal``."""
    return any(PACED_END in x or refusal in x for x in tab.texts())


async def settle(
    server: str, tabs: list[Tab], answers: int, refusal: str, timeout_s: float = 90
) -> None:
    """Wait until the scripted server has been asked ``answers`` times and every tab
    shows an answer to its end or ``refusal`` (nothing streams or waits any more)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if len(requests_seen(server)) >= answers and all(ended(t, refusal) for t in tabs):
            await asyncio.sleep(2.5)  # one more answer would have started by now
            return
        assert time.monotonic() < deadline, [[x[-80:] for x in t.texts()[-3:]] for t in tabs]
        await asyncio.sleep(0.2)


@asynccontextmanager
async def browser(app: LiveApp, server: str) -> AsyncIterator[tuple[httpx.AsyncClient, Tab]]:
    """A new browser's first tab (page loaded, chat open), the scripted server's record of
    requests cleared; the tab is closed after."""
    httpx.delete(f"{server}/debug/requests")
    async with httpx.AsyncClient(timeout=60) as http:
        tab = Tab(app.url, http, load_page=True)
        await tab.open()
        yield http, tab
        await tab.close()


async def test_a_tab_sending_200_messages_at_once_gets_three_answers_and_a_sentence_for_the_rest(
    app: LiveApp, server: str
) -> None:
    async with browser(app, server) as (_, tab):
        started = time.monotonic()
        for i in range(200):
            await tab.send(f"question {i} #scenario=paced")
        assert time.monotonic() - started < 5, "sent within seconds"
        await settle(server, [tab], 3, CHAT_FULL)
        asked = requests_seen(server)
        assert len(asked) == 3, "one answer running and two waiting reach the model server"
        assert [conversation(r)[-1]["content"][-1]["text"] for r in asked] == [
            f"question {i} #scenario=paced" for i in range(3)
        ]
        refused = [t for t in tab.texts() if CHAT_FULL in t]
        assert len(refused) == 197


async def test_one_browser_in_four_tabs_gets_three_answers_at_once_and_a_sentence(
    app: LiveApp, server: str
) -> None:
    async with browser(app, server) as (http, first):
        tabs = [first] + [Tab(app.url, http, cookies=first.cookies) for _ in range(3)]
        for tab in tabs[1:]:
            await tab.open()
        await asyncio.gather(*(tab.send(f"tab {i} #scenario=paced") for i, tab in enumerate(tabs)))
        await settle(server, tabs, 3, PERSON_FULL)
        assert len(requests_seen(server)) == 3
        refused = [tab for tab in tabs if any(PERSON_FULL in x for x in tab.texts())]
        assert len(refused) == 1
        # Another browser is not bound by this one's answers.
        other = Tab(app.url, http, load_page=True)
        await other.open()
        answer = await other.ask("someone else #scenario=quick")
        assert answer.complete, answer.error
        for tab in [*tabs[1:], other]:
            await tab.close()


async def post_file(tab: Tab, name: str) -> httpx.Response:
    """Upload :data:`FILE` as the browser does when it is attached; the app's answer."""
    return await tab.post_file(FILE, name)


def stored(app: LiveApp, tab: Tab) -> list[str]:
    """The files Chainlit keeps for ``tab``'s session (its ``.files/<session id>``)."""
    folder = app.workdir / ".files" / tab.session_id
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


async def test_uploads_beyond_a_chats_and_a_browsers_room_are_refused_with_a_sentence(
    app: LiveApp,
) -> None:
    async with httpx.AsyncClient(timeout=60) as http:
        first = Tab(app.url, http, load_page=True)
        await first.open()
        answers = [await post_file(first, f"photo{i}.jpg") for i in range(3)]
        assert [a.status_code for a in answers] == [200, 200, 413]
        assert answers[2].json() == {"detail": CHAT_UPLOADS_FULL}
        assert len(stored(app, first)) == 2, "the refused file was not written"
        # The same browser in a second tab: 2.4 MB more fit in 5, the third file does not.
        second = Tab(app.url, http, cookies=first.cookies)
        await second.open()
        answers = [await post_file(second, f"more{i}.jpg") for i in range(2)]
        assert [a.status_code for a in answers] == [200, 200]
        third = Tab(app.url, http, cookies=first.cookies)
        await third.open()
        refused = await post_file(third, "one-more.jpg")
        assert refused.status_code == 413
        assert refused.json() == {"detail": PERSON_UPLOADS_FULL}
        assert stored(app, third) == []
        # Files sent at once cannot all pass one check: what is arriving counts too.
        other = Tab(app.url, http, load_page=True)
        await other.open()
        at_once = await asyncio.gather(*(post_file(other, f"burst{i}.jpg") for i in range(5)))
        assert sorted(a.status_code for a in at_once) == [200, 200, 413, 413, 413]
        assert len(stored(app, other)) == 2
        for tab in (first, second, third, other):
            await tab.close()


async def shown(tab: Tab, text: str, timeout_s: float = 30) -> str:
    """The first message of ``tab`` that contains ``text``, once it is shown."""
    deadline = time.monotonic() + timeout_s
    while not (found := [t for t in tab.texts() if text in t]):
        assert time.monotonic() < deadline, tab.texts()
        await asyncio.sleep(0.1)
    return found[0]


async def test_an_empty_file_is_refused_on_attach_with_a_sentence(
    app: LiveApp, server: str
) -> None:
    async with browser(app, server) as (_, tab):
        with pytest.raises(httpx.HTTPStatusError) as refused:
            await tab.upload(b"", "empty.png", "image/png")  # HTTP 500 before, no sentence
        assert refused.value.response.status_code == 400
        assert refused.value.response.json() == {"detail": EMPTY_REFUSAL}
        await asyncio.sleep(1)
        assert requests_seen(server) == [], "nothing was asked"


def test_an_upload_counts_while_it_arrives_and_once_kept_until_its_chat_ends() -> None:
    room = UploadRoom(per_chat=3_000_000, per_person=5_000_000)
    live = {"a", "b"}
    arriving = room.enter("a", "p", 2_000_000, live)
    with pytest.raises(NoRoom):
        room.enter("a", "p", 2_000_000, live)  # 4 MB in chat a: past its 3
    room.keep(arriving)
    room.keep(arriving)  # a second keep counts nothing more
    room.enter("b", "p", 2_500_000, live).leave()  # failed: gives its room back
    room.keep(room.enter("b", "p", 2_500_000, live))
    with pytest.raises(NoRoom) as refused:
        room.enter("c", "p", 1_000_000, live | {"c"})  # 5.5 MB for p: past its 5
    assert "past the 5 MB one person may hold" in str(refused.value)
    room.enter("c", "p", 1_000_000, {"b", "c"})  # chat a ended: its 2 MB are free again
