"""One photo question through a running chat UI, as a browser tab asks it (issue 53's
GPU check: ``bench/gpu_device.sh room-up``).

    python -m bench.gpu_room ask http://127.0.0.1:8300

Opens a fresh tab (loading the page first, so HAProxy's stickiness cookie is kept),
attaches ``tests/data/rocket.jpg``, asks what the photo shows and prints the time to
the first visible words, the whole turn's time and the answer's start. Exits 1 when
the turn fails or ends with no answer.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import httpx

from bench.harness import Tab

PHOTO = Path(__file__).resolve().parent.parent / "tests" / "data" / "rocket.jpg"


async def ask(ui_url: str) -> bool:
    """Ask about :data:`PHOTO` in a fresh tab of ``ui_url``; True if an answer came."""
    async with httpx.AsyncClient(timeout=120) as http:
        tab = Tab(ui_url, http, load_page=True)
        await tab.open()
        try:
            file_id = await tab.upload(PHOTO.read_bytes(), PHOTO.name)
            timing = await tab.ask("What does this photo show?", [file_id], marker="")
        finally:
            await tab.close()
    answer = " ".join(tab.texts())
    print(
        f"photo question: first words after {timing.first_s:.2f} s, turn {timing.end_s:.2f} s, "
        f"error {timing.error or 'none'}; answer ({len(answer)} chars): {answer[:160]!r}"
    )
    return bool(answer) and not timing.error


def main(argv: list[str] | None = None) -> None:
    """``ask URL``: see the module docstring."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("step", choices=["ask"])
    parser.add_argument("ui_url")
    args = parser.parse_args(argv)
    sys.exit(0 if asyncio.run(ask(args.ui_url)) else 1)


if __name__ == "__main__":
    main()
