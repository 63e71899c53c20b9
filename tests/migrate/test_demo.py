"""The demo (``python3 dev.py demo``) runs end to end.

It takes about 10 s on an idle 2-core machine (the issue asks for under a minute); the ceiling
here is 120 s so that a CI machine slowed down by other work does not fail the suite.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DEMO = Path(__file__).resolve().parents[2] / "examples" / "library_migration" / "demo.py"


@pytest.mark.timeout(200)
def test_demo_migrates_everything_after_fixing_and_reprocessing_failures() -> None:
    """The demo ends with every record in the catalogue, reprocessing only the failures."""
    done = subprocess.run(
        [sys.executable, str(DEMO)], capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    # The first run: authors with 3 rejected records, books held back by the preflight.
    assert "authors     normal     1,997        0       3" in out
    assert "books: not run: required dependency 'authors'" in out
    # Transient failures happened and were retried away.
    transient = re.findall(r"transient failures answered \(429/503\): ([\d,]+)", out)
    assert int(transient[-1].replace(",", "")) > 0
    # The summaries count the retries: as many as the catalogue's transient answers, per run.
    assert "needs-update  retries" in out
    matched = re.findall(r"the summary's ([\d,]+) retries match the ([\d,]+) transient", out)
    assert len(matched) == 2
    assert all(retries == transient and retries != "0" for retries, transient in matched)
    # Each reprocessing run touched only the failed items: 3 authors, then 5 books.
    assert re.findall(r"requests made by this run: (\d+)", out) == ["3", "5"]
    assert "every author and book is in the catalogue" in out
    # Rejected records are evidence in the store, not tracebacks on the terminal.
    assert [] == [line for line in done.stderr.splitlines() if "Traceback" in line]
