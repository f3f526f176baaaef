"""backend.sse: SSE bytes cut anywhere give the same JSON values, in order."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from backend.sse import data_values

CHUNKS = [
    {"id": "a", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
    {"id": "a", "choices": [{"index": 0, "delta": {"content": "◁think▷ 你好"}}]},
    {"id": "a", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}},
]


def body(newline: bytes = b"\n") -> bytes:
    """An OpenAI stream: a comment, the chunks as data events, then [DONE]."""
    events = [b": keep-alive"] + [
        b"data: " + json.dumps(c, ensure_ascii=False).encode() for c in CHUNKS
    ]
    return b"".join(e + newline + newline for e in [*events, b"data: [DONE]"])


async def pieces(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


async def collect(data: bytes, size: int) -> list[object]:
    return [value async for value in data_values(pieces(data, size))]


@pytest.mark.parametrize("newline", [b"\n", b"\r\n"])
async def test_every_cut_gives_the_chunks(newline: bytes) -> None:
    data = body(newline)
    for size in range(1, 40):  # cuts inside lines, markers and UTF-8 characters
        assert await collect(data, size) == CHUNKS
    assert await collect(data, len(data)) == CHUNKS


async def test_nothing_after_done_is_parsed() -> None:
    data = body() + b"data: not json\n\n"
    assert await collect(data, 7) == CHUNKS


async def test_a_last_line_without_newline_and_no_space() -> None:
    data = b'data:{"a": 1}\n\ndata: {"b": 2}'
    assert await collect(data, 3) == [{"a": 1}, {"b": 2}]


async def test_empty_data_and_other_fields_are_skipped() -> None:
    data = b'event: message\nid: 4\ndata:\n\nretry: 10\ndata: {"a": 1}\n\n'
    assert await collect(data, 5) == [{"a": 1}]


async def test_a_line_that_is_not_json_raises_value_error() -> None:
    data = b'data: {"a": 1}\n\ndata: {"id": "x", "choices": [{"delta": {"content": "oops\n\n'
    with pytest.raises(ValueError):
        await collect(data, 4)
