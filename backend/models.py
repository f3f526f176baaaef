"""Which models the server serves, cached so that a page load never waits on the server.

Chainlit asks for the chat profiles on every page load. Asking the model server
each time would make a page wait on a server that accepts connections but never
answers (a blank page), and would put a round trip on every load.
:class:`ModelDirectory` answers from a cache that is refreshed in the background
when it is older than ``refresh_s``; a caller waits at most ``wait_s`` for a
refresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from backend.client import ChatClient, ServedModel
from backend.errors import ChatError


class ModelDirectory:
    """The served models of one server, from a cache refreshed in the background.

    Args:
        client: the server's client (borrowed, never closed here).
        refresh_s: seconds after which the cache is refreshed.
        wait_s: the longest a caller of :meth:`current` waits for a refresh.
        clock: monotonic seconds (for tests).
    """

    def __init__(
        self,
        client: ChatClient,
        *,
        refresh_s: float = 10.0,
        wait_s: float = 0.3,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self._refresh_s = refresh_s
        self._wait_s = wait_s
        self._clock = clock
        self._models: list[ServedModel] = []
        self._answered = False
        self._fetched_at = float("-inf")
        self._refreshing: asyncio.Task[None] | None = None

    @property
    def answered(self) -> bool:
        """True if the server answered the last refresh (False before any, or after a
        failed one: what it serves may then be more than :meth:`current` says)."""
        return self._answered

    async def current(self) -> list[ServedModel]:
        """The served models, as last known: the last good answer, kept while the
        server fails (empty until it has answered once).

        Starts a refresh when the cache is stale and waits for it at most
        ``wait_s``; the refresh goes on in the background after that. Never raises.
        """
        refreshing = self._refresh_if_stale()
        if refreshing is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._wait_s):
                    await asyncio.shield(refreshing)
        return list(self._models)

    def known(self, *, refresh: bool = True) -> list[ServedModel]:
        """The served models as last known, at once: :meth:`current` without the wait (a
        stale cache starts its refresh for the next caller, unless not to ``refresh``: a
        question before its request, whose CPU every question of a burst waits for).
        Never raises."""
        if refresh:
            self._refresh_if_stale()
        return list(self._models)

    def _refresh_if_stale(self) -> asyncio.Task[None] | None:
        """The refresh under way (started now if the cache is stale), or None when fresh."""
        if self._clock() - self._fetched_at < self._refresh_s:
            return None
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.create_task(self._refresh())
        return self._refreshing

    async def refresh(self) -> list[ServedModel]:
        """Ask the server now, whatever the cache's age (a chat just found it ready), wait
        for its answer and return the served models as then known. Never raises."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.create_task(self._refresh())
        await asyncio.shield(self._refreshing)
        return list(self._models)

    async def _refresh(self) -> None:
        """Ask ``/v1/models``; keep the last good answer if the server fails."""
        try:
            self._models = await self._client.list_models()
            self._answered = True
        except ChatError:
            self._answered = False
        self._fetched_at = self._clock()

    async def aclose(self) -> None:
        """Cancel a refresh in flight."""
        if self._refreshing is not None and not self._refreshing.done():
            self._refreshing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refreshing
