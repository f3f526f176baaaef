"""Planning one request: the chat completion for a turn, within the server's limits.

What a chat holds (its model, options, conversation and token counts,
:class:`backend.chat.ChatSession`) goes in; a :class:`Planned` request comes out.
The turn runner (:mod:`backend.turn_runner`) plans every answer through here, and
bounds the server's exact prompt count by a deadline of its own (:func:`exact_counter`),
since that count happens before the stream starts.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from backend.chat import ChatSession, SamplingOptions
from backend.client import ChatClient, ChatRequest, ServedModel
from backend.conversation import MIN_ANSWER_TOKENS, Budget, Conversation, Plan, Turn, plan_verified
from backend.families import ReasoningMarkers, family_for
from backend.logs import LOGGER_NAME

log = logging.getLogger(LOGGER_NAME)


def dev_shape_regex(markers: ReasoningMarkers) -> str:
    """Dev mode: vLLM structured outputs force the random-weights model's output into
    a Thinking model's shape (``OPEN`` 40-600 characters ``CLOSE`` 20-400 characters,
    neither part holding the markers' first character), so the reasoning step streams
    and folds as with a Thinking family (the text itself stays noise)."""
    banned = re.escape(markers.open[0])
    opening, closing = re.escape(markers.open), re.escape(markers.close)
    return f"{opening}[^{banned}]{{40,600}}{closing}[^{banned}]{{20,400}}"


MORE_TOKENS_AT_LEAST = 1.1
""""Retry with more tokens" is offered only when it can give at least 10% more."""

ExactCount = Callable[[list[dict[str, Any]]], Awaitable[int | None]]
"""Counts a whole prompt with the server's tokenizer; None when it cannot."""


@dataclass(frozen=True, slots=True)
class Planned:
    """A request ready to send, what to tell the person, and the answer budget asked.

    Attributes:
        request: the chat completion request.
        notices: sentences about what was left out or shrunk.
        wanted_max_tokens: the answer budget the person asked for (the request's
            ``max_tokens`` may be smaller when the conversation leaves less room).
        more_tokens: a larger budget "Retry with more tokens" can offer (twice the
            wanted one, within what the max model length leaves once all history is
            left out), or None when that is not :data:`MORE_TOKENS_AT_LEAST` times
            the request's budget.
    """

    request: ChatRequest
    notices: list[str]
    wanted_max_tokens: int
    more_tokens: int | None


def new_request_id() -> str:
    """A fresh request id, ``chat-`` and 32 hex digits: sent as ``X-Request-Id`` (vLLM logs
    it), named in app.log, and shortened on an error note (:func:`backend.render.short_ref`)."""
    return f"chat-{uuid.uuid4().hex}"


def exact_counter(
    client: ChatClient, model: str, deadline_s: float, prefill: str = ""
) -> ExactCount:
    """Count prompts with ``client``'s ``/tokenize``, all counts together within
    ``deadline_s`` seconds from now; past it (a stuck or slow tokenizer), None: the
    plan goes on with its estimate, which over-estimates text. ``prefill``: the start
    of the reply each request writes (``ModelFamily.reply_start``), counted with the prompt."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + deadline_s

    async def count(messages: list[dict[str, Any]]) -> int | None:
        left = deadline - loop.time()
        if left <= 0:
            return None
        try:
            async with asyncio.timeout(left):
                return await client.count_prompt_tokens(model, messages, prefill)
        except TimeoutError:
            log.warning(
                "no exact prompt count within %.1f s: planned with the estimate", deadline_s
            )
            return None

    return count


async def plan_turn(
    chat: ChatSession,
    turn: Turn,
    max_tokens: int | None = None,
    *,
    make_room: bool = False,
    request_id: str | None = None,
) -> Planned:
    """The request for ``turn`` of ``chat`` (which must be connected) within the server's limits.

    ``max_tokens`` overrides the options' answer budget; ``make_room`` leaves out
    older turns until that whole budget fits ("Retry with more tokens"). Notices say
    what was left out, and when the budget is below what was asked. Near the limit
    the prompt is counted by the server, within ``settings.plan_timeout_s``.
    ``request_id``: the request's id (default: a fresh one, :func:`new_request_id`).

    Raises:
        TooManyImages, ContextTooLong: the turn alone does not fit.
    """
    assert chat.model is not None and chat.options is not None, "connect first"
    wanted = max_tokens or chat.options.max_tokens
    budget = Budget(
        max_model_len=chat.max_model_len,
        max_images=chat.settings.max_images_per_prompt,
        max_tokens=wanted,
        min_answer_tokens=wanted if make_room else MIN_ANSWER_TOKENS,
    )
    prefill = chat.profile.reply_start
    count_exact = exact_counter(chat.client, chat.model.id, chat.settings.plan_timeout_s, prefill)
    plan = await plan_verified(chat.conversation, turn, budget, chat.token_counter, count_exact)
    shaped = chat.settings.dev_mode and chat.profile.dev_shaped
    request = _request(
        chat.model.id,
        plan,
        chat.options,
        thinking=chat.profile.starts_in_reasoning or shaped,
        markers=chat.profile.markers,
        prefill=prefill,
        extra_body=(
            {"structured_outputs": {"regex": dev_shape_regex(chat.profile.markers)}}
            if shaped
            else {}
        ),
        request_id=request_id,
        session_id=chat.chat_id,
    )
    log.info(
        "request %s model=%s messages=%d images=%d prompt_tokens~%d max_tokens=%d "
        "images_left_out=%d turns_left_out=%d",
        request.request_id,
        request.model,
        len(plan.messages),
        plan.images_sent,
        plan.prompt_tokens,
        plan.max_tokens,
        plan.images_left_out,
        plan.turns_left_out,
    )
    ceiling = chat.max_model_len - plan.prompt_tokens + plan.history_tokens
    more = min(2 * wanted, ceiling)
    worth_it = more >= MORE_TOKENS_AT_LEAST * plan.max_tokens
    return Planned(request, plan.notices, wanted, more if worth_it else None)


def plan_compare(chat: ChatSession, turn: Turn, other: ServedModel) -> tuple[Turn, Planned]:
    """Plan asking ``other`` (another served model) ``turn`` of ``chat``.

    The same text, images and history before that turn, with the other model's
    sampling defaults and limits. Returns a turn detached from the conversation
    (the chat goes on with its own model) and the plan.

    Raises:
        TooManyImages, ContextTooLong: the turn does not fit the other model.
    """
    earlier = chat.conversation.turns[: chat.conversation.turns.index(turn)]
    asked = Turn(text=turn.text, images=list(turn.images))
    history = Conversation(turns=[*earlier, asked], system_prompt=chat.conversation.system_prompt)
    profile = family_for(other.id)
    max_model_len = other.max_model_len or chat.settings.max_model_len
    options = SamplingOptions.for_profile(profile, max_model_len)
    budget = Budget(max_model_len, chat.settings.max_images_per_prompt, options.max_tokens)
    plan = history.plan(asked, budget, chat.token_counter)
    request = _request(
        other.id,
        plan,
        options,
        thinking=profile.starts_in_reasoning,
        markers=profile.markers,
        prefill=profile.reply_start,
        session_id=chat.chat_id,
    )
    log.info("request %s model=%s compare of an earlier turn", request.request_id, other.id)
    return asked, Planned(request, plan.notices, options.max_tokens, None)


def _request(
    model: str,
    plan: Plan,
    options: SamplingOptions,
    *,
    thinking: bool,
    markers: ReasoningMarkers,
    prefill: str = "",
    extra_body: dict[str, Any] | None = None,
    request_id: str | None = None,
    session_id: str | None = None,
) -> ChatRequest:
    """The chat completion request of ``plan``, with ``request_id`` (default: a fresh one)
    and the chat's ``session_id`` (replica affinity behind vLLM's router)."""
    return ChatRequest(
        model=model,
        messages=plan.messages,
        max_tokens=plan.max_tokens,
        temperature=options.temperature,
        top_p=options.top_p,
        thinking=thinking,
        markers=markers,
        prefill=prefill,
        request_id=request_id or new_request_id(),
        extra_body=extra_body or {},
        session_id=session_id,
    )
