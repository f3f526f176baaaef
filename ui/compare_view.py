"""Compare in Chainlit: the turn's answer and another model's, side by side.

A Compare draws one step (:class:`ComparePair`, its id ending in :data:`PAIR_ID_TAIL`)
under the turn, holding two child steps, the columns (ids ending in
:data:`COLUMN_ID_TAIL`), each titled with its model's label, so the label is at the
top: the chat's own answer to the turn (left), and the other model's answer (right),
which streams into its column block by block (:class:`ui.blocks.StepBlocks`, as the
reasoning does), its reasoning, if any, in a step of its own inside the column, and how
it ended (the stats line) under it. ``public/style.css`` puts the columns side by side
(stacked on a narrow screen). Chainlit stores steps with their parent, so a resumed
chat shows the same pair (the data layer gives these steps back open:
:func:`opened`), and the export draws the two side by side from the record.

Chainlit's custom elements (``cl.CustomElement``, a JSX file the page evaluates) would
draw the pair too, but the page's Content-Security-Policy runs no evaluated code
(docs/facts.md), so the pair is made of Chainlit's own steps.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any, Final

import chainlit as cl
from chainlit.config import config

from backend.i18n import ENGLISH, Translator, msg
from backend.record import ComparedAnswer
from backend.safety import link_remote_images
from ui.blocks import BLOCK_ID_TAIL, StepBlocks
from ui.reasoning_view import ReasoningView
from ui.reasoning_view import draw_stored as draw_reasoning

PAIR_ID_TAIL: Final = "c0a1c0a1c0a1"
"""The last group of a Compare pair's step id (public/style.css lays its columns out)."""

COLUMN_ID_TAIL: Final = "c0a1c0a1c01a"
"""The last group of a column's step id."""

COMPARE_LABEL: Final = msg("Compare")
"""The pair's own title, above its two columns (each titled with its model's label)."""


def tailed_id(tail: str) -> str:
    """A new id in UUID form whose last group is ``tail``."""
    return str(uuid.uuid4())[: -len(tail)] + tail


def opened(steps: Sequence[dict[str, Any]]) -> None:
    """Mark a stored chat's Compare steps open, as they were drawn: the pairs, their
    columns and the answer blocks in the columns (Chainlit's data layer does not give
    ``defaultOpen`` back, docs/facts.md, and a folded block's text is not shown)."""
    columns = {str(s["id"]) for s in steps if str(s.get("id", "")).endswith(COLUMN_ID_TAIL)}
    for step in steps:
        step_id = str(step.get("id", ""))
        if (
            step_id.endswith(PAIR_ID_TAIL)
            or step_id in columns
            or (step.get("parentId") in columns and step_id.endswith(BLOCK_ID_TAIL))
        ):
            step["defaultOpen"] = True


def _step(name: str, step_id: str, parent: str | None) -> cl.Step:
    return cl.Step(
        name=name,
        type="tool",
        id=step_id,
        parent_id=parent,
        default_open=True,
        show_input=False,
        # The model's avatar, as an answer's (ui/reasoning_view.py says why it is named).
        metadata={"avatarName": config.ui.name},
    )


class CompareColumn(StepBlocks):
    """One column: a model's label on top, its answer as blocks, how it ended under it.

    Stands in for :class:`ui.answer_view.AnswerView` in a Compare run (same calls).
    """

    def __init__(self, step: cl.Step, tr: Translator) -> None:
        super().__init__(step)
        self.step = step
        self.reasoning = ReasoningView(tr=tr, parent=step)

    async def finish(self, content: str, actions: Sequence[cl.Action], footer: str = "") -> None:
        """The answer as it stays: its blocks (made now from ``content`` if no text
        streamed) and ``footer`` as the column's own text under them; a column has no
        buttons (``actions`` are not drawn: Compare's are under the turn's answer)."""
        if not self._blocks and content:  # nothing streamed (an answer in one piece)
            await self.add(content)
        await self.close()
        await self.add_under(footer)

    async def add_under(self, text: str, elements: Sequence[cl.Element] = ()) -> None:
        """Add ``text`` (Markdown) and ``elements`` under the column's answer."""
        if text:
            self.step.output = f"{self.step.output}\n\n{text}" if self.step.output else text
        for element in elements:
            await element.send(for_id=self.step.id)
        self.step.end = cl.utils.utc_now()
        await self.step.update()


class ComparePair:
    """The pair of one Compare: opened at the run's first answer or reasoning event.

    Args:
        left: the chat's own answer, ``(its model's label, its text as shown)``.
        right: the other model's label.
        tr: the chat's language.
    """

    def __init__(self, left: tuple[str, str], right: str, tr: Translator = ENGLISH) -> None:
        self.left, self.right, self.tr = left, right, tr
        self._column: CompareColumn | None = None

    async def column(self) -> CompareColumn:
        """The other model's column, the pair drawn first if it is not yet."""
        if self._column is None:
            parent = cl.context.current_step  # the run, as for an answer message
            pair = _step(
                self.tr(COMPARE_LABEL), tailed_id(PAIR_ID_TAIL), parent.id if parent else None
            )
            await pair.send()
            label, text = self.left
            left = _step(label, tailed_id(COLUMN_ID_TAIL), pair.id)
            left.output = text
            await left.send()
            right = _step(self.right, tailed_id(COLUMN_ID_TAIL), pair.id)
            await right.send()
            self._column = CompareColumn(right, self.tr)
        return self._column


async def draw_stored(
    left: tuple[str, str], answer: ComparedAnswer, footer: str, tr: Translator
) -> None:
    """Draw a Compare that has ended (a version drawn again: ui/versions_view.py): the
    chat's own answer ``left`` (its model's label, its text as shown) beside ``answer``,
    another model's, its reasoning folded in its column and ``footer`` under it."""
    column = await ComparePair(left, answer.label, tr).column()
    await draw_reasoning(answer.turn, tr, parent=column.step)
    await column.finish(link_remote_images(answer.turn.answer), [], footer)
