"""``retry RUN``: a failed run's failed steps get a fresh first attempt; completed ones stay."""

from __future__ import annotations

import pytest

from tests.durable.cli_support import App, assert_one_line_error, run_async

pytestmark = pytest.mark.not_on_memory("the command line runs in processes of its own")


def failed_run(app: App) -> App:
    """*app*, with its run ``d-1`` failed at its second step, a FatalError ``declined``."""

    async def main() -> None:
        async with app.engine() as engine:
            await engine.start("declined", {"message": "card declined"}, run_id="d-1")
            await engine.run_until_idle()

    run_async(main)
    return app


def test_retry_makes_a_failed_run_pending_with_its_failed_step_reset(cli_app: App) -> None:
    """``retry`` is engine.requeue: run pending, failed step at attempt 0, completed step kept."""
    app = failed_run(cli_app)
    assert "failed" == app.shown("d-1")["run"]["status"]
    done = app.cli("--app", "app:engine", "retry", "d-1")
    assert (0, "") == (done.returncode, done.stderr)
    assert "run d-1 was failed, is pending again" in done.stdout
    assert "2 charge" in done.stdout
    document = app.json("show", "d-1")
    assert ("pending", None) == (document["run"]["status"], document["run"]["error"])
    assert [("count", "completed", 1), ("charge", "pending", 0)] == [
        (c["name"], c["status"], c["attempts"]) for c in document["checkpoints"]
    ]
    assert "run.requeued" == document["events"][-1]["name"]


def test_a_retried_run_finishes_without_running_its_completed_steps_again(
    cli_app: App,
) -> None:
    """Once the cause is fixed, the retried run completes; its first step ran only once."""
    app = failed_run(cli_app)
    (app.root / "fixed").write_text("")
    assert 0 == app.cli("--app", "app:engine", "retry", "d-1").returncode

    async def finish() -> tuple[str, object]:
        async with app.engine() as engine:
            await engine.run_until_idle()
            run = await engine.get_run("d-1")
            return run.status, run.output

    assert ("completed", "charged") == run_async(finish)
    assert ["x"] == app.lines("count.calls")


def test_retry_of_a_run_already_requeued_is_refused(cli_app: App) -> None:
    """A second ``retry`` of a run that is pending again: one line, exit 3, nothing changed."""
    app = failed_run(cli_app)
    assert 0 == app.cli("--app", "app:engine", "retry", "d-1").returncode
    before = app.shown("d-1")
    done = app.cli("--app", "app:engine", "retry", "d-1")
    assert_one_line_error(done, "refused", "d-1 is pending", code=3)
    assert before == app.shown("d-1")


def test_retry_of_a_workflow_declared_requeue_false_is_refused_saying_what_to_do(
    cli_app: App,
) -> None:
    """``requeue="..."`` on the workflow: one line naming it and the way out, exit 3, unchanged."""

    async def main() -> None:
        async with cli_app.engine() as engine:
            await engine.start("declined-once", {"message": "no"}, run_id="o-1")
            await engine.run_until_idle()

    run_async(main)
    before = cli_app.shown("o-1")
    assert "failed" == before["run"]["status"]
    done = cli_app.cli("--app", "app:engine", "retry", "o-1")
    assert_one_line_error(
        done, "refused", "'declined-once' is not requeued", "start a new run", code=3
    )
    assert before == cli_app.shown("o-1")
