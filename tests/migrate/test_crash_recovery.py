"""A run killed with SIGKILL mid-window loses nothing and counts nothing twice (real processes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.migrate.cli_support import counts_sum, make_project

N = 300
WINDOW = 10
BLOCK_AT = 155  # the 5th item of the 16th window: 15 windows are committed before it


def _state(i: int) -> str:
    if i % 7 == 0:
        return "bad"
    if i % 11 == 0:
        return "skip"
    return "ok"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("concurrency", ["1", "4"])
def test_killed_run_is_finished_by_the_next_run(tmp_path: Path, concurrency: str) -> None:
    """After kill -9 mid-window, the next run finishes: one state per identity, no double count."""
    states = [_state(i) for i in range(1, N + 1)]
    project = make_project(tmp_path, states, window=WINDOW)
    (tmp_path / "block_at").write_text(str(BLOCK_AT))

    crashed = project.popen("run", "people", "-c", concurrency, "--progress", "none")
    project.wait_for("blocked", crashed)
    crashed.kill()  # SIGKILL: no clean-up of any kind
    crashed.communicate()
    assert crashed.returncode < 0
    if concurrency == "1":
        # The blocked window's earlier items reached the destination, but their states did not.
        assert {151, 152, 153} <= set(project.dest_ids("people"))

    (tmp_path / "block_at").unlink()
    finished = project.cli("run", "people", "-c", concurrency, "--json")
    assert finished.returncode == 1, finished.stderr  # the bad ones fail, as they should

    ok = [i for i, s in enumerate(states, start=1) if s == "ok"]
    bad = [i for i, s in enumerate(states, start=1) if s == "bad"]
    skipped = [i for i, s in enumerate(states, start=1) if s == "skip"]
    stored = project.json("status", "people")["definitions"]["people"]
    assert (stored["migrated"], stored["failed"], stored["skipped"], stored["needs_update"]) == (
        len(ok),
        len(bad),
        len(skipped),
        0,
    )
    assert sorted(int(f["identity"]) for f in project.json("failures", "people")) == bad
    assert project.dest_ids("people") == ok

    runs = project.json("runs")["runs"]
    assert len(runs) == 2
    newest, killed = runs
    assert newest["status"] == "failed"  # finished, with the bad items failed
    assert killed["status"] == "failed"
    assert "died" in (killed["error"] or "")
    killed_counts = killed["definitions"]["people"]
    killed_total = sum(killed_counts[k] for k in ("migrated", "skipped", "failed", "unchanged"))
    assert killed_total % WINDOW == 0  # whole committed windows only
    assert killed_total <= BLOCK_AT - 5
    totals = counts_sum({"runs": runs}, "people")
    assert totals == {
        "migrated": len(ok),
        "skipped": len(skipped),
        "failed": len(bad),
        "unchanged": 0,
        "needs_update": 0,
    }
    assert newest["definitions"]["people"] == {
        **json.loads(finished.stdout)["definitions"]["people"],
        "status": newest["definitions"]["people"]["status"],
    }
