"""Kimi-VL Chat: Chainlit wiring. Logic lives in ``backend/``, rendering in ``ui/``.

Run with ``./launch.sh`` (starts vLLM too) or ``chainlit run app.py`` against a
server at ``KIMI_BASE_URL``. The process's shared resources (the HTTP client,
the served-model cache, the media workers) are created at app start and closed
at app stop; every chat borrows them.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import chainlit as cl
from chainlit.types import ThreadDict

from backend.chat import ChatSession, Upload
from backend.i18n import in_any_language
from backend.logs import configure as configure_logging
from backend.panel import SettingsRefused, option_changes, panel_fields, profile_choices
from backend.presenter import DEV_MODE_BANNER, REGENERATE_LABEL, in_markdown
from backend.resources import AppResources
from backend.safety import escape_markdown
from backend.settings import Settings
from backend.starters import sample_for, starters_for
from ui import clock, history, prefetch, security, server_panel, status
from ui.answer import (
    hold_draft,
    rerun_turn,
    retry_action,
    run_compare,
    run_turn,
    say,
    send_draft,
)
from ui.connection import connect_or_wait, send_settings, stop_waiting
from ui.language import session_translator, translator_for_language
from ui.tasks import one_at_a_time, start_answer_task, stop_answers

SETTINGS = Settings()
security.install(SETTINGS.allowed_origins)  # Origin, session owner, upload size, CSP
prefetch.install()  # uploaded images are prepared before the message is sent
status.install()  # GET /kimi/status for ./launch.sh status
clock.install()  # Chainlit's steps and messages without its 1 ms pause of the event loop
_resources: AppResources | None = None

# Sign-in and stored chats (ui/history.py): on once a user exists; None: the app runs
# open and stores nothing.
STORE = history.register(SETTINGS)
security.refuse_open_beyond_loopback(  # also for `chainlit run app.py --host 0.0.0.0`
    sign_in=STORE is not None, allow_anonymous=SETTINGS.allow_anonymous
)


def resources() -> AppResources:
    """The process's shared resources (made by :func:`startup`, or on first use)."""
    global _resources
    if _resources is None:
        configure_logging(SETTINGS.app_log, SETTINGS.log_max_mb, SETTINGS.log_keep)
        _resources = AppResources.start(SETTINGS)
    return _resources


@cl.on_app_startup
async def startup() -> None:
    """Create the shared resources once, when the app starts."""
    resources().start_housekeeping()
    server_panel.start(SETTINGS)
    # What is loaded by now lives as long as the process: keep it out of the garbage
    # collector's full passes. One pass over the app's ~250,000 objects takes 0.2-1.2 s
    # and holds every thread, the event loop's too (tests/test_hostile_answers.py).
    gc.freeze()


@cl.on_app_shutdown
async def shutdown() -> None:
    """Close the shared resources once, when the app stops."""
    global _resources
    await server_panel.stop()
    if _resources is not None:
        await _resources.aclose()
        _resources = None


def chat() -> ChatSession:
    """This browser session's chat state."""
    session: ChatSession = cl.user_session.get("chat")
    return session


@cl.set_chat_profiles
async def chat_profiles(user: cl.User | None, language: str | None = None) -> list[cl.ChatProfile]:
    """One profile per served model when the server serves several (Thinking, Instruct).

    From a cache: a page load waits at most a moment on the model server.
    """
    return [
        cl.ChatProfile(
            name=c.name, display_name=c.label, markdown_description=c.description, default=c.default
        )
        for c in profile_choices(
            [model for model, _ in await resources().served()], translator_for_language(language)
        )
    ]


@cl.set_starters
async def starters(user: cl.User | None, language: str | None = None) -> list[cl.Starter]:
    """Suggested questions, each with a bundled sample image (attached in on_message)."""
    return [
        cl.Starter(label=s.label, message=s.message, icon=s.icon_url)
        for s in starters_for(language)
    ]


@cl.on_settings_update
async def on_settings_update(values: dict[str, Any]) -> None:
    """Apply the settings panel to the next answers; refuse, in one sentence, values its
    controls cannot give (they come over the socket), keeping the previous ones."""
    session = chat()
    if session.options is None:  # no panel is shown yet: nothing to change
        cl.context.session.chat_settings = {}  # nor to store with the thread
        return
    fields = panel_fields(session.profile, session.options, session.max_model_len, session.tr)
    try:
        session.with_options(**option_changes(values, fields))
    except SettingsRefused as exc:
        await say("⚠️ " + in_markdown(exc.message, session.tr))
        await send_settings(session)  # the panel, and Chainlit's stored copy, as they were


@cl.on_chat_start
async def on_chat_start() -> None:
    """Create the chat state for the chosen profile, connect, show the settings.

    The served models come from the shared cache: a chat start never waits on a
    server that does not answer; it says it is connecting and goes on trying.
    """
    shared = resources()
    profile = cl.user_session.get("chat_profile") or SETTINGS.model
    server = await shared.server_for(profile)
    session = ChatSession.create(
        SETTINGS, server.client, shared.workers, wanted_model=profile, tr=session_translator()
    )
    cl.user_session.set("chat", session)
    await offer_commands()
    if SETTINGS.dev_mode:  # a toast, not a message: the starters stay on screen
        await cl.context.emitter.send_toast(session.tr(DEV_MODE_BANNER), "warning")
    await find_others(session)
    await connect_or_wait(session, await server.models.current())


async def offer_commands() -> None:
    """The composer's command buttons: the live server panel and Export."""
    await cl.context.emitter.set_commands([server_panel.command(), history.export_command()])


async def find_others(session: ChatSession) -> None:
    """Tell the chat which other served models a Compare can ask (from the caches)."""
    chosen = session.model.id if session.model else session.wanted_model
    session.others = [m for m, _ in await resources().served() if m.id != chosen]


@cl.on_message
async def on_message(message: cl.Message) -> None:
    """Prepare the uploads (or a starter's sample image), record the turn, stream the answer."""
    if in_any_language(server_panel.COMMAND, message.command):  # the panel, not a question
        await server_panel.toggle_panel()
        return
    if in_any_language(history.EXPORT_COMMAND, message.command):
        await history.send_export(chat())
        return
    async with one_at_a_time():
        session = chat()
        await find_others(session)
        uploads = [Upload(el.name, Path(el.path)) for el in message.elements or [] if el.path]
        sample = None if uploads else sample_for(message.content)
        if sample is not None:
            uploads = [Upload(name=sample.name, path=sample)]
            image = cl.Image(name=sample.name, path=str(sample), display="inline", size="medium")
            await image.send(for_id=message.id)
        prepared = await session.prepare_uploads(uploads)
        text = prepared.message_text(message.content)  # with PDF pages / video frame times
        if prepared.problems:  # kept back, with "Send anyway" when something can go
            await hold_draft(session, message.id, text, prepared, typed=message.content)
            return
        for notice in prepared.notices:
            await say("ℹ️ " + in_markdown(notice, session.tr))
        if message.id in session.message_turns:  # an edit: what followed it is gone
            await history.forget_after(message)
        turn = session.start_turn(message.id, text, prepared.images)
        await run_turn(session, message.id, turn)


@cl.action_callback("send_anyway")
async def on_send_anyway(action: cl.Action) -> None:
    """Send the message this button sits under, with only the files that could be used."""
    await action.remove()
    session, message_id = chat(), str(action.payload.get("message", ""))
    start_answer_task(lambda: send_draft(session, message_id))


@cl.action_callback("retry")
async def on_retry(action: cl.Action) -> None:
    """Answer again the turn this button sits under (Retry, Regenerate, more tokens).

    An older turn is answered with the history up to it (later turns leave the
    conversation the model sees, as with an edit), and a note says so.
    """
    session, message_id = chat(), str(action.payload.get("message", ""))
    max_tokens = action.payload.get("max_tokens")
    make_room = bool(action.payload.get("make_room"))
    start_answer_task(lambda: rerun_turn(session, message_id, action, max_tokens, make_room))


@cl.action_callback("compare")
async def on_compare(action: cl.Action) -> None:
    """Ask another served model the turn this button sits under; its answer comes next."""
    session, message_id = chat(), str(action.payload.get("message", ""))
    wanted = str(action.payload.get("model", ""))
    other = next((m for m in session.others if m.id == wanted), None)
    if other is None:
        gone = session.tr("{model} is not served any more.", model=escape_markdown(wanted))
        await say("ℹ️ " + gone)
        return
    server = await resources().server_for(other.id)
    start_answer_task(lambda: run_compare(session, message_id, other, server.client))


@cl.on_stop
async def on_stop() -> None:
    """Stop every answer of this chat, however it started."""
    stop_answers()


@cl.on_chat_end
async def on_chat_end() -> None:
    """The tab closed: stop the chat's background work (shared resources stay open) and
    move its images to the session's folder, which Chainlit deletes with the session."""
    stop_waiting()
    server_panel.close_panel()
    session: ChatSession | None = cl.user_session.get("chat")
    if session is not None:
        await session.aclose()
        if not getattr(cl.context.session, "to_clear", False):  # else deleted at once
            await session.spill_images(cl.context.session.files_dir)


# --- Stored chats: resume (ui/history.py) ---------------------------------------
@cl.on_chat_resume
async def on_chat_resume(thread: ThreadDict) -> None:
    """Rebuild a stored chat: turns, images, model and settings; Regenerate on its last answer."""
    shared = resources()
    profile = cl.user_session.get("chat_profile") or SETTINGS.model
    server = await shared.server_for(profile)
    session, restored = await history.resume(thread, SETTINGS, server.client, shared.workers)
    cl.user_session.set("chat", session)
    await find_others(session)
    await connect_or_wait(session, [])
    turns = session.conversation.turns
    last = next((k for k, t in session.message_turns.items() if turns and t is turns[-1]), None)
    if restored.last_answer_id and last is not None and turns[-1].in_history:
        regenerate = retry_action(last, session.tr, REGENERATE_LABEL)
        await regenerate.send(for_id=restored.last_answer_id)
    await offer_commands()
