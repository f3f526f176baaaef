"""The command-line client, run as a person runs it, against the scripted server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import DATA, RunningFake, free_port
from tests.fakes.kimi_server import ANSWER, REASONING, conversation

ROOT = Path(__file__).parent.parent


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "backend.cli", "ask", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_plain_output_splits_reasoning_to_stderr(fake: RunningFake) -> None:
    result = cli("--base-url", fake.base_url, "--image", str(DATA / "rocket.jpg"), "What is it?")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ANSWER.lstrip() + "\n"
    assert REASONING in result.stderr
    assert "◁" not in result.stdout + result.stderr
    body = fake.requests[-1]
    assert body["model"] == "kimi-vl-thinking-2506"  # first of /v1/models
    parts = conversation(body)[0]["content"]
    assert parts[0]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert parts[1] == {"type": "text", "text": "What is it?"}


def test_jsonl_events(fake: RunningFake) -> None:
    result = cli(
        "--base-url", fake.base_url, "--jsonl", "--max-tokens", "77", "--temperature", "0.3", "hi"
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = {line["kind"] for line in lines[:-1]}
    assert kinds == {"reasoning", "answer"}
    done = lines[-1]
    assert done["kind"] == "done" and done["finish_reason"] == "stop"
    assert done["reasoning"] == REASONING and done["answer"] == ANSWER.lstrip()
    assert "".join(x["text"] for x in lines if x["kind"] == "answer") == done["answer"]
    assert done["usage"]["completion_tokens"] > 0
    assert fake.requests[-1]["max_tokens"] == 77 and fake.requests[-1]["temperature"] == 0.3


def test_a_temperature_the_panel_cannot_give_is_refused(fake: RunningFake) -> None:
    result = cli("--base-url", fake.base_url, "--temperature", "nan", "hi")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: The settings were not changed: Temperature must be a number from 0 to 2."
    )
    assert fake.requests == []  # nothing was sent


def test_cut_off_is_said(fake: RunningFake) -> None:
    result = cli("--base-url", fake.base_url, "#scenario=cutoff")
    assert result.returncode == 0
    assert "cut off" in result.stderr


def test_bad_image_is_one_line(fake: RunningFake, tmp_path: Path) -> None:
    bogus = tmp_path / "notes.jpg"
    bogus.write_text("<html>not an image</html>")
    result = cli("--base-url", fake.base_url, "--image", str(bogus), "hi")
    assert result.returncode == 1
    assert result.stderr.startswith("error: notes.jpg")
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert fake.requests == []


def test_unreachable_server_is_one_line() -> None:
    result = cli("--base-url", f"http://127.0.0.1:{free_port()}/v1", "hi")
    assert result.returncode == 1
    assert "The model server cannot be reached" in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr


def test_rejected_request_is_one_line(fake: RunningFake) -> None:
    result = cli("--base-url", fake.base_url, "#scenario=error-images")
    assert result.returncode == 1
    assert "Too many images" in result.stderr and "Traceback" not in result.stderr


def test_unknown_model(fake: RunningFake) -> None:
    result = cli("--base-url", fake.base_url, "--model", "nope", "hi")
    assert result.returncode == 1
    assert "does not serve 'nope'" in result.stderr


def test_thinking_model_answer_without_markers_goes_to_stdout(fake: RunningFake) -> None:
    result = cli("--base-url", fake.base_url, "#scenario=plain")
    assert result.returncode == 0
    assert result.stdout.startswith(ANSWER.lstrip())
