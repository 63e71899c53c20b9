"""``start WORKFLOW [--input JSON] [--run-id ID] [--wait [--timeout D]]``: the command line's start,
its waits and exit codes (0 done, 1 the run waited for failed, 2 usage, 4 still running)."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest

from tests.durable.cli_support import App, assert_one_line_error, durable_command, run_async

pytestmark = pytest.mark.not_on_memory("the command line runs in processes of its own")


def _started(app: App, run_id: str) -> subprocess.Popen[str]:
    """``start --wait`` of `greet` as a process; returns once the run exists."""
    return subprocess.Popen(
        [*durable_command(), "--app", "app:engine", "start", "greet", "--input", '"ada"',
         "--run-id", run_id, "--wait"],
        cwd=app.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _work_until(app: App, run_id: str) -> None:
    """An engine of this process runs *run_id* (and anything else due) to its end."""

    async def work() -> None:
        async with app.engine() as engine:
            deadline = time.monotonic() + 60
            while True:
                run = await engine.store.get_run(run_id)
                if run is not None:
                    break
                assert time.monotonic() < deadline, "the run was never started"
                time.sleep(0.02)
            await engine.run_until_idle()

    run_async(work)


def test_start_prints_the_run_id_and_an_existing_id_changes_nothing(cli_app: App) -> None:
    done = cli_app.cli("--app", "app:engine", "start", "greet", "--input", '"ada"')
    assert (0, "") == (done.returncode, done.stderr)
    (run_id,) = done.stdout.splitlines()
    assert 32 == len(run_id)
    named = cli_app.cli("--app", "app:engine", "start", "greet", "--run-id", "g-1")
    assert ("g-1\n", 0) == (named.stdout, named.returncode)
    before = cli_app.shown("g-1")
    again = cli_app.cli("--app", "app:engine", "start", "greet", "--run-id", "g-1")
    assert ("g-1\n", 0) == (again.stdout, again.returncode)
    assert before == cli_app.shown("g-1")
    shown = cli_app.shown(run_id)
    assert ("greet", "ada", "pending") == (
        shown["run"]["workflow"], shown["run"]["input"], shown["run"]["status"]
    )  # fmt: skip
    assert None is cli_app.shown("g-1")["run"]["input"]


def test_start_wait_prints_the_finished_run_and_exits_0(cli_app: App) -> None:
    waiting = _started(cli_app, "g-wait")
    _work_until(cli_app, "g-wait")
    out, err = waiting.communicate(timeout=60)
    assert (0, "") == (waiting.returncode, err)
    document: dict[str, Any] = json.loads(out)
    assert ("completed", "hello ada") == (document["run"]["status"], document["run"]["output"])
    assert ["hello"] == [c["name"] for c in document["checkpoints"]]
    assert document == cli_app.shown("g-wait")


def test_start_wait_of_a_run_that_fails_exits_1_with_its_document(cli_app: App) -> None:
    message = json.dumps({"message": "card declined"})
    waiting = subprocess.Popen(
        [*durable_command(), "--app", "app:engine", "start", "declined", "--input", message,
         "--run-id", "d-1", "--wait"],
        cwd=cli_app.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    _work_until(cli_app, "d-1")
    out, err = waiting.communicate(timeout=60)
    assert (1, "") == (waiting.returncode, err)
    run = json.loads(out)["run"]
    assert ("failed", "declined") == (run["status"], run["error"]["code"])


def test_start_wait_past_its_timeout_exits_4_with_the_run_as_it_stands(cli_app: App) -> None:
    """No worker runs it: past --timeout the document is printed as it stands (pending)."""
    done = cli_app.cli(
        "--app", "app:engine", "start", "hold", "--input", "3", "--wait", "--timeout", "300ms"
    )
    assert (4, "") == (done.returncode, done.stderr)
    assert "pending" == json.loads(done.stdout)["run"]["status"]


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("start", "nope"), ("unknown workflow 'nope': this engine has",)),
        (("start", "greet", "--input", "{bad"), ("argument --input: expected JSON", "'{bad'")),
        (("start", "greet", "--input", "NaN"), ()),
        (("start", "greet", "--timeout", "1s"), ("--timeout needs --wait",)),
        (("start", "greet", "--wait", "--timeout", "soon"), ("argument --timeout",)),
        (("start", "gr\udcffeet"), ("argument WORKFLOW: b'gr\\xffeet' is not valid UTF-8",)),
        (("start", "greet", "--run-id", ""), ("run_id",)),
    ],
)
def test_start_refuses_bad_input_in_one_line_exit_2_and_starts_nothing(
    cli_app: App, args: tuple[str, ...], fragments: tuple[str, ...]
) -> None:
    done = cli_app.cli("--app", "app:engine", *args)
    if args[-1] == "NaN":
        # Python's JSON reads NaN, but no store keeps it: refused as an input it cannot store.
        assert_one_line_error(done, "input", code=2)
    else:
        assert_one_line_error(done, *fragments, code=2)
    assert "" == done.stdout


def test_start_of_a_run_id_taken_by_another_workflow_is_refused(cli_app: App) -> None:
    assert 0 == cli_app.cli("--app", "app:engine", "start", "greet", "--run-id", "x").returncode
    done = cli_app.cli("--app", "app:engine", "start", "pay", "--run-id", "x", "--input", "2")
    assert_one_line_error(done, "run 'x' exists and is a run of workflow 'greet'", code=2)


def test_a_run_id_with_an_escape_sequence_is_started_and_printed_escaped(cli_app: App) -> None:
    done = cli_app.cli("--app", "app:engine", "start", "greet", "--run-id", "a\x1b[31m")
    assert (0, "a\\x1b[31m\n") == (done.returncode, done.stdout)
    assert "a\x1b[31m" == cli_app.shown("a\x1b[31m")["run"]["run_id"]
