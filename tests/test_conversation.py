"""History on the wire and budgets: what each request carries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.conversation import Budget, Conversation, Turn, estimate_text_tokens
from backend.errors import ContextTooLong, TooManyImages
from backend.images import PreparedImage
from backend.settings import Settings
from backend.uploads import Upload
from tests.conftest import DATA, RunningFake, SessionFactory
from tests.fakes.kimi_server import ANSWER, REASONING


def image(name: str, tokens: int = 100) -> PreparedImage:
    return PreparedImage(
        name=name,
        data_url=f"data:image/png;base64,{name}",
        width=280,
        height=280,
        tokens=tokens,
        source_bytes=1000,
    )


def answered(text: str, images: list[PreparedImage], answer: str = "ok") -> Turn:
    return Turn(text=text, images=images, answer=answer, reasoning="secret thoughts", status="done")


def test_user_message_puts_images_first_then_text() -> None:
    turn = Turn(text="What is this?", images=[image("a.png"), image("b.png")])
    assert turn.user_message() == {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,a.png"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,b.png"}},
            {"type": "text", "text": "What is this?"},
        ],
    }


def test_history_carries_answers_only() -> None:
    conv = Conversation(turns=[answered("first", [image("a.png")], "◁think▷hmm◁/think▷Yes.")])
    current = conv.start_turn("second", [])
    plan = conv.plan(current, Budget(max_model_len=8192, max_images=4, max_tokens=100))
    assert plan.messages[1] == {"role": "assistant", "content": "Yes."}
    wire = json.dumps(plan.messages, ensure_ascii=False)
    assert "secret thoughts" not in wire and "◁" not in wire and "hmm" not in wire
    assert plan.messages[-1]["content"][-1]["text"] == "second"
    assert plan.notices == [] and plan.images_left_out == 0


def test_failed_and_pending_turns_are_not_history() -> None:
    conv = Conversation(turns=[Turn(text="lost", status="failed"), answered("kept", [])])
    current = conv.start_turn("now", [])
    plan = conv.plan(current, Budget(8192, 4, 100))
    texts = [m["content"][-1]["text"] for m in plan.messages if m["role"] == "user"]
    assert texts == ["kept", "now"]


def test_oldest_images_are_left_out_first_for_the_image_limit() -> None:
    turns = [answered(f"t{i}", [image(f"{i}a.png"), image(f"{i}b.png")]) for i in range(3)]
    conv = Conversation(turns=turns)
    current = conv.start_turn("now", [image("new.png")])
    plan = conv.plan(current, Budget(max_model_len=100_000, max_images=4, max_tokens=100))
    sent = [
        p["image_url"]["url"][-6:]
        for m in plan.messages
        if m["role"] == "user"
        for p in m["content"]
        if p["type"] == "image_url"
    ]
    assert sent == ["1b.png", "2a.png", "2b.png", "ew.png"]
    assert plan.images_left_out == 3 and plan.turns_left_out == 0
    assert "0a.png, 0b.png" in plan.messages[0]["content"][-1]["text"]
    assert plan.notices == [
        "Left out 3 older image(s) to fit the model's limits (100000 tokens, 4 images per request)."
    ]


def test_oldest_turns_go_after_images_for_the_token_budget() -> None:
    turns = [answered("x" * 3000, [image(f"{i}.png", 500)]) for i in range(4)]  # ~1000 tokens text
    conv = Conversation(turns=turns)
    current = conv.start_turn("now", [image("new.png", 500)])
    plan = conv.plan(current, Budget(max_model_len=3000, max_images=10, max_tokens=500))
    assert plan.images_left_out == 4  # every older image went before any turn
    assert plan.turns_left_out == 2
    assert plan.prompt_tokens + plan.max_tokens <= 3000
    assert plan.messages[-1]["content"][0]["image_url"]["url"].endswith("new.png")


def test_answer_budget_shrinks_to_fit() -> None:
    conv = Conversation()
    current = conv.start_turn("hi", [image("a.png", 1000)])
    plan = conv.plan(current, Budget(max_model_len=2048, max_images=4, max_tokens=4000))
    assert plan.max_tokens == 2048 - plan.prompt_tokens
    assert plan.max_tokens >= 256


def test_current_turn_alone_too_large() -> None:
    conv = Conversation()
    with pytest.raises(TooManyImages, match="at most 2 per request"):
        conv.plan(conv.start_turn("hi", [image("a"), image("b"), image("c")]), Budget(8192, 2, 100))
    huge = conv.start_turn("hi", [image("big.png", 5000)])
    with pytest.raises(ContextTooLong, match="needs about 50"):
        conv.plan(huge, Budget(max_model_len=4096, max_images=4, max_tokens=512))


async def test_second_request_body_has_no_reasoning(
    fake: RunningFake, make_session: SessionFactory, tmp_path: Path
) -> None:
    """Two real turns through the scripted server; assert on the captured bodies."""
    session = make_session(Settings(base_url=fake.base_url, max_images_per_prompt=4))
    prepared = await session.prepare_uploads([Upload("rocket.jpg", DATA / "rocket.jpg")])
    assert prepared.problems == []
    first = session.start_turn("m1", "What is in this picture?", prepared.images)
    request = (await session.plan_request(first)).request
    events = [e async for e in session.respond(first, request)]
    assert first.status == "done" and first.reasoning == REASONING
    assert first.answer == ANSWER.lstrip() and len(events) > 3
    second = session.start_turn("m2", "And the sky?", [])
    request = (await session.plan_request(second)).request
    _ = [e async for e in session.respond(second, request)]
    body = fake.requests[-1]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == ANSWER.lstrip()
    # The image goes back as the same prepared data URL.
    assert body["messages"][0]["content"][0]["image_url"]["url"] == prepared.images[0].data_url
    wire = json.dumps(body, ensure_ascii=False)
    assert REASONING[:40] not in wire and "◁" not in wire
    assert body["temperature"] == 0.8  # Thinking-2506's recommended temperature


async def test_edit_rewinds_history(fake: RunningFake, make_session: SessionFactory) -> None:
    session = make_session(Settings(base_url=fake.base_url))
    for message_id, text in [("m1", "one #scenario=plain"), ("m2", "two #scenario=plain")]:
        turn = session.start_turn(message_id, text, [])
        request = (await session.plan_request(turn)).request
        _ = [e async for e in session.respond(turn, request)]
    edited = session.start_turn("m1", "one, edited #scenario=plain", [])
    assert session.conversation.turns == [edited]
    request = (await session.plan_request(edited)).request
    assert [m["role"] for m in request.messages] == ["user"]


async def test_exact_counts_are_learnt_from_tokenize(
    fake: RunningFake, make_session: SessionFactory
) -> None:
    session = make_session(Settings(base_url=fake.base_url))
    turn = session.start_turn("m1", "Count me #scenario=plain", [])
    request = (await session.plan_request(turn)).request
    _ = [e async for e in session.respond(turn, request)]
    await session.settled()  # learnt in the background, after the answer
    counter = session.token_counter
    assert counter.knows(turn.text) and counter.knows(turn.answer)
    # The scripted /tokenize counts len(json.dumps(prompt)) // 4.
    assert counter(turn.answer) == len(json.dumps(turn.answer)) // 4
    assert counter("never sent") == estimate_text_tokens("never sent")


async def test_missing_tokenize_falls_back_to_estimate(
    fake: RunningFake, make_session: SessionFactory
) -> None:
    client = make_session(Settings(base_url=fake.base_url + "/nowhere")).client
    assert await client.count_text_tokens("m", "hello") is None


def test_estimate_over_counts_english_and_chinese() -> None:
    assert estimate_text_tokens("The quick brown fox jumps over the lazy dog.") >= 10
    assert estimate_text_tokens("这张图片里有什么？") >= 9  # 9 characters, 27 bytes


async def test_near_the_limit_the_server_count_decides(
    fake: RunningFake, make_session: SessionFactory
) -> None:
    """Estimates short of the server's count (here: images) make the plan leave out more."""
    session = make_session(Settings(base_url=fake.base_url))  # scripted: 8192 tokens
    await session.connect()
    # Each image: estimated 1900 tokens; the scripted /tokenize counts len(json) / 4 = ~2500.
    big = [
        PreparedImage(f"{i}.png", "data:image/png;base64," + "A" * 10_000, 500, 500, 1900, 1)
        for i in range(4)
    ]
    session.conversation.turns = [answered(f"t{i}", [big[i]]) for i in range(3)]
    turn = session.start_turn("now", "now", [big[3]])
    planned = await session.plan_request(turn, max_tokens=300)
    request, notices = planned.request, planned.notices
    estimate_only = session.conversation.plan(turn, Budget(8192, 64, 300), session.token_counter)
    assert estimate_only.images_left_out == 0  # the estimate alone would send all four
    sent = sum(
        p["type"] == "image_url"
        for m in request.messages
        if m["role"] == "user"
        for p in m["content"]
    )
    assert sent < 4 and notices  # the server's count made it leave images out, and say so
    exact = await session.client.count_prompt_tokens("m", request.messages)
    assert exact is not None and exact + request.max_tokens <= 8192
