"""One person's chat with one served model: the glue between a UI and the backend.

:class:`ChatSession` holds the chosen model and its limits, the sampling options,
the conversation and which UI message each turn belongs to. It borrows the
process's :class:`~backend.client.ChatClient` and
:class:`~backend.uploads.MediaWorkers` (their owner, the app or the CLI, closes
them). Uploads are prepared by :mod:`backend.uploads`, requests planned by
:mod:`backend.conversation`; a UI (``app.py``) calls :meth:`ChatSession.connect`,
:meth:`ChatSession.prepare_uploads`, :meth:`ChatSession.start_turn`,
:meth:`ChatSession.plan_request` and iterates :meth:`ChatSession.respond`; it
renders events and never touches the OpenAI API itself.
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
from backend.conversation import (
    MIN_ANSWER_TOKENS,
    Budget,
    Conversation,
    TokenCounter,
    Turn,
    plan_verified,
)
from backend.errors import ChatError
from backend.events import AnswerDelta, Done, ReasoningDelta, StreamEvent
from backend.i18n import ENGLISH, Translator, msg
from backend.images import PreparedImage
from backend.logs import LOGGER_NAME
from backend.settings import ModelProfile, Settings, profile_for
from backend.uploads import (
    MediaWorkers,
    Prefetched,
    Upload,
    UploadLimits,
    UploadResult,
    prepare_uploads,
)

log = logging.getLogger(LOGGER_NAME)

DEV_SHAPE_REGEX = "◁think▷[^◁]{40,600}◁/think▷[^◁]{20,400}"
"""Dev mode: vLLM structured outputs force the random-weights model's output into
the Thinking model's shape, so the reasoning step streams and folds as with
Kimi-VL (the text itself stays noise)."""

MORE_TOKENS_AT_LEAST = 1.1
""""Retry with more tokens" is offered only when it can give at least 10% more."""

__all__ = ["ChatSession", "Draft", "Planned", "SamplingOptions", "Upload", "UploadResult"]


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
class Draft:
    """A message kept back because some of its files could not be used."""

    text: str
    images: list[PreparedImage]


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


@dataclass
class ChatSession:
    """State of one chat: chosen model, limits, options, history, drafts.

    Create with :meth:`create`; :meth:`connect` before the first turn (again
    after a :class:`backend.errors.ServerUnreachable`); :meth:`aclose` when the
    chat ends (it cancels background work, never the borrowed client).
    """

    settings: Settings
    client: ChatClient
    workers: MediaWorkers
    wanted_model: str = ""
    """The served model asked for (the chat profile); empty = ``settings.model``."""
    tr: Translator = ENGLISH
    """The chat's language (the browser's, set at chat start): the UI renders its words with it."""
    model: ServedModel | None = None
    options: SamplingOptions | None = None
    conversation: Conversation = field(default_factory=Conversation)
    message_turns: dict[str, Turn] = field(default_factory=dict)
    drafts: dict[str, Draft] = field(default_factory=dict)
    prefetched: Prefetched = field(default_factory=Prefetched)
    others: list[ServedModel] = field(default_factory=list)
    """Other models the app serves (on this or other servers): what Compare can ask."""
    token_counter: TokenCounter = field(default_factory=TokenCounter)
    _background: set[asyncio.Task[None]] = field(default_factory=set)

    @classmethod
    def create(
        cls,
        settings: Settings,
        client: ChatClient,
        workers: MediaWorkers,
        wanted_model: str = "",
        tr: Translator = ENGLISH,
    ) -> ChatSession:
        """A session borrowing ``client`` and ``workers``, speaking ``tr``'s language;
        nothing is sent yet."""
        return cls(
            settings=settings, client=client, workers=workers, wanted_model=wanted_model, tr=tr
        )

    @property
    def profile(self) -> ModelProfile:
        """The profile of the connected model, else of the wanted one, else the setting's.

        Known before connecting, so uploads are prepared with the chosen
        model's image budget even while the server is still loading.
        """
        if self.model is not None:
            return profile_for(self.model.id)
        return profile_for(self.wanted_model or self.settings.model)

    @property
    def max_model_len(self) -> int:
        """Max model length in tokens: the server's if it says, else the setting."""
        if self.model and self.model.max_model_len:
            return self.model.max_model_len
        return self.settings.max_model_len

    async def connect(
        self, model_name: str | None = None, served: list[ServedModel] | None = None
    ) -> ServedModel:
        """Pick one of the models the server serves.

        Picks ``model_name``, else :attr:`wanted_model`, else ``settings.model``,
        else the first served. ``served``: the server's models if already known
        (:class:`backend.models.ModelDirectory`), else the server is asked. Keeps
        sampling options the person already chose for the same model.

        Raises:
            ChatError: the server is unreachable, serves nothing, or not that model.
        """
        if model_name:
            self.wanted_model = model_name
        models = served if served else await self.client.list_models()
        wanted = self.wanted_model or self.settings.model
        chosen = next((m for m in models if m.id == wanted), None) if wanted else None
        if chosen is None and models and not wanted:
            chosen = models[0]
        if chosen is None:
            if not models:
                raise ChatError(
                    msg(
                        "The model server does not serve '{wanted}'; it serves nothing.",
                        wanted=wanted,
                    )
                )
            names = ", ".join(m.id for m in models)
            raise ChatError(
                msg(
                    "The model server does not serve '{wanted}'; it serves {names}.",
                    wanted=wanted,
                    names=names,
                )
            )
        if self.model is None or self.model.id != chosen.id or self.options is None:
            self.model = chosen
            self.options = SamplingOptions.for_profile(self.profile, self.max_model_len)
        return chosen

    def upload_limits(self) -> UploadLimits:
        """What one message's pictures may take with the chosen model and server."""
        return UploadLimits(
            in_token_limit=self.profile.in_token_limit,
            images_per_prompt=self.settings.max_images_per_prompt,
            max_model_len=self.max_model_len,
            max_bytes=self.settings.max_upload_mb * 1_000_000,
        )

    def prefetch(self, upload: Upload) -> bool:
        """Start preparing an uploaded image now, before its message is sent.

        Returns True if it is an image and its preparation started (PDFs and
        videos wait for their message: their budget depends on what else it holds).
        """
        return self.prefetched.start(upload, self.upload_limits(), self.workers)

    async def prepare_uploads(self, uploads: Sequence[Upload]) -> UploadResult:
        """Prepare uploads for the chosen model (:func:`backend.uploads.prepare_uploads`),
        using what :meth:`prefetch` already started."""
        return await prepare_uploads(uploads, self.upload_limits(), self.workers, self.prefetched)

    def start_turn(self, message_id: str, text: str, images: list[PreparedImage]) -> Turn:
        """Record a new turn for a UI message.

        If ``message_id`` is a message already answered (Chainlit's edit of an
        earlier message), history is rewound to just before it and the edited
        turn keeps its prepared images.
        """
        earlier = self.message_turns.get(message_id)
        if earlier is not None and earlier in self.conversation.turns:
            images = images or earlier.images
            self._rewind(self.conversation.turns.index(earlier))
        turn = self.conversation.start_turn(text, images)
        self.message_turns[message_id] = turn
        return turn

    def rerun(self, message_id: str) -> tuple[Turn, int] | None:
        """Prepare the turn of UI message ``message_id`` to be answered again.

        History is rewound to that turn (as an edit does): later turns are no
        longer part of what the model sees. Returns the turn and how many later
        turns were dropped, or None if the message has no turn (any more).
        """
        turn = self.message_turns.get(message_id)
        if turn is None or turn not in self.conversation.turns:
            return None
        index = self.conversation.turns.index(turn)
        dropped = len(self.conversation.turns) - index - 1
        self._rewind(index + 1)
        turn.answer, turn.reasoning, turn.status = "", "", "pending"
        return turn, dropped

    def _rewind(self, keep: int) -> None:
        """Keep the first ``keep`` turns; forget the UI messages of the others."""
        self.conversation.truncate(keep)
        kept = self.conversation.turns
        self.message_turns = {k: t for k, t in self.message_turns.items() if t in kept}

    def keep_draft(self, message_id: str, text: str, images: list[PreparedImage]) -> None:
        """Keep a message whose files could not all be used, until sent or replaced."""
        self.drafts[message_id] = Draft(text, images)

    def take_draft(self, message_id: str) -> Draft | None:
        """The draft kept for ``message_id`` (removed), or None."""
        return self.drafts.pop(message_id, None)

    async def plan_request(
        self, turn: Turn, max_tokens: int | None = None, *, make_room: bool = False
    ) -> Planned:
        """Build the chat completion request for ``turn`` within the server's limits.

        Connects first if needed (to :attr:`wanted_model`). ``max_tokens``
        overrides the options' answer budget; ``make_room`` leaves out older
        turns until that whole budget fits ("Retry with more tokens"). Notices
        say what was left out, and when the budget is below what was asked.

        Raises:
            ChatError: the server is unreachable, or the turn alone is too large.
        """
        if self.model is None or self.options is None:
            await self.connect()
        assert self.model is not None and self.options is not None
        wanted = max_tokens or self.options.max_tokens
        budget = Budget(
            max_model_len=self.max_model_len,
            max_images=self.settings.max_images_per_prompt,
            max_tokens=wanted,
            min_answer_tokens=wanted if make_room else MIN_ANSWER_TOKENS,
        )
        model = self.model.id

        async def count_exact(messages: list[dict[str, object]]) -> int | None:
            return await self.client.count_prompt_tokens(model, messages)

        plan = await plan_verified(self.conversation, turn, budget, self.token_counter, count_exact)
        shaped = self.settings.dev_mode and self.profile.dev_shaped
        extra_body = {"structured_outputs": {"regex": DEV_SHAPE_REGEX}} if shaped else {}
        request = ChatRequest(
            model=model,
            messages=plan.messages,
            max_tokens=plan.max_tokens,
            temperature=self.options.temperature,
            top_p=self.options.top_p,
            thinking=self.profile.thinking or shaped,
            request_id=f"chat-{uuid.uuid4().hex}",
            extra_body=extra_body,
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
        ceiling = self.max_model_len - plan.prompt_tokens + plan.history_tokens
        more = min(2 * wanted, ceiling)
        worth_it = more >= MORE_TOKENS_AT_LEAST * plan.max_tokens
        return Planned(request, plan.notices, wanted, more if worth_it else None)

    def compare_plan(self, message_id: str, other: ServedModel) -> tuple[Turn, Planned] | None:
        """Plan asking ``other`` (another served model) the turn of UI message ``message_id``.

        The same text, images and history before that turn, with the other
        model's sampling defaults and limits. Returns a turn detached from the
        conversation (the chat goes on with its own model) and the plan, or None
        if the message has no turn.

        Raises:
            ChatError: the turn does not fit the other model.
        """
        turn = self.message_turns.get(message_id)
        if turn is None or turn not in self.conversation.turns:
            return None
        earlier = self.conversation.turns[: self.conversation.turns.index(turn)]
        asked = Turn(text=turn.text, images=list(turn.images))
        history = Conversation(
            turns=[*earlier, asked], system_prompt=self.conversation.system_prompt
        )
        profile = profile_for(other.id)
        max_model_len = other.max_model_len or self.settings.max_model_len
        options = SamplingOptions.for_profile(profile, max_model_len)
        budget = Budget(max_model_len, self.settings.max_images_per_prompt, options.max_tokens)
        plan = history.plan(asked, budget, self.token_counter)
        request = ChatRequest(
            model=other.id,
            messages=plan.messages,
            max_tokens=plan.max_tokens,
            temperature=options.temperature,
            top_p=options.top_p,
            thinking=profile.thinking,
            request_id=f"chat-{uuid.uuid4().hex}",
        )
        log.info("request %s model=%s compare of an earlier turn", request.request_id, other.id)
        return asked, Planned(request, plan.notices, options.max_tokens, None)

    async def respond(
        self, turn: Turn, request: ChatRequest, client: ChatClient | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        """Stream the model's response to ``turn`` and record it in the turn.

        Yields the events of :meth:`backend.client.ChatClient.stream`. On any
        exit ``turn`` holds the reasoning and answer received so far, and its
        status says how it ended: ``done``, ``cut_off`` (max tokens reached),
        ``stopped`` (cancelled by Stop, or closed early before the end) or
        ``failed`` (an error). Once :class:`Done` has arrived the turn is
        finished: a Stop after that changes nothing. Closing this generator
        closes the HTTP stream at once, in the same task: use
        ``contextlib.aclosing`` so a Stop that lands outside the stream (while
        the UI is sending) still makes vLLM abort the request.

        Exact token counts of the finished turn are then learnt from the
        server's tokenizer in the background, outside anything Stop cancels.
        ``client``: another server's client (Compare); then nothing is learnt,
        since the counts are that model's.

        Raises:
            ChatError: any server failure, mapped by the client.
        """
        reasoning: list[str] = []
        answer: list[str] = []
        turn.status = "pending"
        try:
            async with aclosing((client or self.client).stream(request)) as events:
                async for event in events:
                    if isinstance(event, ReasoningDelta):
                        reasoning.append(event.text)
                    elif isinstance(event, AnswerDelta):
                        answer.append(event.text)
                    else:
                        self._finish(turn, event, reasoning, answer, learn=client is None)
                    yield event
        except (asyncio.CancelledError, GeneratorExit):
            if turn.status == "pending":
                turn.status = "stopped"
            raise
        except ChatError:
            turn.status = "failed"
            raise
        finally:
            if turn.status in ("pending", "stopped", "failed"):
                turn.reasoning, turn.answer = "".join(reasoning), "".join(answer)
            log.info("request %s ended: %s", request.request_id, turn.status)

    def _finish(
        self, turn: Turn, done: Done, reasoning: list[str], answer: list[str], *, learn: bool
    ) -> None:
        """Record a finished turn and (``learn``) start learning its exact token counts."""
        if done.answer_in_reasoning:
            answer, reasoning = reasoning, []
        turn.reasoning, turn.answer = "".join(reasoning), "".join(answer)
        turn.status = "cut_off" if done.finish_reason == "length" else "done"
        if not learn:
            return
        task = asyncio.create_task(self._learn_token_counts(turn))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _learn_token_counts(self, turn: Turn) -> None:
        """Ask the server's tokenizer for the exact counts of a finished turn's texts."""
        assert self.model is not None
        for text in (turn.text, turn.answer):
            if text and not self.token_counter.knows(text):
                count = await self.client.count_text_tokens(self.model.id, text)
                if count is not None:
                    self.token_counter.learn(text, count)

    async def settled(self) -> None:
        """Wait for background work (token learning) to finish; for tests and the CLI."""
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)

    async def spill_images(self, folder: Path) -> int:
        """Move the images of this chat (finished turns and drafts) out of memory into
        files in ``folder``, and return how many moved.

        For a tab that has closed: Chainlit keeps its session, in case the tab comes
        back, for ``session_timeout`` (60 s here), and then deletes the session's
        folder. Images are most of a chat's memory (about 1.4 MB for a 1.5 MB photo);
        spilled, a returning tab finds them on disk and loses nothing. A turn still
        being answered keeps its images in memory (its answer is saved with them once
        it ends, whenever that is). If the files cannot be written (a full disk), the
        images stay in memory and 0 is returned.
        """
        turns = [t for t in self.conversation.turns if t.status != "pending"]
        images = [i for t in turns for i in t.images]
        images += [i for d in self.drafts.values() for i in d.images]
        pending = {id(i): i for i in images if isinstance(i.data, str)}
        if not pending:
            return 0

        def write() -> dict[int, PreparedImage]:
            folder.mkdir(parents=True, exist_ok=True)
            return {
                key: image.spilled(folder / f"image-{uuid.uuid4().hex}.txt")
                for key, image in pending.items()
            }

        try:
            moved = await asyncio.to_thread(write)
        except OSError as error:
            log.warning("kept a closed chat's images in memory: %s", error)
            return 0
        for turn in turns:
            turn.images = [moved.get(id(i), i) for i in turn.images]
        for key, draft in self.drafts.items():
            self.drafts[key] = replace(draft, images=[moved.get(id(i), i) for i in draft.images])
        return len(moved)

    async def aclose(self) -> None:
        """Cancel background work; the borrowed client and workers stay open."""
        self.prefetched.clear()
        for task in list(self._background):
            task.cancel()
        await self.settled()

    def with_options(self, **changes: float | int | bool) -> None:
        """Change sampling options (the settings panel), keeping the others."""
        assert self.options is not None
        self.options = replace(self.options, **changes)  # type: ignore[arg-type]
