"""benchmarks/migrate_throughput.py: ours beside the floor and naive loops, with ratios."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psycopg

from tests.postgres_server import PostgresServer

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


def _agrees(top: float, bottom: float, ratio: float) -> bool:
    """Whether *ratio* is top / bottom, given that each figure was printed rounded.

    The rates are printed to the unit and the ratio to 0.01, so a slow loop's rounding moves
    the quotient by far more than the ratio's own digits (23.4/s printed as 23 moves it by 2%).
    """
    low = (top - 0.5) / (bottom + 0.5)
    high = (top + 0.5) / max(bottom - 0.5, 0.5)
    return low - 0.01 <= ratio <= high + 0.01


def _check_loop_rates(stdout: str) -> None:
    """The rows of ours, floor and naive: items/s, and ours / it consistent with the rates."""
    rows = {
        match["name"]: (float(match["rate"].replace(",", "")), float(match["ratio"]))
        for match in re.finditer(
            r"^  (?P<name>migrate run|floor|naive)\b.*?(?P<rate>[\d,]+)\s+(?P<ratio>[\d.]+)$",
            stdout,
            re.MULTILINE,
        )
    }
    assert ["migrate run", "floor", "naive"] == list(rows)
    ours = rows["migrate run"][0]
    for rate, ratio in rows.values():
        assert _agrees(ours, rate, ratio), (ours, rate, ratio)
    # The rollback of the run's states, beside it, and its rate over the run's.
    found = re.search(
        r"^  migrate rollback of its states \(no-op rollback=\), 1,500 states +(?P<rate>[\d,]+) "
        r"+(?P<ratio>[\d.]+)$",
        stdout,
        re.MULTILINE,
    )
    assert found is not None, stdout
    rollback = float(found["rate"].replace(",", ""))
    assert _agrees(ours, rollback, float(found["ratio"])), (ours, rollback, found["ratio"])
    shown = re.search(
        r"^  rollback / run = (?P<ratio>[\d.]+) \((meets|MISSES) the target of 0.5x\)",
        stdout,
        re.MULTILINE,
    )
    assert shown is not None, stdout
    assert _agrees(rollback, ours, float(shown["ratio"])), (rollback, ours, shown["ratio"])


def test_benchmark_prints_each_loop_rate_and_our_ratio_to_it() -> None:
    """A small run prints items/s of ours, floor and naive, and ours / each, consistently."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), *SMALL],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    _check_loop_rates(done.stdout)
    assert re.search(r"^  ours / floor = [\d.]+", done.stdout, re.MULTILINE)
    assert re.search(r"^  ours / naive = [\d.]+", done.stdout, re.MULTILINE)
    assert "naive: DictReader + INSERT/commit per item, 30 rows" in done.stdout
    assert "source read 1 time for 20 identities (meets the target of once)" in done.stdout
    assert re.search(
        r"^  ours: upserts in a run, 50 rows +[\d,]+ +1\.00$", done.stdout, re.MULTILINE
    )
    assert re.search(r"^  per call: .* +[\d,]+ +[\d.]+$", done.stdout, re.MULTILINE)


def test_benchmark_with_a_postgres_store_prints_ours_beside_its_floor(
    postgres_server: PostgresServer,
) -> None:
    """--store postgresql://...: ours, the batched-upsert floor and naive, with ratios."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), *SMALL, "--store", postgres_server.dsn()],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    _check_loop_rates(done.stdout)
    assert "no-op process, PostgreSQL (" in done.stdout
    assert "floor: DictReader + one INSERT ... ON CONFLICT/commit per 1,000" in done.stdout
    assert "source read 1 time for 20 identities (meets the target of once)" in done.stdout
    with psycopg.connect(postgres_server.dsn()) as db:
        left = db.execute(
            "SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE 'bench_%'"
        ).fetchone()
    assert (0,) == left  # every schema it made is dropped
