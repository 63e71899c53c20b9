"""``redispatch RUN``: a run's pending dispatched steps are enqueued again, attempt + 1."""

from __future__ import annotations

import pytest

from tests.durable.cli_support import App, assert_one_line_error, run_async
from tests.durable.support import rows

pytestmark = pytest.mark.not_on_memory("the command line runs in processes of its own")


def pending_run(app: App) -> App:
    """*app*, with its run ``p-1`` waiting on a dispatched step that no worker took yet."""

    async def main() -> None:
        async with app.engine(steps=False) as engine:
            await engine.start("pay", 21, run_id="p-1")
            await engine.run_until_idle()

    run_async(main)
    return app


def tasks(app: App) -> list[tuple[int, int]]:
    """(attempt, redispatched) of every queued task in the app's store."""
    found = rows(app.url, "SELECT attempt, redispatched FROM tasks ORDER BY task_id")
    return [(int(attempt), int(redispatched)) for attempt, redispatched in found]


def test_redispatch_enqueues_the_pending_step_again(cli_app: App) -> None:
    """The pending step goes out again as attempt 2, the stale one withdrawn; a worker finishes."""
    app = pending_run(cli_app)
    assert [(1, 0)] == tasks(app)
    done = app.cli("--app", "app:engine", "redispatch", "p-1")
    assert (0, "") == (done.returncode, done.stderr)
    assert "run p-1: 1 pending step(s) enqueued again: 1 double (attempt 2)" in done.stdout
    assert [(2, 1)] == tasks(app)

    async def finish() -> tuple[str, object]:
        async with app.engine() as engine:
            await engine.run_until_idle()
            run = await engine.get_run("p-1")
            return run.status, run.output

    assert ("completed", 42) == run_async(finish)
    events = [e["name"] for e in app.json("show", "p-1")["events"]]
    assert "step.redispatched" in events


def test_redispatch_of_a_finished_run_is_refused(cli_app: App) -> None:
    """A finished run has nothing to re-drive: refused in one line, exit 3, nothing written."""
    app = pending_run(cli_app)

    async def finish() -> None:
        async with app.engine() as engine:
            await engine.run_until_idle()

    run_async(finish)
    before = app.shown("p-1")
    done = app.cli("--app", "app:engine", "redispatch", "p-1")
    assert_one_line_error(done, "refused", "run p-1 is completed", code=3)
    assert before == app.shown("p-1")


def test_redispatch_of_a_running_run_with_nothing_pending_changes_nothing(cli_app: App) -> None:
    """A run not finished, with no dispatched step pending: said so, exit 0, nothing written."""
    app = cli_app

    async def start() -> None:
        async with app.engine() as engine:
            await engine.start("greet", "ada", run_id="g-1")

    run_async(start)
    before = app.shown("g-1")
    done = app.cli("--app", "app:engine", "redispatch", "g-1")
    assert (0, "") == (done.returncode, done.stderr)
    assert "no pending dispatched step; nothing enqueued" in done.stdout
    assert before == app.shown("g-1")


def test_redispatch_of_an_unknown_run_is_one_line(cli_app: App) -> None:
    """An unknown run id: one line on stderr, exit 2."""
    app = pending_run(cli_app)
    assert_one_line_error(app.cli("--app", "app:engine", "redispatch", "nope"), "'nope'")
