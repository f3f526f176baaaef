"""Tests for backend.reasoning: the incremental ◁think▷ splitter and strip_reasoning.

Every behaviour is checked chunk by chunk: the same text cut at every position,
one character at a time and at random (fixed seed) must give the same reasoning
and answer. Expected strings are written out by hand, and a small whole-text
reference (``re.split`` on the markers) checks random texts.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from itertools import pairwise

import pytest

from backend.events import AnswerDelta, ReasoningDelta, TextPart
from backend.families import KIMI_MARKERS
from backend.reasoning import ReasoningSplitter, strip_reasoning

THINK_OPEN, THINK_CLOSE = KIMI_MARKERS.open, KIMI_MARKERS.close

Collapsed = list[tuple[str, str]]
"""Parts as (kind, text) with neighbours of one kind merged; kind is "r" or "a"."""

# A realistic Thinking-2506 reply: newlines after both markers, look-alike text
# inside the reasoning, markdown and inner whitespace in the answer.
STREAM = (
    "◁think▷\nThe user shows a cat. Is ◁ a marker? No; nor is ▷, ◁thin or "
    "◁/thinking▷.\nSo: tabby.\n◁/think▷\n\nIt is a **tabby** cat.\n\n  - striped coat"
)
STREAM_REASONING = (
    "The user shows a cat. Is ◁ a marker? No; nor is ▷, ◁thin or ◁/thinking▷.\nSo: tabby.\n"
)
STREAM_ANSWER = "It is a **tabby** cat.\n\n  - striped coat"

# The same reply when the model starts with only the closing marker.
CLOSE_ONLY = "Looking at ◁ the ◁/thin image.◁/think▷ A cat◁ ."
CLOSE_ONLY_REASONING = "Looking at ◁ the ◁/thin image."
CLOSE_ONLY_ANSWER = "A cat◁ ."


def _check_parts(parts: Sequence[TextPart], *, markers_allowed: bool = False) -> None:
    """Assert the output contract of one feed/flush call."""
    for part in parts:
        assert isinstance(part, ReasoningDelta | AnswerDelta)
        assert part.text, "empty part"
        if not markers_allowed:
            assert THINK_OPEN not in part.text
            assert THINK_CLOSE not in part.text
    for left, right in pairwise(parts):
        assert type(left) is not type(right), "same-kind parts not merged"


def _collapse(parts: Iterable[TextPart]) -> Collapsed:
    out: Collapsed = []
    for part in parts:
        kind = "r" if isinstance(part, ReasoningDelta) else "a"
        if out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + part.text)
        else:
            out.append((kind, part.text))
    return out


def _run(
    chunks: Iterable[str], *, starts_in_reasoning: bool, markers_allowed: bool = False
) -> tuple[Collapsed, bool]:
    """Feed chunks, then flush; return the collapsed parts and the final in_reasoning."""
    splitter = ReasoningSplitter(markers=KIMI_MARKERS, starts_in_reasoning=starts_in_reasoning)
    parts: list[TextPart] = []
    for chunk in chunks:
        got = splitter.feed(chunk)
        _check_parts(got, markers_allowed=markers_allowed)
        parts.extend(got)
    got = splitter.flush()
    _check_parts(got, markers_allowed=markers_allowed)
    assert len(got) <= 1
    parts.extend(got)
    return _collapse(parts), splitter.in_reasoning


def _split_at(text: str, cuts: Iterable[int]) -> list[str]:
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in pairwise(bounds)]


def _random_chunkings(text: str, rng: random.Random, count: int) -> list[list[str]]:
    chunkings = []
    for _ in range(count):
        cuts = rng.sample(range(1, len(text)), rng.randint(0, min(20, len(text) - 1)))
        chunkings.append(_split_at(text, cuts))
    return chunkings


def _chunkings(text: str, seed: int) -> list[list[str]]:
    """Whole, every single cut, every pair of cuts, one char at a time, random."""
    n = len(text)
    out = [[text], list(text)]
    out += [_split_at(text, [i]) for i in range(1, n)]
    out += [_split_at(text, [i, j]) for i in range(1, n) for j in range(i, n)]
    out += _random_chunkings(text, random.Random(seed), 300)
    return out


@pytest.mark.parametrize("starts_in_reasoning", [True, False])
def test_realistic_stream_any_chunking(starts_in_reasoning: bool) -> None:
    expected = [("r", STREAM_REASONING), ("a", STREAM_ANSWER)]
    for chunks in _chunkings(STREAM, seed=2506):
        assert "".join(chunks) == STREAM
        assert _run(chunks, starts_in_reasoning=starts_in_reasoning) == (expected, False), chunks


def test_close_only_stream_any_chunking() -> None:
    expected = [("r", CLOSE_ONLY_REASONING), ("a", CLOSE_ONLY_ANSWER)]
    for chunks in _chunkings(CLOSE_ONLY, seed=7):
        assert _run(chunks, starts_in_reasoning=True) == (expected, False), chunks


def test_close_only_stream_without_thinking_profile_drops_stray_marker() -> None:
    expected = [("a", "Looking at ◁ the ◁/thin image. A cat◁ .")]
    for chunks in _chunkings(CLOSE_ONLY, seed=8):
        assert _run(chunks, starts_in_reasoning=False) == (expected, False), chunks


def test_marker_and_text_in_same_chunk() -> None:
    splitter = ReasoningSplitter(markers=KIMI_MARKERS)
    assert splitter.feed("◁think▷abc") == [ReasoningDelta("abc")]
    assert splitter.in_reasoning
    assert splitter.feed("abc◁/think▷xyz") == [ReasoningDelta("abc"), AnswerDelta("xyz")]
    assert not splitter.in_reasoning
    assert splitter.flush() == []


def test_both_markers_in_one_chunk() -> None:
    splitter = ReasoningSplitter(markers=KIMI_MARKERS)
    assert splitter.feed("pre◁think▷r◁/think▷a") == [
        AnswerDelta("pre"),
        ReasoningDelta("r"),
        AnswerDelta("a"),
    ]
    assert splitter.saw_marker
    assert not splitter.in_reasoning


def test_second_reasoning_block_alternates_parts() -> None:
    splitter = ReasoningSplitter(markers=KIMI_MARKERS)
    assert splitter.feed("a◁think▷b◁/think▷c◁think▷d") == [
        AnswerDelta("a"),
        ReasoningDelta("b"),
        AnswerDelta("c"),
        ReasoningDelta("d"),
    ]
    assert splitter.in_reasoning


def test_thinking_profile_text_before_marker_is_reasoning() -> None:
    splitter = ReasoningSplitter(markers=KIMI_MARKERS, starts_in_reasoning=True)
    assert splitter.in_reasoning
    assert splitter.feed("abc") == [ReasoningDelta("abc")]
    assert not splitter.saw_marker
    assert splitter.in_reasoning


def test_thinking_profile_answer_with_only_closing_marker() -> None:
    splitter = ReasoningSplitter(markers=KIMI_MARKERS, starts_in_reasoning=True)
    assert splitter.feed("reasoning text◁/think▷answer") == [
        ReasoningDelta("reasoning text"),
        AnswerDelta("answer"),
    ]
    assert splitter.saw_marker
    assert not splitter.in_reasoning


def test_thinking_profile_opening_marker_inside_reasoning_is_dropped() -> None:
    splitter = ReasoningSplitter(markers=KIMI_MARKERS, starts_in_reasoning=True)
    assert splitter.feed("◁think▷ab◁think▷cd") == [ReasoningDelta("abcd")]
    assert splitter.saw_marker
    assert splitter.in_reasoning


def test_plain_profile_text_is_answer_until_opening_marker() -> None:
    splitter = ReasoningSplitter(markers=KIMI_MARKERS)
    assert not splitter.in_reasoning
    assert splitter.feed("hello ") == [AnswerDelta("hello ")]
    assert splitter.feed("world◁think▷") == [AnswerDelta("world")]
    assert splitter.in_reasoning
    assert splitter.feed("hmm") == [ReasoningDelta("hmm")]


@pytest.mark.parametrize(
    ("chunks", "answer"),
    [
        (["abc◁/think▷xyz"], "abcxyz"),
        (["abc◁/th", "ink▷xyz"], "abcxyz"),
        (["abc◁/think▷ xyz"], "abc xyz"),
        (["◁/think▷\nxyz"], "xyz"),
        (["◁/think▷"], None),
    ],
)
def test_plain_profile_stray_closing_marker_is_dropped(
    chunks: list[str], answer: str | None
) -> None:
    expected = [] if answer is None else [("a", answer)]
    text = "".join(chunks)
    for chunking in [chunks, list(text), *(_split_at(text, [i]) for i in range(1, len(text)))]:
        assert _run(chunking, starts_in_reasoning=False) == (expected, False), chunking
    splitter = ReasoningSplitter(markers=KIMI_MARKERS)
    for chunk in chunks:
        splitter.feed(chunk)
    assert splitter.saw_marker
    assert not splitter.in_reasoning


def test_stray_closing_marker_split_releases_text_early() -> None:
    splitter = ReasoningSplitter(markers=KIMI_MARKERS)
    assert splitter.feed("abc◁/th") == [AnswerDelta("abc")]
    assert not splitter.saw_marker
    assert splitter.feed("ink▷xyz") == [AnswerDelta("xyz")]
    assert splitter.saw_marker


def test_stream_ending_inside_reasoning_flushes_held_text_as_reasoning() -> None:
    splitter = ReasoningSplitter(markers=KIMI_MARKERS, starts_in_reasoning=True)
    assert splitter.feed("◁think▷long reasoning ◁/thi") == [ReasoningDelta("long reasoning ")]
    assert splitter.flush() == [ReasoningDelta("◁/thi")]
    assert splitter.in_reasoning
    assert splitter.flush() == []
    assert splitter.in_reasoning


@pytest.mark.parametrize("starts_in_reasoning", [True, False])
def test_unclosed_reasoning_any_chunking(starts_in_reasoning: bool) -> None:
    text = "◁think▷\nStill thinking about ◁ this ◁/thi"
    expected = [("r", "Still thinking about ◁ this ◁/thi")]
    for chunks in _chunkings(text, seed=11):
        assert _run(chunks, starts_in_reasoning=starts_in_reasoning) == (expected, True), chunks


def test_partial_opening_marker_then_not_a_marker() -> None:
    splitter = ReasoningSplitter(markers=KIMI_MARKERS)
    assert splitter.feed("◁thin") == []
    assert splitter.feed("k about it") == [AnswerDelta("◁think about it")]
    assert not splitter.saw_marker
    assert splitter.flush() == []


@pytest.mark.parametrize("text", ["x◁/thinking▷y", "◁thinking", "a ◁ b", "▷", "◁◁", "◁/◁think"])
def test_look_alike_text_is_plain_text(text: str) -> None:
    for chunks in [[text], list(text), *(_split_at(text, [i]) for i in range(1, len(text)))]:
        assert _run(chunks, starts_in_reasoning=False) == ([("a", text)], False), chunks


def test_look_alike_releases_held_text_as_soon_as_possible() -> None:
    splitter = ReasoningSplitter(markers=KIMI_MARKERS)
    assert splitter.feed("a◁") == [AnswerDelta("a")]
    assert splitter.feed("b") == [AnswerDelta("◁b")]
    assert splitter.feed("◁/think") == []
    assert splitter.feed("i") == [AnswerDelta("◁/thinki")]
    assert splitter.feed("▷") == [AnswerDelta("▷")]
    assert splitter.feed("◁◁") == [AnswerDelta("◁")]
    assert splitter.feed("think▷r") == [ReasoningDelta("r")]


def test_lone_marker_start_at_end_is_flushed() -> None:
    splitter = ReasoningSplitter(markers=KIMI_MARKERS)
    assert splitter.feed("a◁") == [AnswerDelta("a")]
    assert splitter.flush() == [AnswerDelta("◁")]
    assert splitter.flush() == []


def test_extra_marker_start_before_real_marker() -> None:
    splitter = ReasoningSplitter(markers=KIMI_MARKERS)
    assert splitter.feed("◁◁think▷x") == [AnswerDelta("◁"), ReasoningDelta("x")]


def test_empty_chunk_changes_nothing() -> None:
    for starts in (True, False):
        splitter = ReasoningSplitter(markers=KIMI_MARKERS, starts_in_reasoning=starts)
        assert splitter.feed("") == []
        assert splitter.in_reasoning is starts
        assert not splitter.saw_marker
        assert splitter.flush() == []
    splitter = ReasoningSplitter(markers=KIMI_MARKERS)
    assert splitter.feed("◁thi") == []
    assert splitter.feed("") == []
    assert splitter.feed("nk▷\n") == []
    assert splitter.feed("") == []
    assert splitter.feed(" r") == [ReasoningDelta("r")]


def test_leading_whitespace_after_markers_is_dropped() -> None:
    text = "◁think▷\n\n  abc  def\n◁/think▷\n\n  Answer  text\n"
    expected = [("r", "abc  def\n"), ("a", "Answer  text\n")]
    for chunks in _chunkings(text, seed=3):
        assert _run(chunks, starts_in_reasoning=True) == (expected, False), chunks


def test_leading_whitespace_at_stream_start_is_dropped() -> None:
    splitter = ReasoningSplitter(markers=KIMI_MARKERS, starts_in_reasoning=True)
    assert splitter.feed("\n") == []
    assert splitter.feed(" ") == []
    assert splitter.feed("a b") == [ReasoningDelta("a b")]
    assert splitter.feed(" ") == [ReasoningDelta(" ")]
    plain = ReasoningSplitter(markers=KIMI_MARKERS)
    assert plain.feed("  hi  there") == [AnswerDelta("hi  there")]


def test_whitespace_only_answer_gives_no_answer_part() -> None:
    splitter = ReasoningSplitter(markers=KIMI_MARKERS, starts_in_reasoning=True)
    assert splitter.feed("r◁/think▷\n\n") == [ReasoningDelta("r")]
    assert splitter.feed(" \n") == []
    assert splitter.flush() == []
    assert not splitter.in_reasoning


def test_parts_of_one_feed_are_merged() -> None:
    splitter = ReasoningSplitter(markers=KIMI_MARKERS)
    assert splitter.feed("ab◁x◁y◁/think▷z") == [AnswerDelta("ab◁x◁yz")]


def _reference(text: str, *, starts_in_reasoning: bool) -> Collapsed:
    """Whole-text reference: split on the markers with a regex, then apply the rules."""
    in_reasoning, started = starts_in_reasoning, False
    out: Collapsed = []
    for piece in re.split(f"({THINK_OPEN}|{THINK_CLOSE})", text):
        if piece in (THINK_OPEN, THINK_CLOSE):
            if (piece == THINK_OPEN) != in_reasoning:
                in_reasoning, started = not in_reasoning, False
            continue
        if not started:
            piece = piece.lstrip()
            started = bool(piece)
        if piece:
            kind = "r" if in_reasoning else "a"
            if out and out[-1][0] == kind:
                out[-1] = (kind, out[-1][1] + piece)
            else:
                out.append((kind, piece))
    return out


def test_random_texts_match_whole_text_reference() -> None:
    rng = random.Random(20250626)
    atoms = [THINK_OPEN, THINK_CLOSE, "◁", "▷", "◁thin", "◁/th", "◁/think", "a", "k", " ", "\n"]
    for _ in range(400):
        text = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 25)))
        chunkings = [[text], list(text), *_random_chunkings(text, rng, 5)]
        for starts in (True, False):
            expected = _reference(text, starts_in_reasoning=starts)
            # Only text written around a removed marker can re-form one (see the
            # test below); then the reference shows it too.
            reformed = any(THINK_OPEN in t or THINK_CLOSE in t for _, t in expected)
            for chunks in chunkings:
                got, _ = _run(chunks, starts_in_reasoning=starts, markers_allowed=reformed)
                assert got == expected, (text, chunks, starts)


def test_text_around_a_removed_marker_is_kept_as_written() -> None:
    text = "◁/think◁/think▷▷\n"
    for chunks in [[text], list(text), *(_split_at(text, [i]) for i in range(1, len(text)))]:
        got, _ = _run(chunks, starts_in_reasoning=False, markers_allowed=True)
        assert got == [("a", "◁/think▷\n")], chunks


def test_long_reasoning_one_character_at_a_time() -> None:
    body = ("step ◁thin ▷ ◁/think ◁ " * 10_000)[:200_000]
    assert len(body) == 200_000
    assert THINK_OPEN not in body
    assert THINK_CLOSE not in body
    splitter = ReasoningSplitter(markers=KIMI_MARKERS, starts_in_reasoning=True)
    reasoning: list[str] = []
    answer: list[str] = []
    for char in THINK_OPEN + body + THINK_CLOSE + "Done.":
        parts = splitter.feed(char)
        assert len(parts) <= 1
        for part in parts:
            (reasoning if isinstance(part, ReasoningDelta) else answer).append(part.text)
    assert splitter.flush() == []
    assert "".join(reasoning) == body
    assert "".join(answer) == "Done."
    assert not splitter.in_reasoning


@pytest.mark.parametrize(
    "text",
    ["", "plain answer", "  leading space kept\n", "a ◁ b ▷ c ◁thin ◁/thinking▷"],
)
def test_strip_reasoning_without_markers_is_unchanged(text: str) -> None:
    assert strip_reasoning(text, KIMI_MARKERS) == text


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        (STREAM, STREAM_ANSWER),
        (CLOSE_ONLY, CLOSE_ONLY_ANSWER),
        ("◁think▷r◁/think▷\n\nanswer", "answer"),
        ("reasoning◁/think▷answer", "answer"),
        ("pre◁think▷r◁/think▷a", "a"),
        ("answer ◁think▷never closed", "answer "),
        ("◁think▷never closed", ""),
        ("◁think▷r1◁/think▷a1 ◁think▷r2◁/think▷a2", "a1 a2"),
        ("◁think▷r◁/think▷see ◁thin", "see ◁thin"),
        ("◁think▷r◁/think▷", ""),
    ],
)
def test_strip_reasoning(text: str, answer: str) -> None:
    assert strip_reasoning(text, KIMI_MARKERS) == answer
