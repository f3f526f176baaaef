"""The front host of several UI hosts: HAProxy's config over chat UIs on other hosts.

``python -m serving.front --bind 0.0.0.0:8300 10.0.0.2:8300 10.0.0.3:8300`` prints the
config that ``launch.sh --ui-workers N`` writes for its own workers (:mod:`serving.proxy`:
cookie affinity, health checks of ``/kimi/status``, the browser's address in
``X-Forwarded-For``), with the workers at the given addresses. Run HAProxy with it on the
front host (``haproxy -f front.cfg``); docs/scaling.md shows the three-host setup. Each UI
host then trusts the front's ``X-Forwarded-For`` (``FORWARDED_ALLOW_IPS=<front address>``).

``--model-api 10.0.0.1:8200`` adds the model API for the UI hosts: vLLM's router, which
``launch.sh --server-only --replicas 0 --remote-replica ...`` runs on the front host's
loopback (``--router``, 127.0.0.1:8100), passed on for the paths the chat UI asks
(:data:`MODEL_API_PATHS`) and for no other: the router's admin API, which adds and removes
replicas, has no key of its own.

Exit status 2 with argparse's message on a malformed address.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Final

from serving.proxy import SERVER_TIMEOUT, ProxyPlan, Worker, bind_address

ROUTER: Final = ("127.0.0.1", 8100)
"""Where ``launch.sh`` runs vLLM's router: loopback, the vLLM port (``KIMI_VLLM_PORT``)."""

MODEL_API_PATHS: Final = ("/v1/chat/completions", "/v1/models", "/tokenize", "/metrics", "/health")
"""What the chat UI asks of its model server (backend/client.py, backend/metrics.py): the
paths, as sent, that the front passes to the router; anything else is answered 403 by the
front itself. They are what a vLLM server answers on its own port (its key guards
``/v1``), never the router's ``/add_worker``, ``/remove_worker`` or ``/list_workers``."""


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


def model_api_config(bind: tuple[str, int], router: tuple[str, int] = ROUTER) -> str:
    """HAProxy's sections that serve the model API on ``bind`` from vLLM's router at
    ``router``: :data:`MODEL_API_PATHS` only, matched exactly (``path`` is the path as
    sent, without its query: ``/v1/models/../add_worker`` or ``/%61dd_worker`` match none).
    A chat completion streams for minutes: both sides wait as long as the UI's front does
    for a worker."""
    lines = [
        "",
        "# The model API for the UI hosts: vLLM's router on this host's loopback. Its admin",
        "# API (adding and removing replicas) has no key: only the chat UI's paths pass.",
        "frontend model_api",
        f"    bind {bind_address(*bind)}",
        f"    timeout client {SERVER_TIMEOUT}",
        f"    http-request deny deny_status 403 unless {{ path {' '.join(MODEL_API_PATHS)} }}",
        "    default_backend router",
        "",
        "backend router",
        f"    server router {bind_address(*router)}",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m serving.front", description=__doc__)
    parser.add_argument("--bind", type=host_port, default=("0.0.0.0", 8300))
    parser.add_argument("--model-api", type=host_port, metavar="HOST:PORT")
    parser.add_argument("--router", type=host_port, default=ROUTER, metavar="HOST:PORT")
    parser.add_argument("uis", nargs="+", type=host_port, metavar="HOST:PORT")
    args = parser.parse_args(argv)
    config = front_config(args.bind, args.uis)
    if args.model_api is not None:
        config += model_api_config(args.model_api, args.router)
    sys.stdout.write(config)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
