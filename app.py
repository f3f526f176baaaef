"""Kimi-VL Chat: Chainlit wiring. Logic lives in ``backend/``; this file renders.

Run with ``./launch.sh`` (starts vLLM too) or ``chainlit run app.py`` against a
server at ``KIMI_BASE_URL``.
"""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from pathlib import Path
from typing import Any

import chainlit as cl
from chainlit.data.base import BaseDataLayer
from chainlit.input_widget import InputWidget, Slider, Switch
from chainlit.types import ThreadDict

from backend.batching import coalesce
from backend.chat import ChatSession, Upload
from backend.conversation import Turn
from backend.errors import ChatError, ServerLoading, can_retry
from backend.events import AnswerDelta, Done, ReasoningDelta
from backend.logs import configure as configure_logging
from backend.panel import option_changes, panel_fields, profile_choices, served_models
from backend.presenter import (
    DEV_MODE_BANNER,
    cut_off_note,
    ready_note,
    stats_line,
    stopped_note,
    unusable_files_note,
    waiting_note,
)
from backend.settings import Settings
from backend.starters import sample_for, starters_for
from ui import history
from ui.reasoning_view import ReasoningView

SETTINGS = Settings()
configure_logging(SETTINGS.app_log)
READY_POLL_S = 1.0  # seconds between two health checks while the server is not ready

# --- Sign-in and stored chats (ui/history.py): on once a user exists ------------
STORE = history.setup(SETTINGS)  # None: no user yet, the app runs open and stores nothing
if STORE is not None:

    @cl.password_auth_callback
    async def sign_in(username: str, password: str) -> cl.User | None:
        """Check a name and password against the users added from the shell."""
        return await history.sign_in(username, password)

    @cl.data_layer
    def data_layer() -> BaseDataLayer:
        """Chainlit's SQL data layer on the app's store."""
        return history.data_layer()

    @cl.on_shared_thread_view
    async def on_shared_thread_view(thread: ThreadDict, viewer: cl.User | None) -> bool:
        """Others may open a chat only once its owner shared it."""
        return await history.may_view_shared(thread, viewer)


def chat() -> ChatSession:
    """This browser session's chat state."""
    session: ChatSession = cl.user_session.get("chat")
    return session


async def say(text: str, actions: list[cl.Action] | None = None) -> None:
    """A short note from the app (not from the model)."""
    await cl.Message(content=text, author="Kimi-VL Chat", actions=actions or []).send()


@cl.set_chat_profiles
async def chat_profiles(user: cl.User | None) -> list[cl.ChatProfile]:
    """One profile per served model when the server serves several (Thinking, Instruct)."""
    return [
        cl.ChatProfile(
            name=c.name, display_name=c.label, markdown_description=c.description, default=c.default
        )
        for c in profile_choices(await served_models(SETTINGS))
    ]


@cl.set_starters
async def starters(user: cl.User | None, language: str | None = None) -> list[cl.Starter]:
    """Suggested questions, each with a bundled sample image (attached in on_message)."""
    return [
        cl.Starter(label=s.label, message=s.message, icon=s.icon_url)
        for s in starters_for(language)
    ]


async def send_settings(session: ChatSession) -> None:
    """Show the settings panel with the connected model's current options."""
    assert session.options is not None
    widgets: list[InputWidget] = [
        Slider(id=f.id, label=f.label, initial=float(f.initial), min=f.min, max=f.max,
               step=f.step, description=f.description)
        if f.kind == "slider"
        else Switch(id=f.id, label=f.label, initial=bool(f.initial), description=f.description)
        for f in panel_fields(session.profile, session.options, session.max_model_len)
    ]  # fmt: skip
    await cl.ChatSettings(widgets).send()


@cl.on_settings_update
async def on_settings_update(values: dict[str, Any]) -> None:
    """Apply the settings panel to the next answers."""
    session = chat()
    if session.options is not None:
        session.with_options(**option_changes(values))


async def wait_until_ready(session: ChatSession, status: cl.Message) -> None:
    """Poll the server while it is unreachable or loading, then say it is ready."""
    profile = cl.user_session.get("chat_profile") or None
    while True:
        await asyncio.sleep(READY_POLL_S)
        if not await session.client.is_healthy():
            continue
        try:
            await session.connect(profile)
        except ServerLoading as exc:
            status.content = waiting_note(str(exc))
            await status.update()
            continue
        except ChatError as exc:
            status.content = f"⚠️ {exc}"
            await status.update()
            return
        break
    status.content = ready_note(session.profile.label)
    await status.update()
    await send_settings(session)


@cl.on_chat_start
async def on_chat_start() -> None:
    """Create the chat state, connect to the chosen model, show the settings."""
    session = ChatSession.create(SETTINGS)
    cl.user_session.set("chat", session)
    if SETTINGS.dev_mode:
        await say(DEV_MODE_BANNER)
    try:
        await session.connect(cl.user_session.get("chat_profile") or None)
    except ChatError as exc:
        status = cl.Message(content=waiting_note(str(exc)), author="Kimi-VL Chat")
        await status.send()
        cl.user_session.set("status_task", asyncio.create_task(wait_until_ready(session, status)))
    else:
        await send_settings(session)
    await history.offer_export()


@cl.on_message
async def on_message(message: cl.Message) -> None:
    """Prepare the uploads (or a starter's sample image), record the turn, stream the answer."""
    session = chat()
    if message.command == history.EXPORT_COMMAND:
        await send_export(session)
        return
    uploads = [Upload(name=el.name, path=Path(el.path)) for el in message.elements or [] if el.path]
    sample = None if uploads else sample_for(message.content)
    if sample is not None:
        uploads = [Upload(name=sample.name, path=sample)]
        image = cl.Image(name=sample.name, path=str(sample), display="inline", size="medium")
        await image.send(for_id=message.id)
    prepared = await session.prepare_uploads(uploads)
    text = prepared.message_text(message.content)  # with PDF pages / video frame times
    if prepared.problems:
        cl.user_session.set("draft", (message.id, text, prepared.images))
        can_send = bool(message.content.strip() or prepared.images)
        actions = [cl.Action(name="send_anyway", payload={}, label="Send without them")]
        await say(unusable_files_note(prepared.problems, can_send), actions if can_send else None)
        return
    for notice in prepared.notices:
        await say(f"ℹ️ {notice}")
    if message.id in session.message_turns:  # an edit: what followed it is gone
        await history.forget_after(message)
    turn = session.start_turn(message.id, text, prepared.images)
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
    """Stream one answer: reasoning into a collapsible step, then the answer message.

    The answer message is created at its first token, so it sits below the step.
    """
    try:
        request, notices = await session.plan_request(turn, max_tokens)
    except ChatError as exc:
        turn.status = "failed"
        await say(f"⚠️ {exc}", [retry_action()] if can_retry(exc) else None)
        return
    for notice in notices:
        await say(f"ℹ️ {notice}")
    show_reasoning = session.options is None or session.options.show_reasoning
    answer: cl.Message | None = None
    reasoning = ReasoningView()
    done: Done | None = None
    turn.status = "pending"
    await history.save_turn(session, turn)
    try:
        async with aclosing(coalesce(session.respond(turn, request))) as events:
            async for event in events:
                if isinstance(event, ReasoningDelta):
                    if show_reasoning:
                        await reasoning.add(event.text)
                elif isinstance(event, AnswerDelta):
                    await reasoning.close()
                    answer = answer or cl.Message(content="")
                    await answer.stream_token(event.text)
                elif isinstance(event, Done):
                    done = event
                    if event.answer_in_reasoning:
                        await reasoning.discard()  # no marker came: that text was the answer
                    await reasoning.close()
                    answer = answer or cl.Message(content="")
                    await finish_answer(answer, turn, event, request.max_tokens)
    except asyncio.CancelledError:
        await reasoning.close(stopped=True)
        answer = answer or cl.Message(content="")
        answer.content = stopped_note(turn.answer)
        answer.actions = [retry_action()]
        await answer.send()
        raise
    except ChatError as exc:
        await reasoning.close(stopped=True)
        if answer is not None:
            await answer.send()
        await say(f"⚠️ {exc}", [retry_action()] if can_retry(exc) else None)
    finally:
        await history.save_turn(session, turn, done, answer.id if answer else None)


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
    """Stop the readiness poll (the HTTP client is shared by all chats and stays open)."""
    task = cl.user_session.get("status_task")
    if task is not None:
        task.cancel()


# --- Stored chats: resume and export (ui/history.py) ---------------------------
@cl.on_chat_resume
async def on_chat_resume(thread: ThreadDict) -> None:
    """Rebuild a stored chat: turns, images, model and settings; Regenerate on its last answer."""
    session, restored = await history.resume(thread, SETTINGS)
    cl.user_session.set("chat", session)
    if session.options is None:
        status = cl.Message(content=waiting_note("It does not answer yet."), author="Kimi-VL Chat")
        await status.send()
        cl.user_session.set("status_task", asyncio.create_task(wait_until_ready(session, status)))
    else:
        await send_settings(session)
    last = session.last_turn()
    if restored.last_answer_id and last is not None and last.in_history:
        await retry_action("Regenerate").send(for_id=restored.last_answer_id)
    await history.offer_export()


async def send_export(session: ChatSession) -> None:
    """Send this chat as one self-contained HTML file."""
    file = await history.export(session)
    text = "This chat as one HTML file: it opens in any browser, offline."
    await cl.Message(content=text, author="Kimi-VL Chat", elements=[file]).send()
