"""The reasoning step of one answer in Chainlit: "Thinking…", then "Thought for 12.3s".

Chainlit's ``cl.Step`` used as a context manager replaces the step's output with
the error text when an exception (including Stop's ``CancelledError``) crosses
it (facts.md), so the step is opened and closed by hand here and always ends
with the reasoning received so far and a title that says how it ended.

The reasoning itself streams into child steps of the step, one per block
(:class:`ui.blocks.StepBlocks`), so the browser's work per update does not grow
with the reasoning's length; the step's own output stays empty. The step is
sent without Chainlit's ``auto_collapse``, which would take the whole reasoning
off the page when it ends and render it all again when the person unfolds it:
``public/stream.js`` folds it then, keeping it on the page.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import chainlit as cl
from chainlit.config import config

from backend.conversation import Turn
from backend.i18n import ENGLISH, Translator
from backend.presenter import THINKING_LABEL, StepEnd, thought_label
from backend.timings import stored_thought_label
from ui.blocks import StepBlocks


class ReasoningView:
    """Opens the step at the first reasoning text, streams into it, closes it once."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        tr: Translator = ENGLISH,
        parent: cl.Step | None = None,
    ) -> None:
        """``parent``: the step it goes in (a Compare column); None: the answer's run."""
        self._clock = clock
        self._tr = tr
        self._parent = parent
        self._open: tuple[cl.Step, StepBlocks] | None = None
        self._since: float | None = None  # the first reasoning text: "Thought for" counts from it

    async def add(self, text: str, step_id: str | None = None) -> None:
        """Stream reasoning text, opening the step (expanded) on the first call: also
        with ``text`` empty (the server took a Thinking request, or a lone opening marker
        came), which a person sees as "Thinking…". ``step_id``: the id the step gets
        when this call opens it (the turn's record names it); None: a new one."""
        if self._since is None and text:
            self._since = self._clock()
        if self._open is None:
            # Same parent as the answer message (the run of on_message), so the
            # browser shows the step above the answer, not after the whole run.
            parent = self._parent or cl.context.current_step
            step = cl.Step(
                name=self._tr(THINKING_LABEL),
                type="llm",
                id=step_id,
                parent_id=parent.id if parent else None,
                default_open=True,  # folded when it ends by public/stream.js
                # Its avatar is the model's, as its answer's. Chainlit's page asks for
                # /avatars/<avatarName, else the step's name>, and its server refuses
                # "Thinking…" and every Chinese title with HTTP 400 (docs/facts.md): a
                # pulsing placeholder and an error in the page's console.
                metadata={"avatarName": config.ui.name},
            )
            step.start = cl.utils.utc_now()
            await step.send()
            self._open = (step, StepBlocks(step))
        await self._open[1].add(text)

    async def discard(self) -> None:
        """Remove the open step: what streamed into it turned out to be the answer."""
        if self._open is not None:
            step, blocks = self._open
            self._open = None
            await blocks.remove()
            await step.remove()

    async def close(self, ended: StepEnd = "done", title: str | None = None) -> None:
        """Retitle the open step "Thought for N.Ns" (plus how it ended), or ``title`` when
        given; no-op if none is open.

        The page folds it then (``public/stream.js``); a resumed chat shows it folded
        (Chainlit's data layer does not give ``defaultOpen`` back), and unfolds its
        blocks a few at a time when it is unfolded.
        """
        if self._open is None:
            return
        step, blocks = self._open
        self._open = None
        await blocks.close()
        thought = self._clock() - self._since if self._since is not None else 0.0
        step.name = title or thought_label(thought, ended, self._tr)
        step.end = cl.utils.utc_now()
        await step.update()


async def draw_stored(turn: Turn, tr: Translator, parent: cl.Step | None = None) -> str | None:
    """Draw ``turn``'s reasoning, if it has any, as a step that has ended (a version drawn
    again: ui/versions_view.py), titled as it was ("Thought for 12.3s", or "Thought"
    when its time was not stored) and folded as one that streamed; inside ``parent`` if
    given (a Compare column). Returns the step's id (None: no reasoning)."""
    if not turn.reasoning:
        return None
    step_id = str(uuid.uuid4())
    view = ReasoningView(tr=tr, parent=parent)
    await view.add(turn.reasoning, step_id)
    await view.close(title=stored_thought_label(turn.reasoning_s, tr))
    return step_id
