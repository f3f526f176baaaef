"""Files that cannot be used, uploaded for real into the real app (bench/_common.py's
``Tab`` over raw socket.io): each is named in one sentence and the text waits with it.

An empty (0-byte) file: Chainlit's upload route refuses it with HTTP 500 (its
``persist_file`` takes no empty content), the browser says "Upload failed", drops the
file and sends the text without it. The app stores it (ui/chainlit_patches.py) and, when
the message is sent, names it as empty and keeps the message, with "Send without them".
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import httpx
import pytest

from bench._common import Tab
from tests.live_app import LiveApp, requests_seen, scripted_server

EMPTY_NOTE = "empty.png: the file is empty (0 bytes)"
KEPT = "Your message is kept: attach other files and send again, or send it without them."


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


async def send(tab: Tab, text: str, file_ids: list[str]) -> None:
    """Emit one message with its files as the browser does (Enter)."""
    message = {
        "threadId": "",
        "id": str(uuid.uuid4()),
        "name": "User",
        "type": "user_message",
        "output": text,
        "createdAt": datetime.now(UTC).isoformat(),
        "metadata": {},
    }
    references = [{"id": i} for i in file_ids]
    await tab.sio.emit("client_message", {"message": message, "fileReferences": references})


async def shown(tab: Tab, text: str, timeout_s: float = 30) -> str:
    """The first message of ``tab`` that contains ``text``, once it is shown."""
    deadline = time.monotonic() + timeout_s
    while not (found := [t for t in tab.texts() if text in t]):
        assert time.monotonic() < deadline, tab.texts()
        await asyncio.sleep(0.1)
    return found[0]


async def test_an_empty_file_is_attached_then_named_and_the_text_waits(
    app: LiveApp, server: str
) -> None:
    httpx.delete(f"{server}/debug/requests")
    async with httpx.AsyncClient(timeout=60) as http:
        tab = Tab(app.url, http, load_page=True)
        await tab.open()
        file_id = await tab.upload(b"", "empty.png", "image/png")  # raised on HTTP 500 before
        await send(tab, "what is in it? #scenario=quick", [file_id])
        note = await shown(tab, EMPTY_NOTE)
        assert KEPT in note
        await asyncio.sleep(1)
        assert requests_seen(server) == [], "the text waits: nothing was asked"
        await tab.close()
