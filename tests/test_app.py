"""The Chainlit handlers of app.py, run in a Chainlit context without a browser.

A WebsocketSession whose ``emit`` records what would go over the socket stands in
for the browser; the scripted server stands in for vLLM.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args, get_type_hints

import chainlit as cl
import pytest
from chainlit.config import config as chainlit_config
from chainlit.context import init_ws_context
from chainlit.session import WebsocketSession

import app
from backend.client import ServedModel
from backend.errors import ServerUnreachable
from backend.fair_use import Leaving
from backend.i18n import msg
from backend.logs import LOGGER_NAME
from backend.render import Button
from backend.settings import Settings
from backend.turn_runner import TurnRunner
from tests.conftest import DATA, RunningFake, SessionFactory, free_port
from tests.fakes.kimi_server import ANSWER, REASONING, conversation
from tests.media import make_pdf, make_video
from ui import process, turn_buttons
from ui.compare_view import PAIR_ID_TAIL
from ui.session import runner


def carries_text(event: str, data: Any) -> bool:
    """Whether a frame streams text: Chainlit's ``stream_token``, or an open block's live
    text (a ``window_message`` of kind ``live``, ui/bridge.py)."""
    if event == "window_message":
        said = data.get("kimi") if isinstance(data, dict) else None
        return isinstance(said, dict) and said.get("kind") == "live"
    return event == "stream_token"


@dataclass
class Browser:
    """What the app sent over the socket, in order."""

    frames: list[tuple[str, Any]] = field(default_factory=list)
    token_delay_s: float = 0.0
    """Seconds each streamed token takes to send (a slow browser)."""
    sending_token: asyncio.Event = field(default_factory=asyncio.Event)
    hold: Callable[[str, Any], bool] | None = None
    """Frames for which the browser hangs (set :attr:`holding`, then sleep long)."""
    holding: asyncio.Event = field(default_factory=asyncio.Event)

    async def emit(self, event: str, data: Any) -> None:
        # python-socketio's emit starts the send before it waits: a frame whose send is
        # cancelled still reaches the page.
        self.frames.append((event, data))
        if self.token_delay_s and carries_text(event, data):
            self.sending_token.set()
            await asyncio.sleep(self.token_delay_s)
        if self.hold is not None and self.hold(event, data):
            self.holding.set()
            await asyncio.sleep(30)

    def live(self, block_id: str) -> str:
        """The text a block showed live while it was open (ui/bridge.py, show_live)."""
        return "".join(
            d["kimi"]["text"]
            for e, d in self.frames
            if carries_text(e, d) and e == "window_message" and d["kimi"]["id"] == block_id
        )

    def steps(self, kind: str) -> dict[str, dict[str, Any]]:
        """Latest state of each step of a type, by id (new_message/update_message)."""
        latest: dict[str, dict[str, Any]] = {}
        for event, data in self.frames:
            if event in ("new_message", "update_message", "stream_start") and data["type"] == kind:
                latest[data["id"]] = {**latest.get(data["id"], {}), **data}
        return latest

    def texts(self) -> list[str]:
        """Final text of every assistant message, each with what the app says under it
        (the system message after an answer: its stats line, how it ended) as the page
        shows them, one answer."""
        latest: dict[str, dict[str, Any]] = {}
        for event, data in self.frames:
            if event in ("new_message", "update_message", "stream_start") and data["type"] in (
                "assistant_message",
                "system_message",
            ):
                latest[data["id"]] = {**latest.get(data["id"], {}), **data}
            elif event == "delete_message":
                latest.pop(data["id"], None)
        texts: list[str] = []
        for step in latest.values():
            if step["type"] == "system_message" and texts:
                texts[-1] = "\n\n".join(t for t in (texts[-1], step["output"]) if t)
            else:
                texts.append(step["output"])
        return texts

    def reasoning(self) -> str:
        """The reasoning as shown: its blocks' final text, in order (ui/blocks.py)."""
        return "".join(s["output"] for s in self.steps("undefined").values())

    def actions(self) -> list[str]:
        return [data["name"] for event, data in self.frames if event == "action"]


async def start_chat(
    settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    before_start: Callable[[], None] | None = None,
) -> Browser:
    """A chat as a new tab starts it: the app's resources for ``settings`` (``before_start``
    runs once they exist), then ``on_chat_start``."""
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
    monkeypatch.setattr(process, "SETTINGS", settings)
    await app.startup()
    if before_start is not None:
        before_start()
    await app.on_chat_start()
    return browser


@pytest.fixture(autouse=True)
async def close_resources() -> AsyncIterator[None]:
    """Close the app's shared resources after each test, as the app does at stop."""
    yield
    await app.shutdown()


async def click(frame: dict[str, Any]) -> None:
    """Press a button the app sent (an ``action`` frame) and wait for the answer it starts."""
    callbacks = {
        "retry": turn_buttons.on_retry,
        "send_anyway": turn_buttons.on_send_anyway,
        "compare": turn_buttons.on_compare,
    }
    session = cl.context.session
    before = session.current_task
    await callbacks[frame["name"]](
        cl.Action(name=frame["name"], payload=frame["payload"], id=frame["id"])
    )
    if session.current_task is not before and session.current_task is not None:
        await session.current_task


def action_frames(browser: Browser, label: str | None = None) -> list[dict[str, Any]]:
    """The ``action`` frames sent so far (optionally only those with ``label``)."""
    return [d for e, d in browser.frames if e == "action" and label in (None, d["label"])]


def user_message(text: str, *paths: Path, model: str | None = None) -> cl.Message:
    """A person's message with ``paths`` attached, ``model`` picked in the model picker."""
    elements = [cl.Image(name=p.name, path=str(p), mime="image/jpeg") for p in paths]
    message = cl.Message(content=text, author="User", type="user_message", elements=elements)
    message.modes = {"model": model} if model else None
    return message


def picker_options(browser: Browser) -> list[tuple[str, bool]]:
    """The model picker the app last showed: (served name, picked) per entry."""
    modes = [data for event, data in browser.frames if event == "set_modes"]
    assert modes, "no model picker was sent"
    return [(o["id"], o["default"]) for mode in modes[-1] for o in mode["options"]]


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
    assert browser.reasoning() == REASONING and step["output"] == ""  # in its blocks
    assert step["name"].startswith("Thought for ") and step["name"].endswith("s")
    assert step["defaultOpen"] is True and step["autoCollapse"] is False  # public/stream.js
    created = [d for e, d in browser.frames if e == "new_message" and d["type"] == "llm"]
    assert [d["name"] for d in created] == ["Thinking…"]
    answer = browser.texts()[-1]
    assert answer.startswith(ANSWER.strip()) and "TTFT" in answer and "tokens/s" in answer
    assert "◁" not in answer and REASONING not in answer
    assert "retry" in browser.actions()  # the Regenerate button
    assert conversation(fake.requests[-1])[0]["content"][0]["type"] == "image_url"


async def test_answer_tokens_are_batched(browser: Browser) -> None:
    await app.on_message(user_message("#scenario=long"))
    tokens = [d for e, d in browser.frames if carries_text(e, d)]
    assert browser.reasoning().count("w") == 30000
    assert 0 < len(tokens) < 300  # 30,000 reasoning tokens, far fewer socket frames


async def test_cut_off_offers_more_tokens(browser: Browser) -> None:
    await app.on_message(user_message("#scenario=cutoff"))
    assert browser.reasoning() == REASONING
    assert "cut off" in browser.texts()[-1] and "while still thinking" in browser.texts()[-1]
    labels = [d["label"] for e, d in browser.frames if e == "action"]
    assert "Retry with more tokens" in labels


async def test_server_error_keeps_the_turn_for_retry(browser: Browser, fake: RunningFake) -> None:
    await app.on_message(user_message("#scenario=error-images"))
    assert "Too many images" in browser.texts()[-1]
    assert "At most 4 image(s)" not in browser.texts()[-1]  # the server's words: app.log
    assert "retry" not in browser.actions()  # the same request would be refused again
    await app.on_message(user_message("#scenario=error-500"))
    assert "failed while answering" in browser.texts()[-1]
    assert "EngineCore" not in browser.texts()[-1]
    assert "Traceback" not in browser.texts()[-1]
    session = runner().chat
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
    content = conversation(fake.requests[-1])[-1]["content"]
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
    assert step["name"].endswith("(stopped)") and len(browser.reasoning()) > 10
    assert not step.get("isError")
    assert "Stopped" in browser.texts()[-1]
    turn = runner().chat.conversation.turns[-1]
    assert turn.status == "stopped" and turn.reasoning


async def test_unreachable_server_is_said_at_chat_start(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(base_url=f"http://127.0.0.1:{free_port()}/v1", connect_timeout_s=1)
    browser = await start_chat(settings, monkeypatch)
    assert "Connecting to the model server" in browser.texts()[-1]  # at once
    await wait_for(lambda: "The model server cannot be reached" in browser.texts()[-1])
    await app.on_chat_end()


async def test_a_thinking_model_answering_without_thought_leaves_no_step(browser: Browser) -> None:
    """The request writes ``◁think▷``, so "Thinking…" shows while the server prepares the
    reply; a reply that closes it at once (the scripted ``plain`` answer, continued) is all
    answer: the step leaves the page before the answer's first words."""
    await app.on_message(user_message("#scenario=plain"))
    (step,) = browser.steps("llm")
    events = [e if e != "delete_message" else f"delete {d['id']}" for e, d in browser.frames]
    gone = events.index(f"delete {step}")
    assert "stream_start" not in events[:gone]  # no answer block before the step left
    assert events.count(f"delete {step}") == 1
    assert browser.texts()[-1].startswith(ANSWER.strip())
    turn = runner().chat.conversation.turns[-1]
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


async def test_a_chat_sends_its_thread_id_as_its_session_for_the_router(
    browser: Browser, fake: RunningFake
) -> None:
    """vLLM's router keeps a chat on one replica by ``X-Session-Id`` (serving/replicas.py):
    the chat's Chainlit thread id, the same after a resume and on every UI worker."""
    await app.on_message(user_message("one #scenario=plain"))
    await app.on_message(user_message("two #scenario=plain"))
    sent = [h.get("x-session-id") for h in fake.server.headers if "x-request-id" in h]
    thread_id = cl.context.session.thread_id
    assert sent == [thread_id, thread_id] and thread_id


async def test_editing_an_earlier_message_asks_a_new_version_of_it(
    browser: Browser, fake: RunningFake
) -> None:
    first = user_message("first question")
    await app.on_message(first)
    await app.on_message(user_message("second question"))
    assert len(conversation(fake.requests[-1])) == 3
    first.content = "first question, edited"  # Chainlit's edit: same message id, new text
    await app.on_message(first)
    assert conversation(fake.requests[-1]) == [
        {"role": "user", "content": [{"type": "text", "text": "first question, edited"}]}
    ]
    chat = runner().chat
    assert [t.text for t in chat.conversation.turns] == ["first question, edited"]
    assert len(chat.versions) == 3 and chat.turn_of(first.id) is chat.conversation.turns[0]


async def test_regenerate_reruns_the_last_turn_without_its_old_answer(
    browser: Browser, fake: RunningFake
) -> None:
    await app.on_message(user_message("earlier"))
    await app.on_message(user_message("again please"))
    before = conversation(fake.requests[-1])
    await click(action_frames(browser, "Regenerate")[-1])
    assert conversation(fake.requests[-1]) == before  # same history, same question
    assert len(runner().chat.conversation.turns) == 2
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
    content = conversation(fake.requests[-1])[-1]["content"]
    assert [part["type"] for part in content] == ["image_url"] * 5 + ["text"]
    assert content[-1]["text"] == (
        "Pages 1-3 of slides.pdf\nFrames of clip.mp4 at 00:00.0, 00:01.5\nWhat happens?"
    )
    notes = browser.texts()
    (note,) = [n for n in notes if "slides.pdf" in n]  # one note for the turn
    pdf_notice, video_notice = note.split("\n\n")
    assert pdf_notice == "slides.pdf: pages 1-3 of 3 sent as images"
    assert video_notice.startswith("clip.mp4: 2 frames of the 00:03.0 video sent")
    assert notes[-1].startswith(ANSWER.strip())


async def test_stop_while_sending_to_the_browser_closes_the_upstream_stream(
    browser: Browser, fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stop usually lands while the app awaits the websocket, not the HTTP read.

    The stream to the server must then be closed at once and by the task that
    opened it (that is what makes vLLM abort), not later by the garbage collector
    in a finaliser task, where httpx's cleanup fails ("exit cancel scope in a
    different task") and the request may run on.
    """
    client = runner().chat.client
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
    # Opened and closed by the same task (the pacer's pump), before Stop returned.
    assert [what for what, _ in tasks] == ["opened", "closed"] and tasks[0][1] is tasks[1][1]
    for _ in range(100):  # and the server saw the client go
        if fake.server.aborted:
            break
        await asyncio.sleep(0.01)
    assert fake.server.aborted == [fake.server.headers[-1]["x-request-id"]]
    turn = runner().chat.conversation.turns[-1]
    assert turn.status == "stopped"


async def wait_for(condition: Callable[[], bool], timeout_s: float = 10) -> None:
    """Poll ``condition`` every 10 ms until it is true (fail after ``timeout_s``)."""
    for _ in range(int(timeout_s * 100)):
        if condition():
            return
        await asyncio.sleep(0.01)
    pytest.fail("condition not met in time")


async def test_regenerate_under_an_older_answer_reruns_that_turn(
    browser: Browser, fake: RunningFake
) -> None:
    """Defect: Regenerate under an older answer reran the last turn."""
    await app.on_message(user_message("first #scenario=plain"))
    await app.on_message(user_message("second #scenario=plain"))
    await click(action_frames(browser, "Regenerate")[0])  # under the first answer
    assert conversation(fake.requests[-1]) == [
        {"role": "user", "content": [{"type": "text", "text": "first #scenario=plain"}]}
    ]
    notes = browser.texts()
    assert any("Answering again" in n and "first #scenario=plain" in n for n in notes)
    assert any("1 later turn(s) stay with the earlier version" in n for n in notes)
    assert [t.text for t in runner().chat.conversation.turns] == ["first #scenario=plain"]
    assert len(runner().chat.versions) == 3  # the first version and turn 2 are kept
    assert notes[-1].startswith(ANSWER.strip())


async def test_send_without_them_sends_the_message_it_sits_under(
    browser: Browser, fake: RunningFake, tmp_path: Path
) -> None:
    """Defect: "Send without them" sent the newest draft, whichever button was pressed."""
    bogus = tmp_path / "holiday.jpg"
    bogus.write_text("<html>nope</html>")
    await app.on_message(user_message("older draft", bogus))
    await app.on_message(user_message("newer draft", bogus))
    await click(action_frames(browser, "Send without them")[0])
    assert conversation(fake.requests[-1])[-1]["content"] == [
        {"type": "text", "text": "older draft"}
    ]
    await click(action_frames(browser, "Send without them")[0])  # already sent
    assert browser.texts()[-1] == "That message was already sent or replaced."


async def test_stop_just_after_the_end_keeps_the_finished_answer(browser: Browser) -> None:
    """Defect: a Stop landing after the last token overwrote the answer with "Stopped"."""
    browser.hold = lambda event, data: (
        event == "new_message" and "TTFT" in str(data.get("output", ""))
    )
    long_enough_to_count = "word " * 2100  # a quarter of the room: its texts are counted
    question = f"done soon {long_enough_to_count}#scenario=plain"
    task = asyncio.create_task(app.on_message(user_message(question)))
    await asyncio.wait_for(browser.holding.wait(), timeout=10)  # sending the finished answer
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    browser.hold = None
    session = runner().chat
    turn = session.conversation.turns[-1]
    assert turn.status == "done" and turn.answer == ANSWER.lstrip()
    assert not any("Stopped" in text for text in browser.texts())
    await session.settled()  # the token learning was not cancelled by the Stop
    assert session.token_counter.knows(turn.answer)


async def test_a_shrunk_answer_budget_is_said_and_more_tokens_makes_room(
    browser: Browser, fake: RunningFake
) -> None:
    """Defect: the budget shrank silently and "more tokens" doubled the shrunk value."""
    session = runner().chat
    chosen = session.options.max_tokens if session.options else 0
    assert chosen == 4096  # Thinking-2506 default, capped at half of the 8192 context
    earlier = session.start_turn("long", "x" * 14_000, [])  # ~4,700 estimated tokens
    earlier.answer, earlier.status = "ok", "done"
    await app.on_message(user_message("#scenario=cutoff"))
    notes = browser.texts()
    assert any(f"not the {chosen} you chose" in n for n in notes)
    more = action_frames(browser, "Retry with more tokens")[-1]
    assert more["payload"]["max_tokens"] > chosen and more["payload"]["make_room"] is True
    await click(more)
    request = fake.requests[-1]
    assert request["max_tokens"] > 2 * 4096 - 100  # nearly the whole context, not 2 x shrunk
    assert len(conversation(request)) == 1  # the long older turn was left out to make room


async def test_more_tokens_that_cannot_fit_are_not_offered(browser: Browser) -> None:
    session = runner().chat
    assert session.options is not None
    session.with_options(max_tokens=8000)  # at most ~8,178 could fit: not worth offering
    await app.on_message(user_message("#scenario=cutoff"))
    assert action_frames(browser, "Retry with more tokens") == []
    assert "More tokens cannot fit" in browser.texts()[-1]


async def test_regenerate_runs_as_the_session_task_stop_works_and_nothing_overlaps(
    browser: Browser, fake: RunningFake
) -> None:
    """Defect: Regenerate ran outside the session's task: no Stop, overlapping answers."""
    await app.on_message(user_message("question #scenario=plain"))
    runner().chat.conversation.turns[-1].text = "question #scenario=slow"  # a long regenerate
    frames_before = len(browser.frames)
    await turn_buttons.on_retry(
        cl.Action(name="retry", payload=action_frames(browser, "Regenerate")[-1]["payload"])
    )
    regenerate = cl.context.session.current_task
    assert regenerate is not None and not regenerate.done()
    await wait_for(lambda: any(e == "stream_start" for e, _ in browser.frames[frames_before:]))
    assert ("task_start", {}) in browser.frames[frames_before:]  # the browser shows Stop
    follow_up = asyncio.create_task(app.on_message(user_message("next #scenario=plain")))
    await asyncio.sleep(0.3)
    assert [conversation(m)[-1]["content"][-1]["text"] for m in fake.requests[-1:]] == [
        "question #scenario=slow"
    ]  # the follow-up waits for the regenerate
    regenerate.cancel()  # Chainlit's Stop cancels the session's current task ...
    await app.on_stop()  # ... then calls on_stop, which stops every answer of the chat
    await asyncio.gather(regenerate, follow_up, return_exceptions=True)
    assert ("task_end", {}) in browser.frames[frames_before:]
    turns = runner().chat.conversation.turns
    assert turns[0].status == "stopped"
    assert any("Stopped" in text for text in browser.texts())


async def test_an_error_mid_reasoning_is_not_labelled_stopped(browser: Browser) -> None:
    """Defect: a failed stream titled its reasoning step "(stopped)"."""
    await app.on_message(user_message("#scenario=midstream-error"))
    step = next(iter(browser.steps("llm").values()))
    assert step["name"].endswith("(interrupted by an error)")
    assert "reported an error" in browser.texts()[-1] and "engine died" not in browser.texts()[-1]
    assert "retry" in browser.actions()


async def test_a_dropped_stream_keeps_the_partial_answer_marked_incomplete(
    browser: Browser,
) -> None:
    await app.on_message(user_message("#scenario=dropped"))
    texts = browser.texts()
    partial = next(t for t in texts if "Incomplete" in t)
    assert ANSWER.startswith(partial.split("\n\n*Incomplete")[0]) and len(partial) > 30
    assert "reply was cut off" in texts[-1] and "still loading" not in texts[-1]
    assert runner().chat.conversation.turns[-1].status == "failed"


async def test_the_chosen_profile_counts_before_the_first_connect(
    two_models: RunningFake, make_session: SessionFactory
) -> None:
    """Defect: a lazy first connect ignored the chat profile, and uploads used the
    fallback profile's image budget."""
    session = make_session(Settings(base_url=two_models.base_url))
    session.wanted_model = "kimi-vl-thinking-2506"
    assert session.upload_limits().in_token_limit == 16384  # before any connect
    session = make_session(Settings(base_url=two_models.base_url))
    session.wanted_model = "kimi-vl"  # Instruct, listed second
    two_models.reset()
    _ = [e async for e in TurnRunner(session).new_turn("m1", "hello", [])]  # connects lazily
    sent = two_models.requests[-1]
    assert sent["model"] == "kimi-vl" and sent["temperature"] == 0.2


def test_importing_the_app_writes_no_log_file(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KIMI_")}
    root = Path(__file__).resolve().parent.parent
    subprocess.run(
        [sys.executable, "-c", "import app"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(root)},
        check=True,
        capture_output=True,
        timeout=60,
    )
    assert not (tmp_path / "app.log").exists()


async def test_a_server_that_has_not_started_is_said_within_seconds(
    fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A silent server is explained in seconds, not after 10 minutes (the first-token note)."""
    browser = await start_chat(Settings(base_url=fake.base_url), monkeypatch)
    task = asyncio.create_task(app.on_message(user_message("#scenario=silent")))
    await wait_for(lambda: any("has not started answering yet" in t for t in browser.texts()))
    notes = [d for e, d in browser.frames if e == "new_message" and "not started" in d["output"]]
    assert notes and "Stop works at any time" in notes[0]["output"]
    await task  # then the answer comes, and the note goes
    assert browser.texts()[-1].startswith(ANSWER.strip())
    removed = {d["id"] for e, d in browser.frames if e == "delete_message"}
    assert notes[0]["id"] in removed


async def test_a_stalled_answer_shows_what_came_then_gives_up(
    fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(base_url=fake.base_url, idle_timeout_s=1.5)
    browser = await start_chat(settings, monkeypatch)
    await asyncio.wait_for(app.on_message(user_message("#scenario=stall")), timeout=20)
    step = next(iter(browser.steps("llm").values()))
    assert REASONING.startswith(browser.reasoning()) and len(browser.reasoning()) > 40
    assert step["name"].endswith("(interrupted by an error)")
    assert "nothing for 2 s" in browser.texts()[-1]  # 1.5 s, said in whole seconds
    assert "retry" in browser.actions()
    assert runner().chat.conversation.turns[-1].status == "failed"


async def upload(session: object, path: Path, mime: str, name: str | None = None) -> dict[str, Any]:
    """Upload ``path`` as the page does: Chainlit's ``POST /project/file`` handler."""
    from chainlit import server
    from fastapi import UploadFile
    from starlette.datastructures import Headers

    assert isinstance(session, WebsocketSession)

    with path.open("rb") as data:
        file = UploadFile(data, filename=name or path.name, headers=Headers({"content-type": mime}))
        response = await server.upload_file(None, session.id, file)
    reference: dict[str, Any] = json.loads(bytes(response.body))
    return reference


async def test_a_stored_file_of_the_app_is_not_judged_as_an_upload(
    browser: Browser, fake: RunningFake
) -> None:
    """Defect: the upload hook prepared every file Chainlit stored, the app's own (a
    starter's sample image, a grounding overlay) included, as if it were an upload."""
    session = cl.context.session
    try:
        await session.persist_file(
            name="rocket.jpg", mime="image/jpeg", path=str(DATA / "rocket.jpg")
        )
        assert len(runner().chat.prefetched) == 0
    finally:
        shutil.rmtree(session.files_dir, ignore_errors=True)


async def test_an_upload_the_app_cannot_use_is_refused_with_its_sentence(
    browser: Browser, fake: RunningFake, tmp_path: Path
) -> None:
    """Judged on attach: the upload answers 400 with the reason (the page shows it after
    "Failed to upload <name>:") and the file is forgotten and deleted."""
    from fastapi import HTTPException

    broken = tmp_path / "broken.jpg"
    broken.write_bytes((DATA / "rocket.jpg").read_bytes()[:300])
    session = cl.context.session
    try:
        with pytest.raises(HTTPException) as refused:
            await upload(session, broken, "image/jpeg")
        assert refused.value.status_code == 400
        assert str(refused.value.detail).startswith("the image is damaged")
        assert session.files == {} and not any(session.files_dir.iterdir())
        assert len(runner().chat.prefetched) == 0
    finally:
        shutil.rmtree(session.files_dir, ignore_errors=True)


async def test_an_uploaded_image_is_prepared_before_the_message_is_sent(
    browser: Browser, fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Preparation starts when Chainlit stores the file, before the message is sent."""
    import backend.images
    import backend.uploads

    calls: list[Path] = []
    real = backend.images.prepare_image

    def counted(path: Path, *args: Any, **kwargs: Any) -> Any:
        calls.append(Path(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(backend.uploads, "prepare_image", counted)
    session = cl.context.session
    try:
        reference = await upload(session, DATA / "rocket.jpg", "image/jpeg")
        stored = Path(session.files[reference["id"]]["path"])
        assert len(runner().chat.prefetched) == 1
        assert calls == [stored]  # in the media workers, before any message
        element = cl.Image(name="rocket.jpg", path=str(stored), mime="image/jpeg")
        message = cl.Message(content="What is it?", type="user_message", elements=[element])
        await app.on_message(message)
        assert calls == [stored]  # not prepared a second time
        assert len(runner().chat.prefetched) == 0
        parts = conversation(fake.requests[-1])[-1]["content"]
        assert [p["type"] for p in parts] == ["image_url", "text"]
    finally:
        shutil.rmtree(session.files_dir, ignore_errors=True)


async def test_compare_asks_the_other_server_the_same_turn(
    fake: RunningFake, instruct_server: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One UI in front of two servers (KIMI_SERVERS); Compare under an
    answer asks the other model the same turn, same images and history."""
    instruct_server.reset()
    settings = Settings(servers=f"{fake.base_url}, {instruct_server.base_url}")
    browser = await start_chat(settings, monkeypatch)
    assert picker_options(browser) == [("kimi-vl-thinking-2506", True), ("kimi-vl", False)]
    await app.on_message(user_message("first #scenario=plain"))
    await app.on_message(user_message("What is in this picture?", DATA / "rocket.jpg"))
    asked = conversation(fake.requests[-1])
    compare = action_frames(browser, "Compare with Kimi-VL Instruct")
    assert len(compare) == 2  # one under each answer
    await click(compare[-1])
    sent = instruct_server.requests[-1]
    assert sent["model"] == "kimi-vl" and sent["temperature"] == 0.2
    assert conversation(sent) == asked  # same history, same prepared image
    # A pair of columns (ui/compare_view.py), each titled with its model: the turn's own
    # answer, then the other model's, streamed into blocks, its stats under them.
    (pair,) = [s for s in browser.steps("tool").values() if s["id"].endswith(PAIR_ID_TAIL)]
    columns = [s for s in browser.steps("tool").values() if s["parentId"] == pair["id"]]
    assert [c["name"] for c in columns] == ["Kimi-VL Thinking (2506)", "Kimi-VL Instruct"]
    assert columns[0]["output"].startswith(ANSWER.strip())
    blocks = [s for s in browser.steps("undefined").values() if s["parentId"] == columns[1]["id"]]
    assert "".join(b["output"] for b in blocks).strip() == ANSWER.strip()
    assert columns[1]["output"].startswith("*TTFT")
    assert len(runner().chat.conversation.turns) == 2  # the chat goes on with its own model
    model = runner().chat.model
    assert model is not None and model.id == "kimi-vl-thinking-2506"


# --- the lifecycle of a turn: defects found following one turn --------------------------


async def test_a_closed_tab_stops_its_answer_once_its_session_is_gone(
    browser: Browser, fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: a tab closed for good (open mode) kept the model server generating its
    answer to the end. Chainlit calls on_chat_end at every disconnect and keeps the
    session ``session_timeout`` seconds for a reconnect; after that nobody can see it."""
    monkeypatch.setattr(chainlit_config.project, "session_timeout", 0.5)
    task = asyncio.create_task(app.on_message(user_message("#scenario=slow")))
    await wait_for(lambda: any(e == "stream_start" for e, _ in browser.frames))
    await app.on_chat_end()  # the socket went away
    await asyncio.sleep(0.2)
    assert fake.server.aborted == []  # within the reconnect grace the answer goes on
    await wait_for(lambda: bool(fake.server.aborted), timeout_s=5)
    assert fake.server.aborted == [fake.server.headers[-1]["x-request-id"]]
    await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), timeout=5)
    assert runner().chat.conversation.turns[-1].status == "stopped"


async def test_a_chat_the_browser_cleared_stops_its_answer_at_once(
    browser: Browser, fake: RunningFake
) -> None:
    """A new chat clears the session (``to_clear``): Chainlit deletes it at once, so its
    answer stops without waiting out the grace (60 s here)."""
    task = asyncio.create_task(app.on_message(user_message("#scenario=slow")))
    await wait_for(lambda: any(e == "stream_start" for e, _ in browser.frames))
    session = cl.context.session
    assert isinstance(session, WebsocketSession)
    session.to_clear = True
    await app.on_chat_end()
    await wait_for(lambda: bool(fake.server.aborted), timeout_s=3)
    await asyncio.wait_for(asyncio.gather(task, return_exceptions=True), timeout=5)
    assert runner().chat.conversation.turns[-1].status == "stopped"


async def test_a_tab_that_comes_back_within_the_grace_keeps_its_answer(
    browser: Browser, fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chainlit_config.project, "session_timeout", 0.5)
    task = asyncio.create_task(app.on_message(user_message("#scenario=steady")))
    await wait_for(lambda: any(e == "stream_start" for e, _ in browser.frames))
    await app.on_chat_end()
    session = cl.context.session
    assert isinstance(session, WebsocketSession)
    session.restore(new_socket_id=str(uuid.uuid4()))  # Chainlit's reconnect
    await asyncio.wait_for(task, timeout=20)
    assert fake.server.aborted == []
    assert runner().chat.conversation.turns[-1].status == "done"


async def test_a_model_picked_before_the_first_question_sends_nothing_before_its_words(
    fake: RunningFake, instruct_server: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: Instruct picked in a new chat sent the settings panel, the picker and "Kimi-VL
    Instruct answers from here on, with the conversation so far" (there was none) before
    the answer: three frames the page rendered before it showed the first words. The
    panel and the picker now follow the first words; the note is for a chat with turns."""
    instruct_server.reset()
    settings = Settings(servers=f"{fake.base_url}, {instruct_server.base_url}")
    browser = await start_chat(settings, monkeypatch)
    del browser.frames[:]
    await app.on_message(user_message("first #scenario=plain", model="kimi-vl"))
    assert instruct_server.requests[-1]["temperature"] == 0.2  # Instruct's defaults
    events = [event for event, _ in browser.frames]
    first_words = events.index("stream_start")
    assert not {"chat_settings", "set_modes"} & set(events[:first_words]), events
    [panel] = [data for event, data in browser.frames if event == "chat_settings"]
    assert {w["id"]: w["initial"] for w in panel}["temperature"] == 0.2
    assert picker_options(browser) == [("kimi-vl-thinking-2506", False), ("kimi-vl", True)]
    assert not any("answers from here on" in text for text in browser.texts())


async def test_a_picked_model_the_cache_names_is_asked_without_a_model_list_first(
    fake: RunningFake, instruct_server: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: a model picked in the composer made the question wait for a live
    ``/v1/models`` of its server before the request (one more round trip before the
    first words), though the picker offered it from the served-model cache."""
    instruct_server.reset()
    listed: list[str] = []

    def count_model_lists() -> None:
        client = process.resources().servers[1].client
        real = client.list_models

        async def list_models() -> list[ServedModel]:
            listed.append("kimi-vl")
            return await real()

        monkeypatch.setattr(client, "list_models", list_models)

    settings = Settings(servers=f"{fake.base_url}, {instruct_server.base_url}")
    browser = await start_chat(settings, monkeypatch, count_model_lists)
    before = len(listed)  # the chat start's refresh of the cache
    await app.on_message(user_message("hello #scenario=plain", model="kimi-vl"))
    assert [r["model"] for r in instruct_server.requests] == ["kimi-vl"]
    assert browser.texts()[-1].startswith(ANSWER.strip())
    assert len(listed) == before


async def test_a_question_does_not_wait_for_a_stale_model_list_before_its_request(
    fake: RunningFake, instruct_server: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: every question first read what is served for Compare from the model cache,
    which, older than 10 s, made it wait (up to 0.3 s) for a ``/v1/models`` answer before
    its request went; in a burst every question waited for it. Now it reads the caches as
    they are (a stale one refreshes for the next question), and Compare is still offered."""
    instruct_server.reset()
    settings = Settings(servers=f"{fake.base_url}, {instruct_server.base_url}")
    browser = await start_chat(settings, monkeypatch)
    asked_when_listed: list[int] = []
    for server in process.resources().servers:
        monkeypatch.setattr(server.models, "_clock", lambda: time.monotonic() + 3600)  # stale
        real = server.client.list_models

        async def slow_list(
            real: Callable[[], Awaitable[list[ServedModel]]] = real,
        ) -> list[ServedModel]:
            await asyncio.sleep(0.2)  # under the 0.3 s a stale cache is waited for
            asked_when_listed.append(len(fake.requests))
            return await real()

        monkeypatch.setattr(server.client, "list_models", slow_list)
    await app.on_message(user_message("hello #scenario=plain"))
    assert asked_when_listed and min(asked_when_listed) == 1  # the request went first
    assert browser.texts()[-1].startswith(ANSWER.strip())
    assert len(action_frames(browser, "Compare with Kimi-VL Instruct")) == 1


@dataclass
class SlowLeases:
    """The shared store's answer leases (backend.store.bounds.Leases) as a store under
    load answers them: each takes ``delay_s``; with ``refuse``, the store finds the person
    at their bound (another worker holds the rest). Records how many requests the model
    server had seen when each lease's transaction completed."""

    fake: RunningFake
    delay_s: float
    refuse: bool = False
    requests_seen: list[int] = field(default_factory=list)

    async def confirm(
        self, chat: str, person: str, released: Callable[[], None] = lambda: None
    ) -> Leaving | None:
        await asyncio.sleep(self.delay_s)
        self.requests_seen.append(len(self.fake.requests))
        bounds = process.resources().answers
        bounds.check(0, bounds.per_person if self.refuse else 0)
        return None


async def test_an_answers_request_goes_before_its_lease_in_the_store_is_taken(
    fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With answers counted in a shared store (sign-in on), the lease's transaction (a
    median 4.7 ms on SQLite under load) runs beside the model request, not before it: the
    scripted server has the request when the slowed lease completes, and the answer comes."""
    browser = await start_chat(Settings(base_url=fake.base_url), monkeypatch)
    fake.reset()
    leases = SlowLeases(fake, delay_s=0.3)
    process.resources().answers.shared = leases
    await app.on_message(user_message("hello #scenario=plain"))
    assert leases.requests_seen == [1]
    assert browser.texts()[-1].startswith(ANSWER.strip())


async def test_an_answer_the_store_finds_over_the_bound_is_cancelled_before_its_words(
    fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store refuses the lease after the request went (another worker holds the
    person's other answers): the request is closed before any of the answer is drawn, and
    the person reads the refusal they read when the bound is met on one worker."""
    browser = await start_chat(Settings(base_url=fake.base_url), monkeypatch)
    fake.reset()
    leases = SlowLeases(fake, delay_s=0.3, refuse=True)
    process.resources().answers.shared = leases
    await app.on_message(user_message("hello #scenario=slow"))
    assert leases.requests_seen == [1]
    await wait_for(lambda: bool(fake.server.aborted), timeout_s=5)
    assert fake.server.aborted == [fake.server.headers[-1]["x-request-id"]]
    said = browser.texts()
    assert "answers running or waiting in your chats" in said[-1]
    assert not any(REASONING[:20] in text or ANSWER.strip() in text for text in said)
    assert browser.reasoning() == ""
    assert process.resources().answers._tally.people == {}  # its place is given back


async def test_a_stale_model_list_is_asked_for_after_the_questions_request(
    fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A question's request goes before the refresh of a stale served-model cache begins
    (it begins with the page's catch-up after the first words): in a room asking at once,
    a model list read in the first question's turn cost every question behind it its CPU
    (docs/benchmarks.md, "The chat completion on aiohttp")."""
    browser = await start_chat(Settings(base_url=fake.base_url), monkeypatch)
    fake.reset()
    server = process.resources().servers[0]
    monkeypatch.setattr(server.models, "_clock", lambda: time.monotonic() + 3600)  # stale
    requests_when_listed: list[int] = []
    real = server.client.list_models

    async def listed() -> list[ServedModel]:
        requests_when_listed.append(len(fake.requests))
        return await real()

    monkeypatch.setattr(server.client, "list_models", listed)
    await app.on_message(user_message("hello #scenario=plain"))
    assert requests_when_listed and requests_when_listed[0] == 1
    assert browser.texts()[-1].startswith(ANSWER.strip())


async def test_a_picked_model_whose_server_is_down_is_refused_though_the_cache_names_it(
    fake: RunningFake, instruct_server: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The served-model cache keeps a failing server's last good list: a model picked
    there is asked for live, and a server that is down refuses the switch (the text back,
    the chat on its own model) instead of switching the chat to it."""
    instruct_server.reset()
    settings = Settings(servers=f"{fake.base_url}, {instruct_server.base_url}")
    browser = await start_chat(settings, monkeypatch)
    second = process.resources().servers[1]
    monkeypatch.setattr(second.models, "_clock", lambda: time.monotonic() + 3600)  # stale

    async def down() -> list[ServedModel]:
        raise ServerUnreachable(msg("Cannot reach the model server at {url}.", url="x"))

    monkeypatch.setattr(second.client, "list_models", down)
    await app.on_message(user_message("hello there", model="kimi-vl"))
    assert instruct_server.requests == []
    assert "Your text is back in the message box" in browser.texts()[-1]
    model = runner().chat.model
    assert model is not None and model.id == "kimi-vl-thinking-2506"


async def test_picking_the_other_model_mid_chat_keeps_the_conversation(
    fake: RunningFake, instruct_server: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: the model was a chat profile, and switching it started a new chat (the
    history gone). Picked in the composer, the next message goes to the other model with
    the whole conversation (answers without their reasoning), and a note says so."""
    instruct_server.reset()
    settings = Settings(servers=f"{fake.base_url}, {instruct_server.base_url}")
    browser = await start_chat(settings, monkeypatch)
    await app.on_message(user_message("first #scenario=plain"))
    first = conversation(fake.requests[-1])
    await app.on_message(user_message("second #scenario=plain", model="kimi-vl"))
    sent = instruct_server.requests[-1]
    assert sent["model"] == "kimi-vl" and sent["temperature"] == 0.2  # Instruct's defaults
    assert conversation(sent)[: len(first)] == first
    assert conversation(sent)[len(first)] == {"role": "assistant", "content": ANSWER}
    assert "Kimi-VL Instruct answers from here on, with the conversation so far." in (
        browser.texts()
    )
    assert len(runner().chat.conversation.turns) == 2
    assert picker_options(browser) == [("kimi-vl-thinking-2506", False), ("kimi-vl", True)]
    await app.on_message(user_message("third #scenario=plain", model="kimi-vl"))
    assert len(instruct_server.requests) == 2  # it stays with the picked model


async def test_a_picked_model_that_is_gone_keeps_the_chat_and_the_text(
    fake: RunningFake, instruct_server: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model the servers no longer serve: said, the text back in the message box, the
    chat on its own model, nothing asked."""
    instruct_server.reset()
    settings = Settings(servers=f"{fake.base_url}, {instruct_server.base_url}")
    browser = await start_chat(settings, monkeypatch)
    asked = len(fake.requests)
    await app.on_message(user_message("hello there", model="gone"))
    assert len(fake.requests) == asked and instruct_server.requests == []
    assert "does not serve 'gone'" in browser.texts()[-1]
    assert "Your text is back in the message box" in browser.texts()[-1]
    backs = [d["kimi"] for e, d in browser.frames if e == "window_message" and "kimi" in d]
    assert {"kind": "composer", "text": "hello there"} in backs
    model = runner().chat.model
    assert model is not None and model.id == "kimi-vl-thinking-2506"
    assert runner().chat.conversation.turns == []
    await app.on_message(user_message("hello #scenario=plain"))
    assert browser.texts()[-1].startswith(ANSWER.strip())


async def test_a_failed_model_list_does_not_bind_the_chat_to_the_first_server(
    fake: RunningFake, instruct_server: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: with two servers, a model-list error of the second one at chat start made
    the chat ask the first server for the second one's model, for good (then picked
    with the chat profile; now with the model picker, mid-chat)."""
    instruct_server.reset()
    failures = [ServerUnreachable(msg("Cannot reach the model server at {url}.", url="x"))] * 2

    def flaky_second_server() -> None:
        client = process.resources().servers[1].client
        real = client.list_models

        async def list_models() -> list[ServedModel]:
            if failures:
                raise failures.pop()
            return await real()

        monkeypatch.setattr(client, "list_models", list_models)

    settings = Settings(servers=f"{fake.base_url}, {instruct_server.base_url}")
    browser = await start_chat(settings, monkeypatch, flaky_second_server)
    await app.on_message(user_message("hello #scenario=plain", model="kimi-vl"))
    assert [r["model"] for r in instruct_server.requests] == ["kimi-vl"]
    assert browser.texts()[-1].startswith(ANSWER.strip())
    assert not any("does not serve" in text for text in browser.texts())


async def test_planning_a_prompt_near_the_limit_does_not_wait_on_a_stuck_tokenizer(
    browser: Browser, fake: RunningFake
) -> None:
    """Defect: counting the prompt with /tokenize had only the 600 s read timeout, up to
    three times, before the stream started. Planning has its own short deadline and then
    goes on with the estimate."""
    session = runner().chat
    earlier = session.start_turn("long", "x" * 19_000, [])  # ~6,300 tokens: near the limit
    earlier.answer, earlier.status = "ok", "done"
    fake.server.tokenize_mode = "hang"
    started = time.monotonic()
    await asyncio.wait_for(app.on_message(user_message("#scenario=plain")), timeout=15)
    assert time.monotonic() - started < 8
    assert browser.texts()[-1].startswith(ANSWER.strip())
    assert len(conversation(fake.requests[-1])) == 3  # the long turn went with it


async def test_an_attachment_removed_before_sending_frees_its_prepared_image(
    browser: Browser, fake: RunningFake
) -> None:
    """Defect: an image attached, prepared early, then removed from the message box (the
    browser tells the server nothing) stayed in memory until the chat ended."""
    session = cl.context.session
    try:
        kept = await upload(session, DATA / "rocket.jpg", "image/jpeg")
        await upload(session, DATA / "chelsea.png", "image/png", "removed.png")
        assert len(runner().chat.prefetched) == 2
        path = session.files[kept["id"]]["path"]
        element = cl.Image(name="rocket.jpg", path=str(path), mime="image/jpeg")
        await app.on_message(
            cl.Message(content="What is it?", type="user_message", elements=[element])
        )
        assert len(runner().chat.prefetched) == 0
        assert [p["type"] for p in conversation(fake.requests[-1])[-1]["content"]] == [
            "image_url",
            "text",
        ]
    finally:
        shutil.rmtree(session.files_dir, ignore_errors=True)


async def test_an_explicit_empty_api_key_means_no_key(
    fake: RunningFake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defect: ``KIMI_API_KEY=`` (.env.example: "an explicit empty value means no key")
    made every chat start with the OpenAI SDK's "Missing credentials" error."""
    monkeypatch.setenv("OPENAI_API_KEY", "not-for-this-server")  # never picked up instead
    browser = await start_chat(Settings(base_url=fake.base_url, api_key=""), monkeypatch)
    await app.on_message(user_message("hello #scenario=plain"))
    assert browser.texts()[-1].startswith(ANSWER.strip())
    assert not any("Missing credentials" in text for text in browser.texts())
    assert all("authorization" not in headers for headers in fake.server.headers)


async def test_an_unexpected_failure_is_said_in_the_apps_words(
    browser: Browser, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Chainlit would show an exception's own text; every error a person sees is ours."""

    def broken(*_: Any) -> Any:
        raise RuntimeError("internal detail nobody should read")

    with monkeypatch.context() as patched:
        patched.setattr(runner(), "ask", broken)
        await app.on_message(user_message("hello"))
    said = browser.texts()[-1]
    assert said.startswith("Something went wrong inside the app; app.log has the details")
    assert "internal detail" not in said and "RuntimeError" not in said
    await app.on_message(user_message("and now? #scenario=plain"))  # the next message works
    assert browser.texts()[-1].startswith(ANSWER.strip())


def test_every_button_an_answer_carries_has_its_callback() -> None:
    kinds = set(get_args(get_type_hints(Button)["kind"]))
    assert kinds  # the answers' buttons, as backend/render.py names them
    assert kinds <= set(chainlit_config.code.action_callbacks)  # registered by importing app
