"""A long streamed text as a run of Chainlit steps or messages, one per block.

Chainlit re-renders a message's whole markdown at every update, so a text
streamed into one message costs the browser more at each update as it grows
(:mod:`backend.blocks` says why and where the text is cut). Here each block is
its own Chainlit step (inside the reasoning step, :class:`StepBlocks`) or
message (the answer while it streams, :class:`ui.answer_view.AnswerView`):
tokens stream into the open block; when :class:`~backend.blocks.BlockSplitter`
cuts, the open block gets its final text (remote images made links,
:func:`backend.safety.link_remote_images`), is stored (Chainlit's data layer, so
a resumed chat shows it) and is not touched again while the text streams.

The blocks' ids end in :data:`BLOCK_ID_TAIL`, which ``public/style.css`` and
``public/stream.js`` recognise in the page (``#step-<id>``): a reasoning block
shows without a title or frame of its own, an answer block after the first
without its own avatar.
"""

from __future__ import annotations

import uuid
from typing import Final, Generic, Protocol, TypeVar

import chainlit as cl

from backend.blocks import HARD_CHARS, SOFT_CHARS, BlockCut, BlockSplitter
from backend.safety import link_remote_images

BLOCK_ID_TAIL: Final = "b10cb10cb10c"
"""The last group of every block's id (a UUID's 12 hex digits), for the page's CSS and JS."""

BLOCK_NAME: Final = "block"
"""The name of a reasoning block's step: never shown (``public/style.css`` hides its title)."""


def block_id() -> str:
    """A new id in UUID form whose last group is :data:`BLOCK_ID_TAIL`."""
    return str(uuid.uuid4())[:-12] + BLOCK_ID_TAIL


class _Block(Protocol):
    """What a block is in Chainlit: a step or a message that streams."""

    async def stream_token(self, token: str, is_sequence: bool = False) -> None: ...


B = TypeVar("B", bound=_Block)


class Blocks(Generic[B]):
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


class StepBlocks(Blocks[cl.Step]):
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
