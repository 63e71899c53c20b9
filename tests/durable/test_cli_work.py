"""``work``: the worker loop as a process; SIGTERM and SIGINT drain it, a second signal stops it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from typing import Any

import pytest

from tests.durable.cli_support import App, read_until, run_async, statuses, work_process

pytestmark = pytest.mark.not_on_memory("the command line runs in processes of its own")


def start_runs(app: App, *starts: tuple[str, Any, str]) -> None:
    """Start runs (workflow, input, run id) without running them."""

    async def main() -> None:
        async with app.engine() as engine:
            for workflow, value, run_id in starts:
                await engine.start(workflow, value, run_id=run_id)

    run_async(main)


def wait_until_finished(app: App, run_ids: list[str], process: subprocess.Popen[str]) -> None:
    """Wait until every run is completed (or failed), while *process* still runs."""
    deadline = time.monotonic() + 60
    while set(statuses(app, run_ids)) - {"completed", "failed"}:
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, statuses(app, run_ids)
        time.sleep(0.05)


def stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    """SIGTERM *process*; return its exit code and the rest of its stderr."""
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    return process.returncode, err


def checkpoint(app: App, run_id: str, seq: int) -> dict[str, Any]:
    """The JSON of the run's checkpoint *seq*, as ``show --json`` prints it."""
    found: list[dict[str, Any]] = [c for c in app.shown(run_id)["checkpoints"] if c["seq"] == seq]
    return found[0]


def test_work_runs_local_and_dispatched_steps_to_the_end(cli_app: App) -> None:
    """A ``work`` process (app imported from its working folder) finishes every run."""
    app = cli_app
    start_runs(app, ("greet", "ada", "g-1"), ("pay", 21, "p-1"), ("pay", 4, "p-2"))
    worker = app.worker()
    wait_until_finished(app, ["g-1", "p-1", "p-2"], worker)
    code, err = stop(worker)
    assert 0 == code, err
    assert ["hello ada", 42, 8] == [app.shown(r)["run"]["output"] for r in ("g-1", "p-1", "p-2")]
    assert "Traceback" not in err


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_drains_the_worker_while_a_slow_step_runs(
    cli_app: App, signum: signal.Signals
) -> None:
    """SIGTERM or SIGINT mid-step: the step finishes, its result is recorded, exit 0."""
    app = cli_app
    start_runs(app, ("hold", 5, "h-1"))
    worker = app.worker()
    app.wait_for("started", worker)
    worker.send_signal(signum)
    assert worker.stderr is not None
    read_until(worker.stderr, "draining")  # the signal is handled while the step still runs
    assert worker.poll() is None
    (app.root / "release").write_text("")
    _, err = worker.communicate(timeout=60)
    assert 0 == worker.returncode, err
    assert "drained" in err
    recorded = checkpoint(app, "h-1", 1)
    assert ("completed", 10) == (recorded["status"], recorded["output"])
    # The result woke the run; nothing holds it: any worker may take it from here.
    assert ["pending"] == statuses(app, ["h-1"])
    finisher = app.worker()
    wait_until_finished(app, ["h-1"], finisher)
    assert 0 == stop(finisher)[0]
    assert 10 == app.shown("h-1")["run"]["output"]
    assert ["5"] == app.lines("slow.calls")


def test_a_second_signal_stops_at_once_and_the_step_runs_again_elsewhere(
    cli_app: App,
) -> None:
    """A second SIGTERM abandons the attempt (exit 143), releases its claim; another finishes."""
    app = cli_app
    start_runs(app, ("hold", 3, "h-2"))
    worker = app.worker()
    app.wait_for("started", worker)
    assert worker.stderr is not None
    worker.send_signal(signal.SIGTERM)
    read_until(worker.stderr, "draining")
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=60)
    assert 128 + signal.SIGTERM == worker.returncode, err
    assert "stopped without draining" in err
    assert "completed" != checkpoint(app, "h-2", 1)["status"]
    (app.root / "release").write_text("")

    async def finish() -> tuple[str, object]:
        # The claim was released, not left to expire: a worker takes the task at once.
        async with app.engine() as engine:
            await engine.run_until_idle()
            run = await engine.get_run("h-2")
            return run.status, run.output

    assert ("completed", 6) == run_async(finish)
    assert ["3", "3"] == app.lines("slow.calls")


def test_two_work_processes_share_one_store_and_run_each_step_once(cli_app: App) -> None:
    """Two ``work`` processes on one SQLite file finish every run; no attempt runs twice."""
    app = cli_app
    run_ids = [f"p-{i}" for i in range(8)]
    start_runs(app, *(("pay", i, run_id) for i, run_id in enumerate(run_ids)))
    workers = [app.worker() for _ in range(2)]
    wait_until_finished(app, run_ids, workers[0])
    assert [0, 0] == [stop(worker)[0] for worker in workers]
    shown = [app.shown(run_id) for run_id in run_ids]
    assert [2 * i for i in range(8)] == [s["run"]["output"] for s in shown]
    assert [[1]] * 8 == [[c["attempts"] for c in s["checkpoints"]] for s in shown]
    started = [
        [e for e in s["events"] if e["name"] == "step.started" and e["data"]["kind"] == "remote"]
        for s in shown
    ]
    assert [1] * 8 == [len(events) for events in started]


def test_a_signal_while_the_app_imports_stops_the_worker_before_it_claims(cli_app: App) -> None:
    """SIGTERM during a slow import of the app: exit 0, nothing claimed, the run stays pending."""
    app = cli_app
    (app.root / "slow_app.py").write_text(
        "import time\nfrom pathlib import Path\n"
        "Path('importing').write_text('')\n"
        "while not Path('go').exists():\n    time.sleep(0.005)\n"
        "from app import engine\n"
    )
    start_runs(app, ("greet", "ada", "g-1"))
    worker = app.popen("--app", "slow_app:engine", "work", "--poll", "50ms")
    app.wait_for("importing", worker)
    worker.send_signal(signal.SIGTERM)
    (app.root / "go").write_text("")
    _, err = worker.communicate(timeout=60)
    assert 0 == worker.returncode, err
    assert "stopped before starting work" in err
    assert ["pending"] == statuses(app, ["g-1"])


SIGNAL_AS_WORK_STARTS = """
import signal, sys
import effects.durable._cli as cli

said = cli._say


def say(message):
    said(message)
    if "drains it" in message:  # the worker is up, its loop not yet started: signal now
        signal.raise_signal(signal.SIGTERM)


cli._say = say
sys.exit(cli.main(["--app", "app:engine", "work", "--poll", "50ms"]))
"""


def test_a_signal_just_before_the_loop_starts_still_drains_it(cli_app: App) -> None:
    """SIGTERM between the worker's start line and its loop's first step: it stops, exit 0."""
    app = cli_app
    start_runs(app, ("greet", "ada", "g-1"))
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_AS_WORK_STARTS],
        cwd=app.root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (0, True) == (done.returncode, "stopped" in done.stderr.splitlines()[-1]), done.stderr


STUCK_APP = """
import time
from pathlib import Path
from effects.durable import Engine, step, workflow

HERE = Path(__file__).resolve().parent


@step("stuck")
def stuck(n):
    (HERE / "started").write_text("1")
    while True:  # a def that never returns, and ignores everything
        time.sleep(0.05)


@workflow("stuck-run")
async def stuck_run(ctx, n):
    return await ctx.step(stuck, n)


engine = Engine(URL, workflows=[stuck_run], steps=[stuck])
"""


def test_a_second_sigterm_ends_work_at_once_even_with_a_def_handler_stuck(
    tmp_path: Any, durable_store_url: str
) -> None:
    """A def handler stuck in its thread: the second SIGTERM still exits 143, and promptly."""
    (tmp_path / "stuck_app.py").write_text(f"URL = {durable_store_url!r}\n{STUCK_APP}")
    starter = subprocess.run(
        [sys.executable, "-c", "import asyncio, stuck_app as a\n"
         "async def main():\n"
         "    async with a.engine:\n"
         "        await a.engine.start(a.stuck_run, 1, run_id='s-1')\n"
         "asyncio.run(main())"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert 0 == starter.returncode, starter.stderr
    worker = work_process(tmp_path, "stuck_app:engine")
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists():
            assert worker.poll() is None, worker.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert worker.stderr is not None
        worker.send_signal(signal.SIGTERM)
        read_until(worker.stderr, "draining")
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert 128 + signal.SIGTERM == worker.returncode, err
    assert "stopped without draining" in err
