"""One stored chat open in two tabs at once, against the real app with sign-in (SQLite),
driven over raw socket.io as two browser tabs (bench/harness.py's ``Tab``): each tab adds
a turn, and the stored chat keeps both; a third tab that opens it sends the model all of
them, in the order they were asked.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.harness import Tab
from tests.fakes.kimi_server import conversation
from tests.live_app import LiveApp, requests_seen, scripted_server, signed_in

PASSWORD = "alice-password-1"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with scripted_server("kimi-vl-thinking-2506") as url:
        yield url


async def ask(tab: Tab, question: str) -> None:
    """Ask ``question`` in ``tab`` and wait for the whole answer."""
    timing = await tab.ask(f"{question} #scenario=quick", marker="", timeout_s=60)
    assert timing.text, timing.error or tab.texts()


async def stored_thread(database: Path, timeout_s: float = 20) -> str:
    """The id of the one chat stored in ``database``, once its owner and first message
    are: the page learns the chat's address (Chainlit's ``first_interaction``) only
    then, and those writes go after the answer's first words (ui/first_words.py)."""
    async with asyncio.timeout(timeout_s):
        while True:
            with sqlite3.connect(database) as db:
                found = db.execute(
                    'SELECT t.id FROM kimi_threads t JOIN kimi_steps s ON s."threadId" = t.id'
                    " WHERE s.type = 'user_message' AND t.\"userId\" IS NOT NULL"
                ).fetchall()
            if found:
                return str(found[0][0])
            await asyncio.sleep(0.1)


def user_texts(request: dict[str, object]) -> list[str]:
    """The text of each user message a chat completion request sent, in order."""
    found = []
    for message in conversation(request):
        if message["role"] != "user":
            continue
        content = message["content"]
        parts = [content] if isinstance(content, str) else [p.get("text", "") for p in content]
        found.append(" ".join(p for p in parts if p).replace(" #scenario=quick", ""))
    return found


async def test_one_chat_in_two_tabs_keeps_the_turns_of_both(tmp_path: Path, server: str) -> None:
    app = LiveApp(tmp_path / "app", server, users={"alice": PASSWORD})
    app.start()
    try:
        async with httpx.AsyncClient(timeout=60) as http:
            cookies = signed_in(app.url, "alice", PASSWORD)
            first = Tab(app.url, http, cookies=cookies, load_page=True)
            await first.open()
            await ask(first, "first question")
            await first.close()
            thread_id = await stored_thread(app.data_dir / "chat.db")
            tabs = [Tab(app.url, http, cookies=cookies, thread_id=thread_id) for _ in range(2)]
            for tab in tabs:  # both open the stored chat before either asks
                await tab.open()
            await ask(tabs[0], "from tab A")
            await ask(tabs[1], "from tab B")
            for tab in tabs:
                await tab.close()
            third = Tab(app.url, http, cookies=cookies, thread_id=thread_id)
            await third.open()
            await ask(third, "what did we say?")
            await third.close()
    finally:
        app.stop()
    assert user_texts(requests_seen(server)[-1]) == [
        "first question",
        "from tab A",
        "from tab B",
        "what did we say?",
    ]
