"""The checkout demo (``python examples/checkout/demo.py``) runs end to end.

It takes about 6 s on an idle 2-core machine; the ceiling here is generous so that a CI machine
slowed down by other work does not fail the suite.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "examples" / "checkout" / "demo.py"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """The demo, run once for this module's tests, and the folder it kept its files in."""
    kept = tmp_path_factory.mktemp("checkout-demo")
    done = subprocess.run(
        [sys.executable, str(DEMO), "--keep", str(kept)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return done, kept


@pytest.mark.timeout(200)
def test_demo_survives_a_killed_worker_and_charges_the_card_once(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    """A worker killed mid-charge; another finishes the run; one charge, one email."""
    done, tmp_path = demo
    out = done.stdout
    assert 0 == done.returncode, out[-3000:] + done.stderr[-3000:]
    assert "" == done.stderr
    # The local step retried in memory, the dispatched one durably with a stored wake_at.
    assert 2 == len(re.findall(r"quote +attempt \d retry in \d+ ms, an in-memory timer", out))
    wakes = re.findall(r"payments:charge-card +attempt (\d) retry at wake_at \S+Z", out)
    assert ["1", "2", "3"] == wakes
    assert re.search(r"attempt 3 failed \[worker_lost\]", out)
    assert re.search(r"killed worker A \(pid \d+\) with SIGKILL; exit code -9", out)
    assert re.search(r"payments:charge-card +attempt 4 claimed by worker B", out)
    assert "run order-1001: completed, output 'ch_1001_3'" in out
    assert "email:confirm         remote completed after 2 attempt(s)" in out
    assert "worker B exit code 0" in out
    assert "FAIL" not in out
    assert "demo: every check passed" in out
    # The files it kept tell the same story: one charge under the step's idempotency key.
    assert [("order-1001:2", "ch_1001_3")] == rows(tmp_path / "gateway.db", "charges")
    assert [("order-1001:3",)] == rows(tmp_path / "mail.db", "outbox", "message_id")
    status = rows(tmp_path / "checkout.db", "runs", "status")
    assert [("completed",)] == status


def rows(path: Path, table: str, columns: str = "key, charge_id") -> list[tuple[object, ...]]:
    """Rows of a SQLite file the demo kept."""
    db = sqlite3.connect(path)
    try:
        return db.execute(f"SELECT {columns} FROM {table}").fetchall()
    finally:
        db.close()


@pytest.mark.timeout(200)
def test_demo_routes_a_declined_card_and_compensates_a_cancelled_order(
    demo: tuple[subprocess.CompletedProcess[str], Path],
) -> None:
    """Order 1002 declined: an outcome. Order 1003 cancelled with compensation: refunded."""
    done, kept = demo
    out = done.stdout
    assert 0 == done.returncode, out[-3000:] + done.stderr[-3000:]
    assert re.search(r"order-1002 +run +error 'declined' routed to the workflow's handler", out)
    assert "run order-1002: completed, output 'declined: insufficient funds'" in out
    assert "cancel order-1003 --compensate" in out
    assert re.search(r"order-1003 +email:confirm +attempt 1 withdrawn \(claimed by a worker\)", out)
    assert re.search(r"order-1003 +compensate:payments:charge-card attempt 1 completed", out)
    assert re.search(r"order-1003 +run +cancelled \(compensated: True\)", out)
    assert "worker C exit code 0" in out
    more = kept / "more"
    charges = rows(more / "gateway.db", "charges", "order_id, charge_id")
    assert [(1003, "ch_1003_1")] == charges
    assert [("ch_1003_1",)] == rows(more / "gateway.db", "refunds", "charge_id")
    assert [("bob@example.com",)] == rows(more / "mail.db", "outbox", "to_address")
    assert [("order-1002", "completed"), ("order-1003", "cancelled")] == rows(
        more / "checkout.db", "runs ORDER BY run_id", "run_id, status"
    )
