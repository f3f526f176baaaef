"""Stored chats in Chainlit: sign-in, saving turns, resume, share, export.

Sign-in and storage go together: Chainlit asks everyone to sign in as soon as
an auth callback is registered, and lists and resumes chats only for signed-in
users, so :func:`setup` turns both on when at least one user exists (checked
at app start: add the first user, then restart the app). Without users the app
runs open and stores nothing.

Chainlit stores what the page shows (messages, reasoning steps, uploads); the
turn runner records each turn as the model saw it through the chat's sink
(:func:`sink`, :class:`backend.store.turns.ThreadTurns`) when its answer starts
and when it ends, and :func:`resume` rebuilds the chat from that.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

import chainlit as cl
from chainlit.config import config
from chainlit.data import get_data_layer
from chainlit.step import StepDict
from chainlit.types import CommandDict, ThreadDict

from backend.blocks import block_texts
from backend.chat import ChatSession
from backend.errors import ChatError
from backend.i18n import ENGLISH, Translator, msg
from backend.logs import LOGGER_NAME
from backend.panel import sane_options
from backend.record import TurnRecord, TurnSink
from backend.safety import link_remote_images_off_loop
from backend.settings import Settings
from backend.store.export import INTERRUPTED_NOTE, ChatExport, export_html, marked_copies
from backend.store.files import DATABASE_FILE
from backend.store.resume import Restored, restore, shown_records
from backend.turn_runner import TurnRunner
from backend.versions import TURN_KEY
from ui import bridge
from ui.blocks import BLOCK_NAME, block_id
from ui.language import session_translator
from ui.notes import note_id

# What runs only where chats are stored (SQLAlchemy, the store, sign-in) is imported
# there, on first use: an app that runs open never loads it (tests/test_startup_imports.py).
if TYPE_CHECKING:
    from backend.store.core import Store
    from ui.datalayer import KimiDataLayer

log = logging.getLogger(LOGGER_NAME)

EXPORT_COMMAND: Final = msg("Export")
"""The command's id, shown as its button text in the chat's language (as ui/server_panel.py)."""
EXPORT_DESCRIPTION: Final = msg("Save this chat as one HTML file (images and reasoning included)")
EXPORT_NOTE: Final = msg("This chat as one HTML file: it opens in any browser, offline.")
"""Chainlit command (the composer's button) that sends the chat as one HTML file."""

CANNOT_OPEN: Final = msg(
    "This chat cannot be opened right now: the app cannot read its database. Try again in a minute."
)
NOT_ALL_SAVED: Final = msg(
    "Not all of this chat is saved yet: what was said last waits until the app can write "
    "to its database again, and is not shown here until then."
)

_store: Store | None = None


def setup(settings: Settings) -> Store | None:
    """Open the store if sign-in is set up; None means the app runs open, storing nothing.

    Called once at app start, before the server's event loop. With no database
    yet (no SQLite file, no ``KIMI_DATABASE_URL``) nothing is created.

    Raises:
        SystemExit: with one line saying what is wrong with the data folder, the
            database, or the missing ``CHAINLIT_AUTH_SECRET``.
    """
    global _store
    data_dir = Path(settings.data_dir)
    if not settings.database_url and not (data_dir / DATABASE_FILE).exists():
        if data_dir.exists() and not data_dir.is_dir():
            raise SystemExit(
                f"Kimi-VL Chat cannot start: the data folder {data_dir.resolve()} is a file; "
                "set KIMI_DATA_DIR to a folder."
            )
        return None
    from backend.store.core import open_store
    from backend.store.db import StoreError
    from ui.files import mount_file_route

    try:
        store, users = open_store(settings)
    except StoreError as exc:
        raise SystemExit(f"Kimi-VL Chat cannot start: {exc}") from None
    if users == 0:
        return None
    if not os.environ.get("CHAINLIT_AUTH_SECRET"):
        raise SystemExit(
            "Kimi-VL Chat cannot start: sign-in needs CHAINLIT_AUTH_SECRET; launch.sh writes "
            "one into .env, or run `chainlit create-secret`."
        )
    from chainlit.server import app as server

    mount_file_route(server, store.engine, store.files, config.run.root_path)
    _store = store
    log.info("chats are stored in %s; sign-in is on (%d users)", store.where, users)
    return store


def store() -> Store:
    """The open store (only call where :func:`setup` returned one)."""
    assert _store is not None
    return _store


async def close() -> None:
    """Close the store at app stop, if it is open (what it holds is written, or logged)."""
    if _store is not None:
        await _store.close()


def data_layer() -> KimiDataLayer:
    """Chainlit's data layer on the open store."""
    from ui.datalayer import KimiDataLayer
    from ui.files import FilesStorageClient

    opened = store()
    return KimiDataLayer(opened, FilesStorageClient(opened.files, config.run.root_path))


def _owner() -> str | None:
    user = cl.user_session.get("user")
    return None if user is None else str(user.identifier)


def sink() -> TurnSink | None:
    """Where this chat's turns are recorded: its stored thread when sign-in is on and
    someone is signed in, else None (open mode stores nothing)."""
    if _store is None or _owner() is None:
        return None
    from backend.store.turns import ThreadTurns

    return ThreadTurns(_store.turns, _store.pending, cl.context.session.thread_id)


async def forget_after(message: cl.Message) -> None:
    """Before an earlier message is answered again (Edit): take what followed it out of
    the stored page (Chainlit's steps: the page shows the new version's branch).

    Keeps the step running now (Chainlit's ``on_message`` run of the edit). The turns
    after it stay in the turn store with the earlier version (:mod:`backend.versions`).
    While the database cannot be written, the removal waits with the chat's other writes.
    """
    if message.created_at:
        await _forget_stored_after(message.created_at)


async def fork_after(message_id: str) -> None:
    """Regenerate on an older answer: take the turns after the one of the person's
    message ``message_id`` off the page, as Chainlit's edit does for the messages after an
    edited one, and (sign-in on) out of the stored page, as :func:`forget_after` (they stay
    in the turn store with the earlier version).

    They start at the first person's message after ``message_id`` in Chainlit's
    ``chat_context`` (this session's messages, a resumed chat's included): it and every
    message after it go, with the runs buttons started since (:func:`ui.answer.draw_run`),
    whose reasoning steps are not messages.
    """
    messages = cl.chat_context.get()
    ids = [m.id for m in messages]
    start = ids.index(message_id) if message_id in ids else len(ids)
    later = [i for i in range(start + 1, len(ids)) if messages[i].type == "user_message"]
    if later:
        await _clear_from(messages, later[0])


async def clear_turns_from(place: int) -> None:
    """Take turn ``place`` (0 first: the ``place``-th person's message in Chainlit's
    ``chat_context``) and every later one off the page and the stored page, as
    :func:`fork_after` (another version is drawn there: ui/versions_view.py)."""
    messages = cl.chat_context.get()
    asked = [i for i, m in enumerate(messages) if m.type == "user_message"]
    if place < len(asked):
        await _clear_from(messages, asked[place])


async def _clear_from(messages: list[cl.Message], start: int) -> None:
    """Remove ``messages[start:]`` and the runs buttons started since, from the page and
    the stored page (the step running now stays)."""
    first = messages[start].created_at
    for message in messages[start:]:
        await message.remove()
    running = cl.context.current_step  # the run drawing the new answer, if a button's
    runs: list[cl.Step] = cl.user_session.get(RUNS) or []
    for run in [r for r in runs if r is not running and str(r.created_at) > str(first)]:
        runs.remove(run)
        await run.remove()
    if first:
        await _forget_stored_after(first)


RUNS = "button_runs"
"""User session key: the run steps of the turns buttons started (:func:`ui.answer.draw_run`)."""


async def _forget_stored_after(after: str) -> None:
    if _store is None:
        return
    from backend.store.pending import Write
    from ui.datalayer import KimiDataLayer

    layer = get_data_layer()
    if not isinstance(layer, KimiDataLayer):
        return
    running = cl.context.current_step
    keep = {running.id} if running is not None else set()
    thread_id = cl.context.session.thread_id
    job = Write(
        run=lambda: layer.delete_steps_after(thread_id, after, keep),
        chat=thread_id,
        what=msg("the removal of the messages after an edited one"),
        size=len(after) + sum(len(k) for k in keep),
    )
    await _store.pending.write(job)


def _show_at_its_place(step: StepDict, restored: Restored) -> None:
    """Map ``step``, if it is a person's message on the page, to the version shown at its
    place, as the tab did before the reload: a message whose answer was regenerated or
    which was edited shows the newer version, one drawn again for a version names that
    version's place (:data:`TURN_KEY`; unless it became a turn of its own, by an edit).
    Mapped last, so that it is the message the page shows for that turn
    (:meth:`ChatSession.message_of`: Regenerate and Compare name it)."""
    if step.get("type") != "user_message":
        return
    message_id = str(step["id"])
    named = (step.get("metadata") or {}).get(TURN_KEY)
    own = message_id in restored.versions or not named
    shown = restored.versions.shown_at_place_of(message_id if own else str(named))
    if shown is not None:
        restored.message_turns.pop(message_id, None)
        restored.message_turns[message_id] = shown.turn


async def resume(thread: ThreadDict, session: ChatSession) -> Restored:
    """Rebuild the chat of ``thread`` into ``session`` and mark interrupted answers on the page.

    Connects to the stored model if the server still serves it (else the first
    served); a server that cannot be reached leaves the session unconnected (the caller
    says so). The stored sampling options win. If some of the chat's writes still wait
    for the database (:mod:`backend.store.pending`), the chat shown is not all of it yet
    (:func:`all_saved`: the caller says so).

    Raises:
        ChatError: the stored turns cannot be read (the database cannot be reached).
    """
    from sqlalchemy.exc import SQLAlchemyError

    from backend.store.pending import cause

    opened = store()
    thread_id = thread["id"]
    try:
        records = await opened.turns.load(thread_id)
    except (SQLAlchemyError, OSError) as exc:
        log.error("opening chat %s failed: %s", thread_id, cause(exc, opened.where))
        raise ChatError(CANNOT_OPEN) from None
    restored = restore(records)
    for step in thread["steps"]:
        _show_at_its_place(step, restored)
    session.restore(restored.versions, restored.message_turns)
    await session.connect_first([restored.model, None])
    session.with_stored_options(sane_options(restored.options, session.max_model_len))
    await mark_interrupted(thread, restored.interrupted, session.tr)
    return restored


def all_saved(thread_id: str) -> bool:
    """False while some of the writes of chat ``thread_id`` wait for the database (then
    a resumed chat is not all of it: say :data:`NOT_ALL_SAVED`)."""
    return not store().pending.holds(thread_id)


async def mark_interrupted(
    thread: ThreadDict, records: list[TurnRecord], tr: Translator = ENGLISH
) -> None:
    """Show each interrupted turn in ``thread`` (what the page shows) as far as it was
    stored, in ``tr``'s language: its reasoning step (the step of type ``llm`` that never
    ended: ui/reasoning_view.py stores a step's end when it closes it) with the reasoning
    saved while it streamed, the answer saved while it streamed where its message was
    never stored (Chainlit stores a streaming message only once a block of it ends; a
    stored one is drawn from the turn: ui/datalayer.py), with remote images made links
    as everywhere an answer is drawn, then a note that the app stopped there.

    A turn is interrupted where ``records`` says so, and, with no record of its turn, where
    a reasoning step never ended or the chat's last question has nothing after it: the
    turn's row, and the page's writes, wait for its first words (backend/turn_runner.py,
    ``Checkpoints.begin``; ui/first_words.py), so an app stopped before them left only the
    question, or the question and its reasoning step."""
    steps = cast(list[dict[str, Any]], thread["steps"])
    for record in records:
        await _mark_turn(thread["id"], steps, record.message_id, tr, record)
    recorded = {record.message_id for record in records}
    for message_id in _never_ended(steps) + _unanswered_last(steps):
        if message_id not in recorded:
            await _mark_turn(thread["id"], steps, message_id, tr, None)


def _never_ended(steps: list[dict[str, Any]]) -> list[str]:
    """The ids of the person's messages whose turn has a reasoning step that never ended."""
    asked: str | None = None
    found: list[str] = []
    for step in steps:
        if step["type"] == "user_message":
            asked = str(step["id"])
        elif step["type"] == "llm" and not step.get("end") and asked and asked not in found:
            found.append(asked)
    return found


def _unanswered_last(steps: list[dict[str, Any]]) -> list[str]:
    """The id of the chat's last person's message if no step follows it."""
    last = steps[-1] if steps else None
    return [str(last["id"])] if last is not None and last["type"] == "user_message" else []


async def _mark_turn(
    thread_id: str,
    steps: list[dict[str, Any]],
    message_id: str,
    tr: Translator,
    record: TurnRecord | None,
) -> None:
    """Mark the turn of the person's message ``message_id`` interrupted, with what
    ``record`` saved of it (None: nothing)."""
    index = next((i for i, s in enumerate(steps) if s["id"] == message_id), None)
    if index is None:
        return
    end = next(
        (j for j in range(index + 1, len(steps)) if steps[j]["type"] == "user_message"),
        len(steps),
    )
    for step in list(steps[index + 1 : end]):
        if step["type"] == "llm" and not step.get("end"):  # its reasoning never ended
            step["name"] = tr("Thought (interrupted)")
            step["end"] = step.get("start") or step.get("createdAt")
            if record is not None:
                end += await _saved_blocks(steps, step, record.turn.reasoning)
    created = str(steps[end - 1].get("createdAt") or "")
    answer = record.turn.answer if record is not None else ""
    answer_id = record.answer_id if record is not None else None
    shown = any(s["id"] == answer_id for s in steps[index + 1 : end])
    if not shown and answer and answer_id:
        linked = await link_remote_images_off_loop(answer)  # no image fetches
        partial = _note_step(thread_id, message_id, created, linked)
        partial.update(id=answer_id, name=config.ui.name)  # as the answer's own
        steps.insert(end, partial)
        end, created = end + 1, str(partial["createdAt"])
    note = tr(INTERRUPTED_NOTE)
    steps.insert(end, _note_step(thread_id, message_id, created, note))


async def _saved_blocks(steps: list[dict[str, Any]], step: dict[str, Any], saved: str) -> int:
    """Add to the page the blocks of reasoning step ``step`` that only ``saved`` (the
    reasoning saved while it streamed) holds: a block is stored once it closes, so the
    stored ones are the first blocks of ``saved`` cut as it streamed
    (:func:`backend.blocks.block_texts`) and what came after them is the rest. Nothing when
    the stored blocks already show as much. Returns the number of steps added."""
    children = [i for i, s in enumerate(steps) if s.get("parentId") == step["id"]]
    missing = block_texts(saved)[len(children) :]
    at = children[-1] + 1 if children else steps.index(step) + 1
    after = str(steps[at - 1].get("createdAt") or "")
    for offset, text in enumerate(missing):
        block = {
            **_drawn_after(str(step.get("threadId") or ""), after),
            "id": block_id(),
            "parentId": step["id"],
            "name": BLOCK_NAME,
            "type": "undefined",
            "output": await link_remote_images_off_loop(text),
        }
        steps.insert(at + offset, block)
        after = str(block["createdAt"])
    return len(missing)


def _note_step(thread_id: str, parent: str, after: str, note: str) -> dict[str, Any]:
    return {
        **_drawn_after(thread_id, after),
        "id": note_id("warning"),
        "name": "Kimi-VL Chat",
        "type": "assistant_message",
        "output": note,
        "metadata": {"interrupted_turn": parent},
    }


def _drawn_after(thread_id: str, after: str) -> dict[str, Any]:
    """The keys of a step the page gets drawn, not stored: an ended step of ``thread_id``
    made 1 ms after ``after`` (an ISO time; now if it is not one)."""
    try:
        moment = datetime.fromisoformat(after.replace("Z", "+00:00")) + timedelta(milliseconds=1)
    except ValueError:
        moment = datetime.now(UTC)
    stamp = moment.isoformat().replace("+00:00", "Z")
    return {
        "threadId": thread_id,
        "parentId": None,
        "createdAt": stamp,
        "start": stamp,
        "end": stamp,
        "streaming": False,
        "isError": False,
        "metadata": {},
        "tags": None,
        "input": "",
    }


async def may_view_shared(thread: ThreadDict, viewer: cl.User | None) -> bool:
    """Chainlit's share hook: only chats their owner shared may be seen by others."""
    metadata = thread.get("metadata") or {}
    return bool(isinstance(metadata, dict) and metadata.get("is_shared"))


async def export(turns: TurnRunner) -> tuple[str, str]:
    """This chat as one HTML file (see :mod:`backend.store.export`): its name and text;
    what the chat showed beyond its turns (numbers, Compare answers, drawn copies) too."""
    session = turns.chat
    records: list[TurnRecord] = []
    if _store is not None and _owner() is not None:
        from sqlalchemy.exc import SQLAlchemyError

        try:
            records = shown_records(await _store.turns.load(cl.context.session.thread_id))
        except (SQLAlchemyError, OSError) as exc:
            log.error("export: reading the stored chat failed: %s", exc)
    if not records:  # nothing stored (open mode): what this session holds
        records = [
            TurnRecord(position=i, message_id=session.versions.key_of(t) or "", turn=t)
            for i, t in enumerate(session.conversation.turns)
        ]
    records = [turns.shown.completed(record) for record in records]
    marked = await session.workers.run(marked_copies, records, session.tr)
    first = records[0].turn.text.strip().splitlines()[0] if records and records[0].turn.text else ""
    now = datetime.now(UTC)
    page = ChatExport(
        title=first[:80] or "Kimi-VL chat",
        model=session.tr.text(session.profile.label),
        options=asdict(session.options) if session.options else {},
        records=records,
        exported_at=now.strftime("%Y-%m-%d %H:%M UTC"),
        marked=marked,
    )
    html = await session.workers.run(export_html, page, session.tr)  # seconds for long chats
    return f"kimi-vl-chat-{now.strftime('%Y%m%d-%H%M%S')}.html", html


def export_command() -> CommandDict:
    """The Export command button of the composer."""
    return {
        "id": session_translator()(EXPORT_COMMAND),
        "icon": "download",
        "description": session_translator()(EXPORT_DESCRIPTION),
        "button": True,
        "persistent": False,
        "selected": False,
    }


async def send_export(turns: TurnRunner) -> None:
    """Have the page save this chat as one self-contained HTML file (a download, not a
    message: the transcript and the stored thread stay as they were), and say so."""
    name, html = await export(turns)
    await bridge.offer_download(name, html.encode("utf-8"), "text/html")
    await cl.context.emitter.send_toast(turns.chat.tr(EXPORT_NOTE), "success")


def register(settings: Settings) -> Store | None:
    """:func:`setup`, then, when sign-in is on, register Chainlit's callbacks for it:
    sign-in and sign-out (:func:`ui.signin.install`), the SQL data layer and who may
    view a shared chat."""
    opened = setup(settings)
    if opened is not None:
        from ui import signin

        signin.install(opened)
        cl.data_layer(data_layer)
        cl.on_shared_thread_view(may_view_shared)
    return opened
