"""A chat's link to its model server in Chainlit: connecting, the waiting note, settings.

At chat start (and resume) :func:`connect_or_wait` connects from the served-model
cache when it can, so the page never waits on a silent server; otherwise a
note says the app is connecting, and a task of the chat polls until the server
is ready, then takes the note away (the page's welcome screen, starters included,
comes back when the chat has no message yet), says so in a toast and shows the
settings panel (:func:`send_settings`). Either way the caller's ``on_ready`` runs
once the served models are known (the model picker, Compare's other models).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import chainlit as cl
from chainlit.input_widget import InputWidget, Slider, Switch

from backend.chat import ChatSession
from backend.client import ServedModel
from backend.errors import ChatError, RequestTimeout, ServerLoading, ServerUnreachable
from backend.panel import panel_fields
from backend.presenter import connecting_note, in_markdown, ready_note, waiting_note
from ui.notes import AUTHOR

READY_POLL_S = 1.0
"""Seconds between two connection attempts while the server is not ready."""

_STATUS_TASK = "status_task"


async def send_settings(session: ChatSession) -> None:
    """Show the settings panel with the connected model's current options."""
    assert session.options is not None
    widgets: list[InputWidget] = [
        Slider(id=f.id, label=f.label, initial=float(f.initial), min=f.min, max=f.max,
               step=f.step, description=f.description)
        if f.kind == "slider"
        else Switch(id=f.id, label=f.label, initial=bool(f.initial), description=f.description)
        for f in panel_fields(session.profile, session.options, session.max_model_len, session.tr)
    ]  # fmt: skip
    await cl.ChatSettings(widgets).send()


Ready = Callable[[ChatSession], Awaitable[None]]
"""Told that the chat is connected and what is served is known."""


async def wait_until_ready(session: ChatSession, status: cl.Message, on_ready: Ready) -> None:
    """Connect, polling while the server is unreachable or loading; then say it is ready."""
    while True:
        try:
            await session.connect()
        except (ServerUnreachable, ServerLoading, RequestTimeout) as exc:
            status.content = waiting_note(exc.message, session.tr)
            await status.update()
            await asyncio.sleep(READY_POLL_S)
            continue
        except ChatError as exc:
            status.content = in_markdown(exc.message, session.tr)
            await status.update()
            return
        break
    await status.remove()
    ready = ready_note(session.tr.text(session.profile.label), session.tr)
    await cl.context.emitter.send_toast(ready, "success")
    await send_settings(session)
    await session.server.models.refresh()  # what the server serves now, for on_ready
    await on_ready(session)


async def connect_or_wait(session: ChatSession, served: list[ServedModel], on_ready: Ready) -> None:
    """Connect to a model of ``served`` (the cache) and show the settings, or, when
    that cannot be done yet, say the app is connecting and keep trying in a task;
    ``on_ready`` once connected."""
    if session.options is None and served:
        with contextlib.suppress(ChatError):  # said below, and tried again
            await session.connect(served=served)
    if session.options is not None:
        await send_settings(session)
        await on_ready(session)
        return
    status = cl.Message(content=connecting_note(session.tr), author=AUTHOR)
    await status.send()
    waiting = wait_until_ready(session, status, on_ready)
    cl.user_session.set(_STATUS_TASK, asyncio.create_task(waiting))


def stop_waiting() -> None:
    """Stop this chat's connection attempts (the chat ended)."""
    task: asyncio.Task[None] | None = cl.user_session.get(_STATUS_TASK)
    if task is not None:
        task.cancel()
