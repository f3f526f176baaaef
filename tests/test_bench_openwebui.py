"""bench.openwebui's chat driver: which of Open WebUI's socket events show text to a person.

The payloads are the ``data`` of ``events`` frames a real Open WebUI 0.12.4 tab
received (Debian's chromium, the scripted ``paced`` answer), trimmed of ids and
timestamps. Open WebUI itself is not needed (CI never installs it).
"""

from __future__ import annotations

from typing import Any

import pytest

from bench.openwebui import item_text, shows_text

ROLE_CHUNK: dict[str, Any] = {  # the server's first chunk, relayed raw: role, no text
    "object": "chat.completion.chunk",
    "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
}
THINKING_OPENS: dict[str, Any] = {  # ◁think▷ seen: the "Thinking" block appears, still empty
    "output": [{"type": "reasoning", "status": "in_progress", "content": [], "summary": None}]
}
REASONING_DELTA: dict[str, Any] = {"type": "response.reasoning_text.delta", "delta": "r0 "}
EMPTY_DELTA: dict[str, Any] = {"type": "response.output_text.delta", "delta": ""}
ANSWER_OPENS_EMPTY: dict[str, Any] = {
    "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text"}]}]
}
USAGE: dict[str, Any] = {"usage": {"prompt_tokens": 42, "completion_tokens": 200}}
DONE: dict[str, Any] = {
    "done": True,
    "output": [
        {"type": "reasoning", "content": [{"type": "output_text", "text": "r0 r1"}]},
        {"type": "message", "content": [{"type": "output_text", "text": "a0 (end of answer)"}]},
    ],
}


@pytest.mark.parametrize(
    ("data", "visible"),
    [
        (ROLE_CHUNK, False),
        (THINKING_OPENS, True),
        (REASONING_DELTA, True),
        (EMPTY_DELTA, False),
        (ANSWER_OPENS_EMPTY, False),
        (USAGE, False),
        (DONE, True),
    ],
)
def test_what_a_person_sees(data: dict[str, Any], visible: bool) -> None:
    assert shows_text(data) is visible


def test_the_answer_is_the_message_items_text_without_the_reasoning() -> None:
    texts = [item_text(item) for item in DONE["output"] if item["type"] == "message"]
    assert texts == ["a0 (end of answer)"]
