"""Fair use of a shared box, against the real app over raw socket.io (bench/_common.py's
``Tab``): one tab flooding its chat with messages, one browser asking in many tabs.

The app runs open (no sign-in: a browser is known by its cookie) with its default bounds,
``KIMI_CHAT_QUEUE=2`` and ``KIMI_USER_ANSWERS=3``, in front of the scripted server, whose
record of the requests it got is the measure: what is refused never reaches it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import httpx
import pytest

from bench._common import PACED_END, Tab
from tests.live_app import LiveApp, requests_seen, scripted_server

CHAT_FULL = "This chat already has 3 answers running or waiting"
PERSON_FULL = "You already have 3 answers running or waiting in your chats"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with scripted_server("kimi-vl-thinking-2506") as url:
        yield url


@pytest.fixture(scope="module")
async def app(tmp_path_factory: pytest.TempPathFactory, server: str) -> AsyncIterator[LiveApp]:
    running = LiveApp(tmp_path_factory.mktemp("app"), server)
    running.start()
    yield running
    running.stop()


async def send(tab: Tab, text: str) -> None:
    """Emit one message as the browser does (Enter), without waiting for its answer."""
    message = {
        "threadId": "",
        "id": str(uuid.uuid4()),
        "name": "User",
        "type": "user_message",
        "output": text,
        "createdAt": datetime.now(UTC).isoformat(),
        "metadata": {},
    }
    await tab.sio.emit("client_message", {"message": message, "fileReferences": []})


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


async def test_a_tab_sending_200_messages_at_once_gets_three_answers_and_a_sentence_for_the_rest(
    app: LiveApp, server: str
) -> None:
    httpx.delete(f"{server}/debug/requests")
    async with httpx.AsyncClient(timeout=60) as http:
        tab = Tab(app.url, http, load_page=True)
        await tab.open()
        started = time.monotonic()
        for i in range(200):
            await send(tab, f"question {i} #scenario=paced")
        assert time.monotonic() - started < 5, "sent within seconds"
        await settle(server, [tab], 3, CHAT_FULL)
        asked = requests_seen(server)
        assert len(asked) == 3, "one answer running and two waiting reach the model server"
        assert [r["messages"][-1]["content"][-1]["text"] for r in asked] == [
            f"question {i} #scenario=paced" for i in range(3)
        ]
        refused = [t for t in tab.texts() if CHAT_FULL in t]
        assert len(refused) == 197
        await tab.close()


async def test_one_browser_in_four_tabs_gets_three_answers_at_once_and_a_sentence(
    app: LiveApp, server: str
) -> None:
    httpx.delete(f"{server}/debug/requests")
    async with httpx.AsyncClient(timeout=60) as http:
        first = Tab(app.url, http, load_page=True)
        await first.open()
        tabs = [first] + [Tab(app.url, http, cookies=first.cookies) for _ in range(3)]
        for tab in tabs[1:]:
            await tab.open()
        await asyncio.gather(*(send(tab, f"tab {i} #scenario=paced") for i, tab in enumerate(tabs)))
        await settle(server, tabs, 3, PERSON_FULL)
        assert len(requests_seen(server)) == 3
        refused = [tab for tab in tabs if any(PERSON_FULL in x for x in tab.texts())]
        assert len(refused) == 1
        # Another browser is not bound by this one's answers.
        other = Tab(app.url, http, load_page=True)
        await other.open()
        answer = await other.ask("someone else #scenario=quick")
        assert answer.complete, answer.error
        for tab in [*tabs, other]:
            await tab.close()
