"""One person's chat with one served model: the glue between a UI and the backend.

:class:`ChatSession` owns the client, the chosen model and its limits, the
conversation and the sampling options. A UI (``app.py``) calls
:meth:`ChatSession.connect`, :meth:`ChatSession.prepare_uploads`,
:meth:`ChatSession.start_turn` and iterates :meth:`ChatSession.respond`;
it renders events and never touches the OpenAI API itself.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from pathlib import Path

from backend.client import ChatClient, ChatRequest, ServedModel
from backend.conversation import Budget, Conversation, Plan, TokenCounter, Turn
from backend.documents import prepare_pdf
from backend.errors import ChatError, ImageError
from backend.events import AnswerDelta, ReasoningDelta, StreamEvent
from backend.images import PreparedImage, prepare_image
from backend.logs import LOGGER_NAME
from backend.settings import ModelProfile, Settings, profile_for
from backend.uploads import MEDIA_CONTEXT_SHARE, MediaBudget, MediaResult, UploadKind, sniff_kind
from backend.video import prepare_video

log = logging.getLogger(LOGGER_NAME)

VERIFY_ABOVE = 0.75
"""Share of the prompt budget above which a planned prompt is counted exactly."""


@dataclass(frozen=True, slots=True)
class Upload:
    """A file the person attached: its display name and where it lies on disk."""

    name: str
    path: Path


@dataclass(frozen=True, slots=True)
class SamplingOptions:
    """Per-chat sampling options (the settings panel)."""

    temperature: float
    top_p: float
    max_tokens: int
    show_reasoning: bool = True

    @classmethod
    def for_profile(cls, profile: ModelProfile, max_model_len: int) -> SamplingOptions:
        """The recommended defaults of a model, max tokens capped by max model length."""
        return cls(
            temperature=profile.temperature,
            top_p=1.0,
            max_tokens=min(profile.max_tokens, max_model_len // 2),
        )


@dataclass(frozen=True, slots=True)
class UploadResult:
    """Prepared images, one sentence per file that could not be used, and remarks.

    ``notices`` are about files that were used but changed in a way the person
    should know (only the first frame of an animated GIF, pages left out of a
    PDF, say). ``texts`` are lines for the model about PDFs and videos (which
    pages, the frames' timestamps), in upload order: see :meth:`message_text`.
    """

    images: list[PreparedImage]
    problems: list[str]
    notices: list[str]
    texts: list[str] = field(default_factory=list)

    def message_text(self, typed: str) -> str:
        """The text to send: :attr:`texts`, one per line, before what the person typed."""
        return "\n".join([*self.texts, typed]) if self.texts else typed


@dataclass
class ChatSession:
    """State of one chat: client, served model, limits, options and history.

    Create with :meth:`create`; call :meth:`connect` before the first turn
    (again after a :class:`backend.errors.ServerUnreachable`).
    """

    settings: Settings
    client: ChatClient
    model: ServedModel | None = None
    options: SamplingOptions | None = None
    conversation: Conversation = field(default_factory=Conversation)
    message_turns: dict[str, Turn] = field(default_factory=dict)
    token_counter: TokenCounter = field(default_factory=TokenCounter)

    @classmethod
    def create(cls, settings: Settings) -> ChatSession:
        """A session with a client built from ``settings``; nothing is sent yet."""
        return cls(settings=settings, client=ChatClient.from_settings(settings))

    @property
    def profile(self) -> ModelProfile:
        """The profile of the connected model (``settings.model`` before connecting)."""
        return profile_for(self.model.id if self.model else self.settings.model)

    @property
    def max_model_len(self) -> int:
        """Max model length in tokens: the server's if it says, else the setting."""
        if self.model and self.model.max_model_len:
            return self.model.max_model_len
        return self.settings.max_model_len

    async def connect(self, model_name: str | None = None) -> ServedModel:
        """Ask the server which models it serves and pick one.

        Picks ``model_name``, else ``settings.model``, else the first served.
        Keeps sampling options the person already chose for the same model.

        Raises:
            ChatError: the server is unreachable, serves nothing, or not that model.
        """
        models = await self.client.list_models()
        wanted = model_name or self.settings.model
        chosen = next((m for m in models if m.id == wanted), None) if wanted else None
        if chosen is None and models and not wanted:
            chosen = models[0]
        if chosen is None:
            served = ", ".join(m.id for m in models) or "nothing"
            raise ChatError(f"The model server does not serve '{wanted}'; it serves {served}.")
        if self.model is None or self.model.id != chosen.id or self.options is None:
            self.model = chosen
            self.options = SamplingOptions.for_profile(self.profile, self.max_model_len)
        return chosen

    async def prepare_uploads(self, uploads: Sequence[Upload]) -> UploadResult:
        """Prepare uploaded images, PDFs and videos for the model, off the event loop.

        Each file's kind is sniffed from its first bytes
        (:func:`backend.uploads.sniff_kind`). Pillow decoding of a large photo takes
        tens of milliseconds and would stall every session's websocket if run on
        the event loop (facts.md), so images are prepared in worker threads, in
        parallel. PDFs and videos follow, one at a time in a worker thread, in
        upload order, each within what the message has left
        (:class:`backend.uploads.MediaBudget`): the server's image limit per
        request minus the images before it, and
        :data:`backend.uploads.MEDIA_CONTEXT_SHARE` of the max model length minus
        their tokens. Results keep the upload order.
        """
        limit = self.profile.in_token_limit
        max_bytes = self.settings.max_upload_mb * 1_000_000
        kinds = [sniff_kind(upload.path) for upload in uploads]  # reads 1 KB of each
        photos = [i for i, kind in enumerate(kinds) if kind is UploadKind.IMAGE]
        prepared = await asyncio.gather(
            *(
                asyncio.to_thread(
                    prepare_image, uploads[i].path, limit, uploads[i].name, max_bytes=max_bytes
                )
                for i in photos
            ),
            return_exceptions=True,
        )
        outcomes: dict[int, PreparedImage | MediaResult | BaseException] = dict(
            zip(photos, prepared, strict=True)
        )
        budget = MediaBudget(
            images=self.settings.max_images_per_prompt,
            tokens=int(MEDIA_CONTEXT_SHARE * self.max_model_len),
            in_token_limit=limit,
            max_bytes=max_bytes,
        ).after([image for image in outcomes.values() if isinstance(image, PreparedImage)])
        for i, kind in enumerate(kinds):
            if kind is not UploadKind.IMAGE:
                prepare = prepare_pdf if kind is UploadKind.PDF else prepare_video
                try:
                    media = await asyncio.to_thread(
                        prepare, uploads[i].path, budget, uploads[i].name
                    )
                except Exception as error:  # reported below with the others
                    outcomes[i] = error
                else:
                    outcomes[i] = media
                    budget = budget.after(media.images)
        result = UploadResult([], [], [], [])
        for i, upload in enumerate(uploads):
            outcome = outcomes[i]
            if isinstance(outcome, PreparedImage):
                result.images.append(outcome)
                result.notices.extend(outcome.notices)
            elif isinstance(outcome, MediaResult):
                result.images.extend(outcome.images)
                result.notices.extend(outcome.notices)
                result.texts.append(outcome.text)
            elif isinstance(outcome, ImageError):
                result.problems.append(str(outcome))
            else:
                log.error("preparing %s failed: %r", upload.name, outcome)
                result.problems.append(
                    f"{upload.name}: could not be prepared ({type(outcome).__name__})."
                )
        return result

    def start_turn(self, message_id: str, text: str, images: list[PreparedImage]) -> Turn:
        """Record a new turn for a UI message.

        If ``message_id`` is a message already answered (Chainlit's edit of an
        earlier message), history is rewound to just before it and the edited
        turn keeps its prepared images.
        """
        earlier = self.message_turns.get(message_id)
        if earlier is not None and earlier in self.conversation.turns:
            index = self.conversation.turns.index(earlier)
            images = images or earlier.images
            self.conversation.truncate(index)
            self.message_turns = {
                k: t for k, t in self.message_turns.items() if t in self.conversation.turns
            }
        turn = self.conversation.start_turn(text, images)
        self.message_turns[message_id] = turn
        return turn

    def last_turn(self) -> Turn | None:
        """The most recent turn, or None in an empty chat."""
        return self.conversation.turns[-1] if self.conversation.turns else None

    async def plan_request(
        self, turn: Turn, max_tokens: int | None = None
    ) -> tuple[ChatRequest, list[str]]:
        """Build the chat completion request for ``turn`` within the server's limits.

        Connects first if needed. Returns the request and the notices for the
        person about older images or turns left out (see
        :meth:`backend.conversation.Conversation.plan`).

        Raises:
            ChatError: the server is unreachable, or the turn alone is too large.
        """
        if self.model is None or self.options is None:
            await self.connect()
        assert self.model is not None and self.options is not None
        budget = Budget(
            max_model_len=self.max_model_len,
            max_images=self.settings.max_images_per_prompt,
            max_tokens=max_tokens or self.options.max_tokens,
        )
        plan = await self._plan_within(turn, budget)
        request = ChatRequest(
            model=self.model.id,
            messages=plan.messages,
            max_tokens=plan.max_tokens,
            temperature=self.options.temperature,
            top_p=self.options.top_p,
            thinking=self.profile.thinking,
            request_id=f"chat-{uuid.uuid4().hex}",
        )
        log.info(
            "request %s model=%s messages=%d prompt_tokens~%d max_tokens=%d "
            "images_left_out=%d turns_left_out=%d",
            request.request_id,
            request.model,
            len(plan.messages),
            plan.prompt_tokens,
            plan.max_tokens,
            plan.images_left_out,
            plan.turns_left_out,
        )
        return request, plan.notices

    async def _plan_within(self, turn: Turn, budget: Budget) -> Plan:
        """Plan ``turn``; near the limit, verify with the server's exact count.

        Estimates (image tokens by the Kimi-VL formula, text by the tokenizer or
        over-estimated) leave out chat-template tokens the server adds and are
        exact only for Kimi-VL. When a plan fills more than
        :data:`VERIFY_ABOVE` of the prompt budget, the whole planned prompt is
        counted with vLLM's ``/tokenize`` (images included) and, if the
        estimate was short, planned again with the difference held back, up to
        three times.
        """
        assert self.model is not None
        plan = self.conversation.plan(turn, budget, self.token_counter)
        held_back = 0
        for _ in range(3):
            room = budget.max_model_len - min(budget.min_answer_tokens, budget.max_tokens)
            if plan.prompt_tokens + held_back <= VERIFY_ABOVE * room:
                break
            exact = await self.client.count_prompt_tokens(self.model.id, plan.messages)
            if exact is None:
                break
            if exact <= plan.prompt_tokens + held_back:
                fits = min(budget.max_tokens, budget.max_model_len - exact)
                return replace(plan, prompt_tokens=exact, max_tokens=max(1, fits))
            held_back = exact - plan.prompt_tokens
            log.info("prompt estimate short by %d tokens: planning again", held_back)
            smaller = replace(budget, max_model_len=budget.max_model_len - held_back)
            plan = self.conversation.plan(turn, smaller, self.token_counter)
        return plan

    async def respond(self, turn: Turn, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        """Stream the model's response to ``turn`` and record it in the turn.

        Yields the events of :meth:`backend.client.ChatClient.stream`. On any
        exit ``turn`` holds the reasoning and answer received so far, and its
        status says how it ended: ``done``, ``cut_off`` (max tokens reached),
        ``stopped`` (cancelled by Stop, or closed early) or ``failed`` (an
        error). Closing this generator closes the HTTP stream at once, in the
        same task: use ``contextlib.aclosing`` so a Stop that lands outside the
        stream (while the UI is sending) still makes vLLM abort the request.

        Raises:
            ChatError: any server failure, mapped by the client.
        """
        reasoning: list[str] = []
        answer: list[str] = []
        turn.status = "pending"
        try:
            async with aclosing(self.client.stream(request)) as events:
                async for event in events:
                    if isinstance(event, ReasoningDelta):
                        reasoning.append(event.text)
                    elif isinstance(event, AnswerDelta):
                        answer.append(event.text)
                    else:
                        turn.status = "cut_off" if event.finish_reason == "length" else "done"
                        if event.answer_in_reasoning:
                            answer, reasoning = reasoning, []
                        turn.reasoning, turn.answer = "".join(reasoning), "".join(answer)
                    yield event
            await self._learn_token_counts(turn)
        except (asyncio.CancelledError, GeneratorExit):
            turn.status = "stopped"
            raise
        except ChatError:
            turn.status = "failed"
            raise
        finally:
            turn.reasoning = "".join(reasoning)
            turn.answer = "".join(answer)
            log.info("request %s ended: %s", request.request_id, turn.status)

    async def _learn_token_counts(self, turn: Turn) -> None:
        """Ask the server's tokenizer for the exact counts of a finished turn's texts."""
        assert self.model is not None
        for text in (turn.text, turn.answer):
            if text and not self.token_counter.knows(text):
                count = await self.client.count_text_tokens(self.model.id, text)
                if count is not None:
                    self.token_counter.learn(text, count)

    def with_options(self, **changes: float | int | bool) -> None:
        """Change sampling options (the settings panel), keeping the others."""
        assert self.options is not None
        self.options = replace(self.options, **changes)  # type: ignore[arg-type]
