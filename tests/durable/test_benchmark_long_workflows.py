"""benchmarks/durable_long_workflows.py runs every case and prints its ratios (smoke, no timing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "durable_long_workflows.py"
#: One round of the smallest cases.
SMALL = ("--rounds", "1", "--runs", "2", "--short", "2", "--long", "4", "--memory-runs", "20")


def test_the_long_workflows_benchmark_prints_a_ratio_per_case() -> None:
    """Tiny sizes: a row per engines and cache setting, each with a ratio; the memory rows."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), *SMALL],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.startswith("  ")]
    ratios = [(row[0], row[1]) for row in rows if row[-1].endswith("x")]
    memory = [row[0] for row in rows if row[0].startswith("cached_runs=")]
    assert [("1", "1000"), ("1", "0"), ("2", "1000"), ("2", "0")] == ratios
    assert ["cached_runs=20", "cached_runs=0"] == memory
