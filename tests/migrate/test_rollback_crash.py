"""
A rollback killed with SIGKILL mid-way (a real ``migrate rollback`` process) loses nothing, and
a rerun finishes it with no undo done twice.

The undos here take 10 ms each, so each is committed at its end, before the next starts
(`migrate._rollback.BATCH_SECONDS`): a kill while one undo runs loses no delete of an undo that
ended. With ``-c 4`` the other workers' undos that had just ended when the kill came may have
lost their commit: at most one each. The test counts each undo done (in a file, once its
destination delete is done).
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from migrate._rollback import BATCH_SECONDS
from tests.migrate.rollback_support import make_rollback_project

N = 300
BLOCK_AT = 155


@pytest.mark.timeout(180)
@pytest.mark.parametrize("concurrency", ["1", "4"])
def test_a_killed_rollback_is_finished_by_the_next_with_no_undo_done_twice(
    tmp_path: Path, store_url: str, concurrency: str
) -> None:
    """kill -9 while the undo of item 155 blocks: committed deletes stay deleted, the lock
    holds while it runs (a run is refused), and a rerun undoes the rest: every identity once
    (with -c 4, at most one undo per other worker, just ended, twice)."""
    project = make_rollback_project(tmp_path, store_url, people=N, window=50)
    assert 0 == project.main("run", "people").returncode
    slow = 0.01
    assert slow >= BATCH_SECONDS  # each undo is committed at its end
    (tmp_path / "slow").write_text(str(slow))
    (tmp_path / "block_at").write_text(str(BLOCK_AT))

    crashed = project.popen("rollback", "people", "-c", concurrency)
    wait_for_blocked(tmp_path, crashed)
    refused = project.main("run", "people")
    assert 3 == refused.returncode
    assert "definition 'people' is locked by run" in refused.stderr
    second = project.main("rollback", "people")  # a second rollback of the same: refused too
    assert 3 == second.returncode
    assert "definition 'people' is locked by run" in second.stderr
    crashed.kill()  # SIGKILL: no clean-up of any kind
    crashed.communicate()
    assert crashed.returncode < 0

    before = project.call_counts("people")
    survived = set(project.states("people"))
    assert str(BLOCK_AT) in survived
    assert str(BLOCK_AT) not in before
    assert len(survived) < N  # batches were committed before the kill
    deleted = {str(i) for i in range(1, N + 1)} - survived
    assert deleted <= set(before)  # a state is deleted only once its undo is done
    lost = set(before) & survived  # undone, but the kill came before its delete committed
    assert len(lost) <= int(concurrency) - 1  # none one by one; -c 4: the others just ended
    assert all(count == 1 for count in before.values())

    (tmp_path / "block_at").unlink()
    (tmp_path / "slow").unlink()
    finished = project.json("rollback", "people", "-c", concurrency)
    assert {"rolled_back": len(survived), "failed": 0, "skipped": 0} == finished["definitions"][
        "people"
    ]
    counts = project.call_counts("people")
    assert {str(i) for i in range(1, N + 1)} == set(counts)
    assert lost == {identity for identity, count in counts.items() if count == 2}
    assert all(count in (1, 2) for count in counts.values())
    assert ({}, []) == (project.states("people"), project.dest_ids("people"))

    newest, refused_run, killed, migrated = project.runs()
    assert ("run", "start-failed") == (refused_run["kind"], refused_run["status"])
    assert ("rollback", "succeeded") == (newest["kind"], newest["status"])
    assert ("rollback", "failed") == (killed["kind"], killed["status"])
    assert "died" in (killed["error"] or "")
    assert N - len(survived) == killed["definitions"]["people"]["rolled_back"]
    assert ("run", "succeeded") == (migrated["kind"], migrated["status"])


def wait_for_blocked(root: Path, process: subprocess.Popen[str], timeout: float = 120) -> None:
    """Wait until the undo at `BLOCK_AT` blocks (while the process still runs)."""
    deadline = time.monotonic() + timeout
    while not (root / "blocked").exists():
        if process.poll() is not None:
            out, err = process.communicate()
            raise AssertionError(f"process ended first ({process.returncode}): {out}{err}")
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for the blocked undo")
        time.sleep(0.01)


@pytest.mark.timeout(120)
def test_ctrl_c_stops_a_rollback_after_the_undo_running(tmp_path: Path, store_url: str) -> None:
    """SIGINT while the undo of item 8 runs: that undo ends as it would, nothing after it is
    undone, what was done is committed, the run is stored failed (interrupted), exit 130; a
    rerun undoes the rest, each identity once."""
    project = make_rollback_project(tmp_path, store_url, people=20, window=5)
    assert 0 == project.main("run", "people").returncode
    (tmp_path / "block_at").write_text("8")
    stopped = project.popen("rollback", "people")
    wait_for_blocked(tmp_path, stopped)
    stopped.send_signal(signal.SIGINT)
    time.sleep(0.2)  # the signal is taken while the undo still waits
    (tmp_path / "release").write_text("")
    _out, err = stopped.communicate(timeout=60)
    assert 130 == stopped.returncode, err
    assert "interrupted" in err
    assert [str(i) for i in range(1, 9)] == [i for _d, i in project.calls()]
    kept = project.states("people")
    assert [str(i) for i in range(9, 21)] == sorted(kept, key=int)
    assert all(not state.rollback_attempts for state in kept.values())
    newest = project.runs()[0]
    assert ("rollback", "failed") == (newest["kind"], newest["status"])
    assert (newest["error"] or "").startswith("interrupted: KeyboardInterrupt")
    assert 8 == newest["definitions"]["people"]["rolled_back"]

    (tmp_path / "block_at").unlink()
    assert 12 == project.json("rollback", "people")["definitions"]["people"]["rolled_back"]
    assert {str(i): 1 for i in range(1, 21)} == dict(project.call_counts("people"))
