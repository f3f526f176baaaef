"""A long streamed text as a run of Chainlit steps or messages, one per block.

Chainlit re-renders a message's whole markdown at every update, so a text
streamed into one message costs the browser more at each update as it grows
(:mod:`backend.blocks` says why and where the text is cut). Here each block is
its own Chainlit step (inside the reasoning step, :class:`StepBlocks`) or
message (the answer, :class:`MessageBlocks`): tokens stream into the open
block; when :class:`~backend.blocks.BlockSplitter` cuts, the open block gets
its final text (remote images made links, :func:`backend.safety.link_remote_images`),
is stored (Chainlit's data layer, so a resumed chat shows it) and is never
touched again.

The blocks' ids end in :data:`BLOCK_ID_TAIL`, which ``public/style.css`` and
``public/stream.js`` recognise in the page (``#step-<id>``): a reasoning block
shows without a title or frame of its own, an answer block after the first
without its own avatar.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Final, Generic, Protocol, TypeVar

import chainlit as cl

from backend.blocks import HARD_CHARS, SOFT_CHARS, BlockCut, BlockSplitter
from backend.safety import link_remote_images

BLOCK_ID_TAIL: Final = "b10cb10cb10c"
"""The last group of every block's id (a UUID's 12 hex digits), for the page's CSS and JS."""

BLOCK_NAME: Final = "block"
"""The name of a reasoning block's step: never shown (``public/style.css`` hides its title)."""


ANSWER_SOFT_CHARS: Final = 8_000
"""An answer's blocks are larger than the reasoning's: the Copy button under an answer
copies its last block only, so most answers should be one block."""

ANSWER_HARD_CHARS: Final = 12_000
"""See :data:`ANSWER_SOFT_CHARS`."""


def block_id() -> str:
    """A new id in UUID form whose last group is :data:`BLOCK_ID_TAIL`."""
    return str(uuid.uuid4())[:-12] + BLOCK_ID_TAIL


class _Block(Protocol):
    """What a block is in Chainlit: a step or a message that streams."""

    async def stream_token(self, token: str, is_sequence: bool = False) -> None: ...


B = TypeVar("B", bound=_Block)


class _Blocks(Generic[B]):
    """Text streamed into a run of blocks: the open one streams, a cut closes it."""

    def __init__(self, soft_chars: int, hard_chars: int, opening: str = "") -> None:
        self._splitter = BlockSplitter(soft_chars, hard_chars)
        self._open: B | None = None
        self._opening = opening  # shown first in the next block

    async def add(self, text: str) -> None:
        """Stream ``text`` into the open block, closing and opening blocks where cut."""
        for part in self._splitter.feed(text):
            if isinstance(part, BlockCut):
                if self._open is not None:
                    block, self._open = self._open, None
                    await self._finish(block, part.closing)
                self._opening = part.opening
                continue
            if self._open is None:
                self._open = self._new_block()
                part, self._opening = self._opening + part, ""
            await self._open.stream_token(part)

    def _new_block(self) -> B:
        raise NotImplementedError

    async def _finish(self, block: B, closing: str) -> None:
        """Give a closed block its final text (``closing`` added) and store it."""
        raise NotImplementedError


class StepBlocks(_Blocks[cl.Step]):
    """Reasoning text as child steps of one step (the reasoning step), block by block.

    Args:
        parent: the step the blocks belong to (already sent).
        soft_chars, hard_chars: block sizes (:class:`backend.blocks.BlockSplitter`).
    """

    def __init__(
        self, parent: cl.Step, soft_chars: int = SOFT_CHARS, hard_chars: int = HARD_CHARS
    ) -> None:
        super().__init__(soft_chars, hard_chars)
        self._parent = parent
        self._blocks: list[cl.Step] = []

    async def close(self) -> None:
        """Give the open block its final text and store it; no-op if none is open."""
        if self._open is not None:
            block, self._open = self._open, None
            await self._finish(block, "")

    async def remove(self) -> None:
        """Take every block off the page and out of the store (before their parent goes)."""
        self._open = None
        for block in self._blocks:
            await block.remove()
        self._blocks.clear()

    def _new_block(self) -> cl.Step:
        block = cl.Step(
            name=BLOCK_NAME,
            type="undefined",
            id=block_id(),
            parent_id=self._parent.id,
            default_open=True,
            show_input=False,
        )
        self._blocks.append(block)
        return block

    async def _finish(self, block: cl.Step, closing: str) -> None:
        block.output = link_remote_images(block.output + closing)  # no image fetches
        await block.update()


class MessageBlocks(_Blocks[cl.Message]):
    """An answer as a run of messages, block by block; the last one carries its buttons.

    The first block is an ordinary message (its avatar shows); the later ones have
    :func:`block_id` ids, so the page shows them as one answer.

    Args:
        author: the messages' author (a compared model's label), or None for the default.
        heading: text shown before the answer in its first block (not part of the answer).
        soft_chars, hard_chars: block sizes (:class:`backend.blocks.BlockSplitter`).
    """

    def __init__(
        self,
        author: str | None = None,
        heading: str = "",
        soft_chars: int = ANSWER_SOFT_CHARS,
        hard_chars: int = ANSWER_HARD_CHARS,
    ) -> None:
        super().__init__(soft_chars, hard_chars, f"{heading}\n\n" if heading else "")
        self._author = author
        self._last: cl.Message | None = None

    @property
    def id(self) -> str | None:
        """The id of the message that ends the answer (the last block), or None before any."""
        return self._last.id if self._last is not None else None

    async def end(self, compose: Callable[[str], str], actions: list[cl.Action]) -> None:
        """End the answer: its last block becomes ``compose(the block's text)``, with ``actions``.

        With no answer text at all, one message holds ``compose("")`` (and the heading).
        """
        block = self._open or self._last
        if block is None:
            block = self._new_block()
            text, self._opening = self._opening, ""
        else:
            text = block.content
        self._open = None
        block.content = compose(link_remote_images(text))  # no image fetches
        block.actions = actions
        await block.send()

    def _new_block(self) -> cl.Message:
        message = cl.Message(content="", author=self._author) if self._author else cl.Message("")
        if self._last is not None:
            message.id = block_id()  # a block after the first: no avatar of its own
        self._last = message
        return message

    async def _finish(self, block: cl.Message, closing: str) -> None:
        block.content = link_remote_images(block.content + closing)  # no image fetches
        await block.send()
