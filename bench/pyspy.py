"""A py-spy recording of the app while a benchmark runs, summed by stage of a chat.

``py-spy record --gil`` samples only the thread that holds the GIL, so on a loaded
machine it counts Python work rather than threads waiting for a core; ``--threads``
names each sample's thread (the media workers' ``media_N``). The summary puts each
sample in the first :data:`STAGES` entry whose pattern its stack matches (start-up
imports are left out) and gives each stage's share; the samples are py-spy's raw
("collapsed") format, one ``frame;frame;... count`` line per distinct stack.

    with recording([app_pid], Path("artifacts/bench/x.spy")) as rec:
        ...  # the load
    print(stage_table({"16 chats": (rec.stages(), 16)}))

py-spy is in requirements-bench.txt; without it :func:`recording` yields None.
"""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

STAGES: Final = (
    ("start-up (imports)", r"_find_and_load"),
    ("upload (multipart, file writes, upload route)", r"formparsers|multipart|Guard\._upload"),
    ("image preparation (backend/images.py, media workers)", r"backend/images\.py|PIL/"),
    ("session start (on_chat_start)", r"on_chat_start|new_chat"),
    ("reply from vLLM (SSE parse, relay)", r"backend/sse\.py|client_proto|streams|_Reading"),
    ("request to vLLM (body, connection)", r"ChatClient\._open|http_writer|aiohappyeyeballs"),
    ("storage (data layer, files, spill)", r"ui/datalayer|sqlalchemy|backend/store|spill"),
    ("page frames (socket.io, engine.io, websocket)", r"socketio|engineio|wsproto|emitter"),
    ("HTTP (uvicorn, Starlette, Chainlit routes)", r"uvicorn|starlette|fastapi"),
    ("event loop, threads, other", r""),
)
"""Stage name and a regular expression searched in a sample's whole stack; first match wins."""


SAMPLE_MS: Final = 10.0
"""Milliseconds one sample stands for at :func:`recording`'s default 100 Hz."""


@dataclass
class Recording:
    """One py-spy recording: its raw output file (written when it stops)."""

    path: Path

    def stages(self) -> Counter[str]:
        """Samples per :data:`STAGES` name."""
        counts: Counter[str] = Counter()
        if not self.path.exists():
            return counts
        for line in self.path.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            if not n.isdigit():
                continue
            name = next(name for name, pattern in STAGES if re.search(pattern, stack))
            counts[name] += int(n)
        return counts


def stage_table(runs: dict[str, tuple[Counter[str], int]]) -> str:
    """Each run's samples per stage (start-up left out) as milliseconds per chat, a column
    per run: ``runs`` maps a column's name to (:meth:`Recording.stages`, chats)."""
    names = list(runs)
    head = "| stage | " + " | ".join(f"{n} (ms)" for n in names) + " |"
    lines = [head, "| --- |" + " ---: |" * len(names)]
    for stage, _ in (*STAGES[1:], ("all", "")):
        cells = []
        for counts, chats in runs.values():
            samples = sum(v for k, v in counts.items() if k != STAGES[0][0])
            if stage != "all":
                samples = counts[stage]
            cells.append(f"{samples * SAMPLE_MS / max(chats, 1):.1f}")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


@contextmanager
def recording(pids: list[int], path: Path, rate_hz: int = 100) -> Iterator[Recording | None]:
    """py-spy records the first of ``pids`` (the app's process) into ``path`` (a file
    there before is removed) while the block runs; None if py-spy is not installed."""
    spy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if spy is None or not pids:
        yield None
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)  # an earlier run's samples are not this one's
    command = [spy, "record", "--pid", str(pids[0]), "--gil", "--threads", "--rate"]
    command += [str(rate_hz), "--format", "raw", "--output", str(path)]
    with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as proc:
        try:
            yield Recording(path)
        finally:
            proc.send_signal(signal.SIGINT)  # py-spy writes its output and exits
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
