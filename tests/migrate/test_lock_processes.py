"""One run per definition at a time, with two real processes; ``migrate unlock`` breaks a lock."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.migrate.cli_support import make_project


@pytest.mark.timeout(120)
def test_second_run_is_refused_until_unlock(tmp_path: Path, store_url: str) -> None:
    """While a run holds a lock a second run exits 3 naming it; after unlock a run proceeds."""
    project = make_project(tmp_path, ["ok"] * 30, window=10, store=store_url)
    (tmp_path / "block_at").write_text("5")
    holder = project.popen("run", "people", "--progress", "none")
    try:
        project.wait_for("blocked", holder)
        (running,) = [r for r in project.json("runs")["runs"] if r["status"] == "running"]
        holding_run = running["run_id"]

        refused = project.cli("run", "people")
        assert refused.returncode == 3, refused.stderr
        assert f"locked by run {holding_run}" in refused.stderr
        assert f"pid {holder.pid}" in refused.stderr
        assert "migrate unlock people" in refused.stderr
        assert holder.poll() is None

        # Locks are per definition: another definition is not held up by this one.
        other = project.cli("run", "orders", "--force", "--progress", "none")
        assert other.returncode in (0, 1), other.stderr

        unlocked = project.cli("unlock", "people")
        assert unlocked.returncode == 0
        assert f"unlocked people (was held by run {holding_run}, pid {holder.pid}" in (
            unlocked.stdout
        )

        (tmp_path / "block_at").unlink()
        # The holder's open window holds dest.db's write lock: let it go on, as a stale
        # holder would be gone, so the new run's writes do not wait on it.
        (tmp_path / "release").write_text("")
        after = project.cli("run", "people", "--json")
        assert after.returncode == 0, after.stderr
        assert project.dest_ids("people") == list(range(1, 31))
    finally:
        holder.kill()
        holder.communicate()
