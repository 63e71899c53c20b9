"""Ctrl-C with process calls stuck for good: the run stops at once, the stuck items interrupted."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

import migrate
from tests.migrate.cli_support import migrate_command

CONFIG = """
import threading
from pathlib import Path

import migrate

HERE = Path(__file__).resolve().parent
STUCK = {"3", "4"}


def process(item, scope):
    if item.identity in STUCK and not (HERE / "unstick").exists():
        (HERE / f"blocked-{item.identity}").write_text("")
        threading.Event().wait()  # stuck for good: only Ctrl-C ends this run
    (HERE / f"done-{item.identity}").write_text("")


config = migrate.Config(
    [migrate.Migration("p", migrate.MemorySource([{"id": i} for i in range(1, 9)]), process)],
    store=STORE,
)
"""


def _cli(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*migrate_command(), "--config", str(root / "migrate_config.py"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.timeout(90)
@pytest.mark.parametrize("concurrency", ["1", "4"])
def test_ctrl_c_stops_a_run_with_stuck_calls_and_marks_them_interrupted(
    tmp_path: Path, concurrency: str, store_url: str
) -> None:
    """SIGINT ends the run with 130; stuck items are interrupted (not failed), the rest kept."""
    (tmp_path / "migrate_config.py").write_text(CONFIG.replace("STORE", repr(store_url)))
    running = subprocess.Popen(
        [
            *migrate_command(),
            "--config",
            str(tmp_path / "migrate_config.py"),
            "run",
            "-c",
            concurrency,
            "--progress",
            "none",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stuck = ["3"] if concurrency == "1" else ["3", "4"]
    finished = ["1", "2"] if concurrency == "1" else ["1", "2", "5", "6", "7", "8"]
    try:
        for marker in [f"blocked-{i}" for i in stuck] + [f"done-{i}" for i in finished]:
            while not (tmp_path / marker).exists():
                assert running.poll() is None, running.communicate()
                time.sleep(0.01)
        running.send_signal(signal.SIGINT)
        _out, err = running.communicate(timeout=30)  # a hang here is the failure
    finally:
        running.kill()
    assert 130 == running.returncode, err
    assert "interrupted" in err
    with migrate.open_store(store_url, read_only=True) as store:
        states = {state.identity: state.status for state in store.items("p")}
    # The stuck items are interrupted. A finished one may be too: its marker is written just
    # before its call returns, and the signal can land in between (so only the stuck ones are
    # certain); none failed, and none is lost.
    interrupted = sorted(i for i, status in states.items() if status == "interrupted")
    assert set(stuck) <= set(interrupted)
    assert {"migrated", "interrupted"} >= set(states.values())
    assert set(finished) <= set(states)
    (record,) = json.loads(_cli(tmp_path, "runs", "--json").stdout)["runs"]
    assert ("failed", len(interrupted)) == (
        record["status"],
        record["definitions"]["p"]["interrupted"],
    )
    (tmp_path / "unstick").write_text("")
    after = _cli(tmp_path, "run", "--json")
    assert 0 == after.returncode, after.stderr
    status = json.loads(_cli(tmp_path, "status", "--json").stdout)["definitions"]["p"]
    assert (8, 0) == (status["migrated"], status["interrupted"])
