"""
The dashboard's runs page and ``/api/runs`` over 100,000 runs on SQLite: each answers in under
200 ms (keyset reads off the ``runs_by_created`` index, no full scan of the runs).

Run: ``.venv/bin/python benchmarks/dashboard_runs_page.py [--runs N] [--rounds N]``

The store is made by an engine (its schema, its indexes), then filled with rows in bulk: runs
of five workflows in every status, a second apart, each with a completed local step, and one in
fifty with a dispatched step waiting out its backoff (``retrying``). Each page is requested
in-process through the ASGI app (httpx's ASGI transport: the app's own work, no sockets), a few
rounds after one warm-up; the table shows the median and the worst, in ms. Then the query plans
of the list reads, as SQLite explains them, each of which must use an index for its order.

Target (issue 22): every page under 200 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

from effects.durable import Engine
from effects.durable.dashboard import app

TARGET_MS = 200.0
START_MS = 1_767_225_600_000
STATUSES = ("completed", "completed", "completed", "failed", "suspended", "cancelled", "dead")
POLICY = json.dumps({"retries": 3, "backoff": "exp", "backoff_ms": 1000, "backoff_max_ms": None,
                     "jitter": False})  # fmt: skip


def fill(path: Path, runs: int) -> None:
    """*runs* runs, their checkpoints, in one transaction."""
    db = sqlite3.connect(path)
    with db:
        db.executemany(
            "INSERT INTO runs (run_id, workflow, version, status, input, created_at, updated_at,"
            " error) VALUES (?, ?, '1', ?, '{}', ?, ?, ?)",
            (
                (
                    f"run-{n:07}",
                    f"workflow-{n % 5}",
                    "suspended" if n % 50 == 0 else STATUSES[n % len(STATUSES)],
                    START_MS + 1000 * n,
                    START_MS + 1000 * n + 500,
                    '{"message":"boom","code":"x","type":"ValueError"}'
                    if STATUSES[n % len(STATUSES)] in ("failed", "dead")
                    else None,
                )
                for n in range(runs)
            ),
        )
        db.executemany(
            "INSERT INTO checkpoints (run_id, seq, name, kind, step_id, status, attempts,"
            " output, created_at, updated_at, policy) VALUES (?, 1, 'quote', 'local', ?,"
            " 'completed', 1, '1', ?, ?, ?)",
            (
                (f"run-{n:07}", f"run-{n:07}:1", START_MS + 1000 * n, START_MS + 1000 * n, POLICY)
                for n in range(runs)
            ),
        )
        # One in fifty waits out a backoff far in the future: retrying.
        db.executemany(
            "INSERT INTO checkpoints (run_id, seq, name, kind, step_id, status, attempts,"
            " wake_at, error, created_at, updated_at, policy) VALUES (?, 2, 'charge', 'remote',"
            ' ?, \'failed\', 1, ?, \'{"message":"no","type":"ValueError"}\', ?, ?, ?)',
            (
                (
                    f"run-{n:07}",
                    f"run-{n:07}:2",
                    2**50,
                    START_MS + 1000 * n,
                    START_MS + 1000 * n,
                    POLICY,
                )
                for n in range(0, runs, 50)
            ),
        )
    db.execute("ANALYZE")
    db.close()


def plans(path: Path, middle: str) -> list[tuple[str, list[str]]]:
    """The query plans of the runs page's reads."""
    from effects.durable._store import RunQuery, listing
    from effects.durable._store import sqlite_sql as sq

    db = sqlite3.connect(path)
    created = db.execute("SELECT created_at FROM runs WHERE run_id = ?", (middle,)).fetchone()[0]
    cases = {
        "first page": RunQuery(limit=51),
        "page after a run": RunQuery(limit=51, after=(created, middle)),
        "failed, after a run": RunQuery(status="failed", limit=51, after=(created, middle)),
        "workflow, after a run": RunQuery(workflow="workflow-3", limit=51, after=(created, middle)),
        "retrying": RunQuery(limit=51, retrying_at=START_MS),
    }
    shown: list[tuple[str, list[str]]] = []
    for name, query in cases.items():
        clause, values = listing.where(sq.RUNS_FILTERS, query.filter_values())
        rows = db.execute(
            "EXPLAIN QUERY PLAN " + sq.RUNS + clause + sq.RUNS_ORDER, (*values, query.limit)
        ).fetchall()
        shown.append((name, [row[-1] for row in rows]))
    counts = db.execute("EXPLAIN QUERY PLAN " + sq.COUNTS + sq.COUNTS_GROUP).fetchall()
    shown.append(("status counts", [row[-1] for row in counts]))
    counts = db.execute(
        "EXPLAIN QUERY PLAN " + sq.COUNTS + " WHERE workflow = ?" + sq.COUNTS_GROUP_FILTERED,
        ("w",),
    ).fetchall()
    shown.append(("status counts of a workflow", [row[-1] for row in counts]))
    db.close()
    return shown


async def measure(url: str, rounds: int, middle: str) -> dict[str, list[float]]:
    """Milliseconds of each page, *rounds* times after one warm-up."""
    pages = {
        "runs page": "/",
        "runs page, after a run": f"/?after={middle}",
        "runs page, status=failed": "/?status=failed",
        "runs page, workflow, after": f"/?workflow=workflow-3&after={middle}",
        "runs page, retrying": "/?retrying=1",
        "runs page, status=running (none)": "/?status=running",
        "runs page, id prefix": "/?id=run-00999",
        "/api/runs": "/api/runs",
        "/api/runs?limit=50&after=": f"/api/runs?limit=50&after={middle}",
    }
    times: dict[str, list[float]] = {name: [] for name in pages}
    async with Engine(url) as engine:
        transport = httpx.ASGITransport(app=app(engine))
        async with httpx.AsyncClient(transport=transport, base_url="http://bench") as http:
            for round_ in range(rounds + 1):
                for name, path in pages.items():
                    started = time.perf_counter()
                    answer = await http.get(path)
                    elapsed = (time.perf_counter() - started) * 1000
                    assert answer.status_code == 200, (path, answer.status_code)
                    if round_:
                        times[name].append(elapsed)
    return times


def main() -> int:
    """Fill a store, time the pages, print the table and the plans; 1 if a page misses."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--runs", type=int, default=100_000, help="runs (default 100,000)")
    parser.add_argument("--rounds", type=int, default=10, help="rounds (default 10)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "durable.db"
        url = f"sqlite:///{path}"

        async def create() -> None:
            async with Engine(url):
                pass

        asyncio.run(create())
        started = time.perf_counter()
        fill(path, args.runs)
        print(f"{args.runs:,} runs written in {time.perf_counter() - started:.1f} s")
        middle = f"run-{args.runs // 2:07}"
        times = asyncio.run(measure(url, args.rounds, middle))
        print(
            f"\nms per answer, median and worst of {args.rounds} rounds (target < {TARGET_MS:.0f})"
        )
        missed = []
        for name, values in times.items():
            worst = max(values)
            verdict = "ok" if worst < TARGET_MS else "MISSED"
            if worst >= TARGET_MS:
                missed.append(name)
            print(f"  {name:32} {statistics.median(values):7.1f} {worst:7.1f}  {verdict}")
        print("\nquery plans (SQLite)")
        for name, lines in plans(path, middle):
            print(f"  {name}:")
            for line in lines:
                print(f"    {line}")
    if missed:
        print(f"\nMISSED the target: {', '.join(missed)}")
        return 1
    print("\nall pages under the target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
