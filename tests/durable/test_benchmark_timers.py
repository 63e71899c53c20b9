"""
benchmarks/durable_steps.py's durable-timer case: 1,000 sleepers wake within one poll, an idle
poll reads the same with 10 or 1,000 runs asleep, and a timer writes what a wake_at writes.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "durable_steps.py"
NUMBER = r"[\d,.]+"


def _number(text: str) -> float:
    return float(text.replace(",", ""))


@pytest.mark.timeout(240)
def test_the_timer_case_wakes_every_sleeper_within_a_poll_and_reads_only_what_is_due() -> None:
    """The printed figures: within one poll, idle polls alike, equal tx, a consistent ratio."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), "--only", "ours-timers:normal", "--seconds", "0",
         "--no-dbos"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert 0 == done.returncode, done.stderr
    out = done.stdout
    sleepers = re.search(
        rf"^  WAL\+NORMAL\s+(?P<late>{NUMBER}) ms\s+(?P<polls>{NUMBER})\s+(?P<few_sql>{NUMBER})"
        rf"\s+(?P<all_sql>{NUMBER})\s+(?P<few_vm>{NUMBER})\s+(?P<all_vm>{NUMBER})"
        rf"\s+(?P<per_sql>{NUMBER})\s+(?P<per_vm>{NUMBER})\s+(?P<verdict>.+)$",
        out,
        re.MULTILINE,
    )
    assert sleepers is not None, out
    assert _number(sleepers["late"]) <= 100, out
    assert "within one poll" == sleepers["verdict"].strip()
    assert sleepers["few_sql"] == sleepers["all_sql"], out
    # The VM count's unit is 100 instructions: an idle poll's reads may differ by one unit.
    assert _number(sleepers["all_vm"]) <= _number(sleepers["few_vm"]) + 100, out
    assert "SEARCH runs USING INDEX runs_by_status (status=? AND wake_at<?)" in out
    costs = re.search(
        rf"^  WAL\+NORMAL\s+{NUMBER}\s+{NUMBER}\s+(?P<timer>-?{NUMBER})\s+{NUMBER}\s+{NUMBER}"
        rf"\s+(?P<wake>-?{NUMBER})\s+(?P<ratio>[\d.-]+|n/a)\s+(?P<timer_tx>{NUMBER})"
        rf"\s+(?P<wake_tx>{NUMBER})\s+(?P<timer_sql>-?{NUMBER})\s+(?P<wake_sql>-?{NUMBER})$",
        out,
        re.MULTILINE,
    )
    assert costs is not None, out
    assert costs["timer_tx"] == costs["wake_tx"], out
    if costs["ratio"] != "n/a":
        timer, wake, ratio = _number(costs["timer"]), _number(costs["wake"]), float(costs["ratio"])
        # Both printed rounded to a whole us; the ratio to 2 decimals.
        low, high = (timer - 0.5) / (wake + 0.5), (timer + 0.5) / max(wake - 0.5, 1e-9)
        assert low - 0.01 <= ratio <= high + 0.01, out
