"""The reasoning step of one answer in Chainlit: "Thinking…", then "Thought for 12.3s".

Chainlit's ``cl.Step`` used as a context manager replaces the step's output with
the error text when an exception (including Stop's ``CancelledError``) crosses
it (facts.md), so the step is opened and closed by hand here and always ends
with the reasoning received so far and a title that says how it ended.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import chainlit as cl

from backend.i18n import ENGLISH, Translator
from backend.presenter import THINKING_LABEL, StepEnd, thought_label
from backend.safety import link_remote_images_off_loop


class ReasoningView:
    """Opens the step at the first reasoning text, streams into it, closes it once."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, tr: Translator = ENGLISH
    ) -> None:
        self._clock = clock
        self._tr = tr
        self._step: cl.Step | None = None
        self._since = 0.0

    async def add(self, text: str) -> None:
        """Stream reasoning text, opening the step (expanded) on the first call."""
        if self._step is None:
            self._since = self._clock()
            # Same parent as the answer message (the run of on_message), so the
            # browser shows the step above the answer, not after the whole run.
            parent = cl.context.current_step
            self._step = cl.Step(
                name=self._tr(THINKING_LABEL),
                type="llm",
                parent_id=parent.id if parent else None,
                default_open=True,
                auto_collapse=True,
            )
            self._step.start = cl.utils.utc_now()
            await self._step.send()
        await self._step.stream_token(text)

    async def discard(self) -> None:
        """Remove the open step: what streamed into it turned out to be the answer."""
        if self._step is not None:
            await self._step.remove()
            self._step = None

    async def close(self, ended: StepEnd = "done") -> None:
        """Retitle the open step "Thought for N.Ns" (plus how it ended); no-op if none is open.

        Chainlit collapses an ``auto_collapse`` step once the answer message follows it.
        """
        if self._step is None:
            return
        self._step.name = thought_label(self._clock() - self._since, ended, self._tr)
        self._step.output = await link_remote_images_off_loop(self._step.output)  # no fetches
        self._step.end = cl.utils.utc_now()
        await self._step.update()
        self._step = None
