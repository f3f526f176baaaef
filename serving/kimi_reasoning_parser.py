"""vLLM reasoning parser plugin for Kimi-VL's reasoning markers (``kimi_vl``).

Load it into ``vllm serve`` (vLLM 0.26 and 0.32; the path is relative to the
server's working directory, the repository root when launch.sh starts it)::

    vllm serve moonshotai/Kimi-VL-A3B-Thinking-2506 ... \\
        --reasoning-parser-plugin serving/kimi_reasoning_parser.py \\
        --reasoning-parser kimi_vl

Then every OpenAI client of the server gets the reasoning in ``reasoning``
(``delta.reasoning`` when streaming, ``message.reasoning`` otherwise) and the
answer, without markers, in ``content``. Structured outputs (``response_format``,
``structured_outputs``) then apply to the answer only, after the closing marker;
``--structured-outputs-config '{"enable_in_reasoning": true}'`` makes them apply
from the first token (the integration test forces the whole Kimi shape so).

This file is vLLM glue only: the text work is :mod:`serving.kimi_reasoning`,
built on :class:`backend.reasoning.ReasoningSplitter`. vLLM loads the file by
path, so it puts the repository root on ``sys.path`` itself (at the end, so it
shadows nothing of vLLM's) to import those.

Interface (vLLM's ``vllm/reasoning/abs_reasoning_parsers.py``, read in the 0.26.0
and 0.32.0 wheels; the same methods and call order in both):

* ``is_reasoning_end(prompt_ids)`` is first asked about the prompt, by the API
  server (for the engine's ``reasoning_ended``) and by its streaming parser: True
  there makes the whole reply content. Only the prompt's last assistant turn
  counts, so the closing marker in the history does not end the new reasoning.
* streaming: ``extract_reasoning_streaming`` per delta, then
  ``is_reasoning_end_streaming(output_ids, delta_ids)``; once that is True,
  vLLM sends the rest as content without calling the parser again.
* the engine, for structured outputs without ``enable_in_reasoning``, builds its
  own instance and asks ``is_reasoning_end_streaming(all_ids, step_ids)`` each
  decode step (all ids include the prompt's; ``step_ids`` may be an iterator).
* non-streaming: ``extract_reasoning(text, request)``.

Differences found between 0.26 and 0.32: ``DeltaMessage`` moved from
``vllm.entrypoints.openai.engine.protocol`` (0.26) to
``vllm.entrypoints.generate.base.protocol`` (0.32), both imported below;
0.26's ``--reasoning-parser-plugin`` takes only a file path, 0.32 also a module
name. Known limit in both: a partial marker held back when a stream ends inside
the reasoning (at most 7 characters, the start of a marker cut off by ``max_tokens``) is not
sent, since vLLM gives such a parser no end-of-stream call.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from vllm.reasoning import ReasoningParser, ReasoningParserManager

try:  # vLLM 0.32
    from vllm.entrypoints.generate.base.protocol import DeltaMessage
except ImportError:  # vLLM 0.26
    from vllm.entrypoints.openai.engine.protocol import DeltaMessage

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.append(_ROOT)

from serving.kimi_reasoning import (  # noqa: E402  (needs the root on sys.path)
    KIMI_ASSISTANT_HEADER,
    KimiReasoning,
    assistant_header,
)

_HEADERS: dict[int, str] = {}  # id(tokenizer) -> its assistant header; one tokenizer per server


def _header_of(tokenizer: Any) -> str:
    """The tokenizer's assistant-turn start, from its chat template; Kimi-VL's if none."""
    key = id(tokenizer)
    if key not in _HEADERS:

        def render(generation_prompt: bool) -> str:
            text: str = tokenizer.apply_chat_template(
                [{"role": "user", "content": "x"}],
                tokenize=False,
                add_generation_prompt=generation_prompt,
            )
            return text

        try:
            header = assistant_header(render)
        except Exception:  # no chat template, or one that needs more than this
            header = None
        _HEADERS[key] = header or KIMI_ASSISTANT_HEADER
    return _HEADERS[key]


class KimiVLReasoningParser(ReasoningParser):  # type: ignore[misc]  # vLLM is untyped here
    """``--reasoning-parser kimi_vl``: Kimi-VL's text markers, one instance per request."""

    def __init__(self, tokenizer: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(tokenizer, *args, **kwargs)

        def decode(ids: Sequence[int]) -> str:
            text: str = tokenizer.decode(list(ids), skip_special_tokens=False)
            return text

        self._kimi = KimiReasoning(decode, _header_of(tokenizer))

    def is_reasoning_end(self, input_ids: Sequence[int]) -> bool:
        """True if the prompt's last assistant turn already holds the closing marker."""
        return self._kimi.prompt_ends_reasoning(input_ids)

    def is_reasoning_end_streaming(
        self, input_ids: Sequence[int], delta_ids: Iterable[int]
    ) -> bool:
        """True if the reasoning ended with this step (see ``KimiReasoning.ends_in``)."""
        return self._kimi.ends_in(input_ids, delta_ids)

    def extract_content_ids(self, input_ids: list[int]) -> list[int]:
        """The answer's token ids in the delta where the reasoning ended."""
        return self._kimi.content_ids(input_ids)

    def count_reasoning_tokens(self, token_ids: Sequence[int]) -> int:
        """Output tokens up to and including the closing marker (all of them if it never came)."""
        return self._kimi.reasoning_token_count(token_ids)

    def extract_reasoning(self, model_output: str, request: Any) -> tuple[str | None, str | None]:
        """``(reasoning, content)`` of a complete reply, markers removed."""
        return self._kimi.split(model_output)

    def extract_reasoning_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
    ) -> Any:
        """This delta's reasoning and content, or None while text is held back."""
        reasoning, content = self._kimi.feed(delta_text)
        if not reasoning and not content:
            return None
        return DeltaMessage(reasoning=reasoning or None, content=content or None)


ReasoningParserManager.register_module("kimi_vl", module=KimiVLReasoningParser)
