"""
benchmarks/durable_recurring.py: a poll reads the due recurring rows alone, off the index, on
SQLite (counted by the benchmark) and on PostgreSQL (its plan), however many are stored.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from effects.durable import Engine, Recurring
from effects.durable._store import postgres_sql
from effects.durable._store.postgres import parse_postgres_url
from effects.testing import VirtualClock
from schedules import from_delays, spaced
from tests.durable.test_recurring_runs import tick

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "durable_recurring.py"
ROW = re.compile(
    r"^  (?P<count>[\d,]+)\s+(?P<polls>\d+)\s+(?P<rows>[\d.]+)\s+(?P<reads>[\d.]+)"
    r"\s+(?P<statements>[\d.]+)\s+(?P<ms>[\d.]+)$",
    re.MULTILINE,
)


def test_a_poll_reads_the_due_rows_alone_whatever_is_stored() -> None:
    """200 recurrings beside 10: one row read per poll, the same statements, the index's plan."""
    done = subprocess.run(
        [sys.executable, str(BENCHMARK), "--recurrings", "200", "--polls", "30"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    print(done.stdout)
    found = {m["count"]: m for m in ROW.finditer(done.stdout)}
    assert ["10", "200"] == list(found)
    assert {("30", "1.00", "1.00")} == {(m["polls"], m["rows"], m["reads"]) for m in found.values()}
    assert found["10"]["statements"] == found["200"]["statements"]
    ratio = float(re.search(r"ratio of ms/poll \(200 / 10\): ([\d.]+)", done.stdout)[1])  # type: ignore[index]
    # The ratio of the printed times, each rounded to 0.01 ms; the ratio itself to 0.01.
    many, few = float(found["200"]["ms"]), float(found["10"]["ms"])
    assert (many - 0.005) / (few + 0.005) - 0.005 <= ratio <= (many + 0.005) / (few - 0.005) + 0.005
    assert "USING INDEX recurring_due" in done.stdout


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_postgresql_reads_the_due_rows_off_the_index(postgres_url: str) -> None:
    """With 1,000 recurrings stored and one due, the due read is an index scan of recurring_due."""
    clock = VirtualClock(1_767_225_600)
    recurring = [
        Recurring(f"r{i:04d}", tick, from_delays(3600 + i).and_then(spaced(1000)))
        for i in range(1000)
    ]
    async with Engine(postgres_url, workflows=[tick], recurring=recurring, clock=clock) as engine:
        await engine.run_until_idle()
    libpq, options = parse_postgres_url(postgres_url)
    with psycopg.connect(libpq, autocommit=True) as db:
        db.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(options.schema)))
        db.execute("ANALYZE recurring")
        due = 1_767_225_600_000 + 3_600_000
        plan = db.execute(
            f"EXPLAIN (FORMAT TEXT) {postgres_sql.RECURRING_DUE}",  # type: ignore[arg-type]
            (due,),
        ).fetchall()
        count = db.execute(postgres_sql.RECURRING_DUE, (due,)).fetchall()
    text = "\n".join(row[0] for row in plan)
    print(text)
    assert 1 == len(count)
    assert "recurring_due" in text, text
