"""benchmarks/durable_steps.py: it keeps running, its ratios match its rates, it cleans up."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "durable_steps.py"
TINY = ("--seconds", "0", "--batch", "2", "--poll-ms", "5", "--workers", "1")
NUMBER = r"[\d,]+|n/a"


def _bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BENCHMARK), *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env=env,
    )


def _number(text: str) -> float | None:
    return None if text == "n/a" else float(text.replace(",", ""))


def _local_rows(out: str) -> dict[tuple[str, str], tuple[float | None, float | None]]:
    """(label, SQLite setting) -> (steps/s, ratio to the floor) of the local-steps table."""
    rows: dict[tuple[str, str], tuple[float | None, float | None]] = {}
    for match in re.finditer(
        rf"^  (?P<label>(?:ours|DBOS|floor)[,:] .+?)\s+(?P<sqlite>[A-Z]+\+[A-Z]+)\s+"
        rf"(?P<rate>{NUMBER})(?:\s+(?P<ratio>[\d.]+|n/a))?\s*$",
        out.split("Dispatched round trips", maxsplit=1)[0],
        re.MULTILINE,
    ):
        ratio = None if match["ratio"] is None else _number(match["ratio"])
        rows[match["label"], match["sqlite"]] = (_number(match["rate"]), ratio)
    return rows


def _close(ratio: float, ours: float, theirs: float) -> bool:
    """Whether a printed ratio (2 decimals) is ours / theirs of the printed (rounded) rates."""
    # Each rate is printed rounded to a whole number: on a slow machine a rate of a few per
    # second moves the quotient far more than the ratio's own rounding does.
    low = (ours - 0.5) / (theirs + 0.5)
    high = (ours + 0.5) / max(theirs - 0.5, 1e-9)
    return low - 0.01 - 0.02 * ratio <= ratio <= high + 0.01 + 0.02 * ratio


@pytest.mark.skipif(importlib.util.find_spec("dbos") is None, reason="needs the bench extra")
def test_benchmark_prints_ours_dbos_and_the_floor_with_ratios_that_match_the_rates() -> None:
    """A tiny run measures every kind of case, and each printed ratio is the rates' quotient."""
    # DBOS's parent + child case is left out to keep the suite fast: it shares its set-up with
    # the queued case, and each DBOS process costs seconds to launch and destroy.
    only = "floor,ours-local,ours-dispatch:full,ours-retry:full,dbos-local:async,dbos-queued"
    done = _bench(*TINY, "--only", only)
    assert 0 == done.returncode, done.stderr
    out = done.stdout
    local = _local_rows(out)
    floors = {
        "WAL+NORMAL": local["floor: INSERT + COMMIT per step", "WAL+NORMAL"][0],
        "WAL+FULL": local["floor: INSERT + COMMIT per step", "WAL+FULL"][0],
        "DELETE+FULL": local["floor: INSERT + COMMIT per step", "DELETE+FULL"][0],
    }
    measured = [
        ("ours, async def steps", "WAL+NORMAL"),
        ("ours, async def steps", "WAL+FULL"),
        ("ours, def steps (in a thread)", "WAL+NORMAL"),
        ("ours, def steps (in a thread)", "WAL+FULL"),
        ("DBOS, async def steps", "DELETE+FULL"),
    ]
    for label, setting in measured:
        rate, ratio = local[label, setting]
        floor = floors[setting]
        assert None not in (rate, ratio, floor), (label, setting)
        assert _close(ratio or 0, rate or 0, floor or 0), (label, setting, rate, ratio, floor)
    assert (None, None) == local["DBOS, def workflow and steps", "DELETE+FULL"]
    ours, theirs = local["ours, async def steps", "WAL+FULL"][0], local[measured[4]][0]
    match = re.search(r"^  ours / DBOS, async def steps, both FULL = ([\d.]+) \(", out, re.M)
    assert match is not None
    assert _close(float(match[1]), ours or 0, theirs or 0)
    assert re.search(r"^  ours / floor, async def steps, WAL\+NORMAL = [\d.]+ \(", out, re.M)

    dispatch = {
        (match["label"], match["sqlite"]): _number(match["rate"])
        for match in re.finditer(
            rf"^  (?P<label>(?:ours|DBOS): .+?)\s+(?P<sqlite>[A-Z]+\+[A-Z]+)\s+(?P<rate>{NUMBER})$",
            out,
            re.MULTILINE,
        )
    }
    ours_full = dispatch["ours: workflow dispatching a step", "WAL+FULL"]
    queued = dispatch["DBOS: queued workflow (one step)", "DELETE+FULL"]
    assert None is dispatch["ours: workflow dispatching a step", "WAL+NORMAL"]
    assert None is dispatch["DBOS: workflow + queued child workflow", "DELETE+FULL"]
    match = re.search(r"^  1 worker: ours / DBOS queued workflow, both FULL = ([\d.]+)", out, re.M)
    assert match is not None
    assert _close(float(match[1]), ours_full or 0, queued or 0)

    retry = re.search(
        r"^  ours: dispatched step\s+WAL\+FULL\s+([\d,]+)\s+([\d,]+)\s+(-?[\d,]+)\s+(-?[\d.]+)$",
        out,
        re.MULTILINE,
    )
    assert retry is not None
    plain, retried, cost = (float(retry[i].replace(",", "")) for i in (1, 2, 3))
    assert abs(retried - plain - cost) <= 1
    assert "DBOS: n/a (no durable retry" in out


def test_benchmark_without_dbos_says_so_and_still_measures_ours(tmp_path: Path) -> None:
    """With DBOS not importable the run prints why, skips its columns and measures ours."""
    hidden = tmp_path / "dbos"
    hidden.mkdir()
    (hidden / "__init__.py").write_text('raise ImportError("dbos is hidden by this test")\n')
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    done = _bench(*TINY, "--only", "floor:wal-full,ours-local:async:full", env=env)
    assert 0 == done.returncode, done.stderr
    out = done.stdout
    assert (
        "  DBOS Transact is not installed (pip install 'effect-schedules[bench]'):"
        " its columns are skipped"
    ) in out
    local = _local_rows(out)
    assert (None, None) == local["DBOS, async def steps", "DELETE+FULL"]
    rate, ratio = local["ours, async def steps", "WAL+FULL"]
    floor = local["floor: INSERT + COMMIT per step", "WAL+FULL"][0]
    assert None not in (rate, ratio, floor)
    assert _close(ratio or 0, rate or 0, floor or 0)
    assert "  ours / DBOS, async def steps, both FULL = n/a" in out
    assert "DBOS: queued workflow (one step)" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--only", "nothing"), "--only 'nothing' names no case; cases: floor:wal-normal,"),
        (("--workers", "0"), "--workers takes worker counts >= 1 separated by commas"),
        (("--seconds", "soon"), "expected a number >= 0, got 'soon'"),
    ],
)
def test_benchmark_refuses_bad_options_by_name(args: tuple[str, ...], message: str) -> None:
    """A bad option is one message naming it and exit 2, before anything is measured."""
    done = _bench("--no-dbos", *args)
    assert 2 == done.returncode
    assert message in done.stderr
    assert "" == done.stdout or "Local steps" not in done.stdout


def _wait_for_workers(folder: Path, count: int) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        logs = list(folder.glob("durable-bench-*/child-*.log"))
        if len(logs) >= count:
            time.sleep(1.0)  # the last one opens its engine and reports ready
            return
        time.sleep(0.05)
    pytest.fail(f"the benchmark never started {count} workers in {folder}")


def _wait_group_gone(pgid: int) -> bool:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("how", ["ctrl-c", "kill-9"])
def test_benchmark_interrupted_leaves_no_process_and_no_file(tmp_path: Path, how: str) -> None:
    """Ctrl-C (SIGINT to the group) or kill -9 of the script ends every child, files removed."""
    args = ("--no-dbos", "--only", "ours-dispatch:normal", "--workers", "2", "--seconds", "60")
    proc = subprocess.Popen(
        [sys.executable, str(BENCHMARK), *args, "--dir", str(tmp_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for_workers(tmp_path, 2)
        if how == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.kill()
        proc.communicate(timeout=30)
        assert _wait_group_gone(proc.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert [] == list(tmp_path.iterdir())


@pytest.mark.parametrize("path", ["local", "retry"])
def test_profile_counts_statements_and_splits_the_time_into_categories(path: str) -> None:
    """durable_profile.py counts each path's statements and its shares add up to the whole."""
    script = BENCHMARK.with_name("durable_profile.py")
    done = subprocess.run(
        [sys.executable, str(script), "--path", path, "--runs", "3", "--top", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    counting = re.search(
        r"^  counting: ([\d.]+) statements, ([\d.]+) write transactions \(([\d.]+) of them empty\),"
        r" ([\d.]+) WAL pages;",
        done.stdout,
        re.MULTILINE,
    )
    assert counting is not None, done.stdout
    statements, writes, empty, pages = (float(counting[i]) for i in range(1, 5))
    assert min(writes, pages) >= 1
    assert statements > writes >= empty
    shares = [float(share) for share in re.findall(r"^ +([\d.]+)%  ", done.stdout, re.MULTILINE)]
    assert abs(100 - sum(shares)) <= 0.1 * len(shares)
    assert "SQLite (C)" in done.stdout


def _worker_pids(folder: Path) -> list[int]:
    """The worker processes whose command line names a store under *folder*."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--worker" in argv and any(str(folder).encode() in part for part in argv):
            found.append(int(entry.name))
    return found


def test_benchmark_fails_at_once_naming_a_worker_that_died(tmp_path: Path) -> None:
    """A worker killed mid-run ends the run with exit 1 and a message naming it, no hang."""
    args = ("--no-dbos", "--only", "ours-dispatch:normal", "--workers", "1", "--seconds", "60")
    proc = subprocess.Popen(
        [sys.executable, str(BENCHMARK), *args, "--dir", str(tmp_path)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _wait_for_workers(tmp_path, 1)
        (worker,) = _worker_pids(tmp_path)
        os.kill(worker, signal.SIGKILL)
        _, err = proc.communicate(timeout=30)
        assert _wait_group_gone(proc.pid)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert 1 == proc.returncode
    assert "case ours-dispatch:normal:1 failed" in err
    assert f"exited with {-signal.SIGKILL}" in err
    assert [] == list(tmp_path.iterdir())
