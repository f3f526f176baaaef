"""What the repository holds: code, docs and small test data, not benchmark output.

Benchmarks write their raw results to git-ignored ``artifacts/bench/`` (``bench/harness.py``,
``RESULTS``); docs/benchmarks.md keeps one summary per benchmark (issue 51).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE_LIMIT_BYTES = 10 * 2**20


def tracked_files() -> list[Path]:
    """Every file git tracks in this checkout (``git ls-files``), as paths under ROOT."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    return [ROOT / name for name in listed.decode().split("\0") if name]


def test_the_tree_without_git_is_under_10_mb() -> None:
    sizes = {path: path.stat().st_size for path in tracked_files() if path.is_file()}
    largest = sorted(sizes, key=sizes.__getitem__, reverse=True)[:5]
    assert sum(sizes.values()) < TREE_LIMIT_BYTES, [
        (str(p.relative_to(ROOT)), sizes[p]) for p in largest
    ]


def test_benchmark_results_are_not_committed_and_their_folder_is_ignored() -> None:
    committed = [p for p in tracked_files() if p.is_relative_to(ROOT / "bench" / "results")]
    assert committed == []
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "artifacts/bench/load_sweep.json"], cwd=ROOT
    )
    assert ignored.returncode == 0
