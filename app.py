"""Kimi-VL Chat: Chainlit wiring. Logic lives in ``backend/``, rendering in ``ui/``.

Run with ``./launch.sh`` (starts vLLM too) or, against a server at ``KIMI_BASE_URL``,
``python -m serving.ui_main run app.py`` (Chainlit's ``chainlit run``, on asyncio's C
tasks: serving/ui_main.py). The process's settings (read when this module is
imported) and shared resources (made at app start, closed at app stop) are
ui/process.py's; every chat borrows them. The buttons under a turn that start an
answer are ui/turn_buttons.py's.
"""

from __future__ import annotations

import functools
import gc
from pathlib import Path
from typing import Any

import chainlit as cl
from chainlit.config import config as chainlit_config
from chainlit.types import ThreadDict

from backend.chat import ChatSession, Upload
from backend.fair_use import UploadRoom
from backend.panel import SettingsRefused, option_changes, panel_fields
from backend.presenter import DEV_MODE_BANNER, in_markdown
from backend.starters import sample_for, starters_for
from backend.turn_runner import TurnRunner
from ui import (
    attach,
    bridge,
    chainlit_patches,
    commands,
    history,
    model_picker,
    previews,
    process,
    security,
    server_panel,
    status,
    turn_buttons,
)
from ui.answer import draw, said, say
from ui.connection import connect_or_wait, send_settings, stop_waiting
from ui.first_words import FIRST_WORDS
from ui.model_picker import served_now, show_served
from ui.session import RUNNER_KEY, new_chat, runner, stop_saving_watch
from ui.tasks import (
    count_in_store,
    one_at_a_time,
    refuse_beyond_bounds,
    stop_answers,
    stop_answers_when_gone,
)

UPLOADS = UploadRoom(
    process.SETTINGS.upload_session_mb * 1_000_000, process.SETTINGS.upload_user_mb * 1_000_000
)
# Origin, owner, upload size and quota, CSP
security.install(process.SETTINGS.allowed_origins, UPLOADS)
attach.install()  # uploads judged (images prepared) on attach; a HEIC shown as a picture
chainlit_patches.unpause_constructors()  # Chainlit's steps and messages without a 1 ms pause
chainlit_patches.hand_questions_on_at_once()  # on_message without Chainlit's 1 ms wait
chainlit_patches.quiet_stop()  # Stop is said once, by the answer it ended
status.install()  # GET /kimi/status for ./launch.sh status
turn_buttons.install()  # Send anyway, Retry, Compare under a turn

# Sign-in and stored chats (ui/history.py): on once a user exists; None: the app runs
# open and stores nothing.
STORE = history.register(process.SETTINGS)
refuse_beyond_bounds(STORE)  # too long, past the store, beyond the queue: refused unstored
security.refuse_open_beyond_loopback(  # also for `chainlit run app.py --host 0.0.0.0`
    sign_in=STORE is not None, allow_anonymous=process.SETTINGS.allow_anonymous
)


@cl.on_app_startup
async def startup() -> None:
    """Create the shared resources once, when the app starts."""
    process.resources().start_housekeeping()
    count_in_store(STORE, UPLOADS)  # answers and uploads, for every worker
    server_panel.start(process.SETTINGS)
    # What is loaded by now lives as long as the process: keep it out of the garbage
    # collector's full passes. One pass over the app's ~250,000 objects takes 0.2-1.2 s
    # and holds every thread, the event loop's too (tests/test_hostile_answers.py).
    gc.freeze()


@cl.on_app_shutdown
async def shutdown() -> None:
    """Close the shared resources once, when the app stops."""
    await server_panel.stop()
    await history.close()
    await process.close()


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
    session = runner().chat
    if session.options is None:  # no panel is shown yet: nothing to change
        cl.context.session.chat_settings = {}  # nor to store with the thread
        return
    fields = panel_fields(session.profile, session.options, session.max_model_len, session.tr)
    try:
        session.with_options(**option_changes(values, fields))
    except SettingsRefused as exc:
        await say(in_markdown(exc.message, session.tr), kind="warning")
        await send_settings(session)  # the panel, and Chainlit's stored copy, as they were


@cl.on_chat_start
@said
async def on_chat_start() -> None:
    """Create the chat state for the chosen profile, connect, show the settings.

    The served models come from the shared cache: a chat start never waits on a
    server that does not answer; it says it is connecting and goes on trying.
    """
    FIRST_WORDS.open()  # no answer to wait for: its page writes go at once
    session = (await new_chat(process.SETTINGS.model)).chat
    await commands.offer()
    if process.SETTINGS.dev_mode:  # a toast, not a message: the starters stay on screen
        await cl.context.emitter.send_toast(session.tr(DEV_MODE_BANNER), "warning")
    await connect_or_wait(session, await session.server.models.current(), served_now)


@cl.on_window_message
@said
async def on_window_message(data: object) -> None:
    """A click on an action button (public/bridge.js); anything else is ignored."""
    action = bridge.action_of(data)
    if action is not None:
        await commands.run(action, runner())


@cl.on_message
@said
async def on_message(message: cl.Message) -> None:
    """Prepare the uploads (or a starter's sample image), then answer, in one turn."""
    action = commands.of_command(message.command)
    if action is not None:  # picked from the "/" list: an action, not a question
        await message.remove()  # off the transcript and the stored thread
        await commands.run(action, runner())
        return
    async with one_at_a_time(process.resources().answers, message.id):
        turns = runner()
        model = turns.chat.model
        if not await model_picker.switch_model(turns.chat, message):
            return
        # Compare: a server up since, a switch. A stale cache is refreshed after the
        # first words (page_catches_up): its model list would cost this request's CPU.
        turns.chat.served_besides(process.served_known(refresh=False))
        uploads = previews.originals(
            cl.user_session.get(previews.SHOWN_KEY),
            [Upload(el.name, Path(el.path)) for el in message.elements or [] if el.path],
        )
        sample = None if uploads else sample_for(message.content)
        if sample is not None:
            uploads = [Upload(name=sample.name, path=sample)]
            image = cl.Image(name=sample.name, path=str(sample), display="inline", size="medium")
            await image.send(for_id=message.id)
        if turns.chat.turn_of(message.id) is not None:  # an edit: what followed it is gone
            await history.forget_after(message)
        caught_up = functools.partial(page_catches_up, turns.chat, turns.chat.model is not model)
        await draw(turns.ask(message.id, message.content, uploads), turns.chat, None, caught_up)


async def page_catches_up(session: ChatSession, switched: bool) -> None:
    """Once a question's first words are out: the settings panel (after a switch, the new
    model's) and the picker (when what is served changed). Every frame before the first
    words is one more render the page does before it shows them (docs/benchmarks.md);
    neither this nor the question waits for a stale model cache's refresh."""
    if switched:
        await send_settings(session)
    await show_served(session, process.served_known())


@cl.on_stop
async def on_stop() -> None:
    """Stop every answer of this chat, however it started."""
    stop_answers()


@cl.on_chat_end
async def on_chat_end() -> None:
    """The tab's socket went away: stop the chat's background work (shared resources stay
    open) and move its images to the session's folder, which Chainlit deletes with the
    session. If the session is not taken up again, its answers stop: nobody can see
    them (a stored chat's answers finish and are stored: README, "Closed tabs")."""
    stop_waiting()
    stop_saving_watch()
    server_panel.close_panel()
    turns: TurnRunner | None = cl.user_session.get(RUNNER_KEY)
    if turns is None:
        return
    if not turns.records:
        stop_answers_when_gone(chainlit_config.project.session_timeout)
    await turns.chat.aclose()
    if not getattr(cl.context.session, "to_clear", False):  # else deleted at once
        await turns.chat.spill_images(cl.context.session.files_dir)


# --- Stored chats: resume (ui/history.py) ---------------------------------------
@cl.on_chat_resume
@said
async def on_chat_resume(thread: ThreadDict) -> None:
    """Rebuild a stored chat: turns, images, model and settings; Regenerate on its last answer."""
    FIRST_WORDS.open()  # no answer to wait for: its page writes go at once
    turns = await new_chat()
    restored = await history.resume(thread, turns.chat)
    if not history.all_saved(thread["id"]):
        await say(turns.chat.tr(history.NOT_ALL_SAVED), kind="warning")
    await connect_or_wait(turns.chat, [], served_now)
    turns.chat.served_besides(process.served_known(refresh=False))  # its Compare buttons
    turns.answer_ids.update(restored.answer_ids)  # where ‹ n/m › go
    turns.shown.resumed(restored.compared, restored.models)  # for ‹ n/m › and Export
    await draw(turns.resumed(restored.last_answer_id), turns.chat)
    await commands.offer()
