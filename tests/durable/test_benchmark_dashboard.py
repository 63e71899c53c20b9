"""benchmarks/dashboard_runs_page.py: it runs, times every page, and its list reads use indexes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "dashboard_runs_page.py"


def test_the_benchmark_times_every_page_and_shows_index_plans() -> None:
    """A small store: each page timed (the verdict is the benchmark's), plans off indexes."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), "--runs", "3000", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode in (0, 1), done.stderr  # 1: a page missed its target on this machine
    for page in ("runs page", "runs page, retrying", "/api/runs"):
        assert f"  {page} " in done.stdout
    for plan in (
        "SCAN runs USING INDEX runs_by_created",
        "SEARCH runs USING INDEX runs_by_created (created_at<?)",
        "SEARCH runs USING INDEX runs_by_status_created (status=? AND created_at<?)",
        "SEARCH runs USING INDEX runs_by_workflow (workflow=? AND created_at<?)",
        "SEARCH checkpoints USING INDEX checkpoints_retrying (wake_at>?)",
    ):
        assert plan in done.stdout
