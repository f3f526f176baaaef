"""Model families as data (backend/families.py), and the reasoning split once (issue 51).

Each family is read the same way by the splitter, the client, planning and the launcher;
the third family, Qwen3-VL-8B-Thinking, writes ``<think>`` tags and has its reasoning opened
by its chat template. Through the scripted server (tests/fakes/kimi_server.py) with and
without a server-side reasoning parser, the person sees the same reasoning and answer; a
server that separates the reasoning has its answer passed on as it is, never split again.
"""

from __future__ import annotations

import random
import re
from collections.abc import AsyncIterator

import pytest

from backend.client import REASONING_PROBE_ID, ChatClient, ChatRequest
from backend.events import AnswerDelta, ReasoningDelta, StreamEvent
from backend.families import (
    DEV,
    FAMILIES,
    INSTRUCT,
    KIMI_MARKERS,
    QWEN3_VL_THINKING,
    THINK_TAGS,
    THINKING_2506,
    ModelFamily,
    ReasoningMarkers,
    family_for,
)
from backend.planning import dev_shape_regex
from backend.reasoning import ReasoningSplitter, split_reasoning, strip_any_reasoning
from serving.launcher import make_plan, reasoning_flags
from tests.conftest import RunningFake
from tests.fakes import kimi_server
from tests.fakes.kimi_server import ANSWER, QUOTED_MARKER_ANSWER, REASONING
from tests.test_launcher import settings as launch_settings


def test_every_family_is_found_by_its_served_name() -> None:
    assert set(FAMILIES) == {
        "kimi-vl-thinking-2506",
        "kimi-vl",
        "qwen3-vl-8b-thinking",
        "kimi-vl-dev",
    }
    for name, family in FAMILIES.items():
        assert family_for(name) is family


def test_an_unknown_model_gets_instruct_defaults_under_its_own_name() -> None:
    other = family_for("someone-elses-model")
    assert (other.label, other.hf_id) == ("someone-elses-model", "someone-elses-model")
    assert (other.temperature, other.max_tokens) == (INSTRUCT.temperature, INSTRUCT.max_tokens)
    assert not other.starts_in_reasoning and other.reply_start == ""


def test_what_each_family_writes_of_its_reply() -> None:
    assert THINKING_2506.reply_start == "◁think▷"  # the request writes it (model card)
    assert QWEN3_VL_THINKING.reply_start == ""  # its chat template opens the reasoning
    assert QWEN3_VL_THINKING.starts_in_reasoning and THINKING_2506.starts_in_reasoning
    assert INSTRUCT.reply_start == "" == DEV.reply_start


def test_markers_must_be_two_different_strings() -> None:
    with pytest.raises(ValueError, match="two different"):
        ReasoningMarkers("<x>", "<x>")
    with pytest.raises(ValueError, match="two different"):
        ReasoningMarkers("", "</x>")


def chunked(text: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    out, at = [], 0
    while at < len(text):
        size = rng.randint(1, 9)
        out.append(text[at : at + size])
        at += size
    return out


@pytest.mark.parametrize("seed", range(20))
def test_think_tags_split_alike_whatever_the_chunks(seed: int) -> None:
    # Replies of Qwen3-VL-Thinking begin inside the reasoning; "<b>" and "</th" are text.
    text = "I see <b>bold</b> and </th in it.\n</think>\n\nIt is a <i>rocket</i>."
    splitter = ReasoningSplitter(markers=THINK_TAGS, starts_in_reasoning=True)
    parts = [p for chunk in chunked(text, seed) for p in splitter.feed(chunk)] + splitter.flush()
    reasoning = "".join(p.text for p in parts if isinstance(p, ReasoningDelta))
    answer = "".join(p.text for p in parts if isinstance(p, AnswerDelta))
    assert reasoning == "I see <b>bold</b> and </th in it.\n"
    assert answer == "It is a <i>rocket</i>."


def test_markers_of_another_family_are_text() -> None:
    kimi_text = "◁think▷Hm.◁/think▷Use <think> tags."
    assert split_reasoning(kimi_text, markers=KIMI_MARKERS, starts_in_reasoning=True) == (
        "Hm.",
        "Use <think> tags.",
    )
    assert split_reasoning(kimi_text, markers=THINK_TAGS, starts_in_reasoning=False) == (
        "tags.",
        "◁think▷Hm.◁/think▷Use ",
    )


def test_a_stored_answer_loses_any_known_familys_reasoning() -> None:
    assert strip_any_reasoning("thought◁/think▷Answer") == "Answer"
    assert strip_any_reasoning("thought</think>\nAnswer") == "Answer"
    assert strip_any_reasoning("Plain <b>answer</b>") == "Plain <b>answer</b>"


def test_dev_modes_shape_is_the_familys_markers_around_text_without_them() -> None:
    pattern = re.compile(dev_shape_regex(KIMI_MARKERS))
    assert pattern.fullmatch("◁think▷" + "r" * 40 + "◁/think▷" + "a" * 20)
    assert not pattern.fullmatch("◁think▷" + "r◁" * 20 + "◁/think▷" + "a" * 20)
    assert re.fullmatch(dev_shape_regex(THINK_TAGS), "<think>" + "r" * 50 + "</think>" + "a" * 30)


def flags_of(args: list[str]) -> list[str]:
    return [
        a
        for i, a in enumerate(args)
        if a.startswith("--reasoning") or (i and args[i - 1].startswith("--reasoning"))
    ]


def test_the_launcher_serves_a_family_named_by_its_served_name_with_its_parser() -> None:
    settings = launch_settings(model="qwen3-vl-8b-thinking")
    assert settings.served_profile is QWEN3_VL_THINKING
    plan = make_plan(settings, mode="gpu", gpus=4, reasoning_plugin=True)
    assert plan.args[1] == "Qwen/Qwen3-VL-8B-Thinking"
    assert plan.args[plan.args.index("--served-model-name") + 1] == "qwen3-vl-8b-thinking"
    assert flags_of(plan.args) == ["--reasoning-parser", "qwen3"]  # vLLM's own: no plugin
    assert reasoning_flags(THINKING_2506) == [
        "--reasoning-parser-plugin",
        "serving/kimi_reasoning_parser.py",
        "--reasoning-parser",
        "kimi_vl",
    ]
    assert reasoning_flags(INSTRUCT) == []


def test_the_dev_model_name_does_not_pick_a_gpu_family() -> None:
    settings = launch_settings(model="kimi-vl-dev")
    assert settings.served_profile is THINKING_2506


def test_the_probe_prefix_is_the_scripted_servers() -> None:
    assert kimi_server.REASONING_PROBE_ID == REASONING_PROBE_ID


@pytest.fixture
async def client(fake: RunningFake) -> AsyncIterator[ChatClient]:
    client = ChatClient(fake.base_url, "k", timeout_s=5)
    yield client
    await client.aclose()


def request(family: ModelFamily, text: str) -> ChatRequest:
    return ChatRequest(
        model=family.served_name,
        messages=[{"role": "user", "content": text}],
        max_tokens=200,
        temperature=family.temperature,
        thinking=family.starts_in_reasoning,
        markers=family.markers,
        prefill=family.reply_start,
    )


def texts(events: list[StreamEvent]) -> tuple[str, str]:
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    answer = "".join(e.text for e in events if isinstance(e, AnswerDelta))
    return reasoning, answer


@pytest.mark.parametrize("family", [THINKING_2506, QWEN3_VL_THINKING], ids=lambda f: f.label)
@pytest.mark.parametrize("parser", [False, True], ids=["client splits", "server splits"])
async def test_a_thinking_family_reads_the_same_with_or_without_a_server_parser(
    client: ChatClient, fake: RunningFake, family: ModelFamily, parser: bool
) -> None:
    fake.server.reasoning_parser = parser
    first = [e async for e in client.stream(request(family, "What is this?"))]  # not learnt
    learning = client.learn_reasoning(family.served_name, family)  # as a chat connects
    assert learning is not None and await learning is parser
    assert client.separates_reasoning(family.served_name) is parser
    again = [e async for e in client.stream(request(family, "And this?"))]
    assert texts(first) == (REASONING, ANSWER) == texts(again)
    assert fake.server.probes == 1  # learnt once for this server and model
    assert [r["model"] for r in fake.requests] == [family.served_name] * 2  # probe unrecorded


async def test_a_server_that_separates_the_reasoning_has_its_answer_passed_as_it_is(
    client: ChatClient, fake: RunningFake
) -> None:
    fake.server.reasoning_parser = True
    learning = client.learn_reasoning(THINKING_2506.served_name, THINKING_2506)
    assert learning is not None and await learning is True
    asked = request(THINKING_2506, "#scenario=quoted-marker")
    events = [e async for e in client.stream(asked)]
    assert texts(events) == ("Let me see.", QUOTED_MARKER_ANSWER)  # the marker kept


async def test_an_instruct_family_is_not_probed(client: ChatClient, fake: RunningFake) -> None:
    assert client.learn_reasoning(INSTRUCT.served_name, INSTRUCT) is None
    events = [e async for e in client.stream(request(INSTRUCT, "Hi"))]
    assert texts(events) == ("", ANSWER)
    assert fake.server.probes == 0
