"""How many chat UI workers the default launch runs (serving/room.py), and the HAProxy
path it takes: installed as tests/run.sh installs it, or one process and one line.

A fake ``apt-get`` (and ``sudo``) on PATH stands in for Debian's; the config of the
default launch's workers is checked by the real ``haproxy -c`` where it is installed
(tests/run.sh installs it)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from serving import launcher, proxy, room, supervisor
from serving.settings import LaunchSettings

HAPROXY = proxy.find_haproxy()


def settings(tmp_path: Path, **values: int) -> LaunchSettings:
    """Settings from ``values`` alone: no ``.env``, no caller ``KIMI_*``."""
    return LaunchSettings(_env_file=None, run_dir=str(tmp_path / "run")).model_copy(update=values)


@pytest.fixture(autouse=True)
def no_kimi_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("KIMI_")]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize(
    ("cpus", "gpus", "room_chats", "workers"),
    [
        (16, 1, 64, 4),  # the H100/H200 machine: 64 chats need 4, 13 cores are spare
        (16, 1, 8, 1),  # a small room: one process is enough
        (16, 1, 65, 5),  # one chat over four workers' worth
        (8, 2, 64, 3),  # 8 cores, 2 GPUs: 8 - 4 - 1 = 3 cores left to the UI
        (128, 8, 256, 16),  # 8 GPUs, a large room: 16 of 111 spare cores
        (4, 2, 64, 1),  # no core to spare: still one
        (2, 0, 64, 1),  # this kind of 2-core machine
    ],
)
def test_workers_follow_the_room_capped_by_the_cores_vllm_leaves(
    cpus: int, gpus: int, room_chats: int, workers: int
) -> None:
    assert room.workers_for_room(cpus=cpus, gpus=gpus, room_chats=room_chats) == workers


def never_install(log: Path) -> bool:
    raise AssertionError("nothing should be installed")


def test_a_number_the_operator_set_is_kept_without_a_word(tmp_path: Path) -> None:
    plan = room.plan_ui(
        settings(tmp_path, ui_workers=2),
        serves_gpu_model=True,
        gpus=1,
        cpus=16,
        find=lambda: None,
        install=never_install,
    )
    assert plan == room.UiPlan(2)  # proxy.check_haproxy refuses it without HAProxy


def test_dev_mode_and_the_ui_alone_run_one_process(tmp_path: Path) -> None:
    plan = room.plan_ui(
        settings(tmp_path), serves_gpu_model=False, gpus=0, cpus=64, install=never_install
    )
    assert plan == room.UiPlan(1)


def test_a_gpu_machine_with_haproxy_runs_four_workers_and_says_why(tmp_path: Path) -> None:
    plan = room.plan_ui(
        settings(tmp_path),
        serves_gpu_model=True,
        gpus=1,
        cpus=16,
        find=lambda: "/usr/sbin/haproxy",
        install=never_install,
    )
    assert plan.workers == 4
    assert plan.lines == (
        "4 chat UI workers behind HAProxy for a room of 64 chats (KIMI_ROOM_CHATS; one per "
        "16, at most the 16 CPU cores less 2 per GPU x 1 and 1; KIMI_UI_WORKERS=N sets the "
        "number)",
    )


def test_missing_haproxy_is_installed_then_used(tmp_path: Path) -> None:
    installed: list[Path] = []

    def install(log: Path) -> bool:
        installed.append(log)
        return True

    plan = room.plan_ui(
        settings(tmp_path),
        serves_gpu_model=True,
        gpus=1,
        cpus=16,
        find=lambda: "/usr/sbin/haproxy" if installed else None,
        install=install,
    )
    assert installed == [tmp_path / "run" / "apt-get.log"]
    assert plan.workers == 4
    assert plan.lines[0] == (
        f"installing Debian's haproxy for 4 UI workers (apt-get's output: {installed[0]})"
    )


def test_haproxy_that_cannot_be_installed_leaves_one_process_and_the_line_to_run(
    tmp_path: Path,
) -> None:
    plan = room.plan_ui(
        settings(tmp_path, room_chats=40),
        serves_gpu_model=True,
        gpus=1,
        cpus=16,
        find=lambda: None,
        install=lambda log: False,
    )
    assert plan.workers == 1
    assert plan.lines[-1] == (
        "could not install HAProxy, so one chat UI process serves the room; for 3 workers "
        "run `sudo apt-get install haproxy` and launch again"
    )


def fake_command(folder: Path, name: str, body: str) -> None:
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.mark.parametrize("root", [True, False])
def test_apt_get_installs_as_tests_run_sh_does_and_logs_its_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, root: bool
) -> None:
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    fake_command(bin_dir, "apt-get", f'echo "apt-get $* $DEBIAN_FRONTEND" >>{calls}; echo fetched')
    fake_command(bin_dir, "sudo", f'echo "sudo $1" >>{calls}; shift; exec "$@"')
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(os, "geteuid", lambda: 0 if root else 1000)
    log = tmp_path / "run" / "apt-get.log"
    assert room.apt_install_haproxy(log)
    sudo = [] if root else ["sudo -n"]
    assert calls.read_text().splitlines() == [
        *sudo,
        "apt-get update -q noninteractive",
        *sudo,
        "apt-get install -y -q haproxy noninteractive",
    ]
    assert log.read_text() == "fetched\nfetched\n"


def test_a_failed_apt_get_update_installs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    fake_command(bin_dir, "apt-get", f'echo "$1" >>{calls}; echo "no network" >&2; exit 100')
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    log = tmp_path / "apt-get.log"
    assert not room.apt_install_haproxy(log)
    assert calls.read_text() == "update\n"
    assert log.read_text() == "no network\n"


@pytest.mark.skipif(HAPROXY is None, reason="haproxy is not installed (tests/run.sh installs it)")
def test_the_default_launch_on_a_gpu_machine_puts_haproxy_before_its_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """supervisor's own sizing on a 16-core, 1-GPU machine, then its HAProxy config,
    which the real haproxy accepts, names the four workers."""
    monkeypatch.setattr(launcher, "detect_gpus", lambda: 1)
    monkeypatch.setattr(room, "usable_cpus", lambda: 16)
    sized = supervisor._size_ui(
        settings(tmp_path, ui_port=18300, vllm_port=18100), supervisor.Options()
    )
    assert sized.ui_workers == 4
    plan = supervisor._proxy_plan(sized)
    config = plan.config_path.read_text()
    assert [
        line.split()[1] for line in config.splitlines() if line.strip().startswith("server ")
    ] == [
        "w1",
        "w2",
        "w3",
        "w4",
    ]
    dev = supervisor._size_ui(settings(tmp_path), supervisor.Options(dev=True))
    assert dev.ui_workers == 1
