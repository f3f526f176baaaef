"""‹ n/m ›: the buttons under an answer whose turn has other versions (Regenerate, Edit:
:mod:`backend.versions`), and the page drawn again with the version chosen.

A click shows the version its payload names: the turn runner records the choice
(:meth:`backend.turn_runner.TurnRunner.choose`), the turns from that place on leave the
page and the stored page (:func:`ui.history.clear_turns_from`), and the branch now shown
is drawn from the turns themselves: each question (with its images) as the person's
message, naming its version (metadata :data:`backend.versions.TURN_KEY`: Edit and
Regenerate on it find the turn after a resume too), its reasoning as a folded step, and its answer,
recorded as the version's, with
Regenerate and, where the turn has other versions, ‹ n/m ›, and the other models' answers
to it (Compare) beside it, as they were shown. Fresh message ids: Chainlit
deletes a removed step in a task of its own, which may land after a new write of the same
id. Chainlit stores what is drawn, so a resumed chat shows the same branch.
"""

from __future__ import annotations

import chainlit as cl

from backend.chat import ChatSession
from backend.families import family_for
from backend.images import decode_data_url
from backend.presenter import REGENERATE_LABEL
from backend.record import ComparedAnswer
from backend.render import Note, compare_button, retry_button, version_buttons
from backend.safety import link_remote_images
from backend.timings import stats_line
from backend.turn_runner import TurnRunner
from backend.versions import TURN_KEY, Version
from ui import compare_view, history, process
from ui.answer import action, button_run, said, say
from ui.reasoning_view import draw_stored
from ui.session import runner
from ui.tasks import start_answer_task


@said
async def on_version(action: cl.Action) -> None:
    """Show the version this button names (‹ or ›), as the chat's task (one at a time
    with its answers)."""
    turns, key = runner(), str(action.payload.get("version", ""))
    if key in turns.chat.versions:
        start_answer_task(lambda: show_version(turns, key), process.resources().answers)


async def show_version(turns: TurnRunner, key: str) -> None:
    """Choose version ``key`` and draw the branch shown from its place on."""
    shown, notes = await turns.choose(key)
    place = len(turns.chat.conversation.turns) - len(shown)
    await history.clear_turns_from(place)
    for n, version in enumerate(shown, 1):
        await draw_version(turns, version, last=n == len(shown))
    for note in notes:
        if isinstance(note, Note):
            await say(note.text, note.buttons, note.level)


async def draw_version(turns: TurnRunner, version: Version, last: bool) -> None:
    """Draw one turn of the branch shown: its question as the person's message (id: the
    version's key, which Edit and Regenerate then name) and its answer, if it has one;
    the ``last`` turn's answer with Compare too, as a resumed chat's last answer has."""
    chat, turn = turns.chat, version.turn
    pictures = []
    for image in turn.images:
        mime, data = decode_data_url(image.data_url)
        pictures.append(cl.Image(name=image.name, content=data, mime=mime, display="inline"))
    user = cl.user_session.get("user")
    author = str(user.identifier) if user is not None else "User"
    question = cl.Message(
        content=turn.text,
        type="user_message",
        author=author,
        elements=pictures,
        metadata={TURN_KEY: version.key},
    )
    await question.send()
    chat.message_turns[question.id] = turn
    async with button_run():  # what it draws under the question leaves with it
        await draw_answer(turns, version, question.id, last)


async def draw_answer(turns: TurnRunner, version: Version, question_id: str, last: bool) -> None:
    """Draw the reasoning and the answer of ``version`` (asked as message ``question_id``)
    and the other models' answers to it beside it, as :func:`draw_version` says."""
    chat, turn = turns.chat, version.turn
    reasoning_id = await draw_stored(turn, chat.tr)
    if not turn.answer:
        return
    buttons = [retry_button(question_id, chat.tr, REGENERATE_LABEL)]
    if last and turn.in_history:
        buttons += [compare_button(question_id, other, chat.tr) for other in chat.others]
    buttons += version_buttons(chat.versions, version.key)
    answer = cl.Message(
        content=link_remote_images(turn.answer), actions=[action(b) for b in buttons]
    )
    await answer.send()
    model = turns.shown.model(version.key)  # its own, which the chat may have left since
    family = family_for(model) if model else chat.profile
    own = (chat.tr.text(family.label), answer.content)
    for compared in turns.shown.compared(version.key):
        await compare_view.draw_stored(own, compared, compared_footer(compared, chat), chat.tr)
    for note in await turns.drawn_again(version.key, answer.id, reasoning_id):
        if isinstance(note, Note):
            await say(note.text, note.buttons, note.level)


def compared_footer(compared: ComparedAnswer, chat: ChatSession) -> str:
    """The line under another model's answer drawn again: its numbers, where it ended
    normally and the chat shows them ("Timings under answers")."""
    timings = compared.timings
    return f"*{stats_line(timings, chat.tr)}*" if timings and chat.shows_stats else ""
