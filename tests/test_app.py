"""The Chainlit handlers of app.py, run in a Chainlit context without a browser.

A WebsocketSession whose ``emit`` records what would go over the socket stands in
for the browser; the scripted server stands in for vLLM.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import chainlit as cl
import pytest
from chainlit.context import init_ws_context
from chainlit.session import WebsocketSession

import app
from backend.logs import LOGGER_NAME
from backend.settings import Settings
from tests.conftest import DATA, RunningFake, free_port
from tests.fakes.kimi_server import ANSWER, REASONING
from tests.media import make_pdf, make_video


@dataclass
class Browser:
    """What the app sent over the socket, in order."""

    frames: list[tuple[str, Any]] = field(default_factory=list)
    token_delay_s: float = 0.0
    """Seconds each streamed token takes to send (a slow browser)."""
    sending_token: asyncio.Event = field(default_factory=asyncio.Event)

    async def emit(self, event: str, data: Any) -> None:
        if event == "stream_token" and self.token_delay_s:
            self.sending_token.set()
            await asyncio.sleep(self.token_delay_s)
        self.frames.append((event, data))

    def steps(self, kind: str) -> dict[str, dict[str, Any]]:
        """Latest state of each step of a type, by id (new_message/update_message)."""
        latest: dict[str, dict[str, Any]] = {}
        for event, data in self.frames:
            if event in ("new_message", "update_message", "stream_start") and data["type"] == kind:
                latest[data["id"]] = {**latest.get(data["id"], {}), **data}
        return latest

    def texts(self) -> list[str]:
        """Final text of every assistant message."""
        return [s["output"] for s in self.steps("assistant_message").values()]

    def actions(self) -> list[str]:
        return [data["name"] for event, data in self.frames if event == "action"]


async def start_chat(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Browser:
    browser = Browser()

    async def emit_call(*_: Any) -> None:
        return None

    session = WebsocketSession(
        id=str(uuid.uuid4()),
        socket_id=str(uuid.uuid4()),
        emit=browser.emit,  # type: ignore[arg-type]  # Chainlit awaits it; its hint is wrong
        emit_call=emit_call,
        user_env={},
        client_type="webapp",
    )
    init_ws_context(session)
    await app.shutdown()  # each test's settings get their own shared resources
    monkeypatch.setattr(app, "SETTINGS", settings)
    await app.startup()
    await app.on_chat_start()
    return browser


@pytest.fixture(autouse=True)
async def close_resources() -> AsyncIterator[None]:
    """Close the app's shared resources after each test, as the app does at stop."""
    yield
    await app.shutdown()


async def click(frame: dict[str, Any]) -> None:
    """Press a button the app sent (an ``action`` frame) and wait for the answer it starts."""
    callback = app.on_retry if frame["name"] == "retry" else app.on_send_anyway
    session = cl.context.session
    before = session.current_task
    await callback(cl.Action(name=frame["name"], payload=frame["payload"], id=frame["id"]))
    if session.current_task is not before and session.current_task is not None:
        await session.current_task


def action_frames(browser: Browser, label: str | None = None) -> list[dict[str, Any]]:
    """The ``action`` frames sent so far (optionally only those with ``label``)."""
    return [d for e, d in browser.frames if e == "action" and label in (None, d["label"])]


def user_message(text: str, *paths: Path) -> cl.Message:
    elements = [cl.Image(name=p.name, path=str(p), mime="image/jpeg") for p in paths]
    return cl.Message(content=text, author="User", type="user_message", elements=elements)


@pytest.fixture
async def browser(fake: RunningFake, monkeypatch: pytest.MonkeyPatch) -> Browser:
    return await start_chat(Settings(base_url=fake.base_url), monkeypatch)


async def test_photo_question_streams_reasoning_step_then_answer(
    browser: Browser, fake: RunningFake
) -> None:
    await app.on_message(user_message("What is in this picture?", DATA / "rocket.jpg"))
    steps = browser.steps("llm")
    assert len(steps) == 1
    step = next(iter(steps.values()))
    assert step["output"] == REASONING
    assert step["name"].startswith("Thought for ") and step["name"].endswith("s")
    assert step["defaultOpen"] is True and step["autoCollapse"] is True
    created = [d for e, d in browser.frames if e == "new_message" and d["type"] == "llm"]
    assert [d["name"] for d in created] == ["Thinking…"]
    answer = browser.texts()[-1]
    assert answer.startswith(ANSWER.strip()) and "TTFT" in answer and "tokens/s" in answer
    assert "◁" not in answer and REASONING not in answer
    assert "retry" in browser.actions()  # the Regenerate button
    assert fake.requests[-1]["messages"][0]["content"][0]["type"] == "image_url"


async def test_answer_tokens_are_batched(browser: Browser) -> None:
    await app.on_message(user_message("#scenario=long"))
    tokens = [d for e, d in browser.frames if e == "stream_token"]
    step = next(iter(browser.steps("llm").values()))
    assert step["output"].count("w") == 30000
    assert len(tokens) < 300  # 30,000 reasoning tokens, far fewer socket frames


async def test_cut_off_offers_more_tokens(browser: Browser) -> None:
    await app.on_message(user_message("#scenario=cutoff"))
    step = next(iter(browser.steps("llm").values()))
    assert step["output"] == REASONING
    assert "cut off" in browser.texts()[-1] and "while still thinking" in browser.texts()[-1]
    labels = [d["label"] for e, d in browser.frames if e == "action"]
    assert "Retry with more tokens" in labels


async def test_server_error_keeps_the_turn_for_retry(browser: Browser, fake: RunningFake) -> None:
    await app.on_message(user_message("#scenario=error-images"))
    assert "At most 4 image(s)" in browser.texts()[-1]
    assert "retry" not in browser.actions()  # the same request would be refused again
    await app.on_message(user_message("#scenario=error-500"))
    assert "EngineCore" in browser.texts()[-1]
    assert "Traceback" not in browser.texts()[-1]
    session = app.chat()
    turn = session.conversation.turns[-1]
    assert turn.status == "failed"
    turn.text = "now fine"  # as if the cause was fixed; the retry resends the turn
    await click(action_frames(browser, "Retry")[-1])
    assert browser.texts()[-1].startswith(ANSWER.strip())
    status: str = turn.status
    assert status == "done" and session.conversation.turns[-1] is turn


async def test_bad_upload_is_refused_and_message_kept(
    browser: Browser, fake: RunningFake, tmp_path: Path
) -> None:
    bogus = tmp_path / "holiday.jpg"
    bogus.write_text("<html>nope</html>")
    good = tmp_path / "rocket.jpg"
    shutil.copy(DATA / "rocket.jpg", good)
    await app.on_message(user_message("Compare these", bogus, good))
    assert "holiday.jpg" in browser.texts()[-1] and fake.requests == []
    assert "send_anyway" in browser.actions()
    await click(action_frames(browser, "Send without them")[-1])
    content = fake.requests[-1]["messages"][-1]["content"]
    assert [p["type"] for p in content] == ["image_url", "text"]
    assert content[-1]["text"] == "Compare these"


async def test_stop_keeps_partial_reasoning(browser: Browser) -> None:
    task = asyncio.create_task(app.on_message(user_message("#scenario=slow")))
    for _ in range(200):
        await asyncio.sleep(0.02)
        if any(e == "stream_start" for e, _ in browser.frames):
            break
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    step = next(iter(browser.steps("llm").values()))
    assert step["name"].endswith("(stopped)") and len(step["output"]) > 10
    assert not step.get("isError")
    assert "Stopped" in browser.texts()[-1]
    turn = app.chat().conversation.turns[-1]
    assert turn.status == "stopped" and turn.reasoning


async def test_unreachable_server_is_said_at_chat_start(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(base_url=f"http://127.0.0.1:{free_port()}/v1", connect_timeout_s=1)
    browser = await start_chat(settings, monkeypatch)
    assert "Cannot reach the model server" in browser.texts()[-1]
    await app.on_chat_end()


async def test_unmarked_answer_of_a_thinking_model_is_shown_as_answer(browser: Browser) -> None:
    await app.on_message(user_message("#scenario=plain"))
    removed = [d for e, d in browser.frames if e == "delete_message"]
    assert [d["type"] for d in removed] == ["llm"]
    assert browser.texts()[-1].startswith(ANSWER.strip())
    turn = app.chat().conversation.turns[-1]
    assert turn.answer == ANSWER.lstrip() and turn.reasoning == ""


async def test_request_id_is_sent_and_logged(browser: Browser, fake: RunningFake) -> None:
    await app.on_message(user_message("Which request am I? #scenario=plain"))
    request_id = fake.server.headers[-1]["x-request-id"]
    assert re.fullmatch(r"chat-[0-9a-f]{32}", request_id)
    logger = logging.getLogger(LOGGER_NAME)
    files = [h.baseFilename for h in logger.handlers if isinstance(h, logging.FileHandler)]
    assert files, "the app logs to a file (KIMI_APP_LOG)"
    lines = [line for line in Path(files[0]).read_text().splitlines() if request_id in line]
    assert len(lines) == 2  # the request with its size, then how it ended
    assert "prompt_tokens~" in lines[0] and lines[1].endswith("ended: done")


async def test_editing_an_earlier_message_rewinds_history(
    browser: Browser, fake: RunningFake
) -> None:
    first = user_message("first question")
    await app.on_message(first)
    await app.on_message(user_message("second question"))
    assert len(fake.requests[-1]["messages"]) == 3
    first.content = "first question, edited"  # Chainlit's edit: same message id, new text
    await app.on_message(first)
    assert fake.requests[-1]["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "first question, edited"}]}
    ]
    assert [t.text for t in app.chat().conversation.turns] == ["first question, edited"]


async def test_regenerate_reruns_the_last_turn_without_its_old_answer(
    browser: Browser, fake: RunningFake
) -> None:
    await app.on_message(user_message("earlier"))
    await app.on_message(user_message("again please"))
    before = fake.requests[-1]["messages"]
    await click(action_frames(browser, "Regenerate")[-1])
    assert fake.requests[-1]["messages"] == before  # same history, same question
    assert len(app.chat().conversation.turns) == 2
    assert browser.texts()[-1].startswith(ANSWER.strip())


async def test_a_chat_end_does_not_break_the_chat_that_goes_on(browser: Browser) -> None:
    """Chainlit ends and restores a chat on a websocket reconnect; the next question works."""
    await app.on_chat_end()
    await app.on_message(user_message("still there?"))
    assert browser.texts()[-1].startswith(ANSWER.strip())


async def test_pdf_pages_and_video_frames_share_the_image_limit(
    fake: RunningFake, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    browser = await start_chat(
        Settings(base_url=fake.base_url, max_images_per_prompt=5), monkeypatch
    )
    # Small pages (3x2 in: 900x600 px, 704 tokens): 3 pages fit the scripted server's
    # 8192-token context, of which pictures may take half.
    pdf = make_pdf(tmp_path / "slides.pdf", pages=3, size_px=(300, 200))
    video = make_video(tmp_path / "clip.mp4", seconds=3)
    elements: list[cl.ElementBased] = [
        cl.File(name="slides.pdf", path=str(pdf), mime="application/pdf"),
        cl.File(name="clip.mp4", path=str(video), mime="video/mp4"),
    ]
    message = cl.Message(content="What happens?", type="user_message", elements=elements)
    await app.on_message(message)
    content = fake.requests[-1]["messages"][-1]["content"]
    assert [part["type"] for part in content] == ["image_url"] * 5 + ["text"]
    assert content[-1]["text"] == (
        "Pages 1-3 of slides.pdf\nFrames of clip.mp4 at 00:00.0, 00:01.5\nWhat happens?"
    )
    notes = browser.texts()
    assert "ℹ️ slides.pdf: pages 1-3 of 3 sent as images" in notes
    assert any(n.startswith("ℹ️ clip.mp4: 2 frames of the 00:03.0 video sent") for n in notes)
    assert notes[-1].startswith(ANSWER.strip())


async def test_stop_while_sending_to_the_browser_closes_the_upstream_stream(
    browser: Browser, fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stop usually lands while the app awaits the websocket, not the HTTP read.

    The stream to the server must then be closed at once and in the same task
    (that is what makes vLLM abort), not later by the garbage collector in a
    finaliser task, where httpx's cleanup fails ("exit cancel scope in a
    different task") and the request may run on.
    """
    client = app.chat().client
    stream = client.stream
    tasks: list[tuple[str, asyncio.Task[Any] | None]] = []

    async def watched(request: Any) -> Any:
        tasks.append(("opened", asyncio.current_task()))
        try:
            async for event in stream(request):
                yield event
        finally:
            tasks.append(("closed", asyncio.current_task()))

    monkeypatch.setattr(client, "stream", watched)
    browser.token_delay_s = 10  # a slow browser: Stop lands while a token is being sent
    task = asyncio.create_task(app.on_message(user_message("#scenario=slow")))
    await asyncio.wait_for(browser.sending_token.wait(), timeout=30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert tasks == [("opened", task), ("closed", task)]  # closed before Stop returned
    for _ in range(100):  # and the server saw the client go
        if fake.server.aborted:
            break
        await asyncio.sleep(0.01)
    assert fake.server.aborted == [fake.server.headers[-1]["x-request-id"]]
    turn = app.chat().conversation.turns[-1]
    assert turn.status == "stopped"
