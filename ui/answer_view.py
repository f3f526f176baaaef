"""One answer message in Chainlit: created at its first text, streamed into, finished once.

The answer's text goes on screen through :class:`AnswerView` only (as the reasoning's
goes through :class:`ui.reasoning_view.ReasoningView`), so how streamed text is drawn
can change here without touching the turn's flow.
"""

from __future__ import annotations

import chainlit as cl


class AnswerView:
    """The message of one answer.

    Args:
        answer_id: the Chainlit id the message gets (the turn's record names it).
        author: a compared model's label; None for the chat's own model.
    """

    def __init__(self, answer_id: str, author: str | None = None) -> None:
        self.answer_id = answer_id
        self.author = author
        self._message: cl.Message | None = None

    def _made(self) -> cl.Message:
        if self._message is None:
            self._message = cl.Message(content="", author=self.author, id=self.answer_id)
        return self._message

    async def add(self, text: str) -> None:
        """Stream more of the answer (the message is created, below the step, at the first)."""
        await self._made().stream_token(text)

    async def finish(self, content: str, actions: list[cl.Action]) -> None:
        """The answer as it stays: its whole ``content`` and its buttons."""
        message = self._made()
        message.content = content
        message.actions = actions
        await message.send()
