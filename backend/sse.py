"""Server-sent events of an OpenAI-compatible stream, parsed lean: bytes in, JSON values out.

The OpenAI SDK's typed stream decodes each event in Python and builds a pydantic
object per chunk; measured with ``bench/bench_chunks.py`` that is most of the
app's CPU while it relays answers. Here the raw bytes are cut at newlines and
each ``data:`` line goes to orjson as bytes: one JSON parse, no text decoding,
no objects beyond the dicts and lists of the chunk.

Format (the WHATWG HTML standard, "Server-sent events"; OpenAI and vLLM): lines
end with LF or CRLF; a ``data:`` line's value follows the colon and one optional
space; lines starting with ``:`` are comments; ``event:``, ``id:`` and
``retry:`` lines are not used by chat completion streams and are skipped. Each
chat completion chunk is one event with one ``data:`` line (OpenAI and vLLM
never split a chunk's JSON over several lines), so every ``data:`` line is
parsed on its own. ``data: [DONE]`` ends the stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import orjson

DONE = b"[DONE]"
"""The data of the last event of an OpenAI stream."""


async def data_values(chunks: AsyncIterable[bytes]) -> AsyncIterator[Any]:
    """Yield the parsed JSON of each ``data:`` line of an SSE byte stream.

    ``chunks`` are the body's bytes as they arrive, cut anywhere (inside a line,
    inside a UTF-8 character). Stops yielding at ``data: [DONE]`` but reads the
    body to its end, so an HTTP/1.1 keep-alive connection goes back to the pool
    clean. A last line without a newline is parsed too; an empty ``data:`` line
    is skipped.

    Raises:
        orjson.JSONDecodeError: a ``data:`` line is not JSON (a subclass of
            ``ValueError``, as ``json.JSONDecodeError``).
    """
    pending = b""
    done = False
    async for chunk in chunks:
        if done:
            continue
        if b"\n" not in chunk:
            pending += chunk
            continue
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            if line.startswith(b"data:"):
                data = line[5:].strip()
                if data == DONE:
                    done = True
                    break
                if data:
                    yield orjson.loads(data)
    if not done and pending.startswith(b"data:"):
        data = pending[5:].strip()
        if data and data != DONE:
            yield orjson.loads(data)
