"""What the app process owns: created once at start, closed once at stop.

One :class:`~backend.client.ChatClient` for the model server (all chats share its
keep-alive connections), its :class:`~backend.models.ModelDirectory`, and the
:class:`~backend.uploads.MediaWorkers` that decode uploads. Chats borrow them
and never close them; after :meth:`AppResources.aclose` the client raises
:class:`backend.errors.ClientClosed`.
"""

from __future__ import annotations

from dataclasses import dataclass

from backend.client import ChatClient
from backend.models import ModelDirectory
from backend.settings import Settings
from backend.uploads import MediaWorkers


@dataclass
class AppResources:
    """The process's shared resources (see the module docstring)."""

    settings: Settings
    client: ChatClient
    models: ModelDirectory
    workers: MediaWorkers

    @classmethod
    def start(cls, settings: Settings) -> AppResources:
        """Create every resource for ``settings`` (opens no connection yet)."""
        client = ChatClient.from_settings(settings)
        return cls(settings, client, ModelDirectory(client), MediaWorkers())

    async def aclose(self) -> None:
        """Close everything, in reverse order of use."""
        await self.models.aclose()
        await self.client.aclose()
        self.workers.close()
