"""The buttons under a turn that start an answer: Send anyway, Retry (also Regenerate
and "more tokens"), Compare; and ‹ n/m › (ui/versions_view.py). Each acts on the message
its payload names, the one it sits under, and its answer runs as the chat's answer task
(ui/tasks.py).
:func:`install` gives them to Chainlit."""

from __future__ import annotations

import chainlit as cl

from backend.families import family_for
from backend.safety import link_remote_images
from ui import process
from ui.answer import draw_run, said
from ui.compare_view import ComparePair
from ui.session import runner
from ui.tasks import start_answer_task
from ui.versions_view import on_version


@said
async def on_send_anyway(action: cl.Action) -> None:
    """Send the message this button sits under, with only the files that could be used."""
    await action.remove()
    turns, message_id = runner(), str(action.payload.get("message", ""))
    start_answer_task(
        lambda: draw_run(turns.send_draft(message_id), turns.chat), process.resources().answers
    )


@said
async def on_retry(action: cl.Action) -> None:
    """Answer again the turn this button sits under (Retry, Regenerate, more tokens).

    An older turn is answered with the history up to it (later turns leave the
    conversation the model sees, as with an edit), and a note says so.
    """
    turns, message_id = runner(), str(action.payload.get("message", ""))
    max_tokens = action.payload.get("max_tokens")
    make_room = bool(action.payload.get("make_room"))
    start_answer_task(
        lambda: draw_run(turns.rerun(message_id, max_tokens, make_room), turns.chat, action),
        process.resources().answers,
    )


@said
async def on_compare(action: cl.Action) -> None:
    """Ask another served model the turn this button sits under; its answer streams beside
    the turn's own answer, each under its model's label (ui/compare_view.py)."""
    turns, message_id = runner(), str(action.payload.get("message", ""))
    model = str(action.payload.get("model", ""))
    chat = turns.chat
    turn = chat.turn_of(message_id)
    own_label = chat.tr.text(chat.profile.label)
    own_answer = link_remote_images(turn.answer) if turn is not None else ""
    pair = ComparePair((own_label, own_answer), chat.tr.text(family_for(model).label), chat.tr)
    start_answer_task(
        lambda: draw_run(turns.compare(message_id, model), chat, compare=pair),
        process.resources().answers,
    )


def install() -> None:
    """Register the buttons' callbacks with Chainlit (``cl.action_callback``), by the
    names of the buttons an answer carries (``backend.render.Button``'s ``kind``)."""
    for name, callback in (
        ("send_anyway", on_send_anyway),
        ("retry", on_retry),
        ("compare", on_compare),
        ("version", on_version),
    ):
        cl.action_callback(name)(callback)
