"""One person's chat with one served model: its state, not its answers.

:class:`ChatSession` holds the chosen model and its limits, the sampling options,
the conversation, which UI message each turn belongs to, kept-back drafts and the
images being prepared before their message is sent. It borrows the process's
:class:`~backend.resources.Server` (client, model list, pace) and
:class:`~backend.uploads.MediaWorkers` (their owner, the app or the CLI, closes
them). Answers are the turn runner's (:mod:`backend.turn_runner`): it is the one
that plans, streams and records a turn and sets its status.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from backend.client import ChatClient, ServedModel
from backend.conversation import Conversation, TokenCounter, Turn
from backend.errors import ChatError, ImageError
from backend.families import ModelFamily, family_for
from backend.i18n import ENGLISH, Translator, msg
from backend.images import PreparedImage, shown_as_is, upload_size
from backend.logs import LOGGER_NAME
from backend.resources import Server
from backend.settings import Settings
from backend.uploads import (
    MediaWorkers,
    Prefetched,
    Upload,
    UploadLimits,
    UploadResult,
    prepare_uploads,
)
from backend.versions import Version, Versions

log = logging.getLogger(LOGGER_NAME)

__all__ = ["ChatSession", "Draft", "Locate", "SamplingOptions", "Upload", "UploadResult"]

Locate = Callable[[str], Awaitable[Server]]
"""Finds the server to ask for a served model name
(:meth:`backend.resources.AppResources.server_for`)."""


@dataclass(frozen=True, slots=True)
class SamplingOptions:
    """Per-chat sampling options (the settings panel), and what the panel shows of an
    answer: its reasoning step, its line of timings (``show_stats``)."""

    temperature: float
    top_p: float
    max_tokens: int
    show_reasoning: bool = True
    show_stats: bool = True

    @classmethod
    def for_profile(cls, profile: ModelFamily, max_model_len: int) -> SamplingOptions:
        """The recommended defaults of a model, max tokens capped by max model length."""
        return cls(
            temperature=profile.temperature,
            top_p=profile.top_p,
            max_tokens=min(profile.max_tokens, max_model_len // 2),
        )

    def with_stored(self, stored: dict[str, Any]) -> SamplingOptions:
        """These options with the stored values of the fields they have (unknown keys
        and values of other types are ignored)."""
        known = {f.name for f in fields(SamplingOptions)}
        changes: dict[str, Any] = {
            k: v for k, v in stored.items() if k in known and isinstance(v, int | float | bool)
        }
        return replace(self, **changes)


@dataclass(frozen=True, slots=True)
class Draft:
    """A message kept back because some of its files could not be used."""

    text: str
    images: list[PreparedImage]


@dataclass
class ChatSession:
    """State of one chat: chosen model, limits, options, history, drafts, early uploads.

    Create with :meth:`create`; :meth:`connect` before the first turn (again
    after a :class:`backend.errors.ServerUnreachable`); :meth:`aclose` when the
    chat ends (it cancels background work, never the borrowed server or workers).
    """

    settings: Settings
    server: Server
    workers: MediaWorkers
    wanted_model: str = ""
    """The served model asked for (the chat profile); empty = ``settings.model``."""
    tr: Translator = ENGLISH
    """The chat's language (the browser's, set at chat start): the UI renders its words with it."""
    locate: Locate | None = None
    """Where to find the server of :attr:`wanted_model`, asked at every :meth:`connect`
    (with several servers, one that failed a model list may be the one); None: always
    :attr:`server`."""
    model: ServedModel | None = None
    options: SamplingOptions | None = None
    conversation: Conversation = field(default_factory=Conversation)
    message_turns: dict[str, Turn] = field(default_factory=dict)
    drafts: dict[str, Draft] = field(default_factory=dict)
    prefetched: Prefetched = field(default_factory=Prefetched)
    others: list[ServedModel] = field(default_factory=list)
    """Other models the app serves (on this or other servers): what Compare can ask."""
    token_counter: TokenCounter = field(default_factory=TokenCounter)
    versions: Versions = field(default_factory=Versions)
    """Every version of every turn (Regenerate, Edit: :mod:`backend.versions`); the
    conversation is the branch shown."""
    chat_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """The chat's id (the UI's thread id; a fresh one for the CLI), sent with every request
    as ``X-Session-Id`` so vLLM's router keeps the chat on one replica (serving/replicas.py)."""
    _background: set[asyncio.Task[Any]] = field(default_factory=set)

    @classmethod
    def create(
        cls,
        settings: Settings,
        server: Server,
        workers: MediaWorkers,
        wanted_model: str = "",
        tr: Translator = ENGLISH,
        locate: Locate | None = None,
        chat_id: str = "",
    ) -> ChatSession:
        """A session borrowing ``server`` and ``workers``, speaking ``tr``'s language, for the
        chat ``chat_id`` (empty: a fresh id); nothing is sent yet."""
        session = cls(settings, server, workers, wanted_model=wanted_model, tr=tr, locate=locate)
        if chat_id:
            session.chat_id = chat_id
        return session

    @property
    def client(self) -> ChatClient:
        """The client of the chat's server (borrowed)."""
        return self.server.client

    @property
    def profile(self) -> ModelFamily:
        """The profile of the connected model, else of the wanted one, else the setting's.

        Known before connecting, so uploads are prepared with the chosen
        model's image budget even while the server is still loading.
        """
        if self.model is not None:
            return family_for(self.model.id)
        return family_for(self.wanted_model or self.settings.model)

    @property
    def shows_stats(self) -> bool:
        """Whether answers end with their line of timings (the settings panel's "Timings
        under answers"; on until the chat has options)."""
        return self.options is None or self.options.show_stats

    @property
    def max_model_len(self) -> int:
        """Max model length in tokens: the server's if it says, else the setting."""
        if self.model and self.model.max_model_len:
            return self.model.max_model_len
        return self.settings.max_model_len

    @property
    def connected(self) -> bool:
        """True once :meth:`connect` chose a model."""
        return self.model is not None and self.options is not None

    async def connect(
        self, model_name: str | None = None, served: list[ServedModel] | None = None
    ) -> ServedModel:
        """Pick one of the models the server serves.

        Picks ``model_name``, else :attr:`wanted_model`, else ``settings.model``,
        else the first served. ``served``: :attr:`server`'s models if already known
        (:class:`backend.models.ModelDirectory`), else the server is asked, found
        again by :attr:`locate` first. Keeps sampling options the person already
        chose for the same model.

        Raises:
            ChatError: the server is unreachable, serves nothing, or not that model.
        """
        if model_name:
            self.wanted_model = model_name
        wanted = self.wanted_model or self.settings.model
        if not served and self.locate is not None and wanted:
            self.server = await self.locate(wanted)
        models = served if served else await self.client.list_models()
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
        self.client.learn_reasoning(chosen.id, family_for(chosen.id))
        if self.model is None or self.model.id != chosen.id or self.options is None:
            self.model = chosen
            defaults = SamplingOptions.for_profile(self.profile, self.max_model_len)
            self.options = replace(defaults, show_stats=self.settings.show_stats)
        return chosen

    async def switch_model(self, model_name: str) -> ServedModel:
        """Go on with the served model ``model_name``, the conversation as it is (the
        history the model sees has no reasoning, which suits either model); its
        sampling options are the new model's defaults unless it was already chosen.

        Raises:
            ChatError: as :meth:`connect`; the chat is then left as it was.
        """
        kept = (self.wanted_model, self.server)
        try:
            if self.locate is not None:
                self.server = await self.locate(model_name)
            # The picker offered what the server's cache names. A cache the server answered
            # last time saves asking /v1/models before the request (when fresh: a stale one
            # is refreshed first); a model it does not name, or a server that failed its
            # last refresh, is asked live, which refuses a server that is down.
            models = self.server.models
            cached = await models.current()
            named = models.answered and any(model.id == model_name for model in cached)
            return await self.connect(model_name, cached if named else None)
        except BaseException:  # a ChatError, or a Stop in the middle: as it was
            self.wanted_model, self.server = kept
            raise

    async def connect_first(self, names: Sequence[str | None]) -> ServedModel | None:
        """Connect to the first of ``names`` that is served (None: the default choice);
        None if none is (or the server cannot be reached): the chat then says so."""
        for name in dict.fromkeys(names):
            try:
                return await self.connect(name)
            except ChatError as exc:
                log.info("model %s not available: %s", name, exc)
        return None

    def served_besides(self, served: Sequence[ServedModel]) -> None:
        """Note the models the app serves (all servers') other than this chat's own:
        what Compare can ask."""
        own = self.model.id if self.model else self.wanted_model
        self.others = [model for model in served if model.id != own]

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

    async def judge_upload(self, upload: Upload) -> str | None:
        """Say at once why ``upload`` cannot be used, or None if it can: its size against
        the limit for one file, and for an image its whole preparation (started now, kept
        for its message). PDFs and videos are prepared with their message (their budget
        depends on what else it holds). Returns the problem as a
        :class:`backend.i18n.Message` (it starts with the file's name)."""
        try:
            upload_size(upload.path, upload.name, self.upload_limits().max_bytes)
        except ImageError as error:
            return error.message
        if not self.prefetch(upload):
            return None
        return await self.prefetched.problem(upload.path)

    async def picture_of(self, upload: Upload) -> tuple[str, bytes] | None:
        """A copy of image ``upload`` that every browser shows, as (MIME type, bytes), for
        an image browsers may not show as it is (HEIC, AVIF, TIFF, BMP, CMYK JPEG:
        :func:`backend.images.shown_as_is`); None for any other upload, or one whose
        preparation (started by :meth:`judge_upload`) failed. The copy is the prepared
        image the model gets (upright, RGB, at most the model's image budget, JPEG or
        PNG), so nothing is decoded again; the header check runs in the media pool."""
        prepared = await self.prefetched.prepared(upload.path)
        if prepared is None or await self.workers.run(shown_as_is, upload.path):
            return None
        return prepared.encoded()

    async def prepare_uploads(self, uploads: Sequence[Upload]) -> UploadResult:
        """Prepare the uploads of one message for the chosen model
        (:func:`backend.uploads.prepare_uploads`), using what :meth:`prefetch` started.

        Images prepared early for uploads this message does not carry are dropped:
        the browser tells the server nothing when an attachment is removed from the
        message box, so at sending time they are known to be unused.
        """
        result = await prepare_uploads(uploads, self.upload_limits(), self.workers, self.prefetched)
        self.prefetched.clear()
        return result

    def turn_of(self, message_id: str) -> Turn | None:
        """The turn of UI message ``message_id`` if it is still in the conversation."""
        turn = self.message_turns.get(message_id)
        return turn if turn is not None and turn in self.conversation.turns else None

    def message_of(self, turn: Turn) -> str | None:
        """The UI message id of ``turn``, if it has one: the key mapped to it last (the
        message the page shows it under, after a resume: ui/history.py)."""
        return next((k for k, t in reversed(self.message_turns.items()) if t is turn), None)

    def start_turn(self, message_id: str, text: str, images: list[PreparedImage]) -> Turn:
        """Record a new turn for a UI message, after the last turn shown.

        If ``message_id`` is a message already answered (Chainlit's edit of an
        earlier message), the edited question is a new version of its turn (a fresh
        key; the message now shows it), its earlier version and the turns after that
        stay (:mod:`backend.versions`), and it keeps the prepared images.
        """
        earlier = self.turn_of(message_id)
        if earlier is None:
            turn = self.conversation.start_turn(text, images)  # after the turns shown
            self.versions.add(message_id, turn, self.versions.last())
            self.message_turns[message_id] = turn
            return turn
        turn = self._add_version(earlier, Turn(text=text, images=list(images or earlier.images)))
        self.message_turns[message_id] = turn  # the edited message shows the new version
        return turn

    def new_version(self, message_id: str) -> Turn | None:
        """A new version of the turn of UI message ``message_id`` (Regenerate), to answer
        again: its question and images, no answer yet, shown in its place; the turns after
        the earlier version stay with it. None if the message has no turn shown."""
        earlier = self.turn_of(message_id)
        if earlier is None:
            return None
        turn = self._add_version(earlier, Turn(text=earlier.text, images=list(earlier.images)))
        self.message_turns[message_id] = turn  # the message's answer is the new version's
        return turn

    def choose(self, key: str) -> list[Version]:
        """Show version ``key`` (and the turns it was shown with after it); the branch
        shown from its place on, its own version first.

        Raises:
            KeyError: no such version.
        """
        chosen = self.versions.choose(key)
        shown = self._show()
        place = next(i for i, v in enumerate(shown) if v is chosen)
        return shown[place:]

    def version_of(self, turn: Turn) -> Version | None:
        """The version that holds ``turn``, if it is one of this chat's."""
        key = self.versions.key_of(turn)
        return self.versions[key] if key is not None else None

    def _add_version(self, earlier: Turn, turn: Turn) -> Turn:
        """Add ``turn`` as a new version beside ``earlier`` and show it."""
        version = self.version_of(earlier)
        assert version is not None  # every turn shown is a version
        key = uuid.uuid4().hex
        self.versions.add(key, turn, version.parent)
        self.message_turns[key] = turn
        self._show()
        return turn

    def _show(self) -> list[Version]:
        """Make the conversation the branch shown; that branch."""
        shown = self.versions.branch()
        self.conversation.turns = [v.turn for v in shown]
        return shown

    def restore(self, versions: Versions, message_turns: dict[str, Turn]) -> None:
        """Go on with a stored chat: every version of its turns (the conversation is the
        branch shown) and the UI message of each turn."""
        self.versions = versions
        self.message_turns = dict(message_turns)
        self._show()

    def keep_draft(self, message_id: str, text: str, images: list[PreparedImage]) -> None:
        """Keep a message whose files could not all be used, until sent or replaced."""
        self.drafts[message_id] = Draft(text, images)

    def take_draft(self, message_id: str) -> Draft | None:
        """The draft kept for ``message_id`` (removed), or None."""
        return self.drafts.pop(message_id, None)

    def in_background(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run ``work`` as the chat's background task (cancelled by :meth:`aclose`,
        never by a Stop)."""
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

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
                key: image.spilled(folder / f"image-{uuid.uuid4().hex}")
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

    def with_stored_options(self, stored: dict[str, Any]) -> None:
        """Take the sampling options a stored chat was last asked with (once connected)."""
        if self.options is not None and stored:
            self.options = self.options.with_stored(stored)
