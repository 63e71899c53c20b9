"""benchmarks/durable_attempts.py runs and prints a ratio per case (smoke test, no timing)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "durable_attempts.py"


def test_the_attempt_cost_benchmark_prints_both_cases_with_their_ratio() -> None:
    """A tiny run prints ms per attempt for N and 8N, and the time ratio, for both kinds."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), "--attempts", "3", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    rows = re.findall(r"^(dispatched|local)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)x$", done.stdout, re.M)
    assert ["dispatched", "local"] == [row[0] for row in rows], done.stdout
