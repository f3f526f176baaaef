"""The front host of several UI hosts: HAProxy's config over chat UIs on other hosts.

``python -m serving.front --bind 0.0.0.0:8300 10.0.0.2:8300 10.0.0.3:8300`` prints the
config that ``launch.sh --ui-workers N`` writes for its own workers (:mod:`serving.proxy`:
cookie affinity, health checks of ``/kimi/status``, the browser's address in
``X-Forwarded-For``), with the workers at the given addresses. Run HAProxy with it on the
front host (``haproxy -f front.cfg``); docs/scaling.md shows the three-host setup. Each UI
host then trusts the front's ``X-Forwarded-For`` (``FORWARDED_ALLOW_IPS=<front address>``).

Exit status 2 with argparse's message on a malformed address.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from serving.proxy import ProxyPlan, Worker


def host_port(text: str) -> tuple[str, int]:
    """``"10.0.0.2:8300"`` -> ``("10.0.0.2", 8300)``; ``"[fd00::2]:8300"`` for IPv6.

    Raises:
        argparse.ArgumentTypeError: no port, or a port outside 1-65535.
    """
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"wants HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def front_config(bind: tuple[str, int], uis: list[tuple[str, int]]) -> str:
    """HAProxy's config on ``bind`` over the chat UIs at ``uis`` (named ``w1``, ``w2`` ...)."""
    workers = [Worker(f"w{i}", port, "", address=host) for i, (host, port) in enumerate(uis, 1)]
    plan = ProxyPlan(bind[0], bind[1], workers, Path("-"), Path("-"), stats_socket=None)
    body = plan.config().splitlines(keepends=True)
    while body[0].startswith("#"):  # launch.sh's own header
        body.pop(0)
    where = " ".join(f"{host}:{port}" for host, port in uis)
    return f"# Written by serving/front.py for the chat UIs at {where}.\n" + "".join(body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m serving.front", description=__doc__)
    parser.add_argument("--bind", type=host_port, default=("0.0.0.0", 8300))
    parser.add_argument("uis", nargs="+", type=host_port, metavar="HOST:PORT")
    args = parser.parse_args(argv)
    sys.stdout.write(front_config(args.bind, args.uis))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
