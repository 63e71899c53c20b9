"""
``prune --older-than D [--status S] [--dry-run]``, ``runs --unserved``, ``show``'s line about the
version a run needs, and ``work``'s warning of runs nobody serves.
"""

from __future__ import annotations

import pytest

from effects.durable import Engine, WorkflowContext, workflow
from effects.testing import VirtualClock
from tests.durable.cli_support import App, assert_one_line_error, read_until, run_async

pytestmark = pytest.mark.not_on_memory("the command line runs in processes of its own")

APP = ("--app", "app:engine")
#: 2020-01-01T00:00:00Z: runs made then ended long before any prune cutoff of these tests.
LONG_AGO = 1_577_836_800.0


def _seed_old_and_new(app: App) -> dict[str, str]:
    """Two runs completed in 2020, one pending since 2020, one completed now: their ids."""

    async def main() -> dict[str, str]:
        async with app.engine(clock=VirtualClock(start=LONG_AGO)) as old:
            done = [await old.start("greet", n, run_id=f"old-{n}") for n in ("a", "b")]
            await old.run_until_idle()
        async with app.engine(clock=VirtualClock(start=LONG_AGO)) as idle:
            waiting = await idle.start("greet", "c", run_id="old-pending")
        async with app.engine() as now:
            recent = await now.start("greet", "d", run_id="recent")
            await now.run_until_idle()
        return {"done": ",".join(done), "waiting": waiting, "recent": recent}

    return run_async(main)


def _run_ids(app: App) -> list[str]:
    return sorted(run["run_id"] for run in app.json(*APP, "runs"))


def test_prune_dry_run_counts_and_prune_deletes_old_finished_runs(cli_app: App) -> None:
    """--dry-run: 'would prune 2 runs', nothing gone; then 'pruned 2 runs'; pending stays."""
    _seed_old_and_new(cli_app)
    everything = _run_ids(cli_app)

    dry = cli_app.cli(*APP, "prune", "--older-than", "30d", "--dry-run")
    after_dry = _run_ids(cli_app)
    done = cli_app.cli(*APP, "prune", "--older-than", "30d")
    again = cli_app.cli(*APP, "prune", "--older-than", "30d", "--status", "failed")

    assert (0, "would prune 2 runs\n", "") == (dry.returncode, dry.stdout, dry.stderr)
    assert everything == after_dry
    assert (0, "pruned 2 runs\n", "") == (done.returncode, done.stdout, done.stderr)
    assert ["old-pending", "recent"] == _run_ids(cli_app)
    assert (0, "pruned 0 runs\n") == (again.returncode, again.stdout)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("prune",), "--older-than"),
        (("prune", "--older-than", "soon"), "expected a duration"),
        (("prune", "--older-than=-1d"), "expected a duration"),
        (("prune", "--older-than", "30d", "--status", "running"), "invalid choice"),
    ],
    ids=["missing", "garbage", "negative", "unfinished-status"],
)
def test_a_bad_prune_exits_2_and_deletes_nothing(
    cli_app: App, args: tuple[str, ...], fragment: str
) -> None:
    """No --older-than, a bad duration, a status that is not finished: exit 2, one line."""
    _seed_old_and_new(cli_app)
    before = _run_ids(cli_app)

    done = cli_app.cli(*APP, *args)

    assert_one_line_error(done, fragment, code=2)
    assert before == _run_ids(cli_app)


@workflow("greet", version="0")
async def greet_v0(ctx: WorkflowContext, name: str) -> str:
    """An older version of the app's `greet`."""
    return f"hi {name}"


def _start_v0(app: App) -> str:
    async def main() -> str:
        async with Engine(app.url, workflows=[greet_v0]) as engine:
            return await engine.start(greet_v0, "ada", run_id="v0-run")

    return run_async(main)


def test_runs_unserved_lists_and_show_names_the_version_a_run_needs(cli_app: App) -> None:
    """A pending run of greet version 0 under an app serving version 1."""
    run_id = _start_v0(cli_app)
    served = cli_app.cli(*APP, "start", "greet", "--run-id", "v1-run")
    assert 0 == served.returncode, served.stderr

    listed = cli_app.json(*APP, "runs", "--unserved")
    table = cli_app.cli(*APP, "runs", "--unserved")
    shown = cli_app.cli(*APP, "show", run_id)
    other = cli_app.cli(*APP, "show", "v1-run")

    assert [("v0-run", "greet", "pending")] == [
        (r["run_id"], r["workflow"], r["status"]) for r in listed
    ]
    assert 0 == table.returncode
    assert "v0-run" in table.stdout
    assert "v1-run" not in table.stdout
    assert 0 == shown.returncode
    assert "needs version 0 of greet (this engine serves 1)" in shown.stdout.splitlines()
    assert "needs version" not in other.stdout


def test_work_warns_once_of_runs_waiting_for_a_version_it_does_not_serve(cli_app: App) -> None:
    """The worker's stderr names the workflow, the version and how many wait."""
    _start_v0(cli_app)
    worker = cli_app.worker("--log-level", "warning")
    assert worker.stderr is not None
    lines = read_until(worker.stderr, "wait for version")
    worker.terminate()
    _, rest = worker.communicate(timeout=60)
    warned = [line for line in [*lines, *rest.splitlines()] if "wait for version" in line]
    assert 1 == len(warned)
    assert "WARNING 1 run(s) of workflow 'greet' wait for version '0'" in warned[0]
    assert "(it serves version '1')" in warned[0]
