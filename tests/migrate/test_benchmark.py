"""benchmarks/migrate_throughput.py: ours beside the floor and naive loops, with ratios."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "migrate_throughput.py"
SMALL = (
    "--rows",
    "1500",
    "--failed",
    "20",
    "--naive-rows",
    "30",
    "--load-rows",
    "50",
    "--rounds",
    "1",
)


def test_benchmark_prints_each_loop_rate_and_our_ratio_to_it() -> None:
    """A small run prints items/s of ours, floor and naive, and ours / each, consistently."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), *SMALL],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    rows = {
        match["name"]: (float(match["rate"].replace(",", "")), float(match["ratio"]))
        for match in re.finditer(
            r"^  (?P<name>migrate run|floor|naive)\b.*?(?P<rate>[\d,]+)\s+(?P<ratio>[\d.]+)$",
            done.stdout,
            re.MULTILINE,
        )
    }
    assert ["migrate run", "floor", "naive"] == list(rows)
    ours = rows["migrate run"][0]
    for rate, ratio in rows.values():
        assert abs(ours / rate - ratio) <= 0.01 + 0.01 * ratio
    assert re.search(r"^  ours / floor = [\d.]+", done.stdout, re.MULTILINE)
    assert re.search(r"^  ours / naive = [\d.]+", done.stdout, re.MULTILINE)
    assert "naive: DictReader + INSERT/commit per item, 30 rows" in done.stdout
    assert "source read 1 time for 20 identities (meets the target of once)" in done.stdout
    assert re.search(
        r"^  ours: upserts in a run, 50 rows +[\d,]+ +1\.00$", done.stdout, re.MULTILINE
    )
    assert re.search(r"^  per call: .* +[\d,]+ +[\d.]+$", done.stdout, re.MULTILINE)
