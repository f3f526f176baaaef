"""The vLLM reasoning parser's logic (serving.kimi_reasoning), chunk by chunk, without vLLM.

A fake byte-level tokenizer gives every UTF-8 byte its own token (as the dev
model's tokenizer does for ``◁`` and ``▷``), plus single tokens for Kimi-VL's
special tokens. :func:`serve` replays what vLLM 0.26 and 0.32 do with the parser
for one streamed request (``vllm/parser/abstract_parser.py``, ``parse_delta``):
ask about the prompt, feed deltas until the parser says the reasoning ended,
then pass the rest on as content untouched. The real vLLM glue is proven in
tests/integration/test_reasoning_parser.py.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import pairwise

import pytest

from backend.families import KIMI_MARKERS
from serving.kimi_reasoning import (
    KIMI_ASSISTANT_HEADER,
    MARKER_TOKENS_MAX,
    KimiReasoning,
    assistant_header,
)

THINK_OPEN, THINK_CLOSE = KIMI_MARKERS.open, KIMI_MARKERS.close
SPECIAL = ["<|im_user|>", "<|im_assistant|>", "<|im_middle|>", "<|im_end|>"]
HEADER = "<|im_assistant|>assistant<|im_middle|>"


def encode(text: str) -> list[int]:
    """Byte tokens, with each special token as one id from 256 on."""
    ids: list[int] = []
    while text:
        special = next((s for s in SPECIAL if text.startswith(s)), None)
        if special:
            ids.append(256 + SPECIAL.index(special))
            text = text[len(special) :]
        else:
            ids.extend(text[0].encode())
            text = text[1:]
    return ids


def decode(ids: Sequence[int]) -> str:
    """Inverse of :func:`encode`; a cut UTF-8 character decodes to U+FFFD, as HF's does."""
    out, pending = [], bytearray()
    for token in ids:
        if token >= 256:
            out.append(pending.decode(errors="replace"))
            pending.clear()
            out.append(SPECIAL[token - 256])
        else:
            pending.append(token)
    out.append(pending.decode(errors="replace"))
    return "".join(out)


def prompt(*turns: tuple[str, str]) -> list[int]:
    """A Kimi-VL prompt of (role, text) turns, ending with the generation prompt."""
    text = "".join(f"<|im_{role}|>{role}<|im_middle|>{body}<|im_end|>" for role, body in turns)
    return encode(text + HEADER)


def deltas(text: str, cuts: Sequence[int]) -> list[tuple[str, list[int]]]:
    """``text``'s tokens cut after the given token counts, as (delta_text, delta_ids).

    Like vLLM's incremental detokenizer, a delta's text holds only complete
    characters; bytes of a cut character move on to the next delta's text.
    """
    ids = encode(text)
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(ids))), len(ids)]
    out, shown = [], ""
    for start, end in pairwise(bounds):
        full = decode(ids[:end])
        complete = full.rstrip("\ufffd") if end < len(ids) else full
        out.append((complete[len(shown) :], ids[start:end]))
        shown = complete
    return out


def serve(prompt_ids: list[int], text: str, cuts: Sequence[int]) -> tuple[str, str, int | None]:
    """One streamed request through the parser as vLLM drives it.

    Returns the concatenated reasoning and content fields and the index of the
    delta after which vLLM stopped asking the parser (None: never).
    """
    parser = KimiReasoning(decode, HEADER)
    reasoning, content = "", ""
    ended_at: int | None = None
    output_ids: list[int] = []
    if parser.prompt_ends_reasoning(prompt_ids):
        ended_at = -1
    for index, (delta_text, delta_ids) in enumerate(deltas(text, cuts)):
        output_ids += delta_ids
        if ended_at is not None:
            content += delta_text
            continue
        r, c = parser.feed(delta_text)
        reasoning, content = reasoning + r, content + c
        if parser.ends_in(output_ids, delta_ids):
            ended_at = index
    return reasoning, content, ended_at


REPLY = "◁think▷\nA striped cat; ◁ and ▷ alone are no markers.\n◁/think▷\n\nA **tabby** cat.◁x"
REPLY_REASONING = "A striped cat; ◁ and ▷ alone are no markers.\n"
REPLY_ANSWER = "A **tabby** cat.◁x"


def test_every_two_way_cut_gives_the_same_fields() -> None:
    tokens = len(encode(REPLY))
    for cut in range(tokens + 1):
        reasoning, content, ended = serve(prompt(("user", "cat?")), REPLY, [cut])
        assert (reasoning, content) == (REPLY_REASONING, REPLY_ANSWER), cut
        assert ended is not None


def test_token_by_token_and_random_cuts_give_the_same_fields() -> None:
    tokens = len(encode(REPLY))
    rng = random.Random(15)
    cut_sets = [list(range(tokens))] + [rng.sample(range(tokens), 9) for _ in range(200)]
    for cuts in cut_sets:
        fields = serve(prompt(("user", "cat?")), REPLY, cuts)[:2]
        assert fields == (REPLY_REASONING, REPLY_ANSWER), cuts


def test_vllm_is_told_the_end_only_once_the_answer_has_started() -> None:
    # One token per delta: the parser must keep the stream until "A" of the answer,
    # so the whitespace after the marker is still dropped by the splitter.
    tokens = encode(REPLY)
    _, _, ended = serve(prompt(("user", "cat?")), REPLY, list(range(len(tokens))))
    # Bytes before "A **": ◁think▷ 11, newline 1, the reasoning line 49, ◁/think▷ 12, 2 newlines.
    assert ended == 11 + 1 + 49 + 12 + 2


def test_an_answer_that_starts_with_only_the_closing_marker_still_splits() -> None:
    text = "the image shows a dog ◁/think▷It is a dog."
    for cuts in ([], list(range(60)), [5, 23, 24, 30]):
        reasoning, content, _ = serve(prompt(("user", "what?")), text, cuts)
        assert (reasoning, content) == ("the image shows a dog ", "It is a dog.")


def test_a_closing_marker_in_the_history_does_not_end_the_new_reasoning() -> None:
    history = prompt(
        ("user", "first?"),
        ("assistant", "◁think▷old◁/think▷old answer"),
        ("user", "second?"),
    )
    parser = KimiReasoning(decode, HEADER)
    assert parser.prompt_ends_reasoning(history) is False
    assert serve(history, "◁think▷new◁/think▷new answer", [3, 11])[:2] == (
        "new",
        "new answer",
    )


def test_a_prefilled_assistant_turn_that_closed_its_reasoning_makes_all_content() -> None:
    # The client continues its own assistant message (continue_final_message).
    prefill = encode("<|im_user|>user<|im_middle|>q<|im_end|>" + HEADER + "◁think▷r◁/think▷An")
    parser = KimiReasoning(decode, HEADER)
    assert parser.prompt_ends_reasoning(prefill) is True
    assert serve(prefill, "swer ◁/think▷ kept", [2])[:2] == ("", "swer ◁/think▷ kept")


def test_a_long_last_turn_is_searched_back_to_its_header() -> None:
    # The marker lies 2000 tokens before the end, far beyond the first 64-token window.
    prefill = encode(HEADER + "◁think▷r◁/think▷" + "a" * 2000)
    long_open = encode(HEADER + "◁think▷" + "r" * 2000)
    parser = KimiReasoning(decode, HEADER)
    assert parser.prompt_ends_reasoning(prefill) is True
    assert parser.prompt_ends_reasoning(long_open) is False


def test_a_prompt_without_any_header_counts_as_a_whole() -> None:
    parser = KimiReasoning(decode, "Assistant:")
    assert parser.prompt_ends_reasoning(encode("plain ◁/think▷ text")) is True
    assert parser.prompt_ends_reasoning(encode("plain text")) is False
    assert parser.prompt_ends_reasoning([]) is False


def test_the_engine_side_sees_the_end_at_the_token_that_completes_the_marker() -> None:
    # The engine's instance never streams: it decodes a window around each step.
    text = "◁think▷abc◁/think▷xyz"
    ids = prompt(("user", "q")) + encode(text)
    first_output = len(ids) - len(encode(text))
    close_done = first_output + len(encode("◁think▷abc◁/think▷")) - 1  # last byte of ▷
    parser = KimiReasoning(decode, HEADER)
    fired = [i for i in range(first_output, len(ids)) if parser.ends_in(ids[: i + 1], [ids[i]])]
    assert fired == [close_done]
    # A whole step at once, as one decode step with speculative tokens would give.
    assert parser.ends_in(ids, iter(ids[first_output:])) is True
    assert parser.ends_in(ids[: close_done + 1], ids[close_done - 3 : close_done + 1]) is True
    assert parser.ends_in(ids[:close_done], ids[close_done - 3 : close_done]) is False
    assert parser.ends_in(ids, []) is False


def test_the_window_covers_a_marker_of_one_token_per_byte() -> None:
    assert MARKER_TOKENS_MAX == len(encode(THINK_CLOSE)) == 12
    parser = KimiReasoning(decode, HEADER)
    ids = encode("x" * 50 + THINK_CLOSE)
    assert parser.ends_in(ids, ids[-1:]) is True


def test_content_ids_of_the_delta_where_the_reasoning_ended() -> None:
    parser = KimiReasoning(decode, HEADER)
    assert parser.content_ids(encode("so.◁/think▷Answer")) == encode("Answer")
    assert parser.content_ids(encode("nk▷Answer")) == encode("Answer")  # marker began before
    assert parser.content_ids(encode("still thinking")) == []
    # Once this stream's answer has started, a delta without the marker is all answer.
    parser.feed("r◁/think▷")
    parser.feed("A")
    assert parser.content_ids(encode("nswer")) == encode("nswer")


def test_reasoning_token_count_includes_the_closing_marker() -> None:
    parser = KimiReasoning(decode, HEADER)
    reply = encode("◁think▷ab◁/think▷cd")
    assert parser.reasoning_token_count(reply) == len(reply) - 2
    assert parser.reasoning_token_count(encode("no end yet")) == 10


def test_split_of_a_complete_reply() -> None:
    assert KimiReasoning.split(REPLY) == (REPLY_REASONING, REPLY_ANSWER)
    assert KimiReasoning.split("a◁/think▷b") == ("a", "b")
    assert KimiReasoning.split("◁think▷cut off by max_tokens") == (
        "cut off by max_tokens",
        None,
    )
    assert KimiReasoning.split("") == (None, None)


def test_feed_holds_a_split_marker_back_and_never_shows_it() -> None:
    parser = KimiReasoning(decode, HEADER)
    assert parser.feed("◁thi") == ("", "")
    assert parser.feed("nk▷reasoning ◁/") == ("reasoning ", "")
    assert parser.feed("think▷") == ("", "")
    assert parser.feed(" \n") == ("", "")
    # The answer starts: vLLM stops asking, so held look-alike text goes out now.
    assert parser.feed("Yes ◁/thi") == ("", "Yes ◁/thi")
    assert parser.ends_in([], [1]) is True


@pytest.mark.parametrize(
    ("with_prompt", "without", "expected"),
    [
        ("<s>User:x<end_of_utterance>\nAssistant:", "<s>User:x<end_of_utterance>\n", "Assistant:"),
        (
            "<|im_user|>user<|im_middle|>x<|im_end|>" + HEADER,
            "<|im_user|>user<|im_middle|>x<|im_end|>",
            HEADER,
        ),
        ("same", "same", None),
        ("other", "text", None),
    ],
)
def test_assistant_header_is_what_the_generation_prompt_adds(
    with_prompt: str, without: str, expected: str | None
) -> None:

    assert assistant_header(lambda on: with_prompt if on else without) == expected


def test_the_kimi_header_fallback_is_kimi_vl_s_assistant_token() -> None:
    # serving/kimi_shape.py's chat template (Kimi-VL's format) starts assistant turns so.
    from serving.kimi_shape import CHAT_TEMPLATE

    assert KIMI_ASSISTANT_HEADER + "assistant<|im_middle|>" in CHAT_TEMPLATE
    assert THINK_OPEN not in CHAT_TEMPLATE


class FakeTokenizer:
    """What the vLLM glue uses of a tokenizer, on the byte tokens above."""

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return decode(ids)

    def apply_chat_template(
        self, messages: list[dict[str, str]], tokenize: bool, add_generation_prompt: bool
    ) -> str:
        turns = [f"<|im_{m['role']}|>{m['role']}<|im_middle|>{m['content']}" for m in messages]
        return "".join(turns) + (HEADER if add_generation_prompt else "")

    def get_vocab(self) -> dict[str, int]:
        return {}


def test_the_vllm_glue_when_vllm_is_installed() -> None:
    # Runs where vLLM is importable (its own environment); the app's has no vLLM,
    # and the integration test proves the glue inside a real server.
    pytest.importorskip("vllm")
    from vllm.reasoning import ReasoningParserManager

    from serving import kimi_reasoning_parser

    assert ReasoningParserManager.get_reasoning_parser("kimi_vl") is (
        kimi_reasoning_parser.KimiVLReasoningParser
    )
    parser = kimi_reasoning_parser.KimiVLReasoningParser(FakeTokenizer())
    history = prompt(("user", "q"), ("assistant", "◁think▷a◁/think▷b"), ("user", "q2"))
    assert parser.is_reasoning_end(history) is False
    first = parser.extract_reasoning_streaming("", "", "◁think▷r ◁/thi", [], [], [])
    assert (first.reasoning, first.content) == ("r ", None)
    assert parser.is_reasoning_end_streaming([], []) is False
    second = parser.extract_reasoning_streaming("", "", "nk▷ans", [], [], [])
    assert (second.reasoning, second.content) == (None, "ans")
    assert parser.is_reasoning_end_streaming([], []) is True
    assert parser.extract_reasoning("x◁/think▷y", None) == ("x", "y")
