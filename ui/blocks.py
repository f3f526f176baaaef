"""A long streamed text as a run of Chainlit steps or messages, one per block.

Chainlit re-renders a message's whole markdown at every update, so a text
streamed into one message costs the browser more at each update as it grows
(:mod:`backend.blocks` says why and where the text is cut). Here each block is
its own Chainlit step (inside the reasoning step, :class:`StepBlocks`) or
message (the answer while it streams, :class:`ui.answer_view.AnswerView`):
the open block shows its text live; when :class:`~backend.blocks.BlockSplitter`
cuts, the open block gets its final text (remote images made links,
:func:`backend.safety.link_remote_images`), is stored (Chainlit's data layer, so
a resumed chat shows it) and is not touched again while the text streams.

The open block's text does not go through Chainlit's ``stream_token``: each of those
renders Chainlit's whole page again in the browser (20-25 ms of main thread per update
on this project's machine, docs/facts.md), 20 times a second. The block is made with
:data:`LIVE_PLACEHOLDER` as its text (a ``stream_token``: on the page, not stored), and
its text goes to the page through :func:`ui.bridge.show_live`, which
``public/live.js`` appends as plain text (:func:`ui.bridge.end_live` once the block has
its whole text). Markdown is rendered once the block closes:
while a block is open the person reads its raw text (README says so).

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
from ui import bridge

BLOCK_ID_TAIL: Final = "b10cb10cb10c"
"""The last group of every block's id (a UUID's 12 hex digits), for the page's CSS and JS."""

LIVE_PLACEHOLDER: Final = " "
"""An open block's own text on the page until it closes: blank, so Chainlit draws the
block (a step or message with no text is drawn without its content) and shows nothing
of it; ``public/live.js`` shows the live text instead."""

BLOCK_NAME: Final = "block"
"""The name of a reasoning block's step: never shown (``public/style.css`` hides its title)."""


def block_id() -> str:
    """A new id in UUID form whose last group is :data:`BLOCK_ID_TAIL`."""
    return str(uuid.uuid4())[:-12] + BLOCK_ID_TAIL


class _Block(Protocol):
    """What a block is in Chainlit: a step or a message that streams."""

    @property
    def id(self) -> str: ...

    async def stream_token(self, token: str, is_sequence: bool = False) -> None: ...


B = TypeVar("B", bound=_Block)


class Blocks(Generic[B]):
    """Text streamed into a run of blocks: the open one shows it live, a cut closes it."""

    def __init__(self, soft_chars: int, hard_chars: int, opening: str = "") -> None:
        self._splitter = BlockSplitter(soft_chars, hard_chars)
        self._open: B | None = None
        self._text = ""  # the open block's text so far
        self._cut: tuple[B, str] | None = None  # cut at the last update, not yet drawn whole
        self._opening = opening  # shown first in the next block

    async def add(self, text: str) -> None:
        """Show ``text`` in the open block, closing and opening blocks where cut.

        A block cut here is drawn whole at the next call (its live text stays on the page
        until then), not right after the block that follows it is drawn: each of the two
        is a render of Chainlit's whole page, and together they would be one long frame."""
        await self._close_cut()
        for part in self._splitter.feed(text):
            if isinstance(part, BlockCut):
                await self._close_cut()  # a second cut in one call
                if self._open is not None:
                    self._cut = (self._open, self._text + part.closing)
                    self._drop_open()
                self._opening = part.opening
                continue
            # The text is the block's before it is sent: a Stop that lands while it is
            # being sent (it still reaches the page) closes the block with it.
            new = self._open is None
            if new:
                part, self._opening = self._opening + part, ""
            block = self._open = self._open or self._new_block()
            self._text += part
            try:  # the words first: the page keeps them until the block is drawn
                await bridge.show_live(block.id, part)
            finally:
                if new:  # drawn blank: its text is live
                    await block.stream_token(LIVE_PLACEHOLDER)

    async def _close_open(self, closing: str) -> None:
        """Give the cut block and the open one their final text (the open one's with
        ``closing`` added) and store them; no-op for those there are not."""
        await self._close_cut()
        if self._open is not None:
            block, text = self._open, self._text + closing
            self._drop_open()
            await self._draw_whole(block, text)

    async def _close_cut(self) -> None:
        if self._cut is not None:
            (block, text), self._cut = self._cut, None
            await self._draw_whole(block, text)

    async def _draw_whole(self, block: B, text: str) -> None:
        await self._finish(block, text)
        await bridge.end_live(block.id)

    def _drop_open(self) -> None:
        """Forget the open block without closing it (it leaves the page, is replaced, or
        is cut)."""
        self._open, self._text = None, ""

    def _drop_all(self) -> list[B]:
        """Forget the open and the cut block without closing them (they leave the page,
        or are replaced); returns them."""
        streaming = [block for block in (self._open, self._cut and self._cut[0]) if block]
        self._drop_open()
        self._cut = None
        return streaming

    def _new_block(self) -> B:
        raise NotImplementedError

    async def _finish(self, block: B, text: str) -> None:
        """Give a closed block its final ``text`` and store it."""
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
        """Give the cut and the open block their final text and store them; no-op if
        there are none."""
        await self._close_open("")

    async def remove(self) -> None:
        """Take every block off the page and out of the store (before their parent goes)."""
        self._drop_all()
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

    async def _finish(self, block: cl.Step, text: str) -> None:
        block.output = link_remote_images(text)  # no image fetches
        await block.update()
