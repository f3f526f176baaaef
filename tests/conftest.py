"""Shared fixtures: the scripted Kimi-VL stream server, on a real socket."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from tests.fakes.kimi_server import KimiServer

DATA = Path(__file__).parent / "data"


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class RunningFake:
    """A scripted server running in a thread."""

    server: KimiServer
    base_url: str

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Request bodies received so far."""
        return self.server.requests

    def reset(self) -> None:
        """Forget recorded requests."""
        self.server.requests.clear()
        self.server.headers.clear()
        self.server.aborted.clear()


@pytest.fixture(scope="session")
def kimi_server() -> Iterator[RunningFake]:
    """The scripted server (serving ``kimi-vl-thinking-2506``), started once."""
    fake = KimiServer(max_model_len=8192)
    port = free_port()
    config = uvicorn.Config(fake.app(), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    yield RunningFake(fake, f"http://127.0.0.1:{port}/v1")
    server.should_exit = True
    thread.join(timeout=5)


@pytest.fixture
def fake(kimi_server: RunningFake) -> RunningFake:
    """The scripted server with no recorded requests."""
    kimi_server.reset()
    return kimi_server
