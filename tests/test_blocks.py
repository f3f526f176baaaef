"""The markdown block splitter (backend/blocks.py), fed chunk by chunk.

Independent expectations: blocks are rendered with markdown-it (CommonMark, as
the page's remark is) one by one and compared with the whole text rendered at
once; the text is compared character for character whatever the chunking.
"""

from __future__ import annotations

import random

import pytest
from markdown_it import MarkdownIt

from backend.blocks import (
    BlockCut,
    BlockPart,
    BlockSplitter,
    block_texts,
)

MD = MarkdownIt("commonmark").enable("table")


def paragraphs(count: int, words: int = 40) -> str:
    """``count`` paragraphs of numbered words, with **bold** and `code`, a blank line apart."""
    out = []
    for p in range(count):
        text = " ".join(f"w{p}_{i}" for i in range(words))
        out.append(f"{text} **bold{p}** and `code{p}`.")
    return "\n\n".join(out) + "\n"


def feed_in_chunks(splitter: BlockSplitter, text: str, seed: int) -> list[BlockPart]:
    """Feed ``text`` in random chunks of 1 to 12 characters; all the parts, in order."""
    rng = random.Random(seed)
    parts: list[BlockPart] = []
    pos = 0
    while pos < len(text):
        size = rng.randint(1, 12)
        parts += splitter.feed(text[pos : pos + size])
        pos += size
    return parts


def blocks_of(parts: list[BlockPart]) -> list[str]:
    """The blocks as shown: text between cuts, with each cut's closing and opening text."""
    blocks = [""]
    for part in parts:
        if isinstance(part, BlockCut):
            blocks[-1] += part.closing
            blocks.append(part.opening)
        else:
            blocks[-1] += part
    return blocks


def text_of(parts: list[BlockPart]) -> str:
    return "".join(p for p in parts if isinstance(p, str))


@pytest.mark.parametrize("seed", range(5))
def test_the_text_is_kept_exactly_whatever_the_chunks(seed: int) -> None:
    long_line = " ".join(f"w{i}" for i in range(900)) + " \n"  # over 2 * 600, one line
    code = "x = 1\n\ny = 2\n" * 200 + "print(" + "1, " * 700 + ")\n"  # a long code line too
    text = paragraphs(30) + long_line + "```python\n" + code + "```\n" + paragraphs(5)
    parts = feed_in_chunks(BlockSplitter(300, 600), text, seed)
    assert text_of(parts) == text
    assert blocks_of(parts) == block_texts(text, 300, 600)  # same cuts as fed at once


def test_paragraph_cuts_render_as_the_whole_text_does() -> None:
    text = "# Title\n\n" + paragraphs(40) + "\n> a quote\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
    blocks = block_texts(text, 500, 5000)
    assert len(blocks) > 5
    assert all(0 < len(b) < 500 + 400 for b in blocks)  # a paragraph past the soft size
    assert "".join(MD.render(b) for b in blocks) == MD.render(text)


def test_no_cut_inside_code_or_math_before_the_hard_size() -> None:
    code = "```python\n" + "def f():\n    return 1\n\n" * 40 + "```\n"
    math = "$$\n" + "x + y \\\\\n\n" * 20 + "$$\n"
    text = paragraphs(2) + "\n" + code + "\n" + math + "\n" + paragraphs(2)
    blocks = block_texts(text, 100, 100_000)
    assert any(code in b for b in blocks)  # whole, in one block
    assert any(math in b for b in blocks)
    assert "".join(MD.render(b) for b in blocks) == MD.render(text)


def test_a_long_code_block_is_cut_at_line_ends_and_reopened_with_its_language() -> None:
    lines = [f"total = step(total, {i})\n" for i in range(1000)]
    text = "Here:\n\n```python\n" + "".join(lines) + "```\n\nDone.\n"
    blocks = block_texts(text, 1000, 2000)
    assert len(blocks) > 5
    for block in blocks[1:-1]:
        assert block.startswith("```python\n") and block.endswith("```\n")
        assert len(block) <= 2000 + 100
    code = "".join(token.content for b in blocks for token in MD.parse(b) if token.type == "fence")
    assert code == "".join(lines)  # every line once, in order, as code
    assert all(t.info == "python" for b in blocks for t in MD.parse(b) if t.type == "fence")


def test_a_cut_never_lands_before_a_closing_fence() -> None:
    text = "```\n" + "a\n" * 50 + "```\n" + "b\n"
    for hard in range(20, 120, 7):
        for block in block_texts(text, hard, hard):
            assert block not in ("```\n```\n", "```\n")  # no empty code box
            assert MD.render(block).count("<pre>") <= 1


def test_continuation_lines_stay_with_their_list_item() -> None:
    text = "1. First\n\n   still the first item\n\n2. Second\n\n    indented code? no: item text\n"
    blocks = block_texts(text, 1, 1000)
    assert all(not b.startswith((" ", "\t")) for b in blocks)
    assert blocks[0].startswith("1. First\n\n   still")


def test_a_line_with_no_end_is_cut_at_a_space_past_twice_the_hard_size() -> None:
    text = " ".join(f"word{i}" for i in range(3000))  # about 26,000 characters, one line
    splitter = BlockSplitter(1000, 2000)
    parts = feed_in_chunks(splitter, text, 7)
    blocks = blocks_of(parts)
    assert text_of(parts) == text
    assert len(blocks) > 5
    assert all(len(b) <= 4000 + 24 for b in blocks)  # a word and a chunk past it at most
    assert all(b.endswith(" ") for b in blocks[:-1])  # between words


def test_small_text_is_one_block_and_nothing_is_empty() -> None:
    assert block_texts("Hello **world**") == ["Hello **world**"]
    assert block_texts("") == []
    splitter = BlockSplitter(10, 20)
    parts = splitter.feed("a" * 15 + "\n\n")  # the cut waits for the next block's text
    assert not any(isinstance(p, BlockCut) for p in parts)
    assert splitter.feed("b") == [BlockCut(), "b"]


def test_a_forced_cut_outside_code_is_at_a_line_start() -> None:
    text = "".join(f"line {i}\n" for i in range(500))  # one paragraph, no blank line
    blocks = block_texts(text, 100, 400)
    assert all(b.endswith("\n") for b in blocks[:-1])
    assert all(len(b) <= 400 + 10 for b in blocks)
    assert "".join(blocks) == text


@pytest.mark.parametrize("seed", range(3))
def test_the_blocks_of_a_whole_text_are_those_its_stream_drew(seed: int) -> None:
    """A stored reasoning is drawn again from its turn's text (ui/datalayer.py): the blocks
    must be those the stream showed, fences closed and reopened at the same places."""
    code = "".join(f"x = {i}\n" for i in range(300))
    text = paragraphs(30) + "```python\n" + code + "```\n\n" + paragraphs(10)
    streamed = blocks_of(feed_in_chunks(BlockSplitter(500, 1000), text, seed))
    assert block_texts(text, 500, 1000) == streamed
    assert len(streamed) > 5


def test_a_code_block_cut_in_two_shows_as_two_closed_fences() -> None:
    text = "Intro.\n\n```sh\n" + "echo hi\n" * 4 + "```\n"
    assert block_texts(text, 10, 20) == [  # cut at the first line start past 20 characters
        "Intro.\n\n```sh\necho hi\n```\n",
        "```sh\necho hi\necho hi\n```\n",
        "```sh\necho hi\n```\n",
    ]
    assert block_texts("") == []


@pytest.mark.parametrize("seed", range(20))
def test_small_blocks_cut_the_same_however_the_text_comes(seed: int) -> None:
    """Long lines cut at spaces before a line that opens math or code: the line's head is
    read the same whether the line came whole or in pieces of 1 to 3 characters."""
    rng = random.Random(seed)

    def line() -> str:
        marker = rng.choice(["", "$$", "```sh", "```"])
        return rng.choice(["w " * rng.randint(0, 12) + marker, "x^2", "", "| a | b |", "b"])

    text = "\n".join(line() for _ in range(80)) + "\n"
    splitter, parts, pos = BlockSplitter(5, 10), [], 0
    while pos < len(text):
        size = rng.randint(1, 3)
        parts += splitter.feed(text[pos : pos + size])
        pos += size
    assert text_of(parts) == text
    assert blocks_of(parts) == block_texts(text, 5, 10)


def test_a_line_cut_at_a_space_is_still_read_for_what_it_opens() -> None:
    one = BlockSplitter(1, 1)
    by_character = [part for character in "a $$\na" for part in one.feed(character)]
    assert blocks_of(by_character) == block_texts("a $$\na", 1, 1) == ["a ", "$$\n", "a"]
