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


@pytest.mark.timeout(200)
def test_demo_survives_a_killed_worker_and_charges_the_card_once(tmp_path: Path) -> None:
    """A worker killed mid-charge; another finishes the run; one charge, one email."""
    done = subprocess.run(
        [sys.executable, str(DEMO), "--keep", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
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
