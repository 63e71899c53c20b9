"""benchmarks/durable_steps_pg.py: its cases run and report what the comparison reads."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from tests.postgres_server import PostgresServer

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def bench() -> object:
    """The benchmark module (its folder on sys.path, as when it runs as a script)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import durable_steps_pg

        yield durable_steps_pg
    finally:
        sys.path.remove(str(BENCHMARKS))


def test_the_dispatch_cases_and_the_claim_floor_report_their_cpu_per_item(
    postgres_server: PostgresServer, bench: object
) -> None:
    """A tiny run of ours and of the floor, each in its own process and database."""
    args = argparse.Namespace(seconds=0.3, batch=5, poll_ms=20)
    server = postgres_server.dsn()
    ours = bench.measure("ours-dispatch:1", server, args)  # type: ignore[attr-defined]
    floor = bench.measure("floor-claim:1", server, args)  # type: ignore[attr-defined]
    local = bench.measure("ours-local-work", server, args)  # type: ignore[attr-defined]
    for figures in (ours, floor):
        assert figures["count"] > 0
        assert figures["rate"] == pytest.approx(figures["count"] / figures["seconds"])
        # The server runs here: its processes' CPU is counted, and is not nothing.
        assert figures["cpu_server_ms"] > 0
        assert figures["cpu_workers_ms"] > 0
        assert figures["cpu_self_ms"] >= 0
    assert 0 == ours["count"] % 5
    assert local["count"] > 0
    assert 0 == local["count"] % 10


def test_the_concurrent_local_and_queue_drain_cases_run_and_are_reported(
    postgres_server: PostgresServer, bench: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each new case once, briefly (N = 200 items), and the report's lines for them."""
    args = argparse.Namespace(seconds=0.3, batch=5, poll_ms=20)
    server = postgres_server.dsn()
    keys = ["ours-local-concurrent", "ours-drain:2"]
    if bench.available("dbos"):  # type: ignore[attr-defined]
        keys += ["dbos-local-concurrent", "dbos-drain:1"]
    if bench.available("procrastinate"):  # type: ignore[attr-defined]
        keys += ["procrastinate-drain:1"]
    results = {key: bench.measure(key, server, args) for key in keys}  # type: ignore[attr-defined]
    for key, figures in results.items():
        assert figures["rate"] == pytest.approx(figures["count"] / figures["seconds"])
        if key.endswith("local-concurrent"):
            assert figures["count"] > 0
            assert 0 == figures["count"] % (10 * bench.CONCURRENT)  # type: ignore[attr-defined]
        else:
            assert figures["count"] == bench.drain_items(args.seconds) == 200  # type: ignore[attr-defined]
            assert figures["cpu_server_ms"] > 0
            assert figures["cpu_workers_ms"] > 0
            assert figures["cpu_self_ms"] >= 0
    bench.report(results, [1, 2])  # type: ignore[attr-defined]
    out = capsys.readouterr().out
    assert "64 runs at once, ours / floor (blocking): n/a" in out
    assert "Queue drain (N = 200 items" in out
    assert "ours / claim floor:          n/a" in out
    assert "CPU ms per item, effects.durable:" in out
