"""``runs`` and ``show``: tables with ISO-8601 times, JSON documents, filters, escaped text."""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from effects.testing import VirtualClock
from tests.durable.cli_support import (
    App,
    durable_command,
    no_raw_controls,
    rows,
    run_async,
)

pytestmark = pytest.mark.not_on_memory("the command line runs in processes of its own")

#: 2026-01-01T00:00:00Z in epoch seconds.
T0 = 1_767_225_600.0


def seed(app: App) -> None:
    """Four runs a second apart from T0: two greets, a declined payment, a waiting payment."""

    async def main() -> None:
        clock = VirtualClock(start=T0)
        # No steps: the payment's task stays queued and the run suspended.
        async with app.engine(clock=clock, steps=False) as engine:
            await engine.start("greet", "ada", run_id="greet-1")
            clock.advance(1)
            await engine.start("greet", "bob", run_id="greet-2")
            clock.advance(1)
            await engine.start("declined", {"message": "card declined"}, run_id="declined-1")
            clock.advance(1)
            await engine.start("pay", 21, run_id="pay-1")
            await engine.run_until_idle()

    run_async(main)


@pytest.fixture
def app(cli_app: App) -> App:
    """An app whose store holds the four runs of ``seed``."""
    made = cli_app
    seed(made)
    return made


def test_runs_prints_a_table_newest_first_with_iso_times(app: App) -> None:
    """``runs`` prints id, workflow, status, created, updated, error; times ISO-8601 UTC."""
    done = app.cli("--app", "app:engine", "runs")
    assert 0 == done.returncode, done.stderr
    table = rows(done.stdout)
    assert ["run", "workflow", "status", "created", "updated", "error"] == table[0]
    assert [
        ["pay-1", "pay", "suspended", "2026-01-01T00:00:03.000Z"],
        ["declined-1", "declined", "failed", "2026-01-01T00:00:02.000Z"],
        ["greet-2", "greet", "completed", "2026-01-01T00:00:01.000Z"],
        ["greet-1", "greet", "completed", "2026-01-01T00:00:00.000Z"],
    ] == [row[:4] for row in table[1:]]
    assert "[declined] card declined" == table[2][5]


def test_runs_json_is_an_array_of_run_objects(app: App) -> None:
    """``runs --json``: run_id, workflow, status, created_at, updated_at (epoch ms), error."""
    document = app.json("runs")
    assert ["pay-1", "declined-1", "greet-2", "greet-1"] == [r["run_id"] for r in document]
    declined = document[1]
    assert {
        "run_id": "declined-1",
        "workflow": "declined",
        "status": "failed",
        "created_at": 1_767_225_602_000,
        "updated_at": 1_767_225_603_000,
    } == {
        key: declined[key] for key in ("run_id", "workflow", "status", "created_at", "updated_at")
    }
    assert ("declined", "card declined") == (
        declined["error"]["code"],
        declined["error"]["message"],
    )
    assert None is document[3]["error"]
    assert "hello ada" == document[3]["output"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--status", "completed"), ["greet-2", "greet-1"]),
        (("--status", "failed"), ["declined-1"]),
        (("--workflow", "greet"), ["greet-2", "greet-1"]),
        (("--workflow", "greet", "--limit", "1"), ["greet-2"]),
        (("--limit", "2"), ["pay-1", "declined-1"]),
        (("--status", "dead"), []),
        (("--workflow", "nothing-by-this-name"), []),
    ],
)
def test_runs_filters_by_status_workflow_and_limit(
    app: App, args: tuple[str, ...], expected: list[str]
) -> None:
    """``--status``, ``--workflow`` and ``--limit`` narrow the list, together too."""
    assert expected == [r["run_id"] for r in app.json("runs", *args)]


def test_runs_after_pages_on_from_the_run_given(app: App) -> None:
    """``--after RUN`` lists the runs after RUN, newest first; an unknown RUN is exit 2."""
    assert ["declined-1", "greet-2"] == [
        r["run_id"] for r in app.json("runs", "--after", "pay-1", "--limit", "2")
    ]
    assert ["greet-1"] == [r["run_id"] for r in app.json("runs", "--after", "greet-2")]
    assert [] == app.json("runs", "--after", "greet-1")
    done = app.cli("--app", "app:engine", "runs", "--after", "nope")
    assert 2 == done.returncode
    assert "nope" in done.stderr


def test_runs_prints_no_runs_for_an_empty_result(app: App) -> None:
    """A filter that matches nothing prints ``no runs``, exit 0."""
    done = app.cli("--app", "app:engine", "runs", "--status", "cancelled")
    assert (0, "no runs\n") == (done.returncode, done.stdout)


def test_runs_stale_lists_suspended_runs_with_an_old_pending_dispatch(cli_app: App) -> None:
    """``--stale D`` keeps suspended runs whose pending dispatch is older than D, any unit."""
    app = cli_app
    now = time.time()

    async def main() -> None:
        # One dispatch two days ago, one a day in the future: never stale, however slow we are.
        for run_id, at in (("old", now - 2 * 86_400), ("new", now + 86_400)):
            async with app.engine(clock=VirtualClock(start=at), steps=False) as engine:
                await engine.start("pay", 1, run_id=run_id)
                await engine.start("greet", run_id, run_id=f"{run_id}-done")
                await engine.run_until_idle()

    run_async(main)
    for duration in ("90", "10m", "36 hours"):
        found = [r["run_id"] for r in app.json("runs", "--stale", duration)]
        assert ["old"] == found, duration
    assert [] == [r["run_id"] for r in app.json("runs", "--stale", "3d")]
    assert [] == [r["run_id"] for r in app.json("runs", "--stale", "1e306")]
    assert {"old", "new", "old-done", "new-done"} == {r["run_id"] for r in app.json("runs")}


def test_show_prints_the_run_its_checkpoints_and_its_event_trail(app: App) -> None:
    """``show RUN`` prints the run's fields, a checkpoint table and the event trail."""
    done = app.cli("--app", "app:engine", "show", "declined-1")
    assert 0 == done.returncode, done.stderr
    head, checkpoints, events = done.stdout.split("\n\n")
    fields = dict(row for row in rows(head) if len(row) == 2)
    assert {
        "run": "declined-1",
        "workflow": "declined (version 1)",
        "status": "failed",
        "created": "2026-01-01T00:00:02.000Z",
        "input": '{"message": "card declined"}',
        "output": "-",
        "error": "[declined] card declined",
        "error type": "effects.errors.FatalError",
    } == {key: fields[key] for key in ("run", "workflow", "status", "created", "input")} | {
        key: fields[key] for key in ("output", "error", "error type")
    }
    table = rows(checkpoints)
    assert ["checkpoints"] == table[0]
    assert [
        ["1", "count", "local", "completed", "1"],
        ["2", "charge", "local", "failed (final)", "1"],
    ] == [row[:5] for row in table[2:]]
    trail = rows(events)
    assert ["events"] == trail[0]
    assert ["run.started", "step.started", "step.completed", "step.started", "step.failed"] == [
        row[3] for row in trail[2:7]
    ]
    assert "run.failed" == trail[-1][3]


def test_show_json_holds_the_run_checkpoints_and_events_as_stored(app: App) -> None:
    """``show --json`` prints {"run", "checkpoints", "events"}, the same as the engine reads."""
    document = app.json("show", "pay-1")
    assert {"run", "checkpoints", "events"} == set(document)
    assert ("pay-1", "suspended", 21) == (
        document["run"]["run_id"],
        document["run"]["status"],
        document["run"]["input"],
    )
    (checkpoint,) = document["checkpoints"]
    assert {
        "seq": 1,
        "name": "double",
        "kind": "remote",
        "step_id": "pay-1:1",
        "status": "pending",
        "attempts": 1,
        "input": 21,
        "dispatched_at": 1_767_225_603_000,
    } == {key: checkpoint[key] for key in ("seq", "name", "kind", "step_id", "status")} | {
        key: checkpoint[key] for key in ("attempts", "input", "dispatched_at")
    }
    assert {"retries": 1, "backoff": "fixed", "backoff_ms": 0, "backoff_max_ms": None,
            "jitter": False} == checkpoint["policy"]  # fmt: skip
    assert [["run.started", None], ["step.dispatched", 1]] == [
        [e["name"], e["seq"]] for e in document["events"]
    ]
    assert {"name", "level", "at", "seq", "data"} == set(document["events"][0])


def test_show_json_of_a_completed_run_has_its_output(app: App) -> None:
    """A completed run's JSON carries its output and its checkpoint's attempts."""
    document = app.json("show", "greet-2")
    assert ("completed", "hello bob") == (document["run"]["status"], document["run"]["output"])
    assert [("hello", "completed", 1)] == [
        (c["name"], c["status"], c["attempts"]) for c in document["checkpoints"]
    ]


def test_show_prints_the_last_heartbeat_progress_of_a_step(cli_app: App) -> None:
    """A step that reported progress gets a progress column in ``show``, and it is in the JSON."""

    async def main() -> None:
        async with cli_app.engine() as engine:
            await engine.start("beating", 3, run_id="b-1")
            await engine.run_until_idle()

    run_async(main)
    done = cli_app.cli("--app", "app:engine", "show", "b-1")
    assert 0 == done.returncode, done.stderr
    table = rows(done.stdout.split("\n\n")[1])
    assert "progress" == table[1][-1]
    # (PostgreSQL's jsonb keeps no key order: compare the object, not its text.)
    assert {"done": 3, "of": 3} == json.loads(table[2][-1])
    (checkpoint,) = cli_app.json("show", "b-1")["checkpoints"]
    assert {"done": 3, "of": 3} == checkpoint["progress"]


HOSTILE = "evil\x1b[2J\x1b]0;owned\x07\x9b31m\u202edecoy\u2028\r\nline\x7f"


@pytest.fixture
def hostile(cli_app: App) -> App:
    """An app with a failed run whose id and error message are full of terminal controls."""

    async def main() -> None:
        async with cli_app.engine() as engine:
            await engine.start("declined", {"message": HOSTILE}, run_id=f"run-{HOSTILE}")
            await engine.run_until_idle()

    run_async(main)
    return cli_app


def test_stored_control_characters_are_escaped_in_every_table(hostile: App) -> None:
    """Escape sequences in a run id or an error message reach the terminal escaped."""
    for args in (("runs",), ("show", f"run-{HOSTILE}")):
        done = hostile.cli("--app", "app:engine", *args)
        assert 0 == done.returncode, done.stderr
        assert no_raw_controls(done.stdout), repr(done.stdout)
        assert "evil\\x1b[2J\\x1b]0;owned\\x07\\x9b31m\\u202edecoy\\u2028\\r\\nline\\x7f" in (
            done.stdout
        )


def test_json_output_escapes_control_characters_and_keeps_the_data(hostile: App) -> None:
    """``--json`` has no raw control character either, and decodes to the stored text."""
    done = hostile.cli("--app", "app:engine", "show", f"run-{HOSTILE}", "--json")
    assert 0 == done.returncode, done.stderr
    assert done.stdout.isascii()
    assert no_raw_controls(done.stdout)
    document = json.loads(done.stdout)
    assert (f"run-{HOSTILE}", HOSTILE) == (
        document["run"]["run_id"],
        document["run"]["error"]["message"],
    )


def test_the_app_may_be_named_after_the_command_or_by_a_factory(app: App) -> None:
    """``runs --app app:engine`` and ``--app app:make_engine`` (a function) both work."""
    for args in (
        ("runs", "--app", "app:engine", "--json"),
        ("--app", "app:make_engine", "runs", "--json"),
    ):
        done = app.cli(*args)
        assert 0 == done.returncode, done.stderr
        assert 4 == len(json.loads(done.stdout))


def test_a_reader_that_goes_away_ends_the_output_quietly(app: App) -> None:
    """``runs | head`` with the reader gone: exit 0, no traceback."""
    process = subprocess.Popen(
        [*durable_command(), "--app", "app:engine", "runs"],
        cwd=app.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert process.stdout is not None
        process.stdout.close()  # before the command writes anything
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
        process.wait()
    assert (0, b"") == (process.returncode, err)
