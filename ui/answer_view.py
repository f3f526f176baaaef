"""One answer in Chainlit: streamed as blocks, finished as one message.

The answer's text goes on screen through :class:`AnswerView` only (as the reasoning's
goes through :class:`ui.reasoning_view.ReasoningView`), so how streamed text is drawn
can change here without touching the turn's flow.

While it streams, a long answer is a run of messages, one per block
(:class:`ui.blocks.Blocks`): Chainlit renders a message's whole markdown again at
every update, so one growing message would cost the browser more at each update.
When the answer ends, its first message (the id the turn's record names) gets the
whole answer and the other blocks leave the page: the answer is one message, exactly
the model's text (what Copy copies), with what the app says about it and its buttons
in a message under it.
"""

from __future__ import annotations

from typing import Final

import chainlit as cl

from backend.blocks import HARD_CHARS, SOFT_CHARS
from backend.safety import link_remote_images
from ui import bridge
from ui.blocks import Blocks, block_id

ANSWER_SOFT_CHARS: Final = SOFT_CHARS
"""An answer's blocks are the reasoning's size: a streaming update re-renders the open
block, so its size is what an update costs the page; the answer's Copy, record and
export do not depend on it (it ends as one message)."""

ANSWER_HARD_CHARS: Final = HARD_CHARS
"""See :data:`ANSWER_SOFT_CHARS`."""


class AnswerView(Blocks[cl.Message]):
    """The message(s) of one answer.

    Args:
        answer_id: the Chainlit id the answer's message gets (the turn's record names it).
        author: a compared model's label; None for the chat's own model.
        soft_chars, hard_chars: block sizes (:class:`backend.blocks.BlockSplitter`).
    """

    def __init__(
        self,
        answer_id: str,
        author: str | None = None,
        soft_chars: int = ANSWER_SOFT_CHARS,
        hard_chars: int = ANSWER_HARD_CHARS,
    ) -> None:
        super().__init__(soft_chars, hard_chars)
        self.answer_id = answer_id
        self.author = author
        self._messages: list[cl.Message] = []
        self._sent: set[str] = set()  # ids of the blocks already sent whole
        self._under: cl.Message | None = None  # the message under it: its footer, buttons
        self._actions: list[cl.Action] = []

    def _new_block(self) -> cl.Message:
        first = not self._messages
        message = cl.Message(
            content="", author=self.author, id=self.answer_id if first else block_id()
        )
        self._messages.append(message)
        return message

    async def _finish(self, block: cl.Message, text: str) -> None:
        block.content = link_remote_images(text)  # no image fetches
        await block.send()
        self._sent.add(block.id)

    async def finish(self, content: str, actions: list[cl.Action], footer: str = "") -> None:
        """The answer as it stays: one message with exactly ``content`` (what its Copy
        button copies), made now if no text streamed; the other blocks leave the page.
        ``footer`` (how it ended, the stats line) and ``actions`` go in a message of their
        own under it, a system message: Chainlit gives Copy to the last assistant message
        of a run, and the page shows the two as one answer (``public/style.css``).
        With no answer text (stopped while thinking, cut off before the answer) the
        system message alone is the answer's message: nothing to copy."""
        streaming = self._drop_all()
        if not content and not self._messages:
            await self._footer(footer, actions, self.answer_id)
            return
        message = self._messages[0] if self._messages else self._new_block()
        # The other blocks go first: while one is the last answer on the page, each
        # removal renders that one again (Chainlit's page marks its run's last answer),
        # so the first block is rendered whole once, after them.
        for block in reversed(self._messages[1:]):
            await block.remove()
        del self._messages[1:]
        message.content = content
        message.actions = [] if footer else actions
        self._actions = actions
        if message.id in self._sent:
            await message.update()
        else:
            await message.send()
        for block in streaming:
            await bridge.end_live(block.id)
        if footer:
            await self._footer(footer, actions, block_id())

    async def _footer(
        self,
        text: str,
        actions: list[cl.Action],
        message_id: str,
        elements: list[cl.Element] | None = None,
    ) -> None:
        under = cl.Message(
            text,
            author=self.author,
            actions=actions,
            type="system_message",
            id=message_id,
            elements=elements,
        )
        await under.send()
        self._under = under

    async def add_under(self, text: str, elements: list[cl.Element] | None = None) -> None:
        """Add ``text`` (a Markdown paragraph) and inline ``elements`` (a grounding copy)
        to the finished answer, in the message under it, above its buttons: nothing of
        it comes after the buttons or gets a Copy of its own, and the answer's own text
        (what Copy copies) stays the model's. Made now, the buttons moved into it, when
        the answer has no such message yet."""
        under = self._under
        if under is None:
            for button in self._actions:
                await button.remove()
            await self._footer(text, self._actions, block_id(), elements)
            return
        under.content = f"{under.content}\n\n{text}" if under.content else text
        under.elements = [*under.elements, *(elements or [])]
        await under.update()
