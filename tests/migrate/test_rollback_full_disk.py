"""
A rollback whose store's disk fills up mid-way (a real tmpfs, a real ``migrate rollback``
process): it stops with exit 5 naming the store, every delete it committed is of an undo that
was done, no state is lost, and once there is room again a rerun finishes with no undo done twice
but the one whose commit the full disk refused.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.migrate.rollback_support import make_rollback_project

N = 60


def _resize(mount: Path, size: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)


def _used(mount: Path) -> int:
    stats = os.statvfs(mount)
    return (stats.f_blocks - stats.f_bfree) * stats.f_frsize


@pytest.mark.timeout(180)
def test_a_full_disk_stops_the_rollback_losing_no_state_and_the_rerun_finishes(
    tmp_path: Path, small_disk: Path
) -> None:
    """Exit 5 naming the store and the full disk; deleted states are all of undos done; a rerun
    with room undoes the rest, each identity once, but for the one whose commit failed."""
    store = small_disk / "state.db"
    _resize(small_disk, 8 * 1024 * 1024)
    project = make_rollback_project(tmp_path / "project", f"sqlite:///{store}", people=N)
    assert 0 == project.main("run", "people").returncode
    (project.root / "slow").write_text("0.01")  # each undo committed at its end
    # Room for the run record and a few commits of the rollback, not for all of them.
    _resize(small_disk, _used(small_disk) + 160 * 1024)

    full = project.popen("rollback", "people")
    out, err = full.communicate(timeout=120)
    assert 5 == full.returncode, out + err
    assert f"store {store}" in err
    assert "database or disk is full" in err

    _resize(small_disk, 8 * 1024 * 1024)
    before = project.call_counts("people")
    survived = set(project.states("people"))
    everyone = {str(i) for i in range(1, N + 1)}
    assert 0 < len(survived) < N, (out, err)  # some deletes committed, then the disk was full
    assert everyone - survived <= set(before)  # a state is deleted only once its undo is done
    assert len(set(before) & survived) <= 1  # undone, but its commit was refused

    again = project.json("rollback", "people")
    assert {"rolled_back": len(survived), "failed": 0, "skipped": 0} == again["definitions"][
        "people"
    ]
    counts = project.call_counts("people")
    assert everyone == set(counts)
    assert set(before) & survived == {i for i, count in counts.items() if count == 2}
    assert all(count in (1, 2) for count in counts.values())
    assert ({}, []) == (project.states("people"), project.dest_ids("people"))
