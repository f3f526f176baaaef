"""Kimi-VL Chat: Chainlit wiring. Logic lives in ``backend/``; this file renders.

Run with ``./launch.sh`` (starts vLLM too) or ``chainlit run app.py`` against a
server at ``KIMI_BASE_URL``.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import chainlit as cl

from backend.batching import coalesce
from backend.chat import ChatSession, Upload
from backend.conversation import Turn
from backend.errors import ChatError
from backend.events import AnswerDelta, Done, ReasoningDelta
from backend.presenter import (
    DEV_MODE_BANNER,
    THINKING_LABEL,
    cut_off_note,
    stats_line,
    thought_label,
)
from backend.settings import Settings

SETTINGS = Settings()


def chat() -> ChatSession:
    """This browser session's chat state."""
    session: ChatSession = cl.user_session.get("chat")
    return session


async def say(text: str, actions: list[cl.Action] | None = None) -> None:
    """A short note from the app (not from the model)."""
    await cl.Message(content=text, author="Kimi-VL Chat", actions=actions or []).send()


async def wait_until_ready(session: ChatSession, status: cl.Message) -> None:
    """Poll the server while it loads, then tell the person it is ready."""
    while not await session.client.is_healthy():
        await asyncio.sleep(2)
    try:
        model = await session.connect()
    except ChatError as exc:
        status.content = f"⚠️ {exc}"
    else:
        status.content = f"✅ The model server is ready: **{model.id}**. Ask away."
    await status.update()


@cl.on_chat_start
async def on_chat_start() -> None:
    """Create the chat state and tell the person whether the server is ready."""
    session = ChatSession.create(SETTINGS)
    cl.user_session.set("chat", session)
    if SETTINGS.dev_mode:
        await say(DEV_MODE_BANNER)
    try:
        await session.connect()
    except ChatError as exc:
        status = cl.Message(
            content=f"⏳ {exc} I will say here when it is ready.", author="Kimi-VL Chat"
        )
        await status.send()
        cl.user_session.set("status_task", asyncio.create_task(wait_until_ready(session, status)))


@cl.on_message
async def on_message(message: cl.Message) -> None:
    """Prepare the uploads, record the turn, stream the answer."""
    session = chat()
    uploads = [Upload(name=el.name, path=Path(el.path)) for el in message.elements or [] if el.path]
    prepared = await session.prepare_uploads(uploads)
    if prepared.problems:
        cl.user_session.set("draft", (message.id, message.content, prepared.images))
        lines = "\n".join(f"- {p}" for p in prepared.problems)
        can_send = bool(message.content.strip() or prepared.images)
        actions = [cl.Action(name="send_anyway", payload={}, label="Send without them")]
        await say(
            f"⚠️ Some files could not be used:\n{lines}\n\nYour message is kept: attach other "
            "files and send again" + (", or send it without them." if can_send else "."),
            actions if can_send else None,
        )
        return
    for notice in prepared.notices:
        await say(f"ℹ️ {notice}")
    turn = session.start_turn(message.id, message.content, prepared.images)
    await run_turn(session, turn)


@cl.action_callback("send_anyway")
async def on_send_anyway(action: cl.Action) -> None:
    """Send the kept message with only the files that could be used."""
    await action.remove()
    message_id, text, images = cl.user_session.get("draft")
    session = chat()
    await run_turn(session, session.start_turn(message_id, text, images))


@cl.action_callback("retry")
async def on_retry(action: cl.Action) -> None:
    """Run the last turn again (after an error, a Stop, a cut-off, or to regenerate)."""
    await action.remove()
    session = chat()
    turn = session.last_turn()
    if turn is not None:
        await run_turn(session, turn, action.payload.get("max_tokens"))


def retry_action(label: str = "Retry", max_tokens: int | None = None) -> cl.Action:
    """A button that reruns the last turn."""
    payload = {"max_tokens": max_tokens} if max_tokens else {}
    return cl.Action(name="retry", payload=payload, label=label, icon="refresh-cw")


async def run_turn(session: ChatSession, turn: Turn, max_tokens: int | None = None) -> None:
    """Stream one answer: reasoning into a collapsible step, answer into a message."""
    try:
        request, notices = await session.plan_request(turn, max_tokens)
    except ChatError as exc:
        turn.status = "failed"
        await say(f"⚠️ {exc}", [retry_action()])
        return
    for notice in notices:
        await say(f"ℹ️ {notice}")
    show_reasoning = session.options is None or session.options.show_reasoning
    answer = cl.Message(content="")
    step: cl.Step | None = None
    thinking_since = 0.0

    async def close_step(stopped: bool = False) -> None:
        nonlocal step
        if step is not None:
            step.name = thought_label(time.monotonic() - thinking_since, stopped=stopped)
            step.end = cl.utils.utc_now()
            await step.update()
            step = None

    try:
        async for event in coalesce(session.respond(turn, request)):
            if isinstance(event, ReasoningDelta):
                if not show_reasoning:
                    continue
                if step is None:
                    thinking_since = time.monotonic()
                    step = cl.Step(
                        name=THINKING_LABEL, type="llm", default_open=True, auto_collapse=True
                    )
                    step.start = cl.utils.utc_now()
                    await step.send()
                await step.stream_token(event.text)
            elif isinstance(event, AnswerDelta):
                await close_step()
                await answer.stream_token(event.text)
            elif isinstance(event, Done):
                if event.answer_in_reasoning and step is not None:
                    await step.remove()  # no marker came: that text was the answer
                    step = None
                await close_step()
                await finish_answer(answer, turn, event, request.max_tokens)
    except asyncio.CancelledError:
        await close_step(stopped=True)
        answer.content = (turn.answer + "\n\n" if turn.answer else "") + "*⏹ Stopped.*"
        answer.actions = [retry_action()]
        await answer.send()
        raise
    except ChatError as exc:
        await close_step(stopped=True)
        if turn.answer:
            await answer.send()
        await say(f"⚠️ {exc}", [retry_action()])


async def finish_answer(answer: cl.Message, turn: Turn, done: Done, max_tokens: int) -> None:
    """End the answer message: stats line, cut-off note, regenerate button."""
    lines = [turn.answer] if turn.answer else []
    actions = [retry_action("Regenerate")]
    if done.finish_reason == "length":
        lines.append(f"⚠️ {cut_off_note(max_tokens, in_reasoning=done.reasoning_unclosed)}")
        actions = [retry_action("Retry with more tokens", max_tokens * 2), retry_action()]
    lines.append(f"*{stats_line(done)}*")
    answer.content = "\n\n".join(lines)
    answer.actions = actions
    await answer.send()


@cl.on_chat_end
async def on_chat_end() -> None:
    """Stop the readiness poll and close the HTTP connections of this chat."""
    task = cl.user_session.get("status_task")
    if task is not None:
        task.cancel()
    session = cl.user_session.get("chat")
    if session is not None:
        await session.client.aclose()
