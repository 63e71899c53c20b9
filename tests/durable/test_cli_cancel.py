"""``cancel RUN [--compensate]``: the command line's cancel, its refusals and an unknown id."""

from __future__ import annotations

import pytest

from tests.durable.cli_support import App, assert_one_line_error, run_async

pytestmark = pytest.mark.not_on_memory("the command line runs in processes of its own")


def waiting(app: App, workflow: str, run_id: str) -> App:
    """*app*, with its run *run_id* of *workflow* suspended on the slow step (no worker ran it)."""

    async def main() -> None:
        async with app.engine(steps=False) as engine:
            await engine.start(workflow, 3, run_id=run_id)
            await engine.run_until_idle()

    run_async(main)
    return app


def test_cancel_cancels_a_waiting_run_and_withdraws_its_attempt(cli_app: App) -> None:
    """One line naming the status before and the withdrawn attempt; the slow step never runs."""
    app = waiting(cli_app, "hold", "h-1")
    done = app.cli("--app", "app:engine", "cancel", "h-1")
    assert (0, "") == (done.returncode, done.stderr)
    assert "run h-1 was suspended, is cancelled; 1 pending attempt(s) withdrawn\n" == done.stdout
    document = app.shown("h-1")
    assert ("cancelled", None) == (document["run"]["status"], document["run"]["error"])
    assert "run.cancelled" == document["events"][-1]["name"]

    async def work() -> None:
        async with app.engine() as engine:
            await engine.run_until_idle()

    run_async(work)
    assert [] == app.lines("slow.calls")


def test_cancel_of_a_finished_run_is_refused_naming_its_status(cli_app: App) -> None:
    """A cancelled (or any finished) run: one line, exit 3, nothing changed."""
    app = waiting(cli_app, "hold", "h-1")
    assert 0 == app.cli("--app", "app:engine", "cancel", "h-1").returncode
    before = app.shown("h-1")
    for args in (("cancel", "h-1"), ("cancel", "h-1", "--compensate")):
        done = app.cli("--app", "app:engine", *args)
        assert_one_line_error(done, "refused", "run h-1 is cancelled", code=3)
    assert before == app.shown("h-1")


def test_cancel_of_an_unknown_run_is_one_line_and_exit_2(cli_app: App) -> None:
    """An id no run has: exit 2, one line naming it, no traceback."""
    waiting(cli_app, "hold", "h-1")
    done = cli_app.cli("--app", "app:engine", "cancel", "nope")
    assert_one_line_error(done, "no run with id 'nope'", code=2)


def test_cancel_with_compensation_leaves_the_undo_to_a_worker_then_the_run_is_cancelled(
    cli_app: App,
) -> None:
    """--compensate: pending at once; a worker's turn runs the undo, then cancels the run."""
    app = waiting(cli_app, "saga", "s-1")
    done = app.cli("--app", "app:engine", "cancel", "s-1", "--compensate")
    assert (0, "") == (done.returncode, done.stderr)
    assert (
        "run s-1 was suspended, is pending: a worker of workflow 'saga' will undo its completed"
        " steps, then cancel it; 1 pending attempt(s) withdrawn\n"
    ) == done.stdout
    again = app.cli("--app", "app:engine", "cancel", "s-1", "--compensate")
    assert (0, "run s-1 is already being cancelled with compensation (pending)\n") == (
        again.returncode, again.stdout
    )  # fmt: skip

    async def work() -> str:
        async with app.engine() as engine:
            await engine.run_until_idle()
            return (await engine.get_run("s-1")).status

    assert "cancelled" == run_async(work)
    assert ["3"] == app.lines("undo.calls")
    assert [] == app.lines("slow.calls")
    retried = app.cli("--app", "app:engine", "retry", "s-1")
    assert_one_line_error(retried, "refused", "cancelled with compensation", code=3)


def test_a_plainly_cancelled_run_is_resumed_by_retry(cli_app: App) -> None:
    """``retry`` of a plain cancel: the withdrawn step gets a first attempt; the run completes."""
    app = waiting(cli_app, "pay", "p-1")
    assert 0 == app.cli("--app", "app:engine", "cancel", "p-1").returncode
    done = app.cli("--app", "app:engine", "retry", "p-1")
    assert 0 == done.returncode, done.stderr
    assert "run p-1 was cancelled, is pending again" in done.stdout

    async def work() -> tuple[str, object]:
        async with app.engine() as engine:
            await engine.run_until_idle()
            run = await engine.get_run("p-1")
            return run.status, run.output

    assert ("completed", 6) == run_async(work)


@pytest.mark.parametrize("command", ["cancel", "show", "retry", "redispatch"])
def test_an_id_of_bytes_invalid_in_utf_8_is_an_unknown_run(cli_app: App, command: str) -> None:
    """Byte 0xff on the command line (a lone surrogate once decoded): a usage error naming the
    bytes (exit 2, one line), not an encoding traceback from the store; nothing changed."""
    waiting(cli_app, "hold", "h-1")
    before = cli_app.shown("h-1")
    done = cli_app.cli("--app", "app:engine", command, "h\udcff")
    assert_one_line_error(done, "argument RUN: b'h\\xff' is not valid UTF-8", code=2)
    assert before == cli_app.shown("h-1")
