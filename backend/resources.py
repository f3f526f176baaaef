"""What the app process owns: created once at start, closed once at stop.

For each model server (``KIMI_SERVERS``, else ``KIMI_BASE_URL``) one
:class:`~backend.client.ChatClient` (all chats share its keep-alive connections)
and its :class:`~backend.models.ModelDirectory`; the
:class:`~backend.uploads.MediaWorkers` that decode uploads; and the
:class:`~backend.fair_use.AnswerQueues` that bound each chat's and each person's
answers. Chats borrow them and never close them; after :meth:`AppResources.aclose` a client raises
:class:`backend.errors.ClientClosed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
from dataclasses import dataclass

from backend.client import ChatClient, ServedModel, load_sdk
from backend.collector import FullCollections
from backend.fair_use import AnswerQueues
from backend.i18n import load_catalogs
from backend.logs import LOGGER_NAME
from backend.models import ModelDirectory
from backend.pacing import ServerPace
from backend.settings import Settings
from backend.uploads import MediaWorkers, hand_back_large_blocks

log = logging.getLogger(LOGGER_NAME)

TRIM_EVERY_S = 30.0
"""Seconds between two hand-backs of freed memory (:meth:`AppResources.start_housekeeping`)."""

PRELOAD_AFTER_S = 0.0
"""Seconds after the app's start at which, in a thread, the translations are compiled
(:func:`backend.i18n.load_catalogs`) and the OpenAI SDK is imported
(:func:`backend.client.load_sdk`): while the first page loads, before its chat connects."""

KEPT_BLOCKS_IDLE_S = 60.0
"""Pillow's kept blocks go back to the system once no media has been prepared for this long.
Measured (docs/benchmarks.md, closed tabs): right after 1,000 tabs with a photo each, 260 MB RSS
with them kept, 236 MB with ``PILLOW_BLOCKS_MAX=0``; 228 MB 120 s later (idle 183 MB)."""


@dataclass(frozen=True, slots=True)
class Server:
    """One model server: its client, the cache of what it serves, and its pace."""

    client: ChatClient
    models: ModelDirectory
    pace: ServerPace

    @classmethod
    def of(cls, client: ChatClient, settings: Settings) -> Server:
        """The server behind ``client`` (borrowed: its owner closes it)."""
        return cls(client, ModelDirectory(client), ServerPace(client, settings.stream_interval))


@dataclass
class AppResources:
    """The process's shared resources (see the module docstring)."""

    settings: Settings
    servers: list[Server]
    workers: MediaWorkers
    answers: AnswerQueues
    """How many answers each chat and each person have running or waiting."""
    collections: FullCollections
    """The process's full garbage collections, at quiet moments once housekeeping starts."""
    _housekeeping: asyncio.Task[None] | None = None
    _preload: asyncio.Task[None] | None = None
    _collecting: asyncio.Task[None] | None = None

    @classmethod
    def start(cls, settings: Settings) -> AppResources:
        """Create every resource for ``settings`` (opens no connection yet), and have
        large freed blocks handed back to the system (:func:`hand_back_large_blocks`)."""
        hand_back_large_blocks()
        servers = []
        for url in settings.base_urls:
            servers.append(Server.of(ChatClient.from_settings(settings, url), settings))
        answers = AnswerQueues(1 + settings.chat_queue, settings.user_answers)
        collections = FullCollections(lambda: answers.last_entered)
        return cls(settings, servers, MediaWorkers(), answers, collections)

    @property
    def client(self) -> ChatClient:
        """The first server's client (the only one unless ``KIMI_SERVERS`` lists more)."""
        return self.servers[0].client

    async def served(self) -> list[tuple[ServedModel, Server]]:
        """Every served model with its server, in server order (from the caches)."""
        lists = await asyncio.gather(*(server.models.current() for server in self.servers))
        return [(model, server) for server, models in zip(self.servers, lists, strict=True)
                for model in models]  # fmt: skip

    def known(self, *, refresh: bool = True) -> list[tuple[ServedModel, Server]]:
        """:meth:`served` at once, without waiting for a stale cache's refresh (started
        unless not to ``refresh``: :meth:`backend.models.ModelDirectory.known`)."""
        return [
            (model, server)
            for server in self.servers
            for model in server.models.known(refresh=refresh)
        ]

    async def server_for(self, model: str) -> Server:
        """The server to ask for ``model``, asked again at every connect of a chat.

        The first server whose model list names it; else the first one that did not
        answer its last model-list refresh (it may serve it: asking it then fails in a
        way a chat retries); else the first server, which will say what it serves.
        """
        found = [server for served, server in await self.served() if served.id == model]
        unknown = [server for server in self.servers if not server.models.answered]
        return (found or unknown or self.servers)[0]

    def start_housekeeping(
        self, every_s: float = TRIM_EVERY_S, preload_after_s: float = PRELOAD_AFTER_S
    ) -> None:
        """Hand freed memory back to the system every ``every_s`` seconds (in the event
        loop's task; idempotent). Closed chats are dropped by Chainlit a minute after
        their tab closes; their prepared images are large allocations that the C
        allocator otherwise keeps as the process's RSS. Also, ``preload_after_s`` seconds
        from now and in a thread, compile the translations
        (:func:`backend.i18n.load_catalogs`) and import the OpenAI SDK
        (:func:`backend.client.load_sdk`). Left to the first question, the translations
        took 26 ms of the event loop's time (Babel's locale data and ``.po`` parsing,
        docs/benchmarks.md), which every question of a first burst waited behind; a
        failure here is logged, and what failed is tried again where it is first used.
        And the full garbage collections run at quiet moments from now on
        (:class:`backend.collector.FullCollections`)."""
        if self._housekeeping is None or self._housekeeping.done():
            self._housekeeping = asyncio.create_task(self._trim_forever(every_s))
        if self._preload is None:
            self._preload = asyncio.create_task(self._preload_after(preload_after_s))
        if self._collecting is None:
            self.collections.take_over()
            self._collecting = asyncio.create_task(self.collections.run())

    @staticmethod
    async def _preload_after(after_s: float) -> None:
        await asyncio.sleep(after_s)
        for load in (load_catalogs, load_sdk):  # the catalogs first: 26 ms, the SDK 0.5 s
            try:
                await asyncio.to_thread(load)
            except Exception:
                log.exception("preloading at the start failed (%s)", load.__name__)
        # What they loaded lives as long as the process: out of the garbage collector's
        # full passes, as app.py does with what the start loaded.
        gc.freeze()

    async def _trim_forever(self, every_s: float) -> None:
        while True:
            await asyncio.sleep(every_s)
            await self.workers.release_when_idle(KEPT_BLOCKS_IDLE_S)

    async def aclose(self) -> None:
        """Close everything, in reverse order of use."""
        for task in (self._housekeeping, self._preload, self._collecting):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._collecting = None
        self.collections.hand_back()
        for server in self.servers:
            await server.models.aclose()
            await server.client.aclose()
        self.workers.close()
