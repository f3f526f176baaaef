"""Conversation history and the request messages built from it.

A conversation is a list of :class:`Turn` (the person's text and prepared
images, the model's answer and reasoning). :meth:`Conversation.plan` turns it
into OpenAI chat messages for the next request, within the server's limits:

* earlier assistant turns go back with their answer only; reasoning never goes
  back (the official Kimi-VL demo strips the reasoning and its closing marker from
  history, and reasoning fed back makes the model imitate the markers);
* images are the already prepared copies (data URLs), never re-read uploads;
* when the prompt would exceed ``max_model_len`` minus the answer budget, or its
  images would exceed ``--limit-mm-per-prompt``, the oldest images and then the
  oldest turns are left out (never the current turn), with a notice saying so.

``cl.chat_context.to_openai()`` drops images, which is why the app keeps its own
history here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from backend.errors import ContextTooLong, TooManyImages
from backend.i18n import msg
from backend.images import PreparedImage
from backend.reasoning import strip_any_reasoning

TurnStatus = Literal["pending", "done", "stopped", "cut_off", "failed"]

# Chat-template tokens around one message (role markers, <|im_end|>) and around
# one image (media start/end); a deliberate over-estimate.
MESSAGE_OVERHEAD_TOKENS = 8
IMAGE_OVERHEAD_TOKENS = 4

MIN_ANSWER_TOKENS = 256
"""The least answer budget worth sending a request for (tokens)."""

VERIFY_ABOVE = 0.75
"""Share of the prompt budget above which a planned prompt is counted exactly."""


_WORD = re.compile(r"[A-Za-z0-9]+")
_SPACE_RUN = re.compile(r" {2,}")


def estimate_text_tokens(text: str) -> int:
    """Estimate the token count of ``text`` without a tokenizer; an over-estimate.

    Byte-level BPE vocabularies (Kimi-VL's has 160K tokens) spend at most: one
    token per 3 letters or digits of a word; one per ASCII symbol or newline;
    one per 3 extra spaces of an indent; and, for any other character, its
    UTF-8 length minus one (2 for a Chinese character, 3 for an emoji).
    tests/test_conversation.py checks it against a real tokenizer (tiktoken's
    cl100k_base, weaker than Kimi-VL's on Chinese, so a strict bar). Used for
    texts the server's ``/tokenize`` has not counted yet (the current message)
    or cannot count; exact counts replace it once a conversation is long enough for
    them to matter (:data:`backend.turn_runner.COUNT_TEXT_ABOVE`).
    """
    words = sum(math.ceil(len(word) / 3) for word in _WORD.findall(text))
    symbols = sum(1 for ch in text if ord(ch) < 128 and not ch.isalnum() and ch != " ")
    other = sum(len(ch.encode("utf-8")) - 1 for ch in text if ord(ch) >= 128)
    indent = sum(math.ceil((len(run) - 1) / 3) for run in _SPACE_RUN.findall(text))
    return words + symbols + other + indent


class TokenCounter:
    """Text token counts: exact ones learnt from the server's tokenizer, else an estimate.

    Call it like a function (``counter(text) -> int``). Exact counts come from
    vLLM's ``/tokenize`` (see :meth:`backend.client.ChatClient.count_text_tokens`)
    and are learnt after a turn, off the time-to-first-token path, once the conversation
    is long enough for them to matter; texts not
    counted yet (the current message) use :func:`estimate_text_tokens`, which
    over-estimates, so a plan made with it still fits.
    """

    def __init__(self) -> None:
        self._known: dict[str, int] = {}

    def __call__(self, text: str) -> int:
        known = self._known.get(text)
        return estimate_text_tokens(text) if known is None else known

    def knows(self, text: str) -> bool:
        """True if an exact count of ``text`` was learnt."""
        return text in self._known

    def learn(self, text: str, count: int) -> None:
        """Remember the exact token count of ``text``."""
        self._known[text] = count


@dataclass(eq=False)
class Turn:
    """One exchange: what the person sent and what the model answered.

    Attributes:
        text: the person's message.
        images: prepared images sent with it, in upload order.
        answer: the final answer (markers never included).
        reasoning: the model's reasoning, kept for display only.
        status: ``pending`` while streaming; ``done``; ``stopped`` by the person;
            ``cut_off`` when max tokens ran out; ``failed`` on an error.
        reasoning_s: seconds the reasoning took, from its first text to the answer's
            ("Thought for 12.3s"); None while unknown (not ended, or stored without timings).
    """

    text: str
    images: list[PreparedImage] = field(default_factory=list)
    answer: str = ""
    reasoning: str = ""
    status: TurnStatus = "pending"
    reasoning_s: float | None = None

    def user_message(self, kept_images: int | None = None) -> dict[str, Any]:
        """The OpenAI user message: image parts first, then the text.

        Args:
            kept_images: send only the last ``kept_images`` images; the others
                are named in a short text note. ``None`` sends all.
        """
        keep = len(self.images) if kept_images is None else kept_images
        dropped = self.images[: len(self.images) - keep]
        parts: list[dict[str, Any]] = [img.as_content_part() for img in self.images[len(dropped) :]]
        text = self.text
        if dropped:
            names = ", ".join(img.name for img in dropped)
            text = f"[{len(dropped)} earlier image(s) left out to fit the context: {names}]\n{text}"
        parts.append({"type": "text", "text": text})
        return {"role": "user", "content": parts}

    def assistant_message(self) -> dict[str, Any]:
        """The OpenAI assistant message: the answer only, reasoning stripped."""
        return {"role": "assistant", "content": strip_any_reasoning(self.answer)}

    @property
    def in_history(self) -> bool:
        """True if this turn goes back as history (it has an answer to show)."""
        return self.status != "pending" and bool(self.answer.strip())


@dataclass(frozen=True, slots=True)
class Budget:
    """The server's limits for one request.

    Attributes:
        max_model_len: tokens of prompt plus answer the server accepts (from
            ``/v1/models`` or settings).
        max_images: images per request (vLLM ``--limit-mm-per-prompt``).
        max_tokens: the answer budget the person asked for.
        min_answer_tokens: the answer budget history must leave room for: older
            images and turns are left out before the answer budget goes below it.
            :data:`MIN_ANSWER_TOKENS` by default (the answer budget then shrinks
            silently down to it, with a notice); ``max_tokens`` to make room for
            the whole budget ("Retry with more tokens").
    """

    max_model_len: int
    max_images: int
    max_tokens: int
    min_answer_tokens: int = MIN_ANSWER_TOKENS

    @property
    def reserved(self) -> int:
        """Answer tokens the plan keeps free by leaving history out."""
        return min(max(self.min_answer_tokens, MIN_ANSWER_TOKENS), self.max_tokens)

    @property
    def floor(self) -> int:
        """The least answer budget a request is sent with."""
        return min(MIN_ANSWER_TOKENS, self.max_tokens)


@dataclass(frozen=True, slots=True)
class Plan:
    """What to send: messages, the answer budget, and what was left out.

    Attributes:
        messages: OpenAI chat messages, oldest first, current turn last.
        max_tokens: answer budget that fits beside the prompt.
        prompt_tokens: estimated prompt tokens (text estimate + image tokens).
        history_tokens: the part of ``prompt_tokens`` taken by older turns (what
            leaving out all history could free).
        images_left_out: older images replaced by a note.
        turns_left_out: older turns not sent at all.
        left_out_notices: sentences for the person about what was left out.
        budget: the limits the plan was made for.
    """

    messages: list[dict[str, Any]]
    max_tokens: int
    prompt_tokens: int
    history_tokens: int
    images_left_out: int
    turns_left_out: int
    left_out_notices: list[str]
    budget: Budget

    @property
    def images_sent(self) -> int:
        """The ``image_url`` parts of :attr:`messages` (every turn's images that were not
        left out)."""
        return sum(
            part.get("type") == "image_url"
            for message in self.messages
            if isinstance(message.get("content"), list)
            for part in message["content"]
        )

    @property
    def notices(self) -> list[str]:
        """What to tell the person: what was left out, and a budget below the one asked."""
        if self.max_tokens >= self.budget.max_tokens:
            return list(self.left_out_notices)
        shrunk = shrunk_budget_note(
            self.max_tokens, self.budget, history_left=self.history_tokens > 0
        )
        return [*self.left_out_notices, shrunk]


@dataclass
class Conversation:
    """The turns of one chat, oldest first, plus an optional system prompt."""

    turns: list[Turn] = field(default_factory=list)
    system_prompt: str = ""

    def start_turn(self, text: str, images: list[PreparedImage]) -> Turn:
        """Append a pending turn for a new message and return it."""
        turn = Turn(text=text, images=list(images))
        self.turns.append(turn)
        return turn

    def images_before(self, turn: Turn) -> list[PreparedImage]:
        """The images of the turns before ``turn`` (all turns' if it is not one of
        them), oldest first."""
        before = next((i for i, t in enumerate(self.turns) if t is turn), len(self.turns))
        return [image for earlier in self.turns[:before] for image in earlier.images]

    def plan(
        self,
        current: Turn,
        budget: Budget,
        count_text: Callable[[str], int] = estimate_text_tokens,
        held_back: int = 0,
    ) -> Plan:
        """Build the request for ``current`` (the last turn) within ``budget``.

        Older images go first, oldest first, then whole older turns, oldest
        first; the current turn is never cut. ``held_back``: tokens the
        estimates are known to be short by (the server counted more), kept free
        on top of the estimate.

        When the answer budget that fits is below ``budget.max_tokens``, a notice
        says so, and whether leaving out older turns could give more.

        Raises:
            TooManyImages: the current turn alone has more images than allowed.
            ContextTooLong: the current turn alone leaves less than
                :data:`MIN_ANSWER_TOKENS` for the answer.
        """
        fixed = self._fixed_tokens(current, count_text)
        _check_alone(current, fixed + held_back, budget)
        history = [t for t in self.turns if t is not current and t.in_history]
        fitting = _Fitting(history, count_text, fixed, len(current.images))
        fitting.leave_out(
            budget, available=max(budget.max_model_len - budget.reserved - held_back, fixed)
        )
        messages: list[dict[str, Any]] = []
        if self.system_prompt:
            messages.append({"role": "system", "content": self.system_prompt})
        for turn, images in fitting.kept():
            messages += [turn.user_message(images), turn.assistant_message()]
        messages.append(current.user_message())
        total = fitting.prompt_tokens()
        return Plan(
            messages=messages,
            max_tokens=max(1, min(budget.max_tokens, budget.max_model_len - total - held_back)),
            prompt_tokens=total,
            history_tokens=total - fixed,
            images_left_out=fitting.images_left_out,
            turns_left_out=fitting.first_turn,
            left_out_notices=fitting.notices(budget),
            budget=budget,
        )

    def _fixed_tokens(self, current: Turn, count_text: Callable[[str], int]) -> int:
        """Tokens of what every plan sends: the current turn and the system prompt."""
        system = (
            count_text(self.system_prompt) + MESSAGE_OVERHEAD_TOKENS if self.system_prompt else 0
        )
        images = sum(i.tokens + IMAGE_OVERHEAD_TOKENS for i in current.images)
        return count_text(current.text) + MESSAGE_OVERHEAD_TOKENS + images + system


def _check_alone(current: Turn, tokens: int, budget: Budget) -> None:
    """Refuse a turn that does not fit ``budget`` even with no history (``tokens``: its own).

    Raises:
        TooManyImages: more images than the server takes per request.
        ContextTooLong: it leaves less than the least answer budget.
    """
    if len(current.images) > budget.max_images:
        raise TooManyImages(
            msg(
                "This message has {count} images but the server accepts at most "
                "{max_images} per request. Send fewer images at a time.",
                count=len(current.images),
                max_images=budget.max_images,
            )
        )
    if tokens > budget.max_model_len - budget.floor:
        raise ContextTooLong(
            msg(
                "This message needs about {tokens} tokens, but the model takes "
                "{max_model_len} tokens including at least {floor} "
                "for the answer. Send fewer or smaller images, or a shorter text.",
                tokens=tokens,
                max_model_len=budget.max_model_len,
                floor=budget.floor,
            )
        )


class _Fitting:
    """Older turns being fitted into a prompt: how many images of each are kept, and
    from which turn on they are sent (:meth:`Conversation.plan`)."""

    def __init__(
        self, history: list[Turn], count_text: Callable[[str], int], fixed: int, images_now: int
    ) -> None:
        self.history = history
        self.count_text = count_text
        self.fixed = fixed
        self.kept_images = [len(t.images) for t in history]
        self.image_total = sum(self.kept_images) + images_now
        self.costs = [self._cost(i, n) for i, n in enumerate(self.kept_images)]
        self.images_left_out = 0
        self.first_turn = 0

    def _cost(self, index: int, images: int) -> int:
        """Tokens of older turn ``index`` with its last ``images`` images."""
        turn = self.history[index]
        kept = turn.images[len(turn.images) - images :]
        return (
            self.count_text(turn.text)
            + self.count_text(turn.answer)
            + 2 * MESSAGE_OVERHEAD_TOKENS
            + sum(i.tokens + IMAGE_OVERHEAD_TOKENS for i in kept)
        )

    def prompt_tokens(self) -> int:
        """Tokens of the prompt as it stands."""
        return self.fixed + sum(self.costs[self.first_turn :])

    def leave_out(self, budget: Budget, available: int) -> None:
        """Leave out older images, oldest first, while over the image limit or
        ``available`` tokens; then whole older turns, oldest first."""
        for i in range(len(self.history)):
            while self.kept_images[i] and (
                self.image_total > budget.max_images or self.prompt_tokens() > available
            ):
                self.kept_images[i] -= 1
                self.image_total -= 1
                self.images_left_out += 1
                self.costs[i] = self._cost(i, self.kept_images[i])
        while self.first_turn < len(self.history) and self.prompt_tokens() > available:
            self.first_turn += 1

    def kept(self) -> list[tuple[Turn, int]]:
        """The older turns sent, oldest first, each with how many of its images go."""
        indices = range(self.first_turn, len(self.history))
        return [(self.history[i], self.kept_images[i]) for i in indices]

    def notices(self, budget: Budget) -> list[str]:
        """What to tell the person about what was left out (nothing if nothing was)."""
        images, turns = self.images_left_out, self.first_turn
        if not images and not turns:
            return []
        if images and turns:
            what = msg(
                "{images} older image(s) and {turns} older turn(s)", images=images, turns=turns
            )
        elif images:
            what = msg("{images} older image(s)", images=images)
        else:
            what = msg("{turns} older turn(s)", turns=turns)
        return [
            msg(
                "Left out {what} to fit the model's limits "
                "({max_model_len} tokens, {max_images} images per request).",
                what=what,
                max_model_len=budget.max_model_len,
                max_images=budget.max_images,
            )
        ]


def shrunk_budget_note(max_tokens: int, budget: Budget, *, history_left: bool) -> str:
    """Say that the answer may use fewer tokens than the person chose, and why.

    ``history_left``: older turns are still in the request, so leaving them out
    ("Retry with more tokens") can give the answer more room.
    """
    numbers = {
        "max_tokens": max_tokens,
        "chosen": budget.max_tokens,
        "max_model_len": budget.max_model_len,
    }
    if history_left:
        return msg(
            "The answer may use at most {max_tokens} tokens, not the {chosen} you chose: "
            "the conversation takes the rest of the model's {max_model_len}-token context. "
            "If the answer is cut off, 'Retry with more tokens' leaves out older turns to "
            "make room.",
            **numbers,
        )
    return msg(
        "The answer may use at most {max_tokens} tokens, not the {chosen} you chose: "
        "this message takes the rest of the model's {max_model_len}-token context.",
        **numbers,
    )


async def plan_verified(
    conversation: Conversation,
    turn: Turn,
    budget: Budget,
    count_text: Callable[[str], int],
    count_exact: Callable[[list[dict[str, Any]]], Awaitable[int | None]],
) -> Plan:
    """Plan ``turn``; near the limit, verify with the server's exact count.

    Estimates (image tokens by the Kimi-VL formula, text by the tokenizer or
    over-estimated) leave out chat-template tokens the server adds and are exact
    only for Kimi-VL. When a plan fills more than :data:`VERIFY_ABOVE` of the
    prompt budget, ``count_exact`` (vLLM's ``/tokenize`` of the whole prompt,
    images included; ``None`` when it cannot count) is asked and, if the estimate
    was short, the turn is planned again with the difference held back, up to
    three times.

    Raises:
        TooManyImages, ContextTooLong: as :meth:`Conversation.plan`.
    """
    plan = conversation.plan(turn, budget, count_text)
    held_back = 0
    for _ in range(3):
        room = budget.max_model_len - budget.reserved
        if plan.prompt_tokens + held_back <= VERIFY_ABOVE * room:
            break
        exact = await count_exact(plan.messages)
        if exact is None:
            break
        if exact <= plan.prompt_tokens + held_back:
            fits = min(budget.max_tokens, budget.max_model_len - exact)
            return replace(plan, prompt_tokens=exact, max_tokens=max(1, fits))
        held_back = exact - plan.prompt_tokens
        plan = conversation.plan(turn, budget, count_text, held_back)
    return plan
