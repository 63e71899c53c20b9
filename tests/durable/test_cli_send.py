"""``send RUN TOPIC JSON [--message-id ID]``: a message from the command line, and its refusals."""

from __future__ import annotations

from typing import Final

import pytest

from tests.durable.cli_support import App, assert_one_line_error, run_async
from tests.durable.support import rows

pytestmark = pytest.mark.not_on_memory("the command line runs in processes of its own")


def started(app: App, run_id: str, count: int) -> App:
    """*app* with a run of ``inbox`` waiting for *count* messages on 'orders'."""

    async def main() -> None:
        async with app.engine() as engine:
            await engine.start("inbox", count, run_id=run_id)
            await engine.run_until_idle()

    run_async(main)
    return app


def finish(app: App, run_id: str) -> tuple[str, object]:
    """Work the app's runs; the status and output of *run_id*."""

    async def work() -> tuple[str, object]:
        async with app.engine() as engine:
            await engine.run_until_idle()
            run = await engine.get_run(run_id)
            return run.status, run.output

    return run_async(work)


def test_send_delivers_a_message_to_the_runs_recv_and_a_repeated_id_once(cli_app: App) -> None:
    """Exit 0 and one line; the run receives the messages in order, the repeated id once."""
    app = started(cli_app, "in-1", 2)
    first = app.cli(
        "--app", "app:engine", "send", "in-1", "orders", '{"sku": 7}', "--message-id", "m1"
    )
    again = app.cli("--app", "app:engine", "send", "in-1", "orders", '"dup"', "--message-id", "m1")
    second = app.cli("--app", "app:engine", "send", "in-1", "orders", "[1, 2]")
    assert (0, "", "run in-1: message sent on topic orders (message id m1)\n") == (
        first.returncode, first.stderr, first.stdout
    )  # fmt: skip
    assert (0, 0) == (again.returncode, second.returncode)
    assert "run in-1: message sent on topic orders\n" == second.stdout
    assert ("completed", [{"sku": 7}, [1, 2]]) == finish(app, "in-1")


#: Bad arguments, and what the one line of each refusal says.
REFUSED: Final = {
    ("nope", "orders", "1"): ("no run with id 'nope'",),
    ("in-1", "orders", "{bad"): ("argument JSON: expected JSON", "'{bad'"),
    ("in-1", "orders", "NaN"): ("message", "cannot be stored as JSON"),
    ("in-1", "orders", "[" * 5000 + "]" * 5000): ("argument JSON: expected JSON nested",),
    ("in-1", "orders", "[" * 150 + "]" * 150): (" more than 100 deep",),
    ("in-1", "", "1"): ("TOPIC must be a non-empty name",),
    ("in-1", "orders", "1", "--message-id", ""): ("--message-id must be a non-empty name",),
    ("in\udcff", "orders", "1"): ("argument RUN: b'in\\xff' is not valid UTF-8",),
    ("in-1", "ord\udcffers", "1"): ("argument TOPIC: b'ord\\xffers' is not valid UTF-8",),
    ("in-1", "orders", '"\udcff"'): ("argument JSON: b'\"\\xff\"' is not valid UTF-8",),
    ("in-1", "orders", "1", "--message-id", "m\udcff"): ("argument --message-id: b'm\\xff'",),
    ("in-1", "orders"): ("the following arguments are required: JSON",),
}


def test_send_refuses_bad_arguments_in_one_line_exit_2_and_writes_nothing(cli_app: App) -> None:
    """Unknown run, bad JSON, NaN, nesting, empty or non-UTF-8 arguments: exit 2, nothing sent."""
    app = started(cli_app, "in-1", 1)
    before = app.shown("in-1")
    done = app.cli_many([("--app", "app:engine", "send", *args) for args in REFUSED])
    for args, fragments in REFUSED.items():
        refused = done[("--app", "app:engine", "send", *args)]
        assert_one_line_error(refused, *fragments, code=2)
        assert "" == refused.stdout
    assert before == app.shown("in-1")
    assert [] == rows(app.url, "SELECT * FROM messages")


def test_send_to_a_finished_run_is_refused_with_exit_3_naming_its_status(cli_app: App) -> None:
    """A completed run: one line naming its status, exit 3, nothing stored."""
    app = started(cli_app, "in-1", 1)
    assert 0 == app.cli("--app", "app:engine", "send", "in-1", "orders", "1").returncode
    assert ("completed", [1]) == finish(app, "in-1")
    done = app.cli("--app", "app:engine", "send", "in-1", "orders", "2", "--message-id", "x")
    assert_one_line_error(done, "refused", "run in-1 is completed", code=3)


def test_send_to_a_store_that_does_not_exist_is_exit_2_and_creates_none(cli_app: App) -> None:
    """No store at the app's URL: exit 2 (nothing can be sent), and no store is made."""
    done = cli_app.cli("--app", "app:engine", "send", "in-1", "orders", "1")
    assert_one_line_error(done, code=2)
    if cli_app.store_url is None:
        assert not cli_app.db.exists()


@pytest.mark.sqlite_only("a store file that is no database")
def test_send_to_a_store_that_cannot_be_used_is_exit_5(cli_app: App) -> None:
    """A store file that is not a database: one line, exit 5."""
    cli_app.db.write_bytes(b"not a database, just bytes" * 100)
    done = cli_app.cli("--app", "app:engine", "send", "in-1", "orders", "1")
    assert_one_line_error(done, "store error", code=5)
