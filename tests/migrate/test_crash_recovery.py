"""A run killed with SIGKILL mid-window loses nothing and counts nothing twice (real processes)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from migrate._liveness import ProcessId, is_alive, this_process
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
def test_killed_run_is_finished_by_the_next_run(
    tmp_path: Path, concurrency: str, store_url: str
) -> None:
    """After kill -9 mid-window, the next run finishes: one state per identity, no double count."""
    states = [_state(i) for i in range(1, N + 1)]
    project = make_project(tmp_path, states, window=WINDOW, store=store_url)
    (tmp_path / "block_at").write_text(str(BLOCK_AT))

    crashed = project.popen("run", "people", "-c", concurrency, "--progress", "none")
    project.wait_for("blocked", crashed)
    crashed.kill()  # SIGKILL: no clean-up of any kind
    crashed.communicate()
    assert crashed.returncode < 0
    # The blocked window's destination writes share its transaction: gone with its states.
    assert not {151, 152, 153} & set(project.dest_ids("people"))
    assert {141, 142, 150} <= set(project.dest_ids("people"))  # committed windows stay

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


@pytest.mark.timeout(120)
def test_a_dead_run_whose_pid_was_reused_is_still_seen_dead(tmp_path: Path) -> None:
    """Same host, same pid, another process (a restarted container): the run is dead."""
    if this_process().token is None:
        pytest.skip("this system does not tell process start times (no /proc): pid only")
    project = make_project(tmp_path, ["ok"] * 20, window=5)
    (tmp_path / "block_at").write_text("12")
    crashed = project.popen("run", "people", "--progress", "none")
    project.wait_for("blocked", crashed)
    crashed.kill()
    crashed.communicate()
    (tmp_path / "block_at").unlink()
    # A live process now has the dead run's pid; its start time differs from the one recorded.
    impostor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        db = sqlite3.connect(tmp_path / "state" / "migrate.db")
        with db:
            db.execute("UPDATE runs SET pid = ?", (impostor.pid,))
            db.execute("UPDATE locks SET pid = ?", (impostor.pid,))
        db.close()
        after = project.cli("run", "people", "--json")
        assert 0 == after.returncode, after.stderr
        runs = project.json("runs")["runs"]
        assert ("failed", f"process {impostor.pid} died") == (runs[1]["status"], runs[1]["error"])
        assert list(range(1, 21)) == project.dest_ids("people")
    finally:
        impostor.kill()
        impostor.wait()


def test_liveness_trusts_the_start_token_over_the_pid() -> None:
    """A live pid with another start token is dead; the right token, or none recorded, alive."""
    me = this_process()
    if me.token is None:
        pytest.skip("this system does not tell process start times (no /proc): pid only")
    assert (True, True, False) == (
        is_alive(me),
        is_alive(ProcessId(me.pid, me.host, None)),
        is_alive(ProcessId(me.pid, me.host, "another-boot:1")),
    )
    assert is_alive(ProcessId(me.pid, "elsewhere", me.token)) is None
