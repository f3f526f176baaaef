"""A throwaway PostgreSQL server for tests: Debian's ``postgresql`` package, real, no mock.

:func:`start_postgres` runs ``initdb`` in a new temporary folder and ``pg_ctl
start`` with no TCP listener at all (``listen_addresses=''``): clients connect
over the unix socket in that folder, on a free port number (the socket's name).
``start_postgres(listen=ADDRESS, netns=NAMESPACE)`` also listens on TCP at ``ADDRESS``
inside that network namespace (a host of tests/netlab.py), trusting clients of its /24.
PostgreSQL refuses to run as root, so as root the cluster belongs to the
package's ``postgres`` user and commands run through ``runuser``. Trust
authentication: only local processes that can reach the socket folder connect.
``tests/run.sh`` installs the package when ``initdb`` is missing.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import free_port

SUPERUSER = "kimi"


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL's bin folder, or None when none is installed."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4])
    )
    return Path(found[-1]).parent if found else None


@dataclass
class PgServer:
    """A running throwaway cluster; :meth:`stop` ends it and removes its folder."""

    folder: Path
    port: int
    bin: Path
    run_as: list[str]
    listen: str = ""
    """The TCP address it listens on ("" = none: the unix socket only)."""
    netns: str = ""
    """The network namespace it runs in ("" = this process's)."""

    def url(self, database: str = "postgres") -> str:
        """SQLAlchemy asyncpg URL of ``database`` over the unix socket."""
        return f"postgresql+asyncpg://{SUPERUSER}@/{database}?host={self.folder}&port={self.port}"

    def tcp_url(self, database: str) -> str:
        """SQLAlchemy asyncpg URL of ``database`` over TCP at :attr:`listen`.

        Raises:
            ValueError: the server listens on no TCP address.
        """
        if not self.listen:
            raise ValueError("this PostgreSQL listens on its unix socket only")
        return f"postgresql+asyncpg://{SUPERUSER}@{self.listen}:{self.port}/{database}"

    def create_database(self) -> str:
        """A new empty database; returns its URL."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self._psql(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def _psql(self, sql: str) -> None:
        subprocess.run(
            [*self.run_as, str(self.bin / "psql"), "-h", str(self.folder), "-p", str(self.port),
             "-U", SUPERUSER, "-d", "postgres", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip

    def stop(self) -> None:
        """Stop the server at once and delete the cluster."""
        self.pause("immediate")
        shutil.rmtree(self.folder, ignore_errors=True)

    def pause(self, mode: str = "fast", wait: bool = True) -> None:
        """Stop the server, keeping the cluster: :meth:`resume` starts it again with its data.

        ``mode`` is ``pg_ctl stop -m``'s: ``fast`` (the default) ends every connection and
        keeps every commit (the cluster runs with ``synchronous_commit=off``, so
        ``immediate``, a crash, may lose the last ones); ``smart`` waits for every client to
        leave, refusing new connections meanwhile. ``wait``: return once it has stopped.
        """
        subprocess.run(
            [*self.run_as, str(self.bin / "pg_ctl"), "-D", str(self.folder / "db"), "-m",
             mode, "-w" if wait else "-W", "stop"],
            capture_output=True, timeout=60, check=False,
        )  # fmt: skip

    def resume(self) -> None:
        """Start the server (again) on the same socket and port, with its data.

        Raises:
            subprocess.CalledProcessError: ``pg_ctl start`` failed.
        """
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses='{self.listen}' -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c shared_buffers=32MB"
        )
        inside = ["ip", "netns", "exec", self.netns] if self.netns else []
        subprocess.run(
            [*inside, *self.run_as, str(self.bin / "pg_ctl"), "-D", str(self.folder / "db"), "-l",
             str(self.folder / "server.log"), "-o", options, "-w", "-t", "60", "start"],
            check=True, capture_output=True, timeout=90,
        )  # fmt: skip


def start_postgres(listen: str = "", netns: str = "") -> PgServer:
    """Start a cluster (about 2-3 s on two cores); with ``listen`` (an IPv4 address) also on
    TCP there, trusting every client of its /24, in the network namespace ``netns``.

    Raises:
        RuntimeError: PostgreSQL is not installed, or it did not start (with its log).
    """
    binaries = pg_bin()
    if binaries is None:
        raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql")
    folder = Path(tempfile.mkdtemp(prefix="kimi-pg-"))
    run_as: list[str] = []
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(folder, owner.pw_uid, owner.pw_gid)
        run_as = ["runuser", "-u", "postgres", "--"]
    server = PgServer(folder, free_port(), binaries, run_as, listen, netns)
    try:
        subprocess.run(
            [*run_as, str(binaries / "initdb"), "-D", str(folder / "db"), "-U", SUPERUSER,
             "-A", "trust", "-E", "UTF8", "--no-sync", "--no-instructions"],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
        if listen:
            with open(folder / "db" / "pg_hba.conf", "a") as hba:
                hba.write(f"host all {SUPERUSER} {listen}/24 trust\n")
        server.resume()
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or b"").decode(errors="replace")[-2000:]
        log = folder / "server.log"
        if log.exists():
            detail += log.read_text(errors="replace")[-2000:]
        server.stop()
        raise RuntimeError(f"PostgreSQL did not start: {detail}") from None
    return server
