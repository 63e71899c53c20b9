"""
The harness of the durable-steps benchmarks, whatever the store: ``durable_steps.py`` (SQLite)
and ``durable_steps_pg.py`` (PostgreSQL) keep only what their store needs (its floors, how a case
gets a fresh store, its report's tables) and take the rest from here and from ``_durable_ours.py``
(our cases) and ``_durable_dbos.py`` (DBOS's).

What is here: a case run in a fresh interpreter and its JSON line read back, the worker processes
of a case (``Children``) and a worker's start and end (``Gate``), timed loops, the round kept of a
case's rounds (best or median), CPU per item from ``/proc``, and the report's pieces (rates,
ratios, target marks, spreads over the rounds).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import select
import signal
import stat
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, Any, NamedTuple, Protocol, TypeVar

#: A case's figures: what it prints as its JSON line.
Figures = dict[str, float]
T = TypeVar("T")
E = TypeVar("E")
#: Steps per run of the local workflow, on every side.
STEPS_PER_RUN = 10
#: The case process's own check for finished runs, on every side (seconds).
WAIT_POLL = 0.001
#: How long a worker may take to start, and to stop once asked (seconds).
START_TIMEOUT = 60.0
STOP_GRACE = 10.0
#: How often the drain cases look for the last item done, where they poll (seconds).
DRAIN_POLL = 0.01
#: A worker's last argument that makes it wait, once ready, for the parent's ``SIGUSR1``.
GATED = "gated"


class Dispatch(NamedTuple):
    """
    How a case of dispatched steps runs: *workers* worker processes, which (and this process)
    poll every *poll_ms*, serving batches of *batch* runs (or items) for *seconds*.
    """

    workers: int
    seconds: float
    batch: int
    poll_ms: int

    @classmethod
    def of(cls, args: Options, workers: int) -> Dispatch:
        """The dispatch options of a command line's *args*, with *workers* processes."""
        return cls(workers, args.seconds, args.batch, args.poll_ms)


class Options(Protocol):
    """The options every benchmark's command line has (an ``argparse.Namespace``)."""

    seconds: float
    batch: int
    poll_ms: int


# -- processes ------------------------------------------------------------------------------------


def exit_when_parent_leaves() -> None:
    """SIGTERM this process once its stdin, a pipe from its parent, closes (even on a kill -9)."""
    if not stat.S_ISFIFO(os.fstat(0).st_mode):
        return  # run by hand: there is no parent to watch

    def watch() -> None:
        # The raw descriptor: a daemon thread blocked in a buffered read would abort the
        # interpreter's shutdown.
        with contextlib.suppress(OSError):
            while os.read(0, 4096):
                pass
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def raise_on_sigterm() -> None:
    """Turn SIGTERM into ``SystemExit`` so ``finally`` blocks stop workers and delete files."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)


class Children:
    """
    Worker processes of a case (*script* run again with the arguments given), stopped when the
    block ends: stdin closed, then SIGTERM, then kill. With a *folder*, each one's stderr goes to
    a log there (whose tail a failure shows); without, to this process's stderr.
    """

    def __init__(self, script: Path, folder: Path | None = None) -> None:
        self._script = script
        self._folder = folder
        self._procs: list[tuple[subprocess.Popen[str], Path | None]] = []

    def __enter__(self) -> Children:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def pids(self) -> list[int]:
        """The process ids of the children started so far."""
        return [proc.pid for proc, _ in self._procs]

    def start(self, *args: str) -> subprocess.Popen[str]:
        """Start the script with *args*; wait until it prints ``ready``."""
        log = None if self._folder is None else self._folder / f"child-{len(self._procs)}.log"
        with contextlib.ExitStack() as stack:
            stderr = None if log is None else stack.enter_context(log.open("w"))
            proc = subprocess.Popen(
                [sys.executable, str(self._script), *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
            )
        self._procs.append((proc, log))
        self._wait_ready(proc, log)
        return proc

    @staticmethod
    def _tail(log: Path | None) -> str:
        return "" if log is None else log.read_text()[-2000:]

    @classmethod
    def _wait_ready(cls, proc: subprocess.Popen[str], log: Path | None) -> None:
        assert proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([proc.stdout], [], [], left)
            if readable:
                line = proc.stdout.readline()
                if line.strip() == "ready":
                    return
                if not line:
                    break
        try:  # its output ended: it exited (or is exiting) before it was ready
            code = proc.wait(timeout=5) if deadline > time.monotonic() else None
        except subprocess.TimeoutExpired:
            code = None
        if code is not None:
            msg = f"worker {proc.args!r} exited with {code} before it was ready:\n{cls._tail(log)}"
            raise RuntimeError(msg)
        proc.kill()
        msg = f"worker {proc.args!r} did not start in {START_TIMEOUT} s:\n{cls._tail(log)}"
        raise RuntimeError(msg)

    def go(self) -> None:
        """Let gated workers (started with ``GATED``) begin: ``SIGUSR1`` to each."""
        for proc, _ in self._procs:
            proc.send_signal(signal.SIGUSR1)

    def check(self) -> None:
        """Raise ``RuntimeError`` (with its log's tail) if a child has exited."""
        for proc, log in self._procs:
            if proc.poll() is not None:
                msg = f"worker {proc.args!r} exited with {proc.returncode}:\n{self._tail(log)}"
                raise RuntimeError(msg)

    async def watch(self, work: Awaitable[T], *also: asyncio.Task[Any]) -> T:
        """Await *work*, but fail at once if a child exits or one of the tasks *also* ends."""
        task = asyncio.ensure_future(work)
        try:
            while True:
                done, _ = await asyncio.wait(
                    {task, *also}, timeout=0.2, return_when="FIRST_COMPLETED"
                )
                if task in done:
                    return task.result()
                for ended in done:
                    msg = f"{ended.get_name()} ended while runs were still going"
                    raise RuntimeError(msg) from (None if ended.cancelled() else ended.exception())
                self.check()
        finally:
            task.cancel()

    def stop(self) -> None:
        """Ask every child to stop (close its stdin), then make sure it has."""
        procs, self._procs = self._procs, []
        for proc, _ in procs:
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()
        deadline = time.monotonic() + STOP_GRACE
        for proc, _ in procs:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.terminate()
                try:
                    proc.wait(2)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


class Gate:
    """
    A worker's start and end, on its event loop: *go* once the parent's ``SIGUSR1`` comes (at
    once unless *gated*), *left* once SIGTERM or SIGINT comes (which also sets *go*), then
    *on_leave*. A closed stdin is a SIGTERM (see ``exit_when_parent_leaves``).
    """

    def __init__(self, gated: bool, on_leave: Callable[[], object]) -> None:
        loop = asyncio.get_running_loop()
        self.go, self.left = asyncio.Event(), asyncio.Event()
        self._on_leave = on_leave
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.leave)
        if gated:
            loop.add_signal_handler(signal.SIGUSR1, self.go.set)
        else:
            self.go.set()

    def leave(self) -> None:
        """Stop: set *left* and *go*, then call *on_leave*."""
        self.left.set()
        self.go.set()
        self._on_leave()


def measure_in_process(script: Path, key: str, options: Sequence[str], timeout: float) -> Figures:
    """
    Run case *key* in a fresh interpreter (``script --case key *options``) and return the
    figures of its last line; ``SystemExit`` with its stderr's tail if it fails.
    """
    argv = [sys.executable, str(script), "--case", key, *options]
    # Its stdin stays open while it runs: a case that sees it close stops (see
    # exit_when_parent_leaves), so nothing outlives this process.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=out, stderr=err, text=True)
        try:
            proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(STOP_GRACE + 5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            if proc.stdin is not None:
                proc.stdin.close()
        out.seek(0)
        err.seek(0)
        output, errors = out.read(), err.read()
    if proc.returncode:
        msg = f"case {key} failed (exit {proc.returncode}):\n{errors[-3000:]}"
        raise SystemExit(msg)
    figures: Figures = json.loads(output.strip().splitlines()[-1])
    return figures


# -- timing ---------------------------------------------------------------------------------------


def rate(count: int, elapsed: float) -> Figures:
    """*count* items in *elapsed* seconds, and their rate."""
    return {"count": count, "seconds": elapsed, "rate": count / elapsed}


def timed(seconds: float, once: Callable[[], int]) -> Figures:
    """
    Call *once* (returning a count) until *seconds* have passed, at least once; the rate, and
    ``cpu_us``: this thread's CPU per item (which other processes' load inflates far less).
    """
    count = 0
    start, cpu = time.perf_counter(), time.thread_time()
    deadline = start + seconds
    while True:
        count += once()
        now = time.perf_counter()
        if now >= deadline:
            return {**rate(count, now - start), "cpu_us": cpu_us(cpu, count)}


def cpu_us(since: float, count: int) -> float:
    """This thread's CPU since ``time.thread_time()`` read *since*, per item, in microseconds."""
    return (time.thread_time() - since) / count * 1e6


async def timed_async(seconds: float, once: Callable[[], Awaitable[int]]) -> Figures:
    """Like ``timed`` for a coroutine function."""
    count = 0
    start, cpu = time.perf_counter(), time.thread_time()
    deadline = start + seconds
    while True:
        count += await once()
        now = time.perf_counter()
        if now >= deadline:
            return {**rate(count, now - start), "cpu_us": cpu_us(cpu, count)}


def per_hundred(write: Callable[[int], object]) -> Callable[[], int]:
    """
    A floor's unit for ``timed``: *write* (one step's row) for the next 100 step numbers, from 1
    on; it returns 100.
    """
    seqs = itertools.count(1)

    def hundred() -> int:
        for _ in range(100):
            write(next(seqs))
        return 100

    return hundred


def per_hundred_async(write: Callable[[int], Awaitable[object]]) -> Callable[[], Awaitable[int]]:
    """Like ``per_hundred`` for a coroutine function, for ``timed_async``."""
    seqs = itertools.count(1)

    async def hundred() -> int:
        for _ in range(100):
            await write(next(seqs))
        return 100

    return hundred


async def interleaved(
    engine: E, variants: dict[str, Callable[[E], Awaitable[int]]], seconds: float
) -> Figures:
    """
    Each variant once (untimed), then the variants in turn, a block at a time, until *seconds*
    have passed; the median over the blocks of each variant's time per unit, in microseconds,
    as ``{kind}_us`` (a median, so that one slow fsync of a shared disk does not move a
    difference between variants), and the blocks as ``blocks``.
    """
    times: dict[str, list[float]] = {kind: [] for kind in variants}

    async def block() -> int:
        for kind, once in variants.items():
            start = time.perf_counter()
            done = await once(engine)
            times[kind].append((time.perf_counter() - start) / done)
        return 1

    await block()
    for found in times.values():
        found.clear()
    blocks = (await timed_async(seconds, block))["count"]
    figures: Figures = {f"{kind}_us": statistics.median(times[kind]) * 1e6 for kind in variants}
    figures["blocks"] = blocks
    return figures


# -- rounds ---------------------------------------------------------------------------------------


def best_round(rounds: list[Figures]) -> Figures:
    """
    The round with the highest rate; for a cost (``cost_us``), the median cost's round; for the
    cases that time several variants, each variant's lowest time (``_us``), counts from the first.
    """
    first = rounds[0]
    if "cost_us" in first:
        costs = [figures["cost_us"] for figures in rounds]
        return rounds[costs.index(statistics.median_low(costs))]
    if "rate" in first:
        return max(rounds, key=lambda figures: figures["rate"])
    return {
        key: min(figures[key] for figures in rounds) if key.endswith("_us") else value
        for key, value in first.items()
    }


def median_round(rounds: list[Figures]) -> Figures:
    """The round of the median rate (of an even number, the higher of the middle two)."""
    return sorted(rounds, key=lambda figures: figures["rate"])[len(rounds) // 2]


# -- CPU ------------------------------------------------------------------------------------------

_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name, or None (gone, or no /proc)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _server_cpu(server: int) -> float:
    """CPU seconds of a server so far: its main process, its live children, and those reaped."""
    total = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := proc_stat(int(entry.name))) is not None:
            if int(entry.name) == server:
                total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
            elif int(fields[1]) == server:
                total += int(fields[11]) + int(fields[12])
    return total / _HZ


def _pids_cpu(pids: Iterable[int]) -> float:
    """CPU seconds so far of the live processes *pids*."""
    total = 0
    for pid in pids:
        if (fields := proc_stat(pid)) is not None:
            total += int(fields[11]) + int(fields[12])
    return total / _HZ


class CpuMeter:
    """
    CPU per item of a timed window, from its start (the meter's making, or ``restart``): this
    process, its worker processes *workers*, and the server whose main process is *server* (a
    pid on this machine; ``None``: not counted).
    """

    def __init__(self, server: int | None, workers: Iterable[int] = ()) -> None:
        self.server = server
        self.workers = list(workers)
        self._start = self._now()

    def _now(self) -> tuple[float, float, float | None]:
        return (
            time.process_time(),
            _pids_cpu(self.workers),
            None if self.server is None else _server_cpu(self.server),
        )

    def restart(self) -> None:
        """Start the window now."""
        self._start = self._now()

    def per_item(self, count: float, *, workers_cpu: float | None = None) -> Figures:
        """ms of CPU per item since the window began (*workers_cpu*: seconds the workers said)."""
        own, workers, server = self._now()
        start_own, start_workers, start_server = self._start
        used = workers - start_workers if workers_cpu is None else workers_cpu
        figures = {
            "cpu_self_ms": (own - start_own) * 1000 / count,
            "cpu_workers_ms": used * 1000 / count,
        }
        if server is not None and start_server is not None:
            figures["cpu_server_ms"] = (server - start_server) * 1000 / count
        return figures


#: How a case makes the meter of its timed window, given its workers' pids.
Meter = Callable[[Iterable[int]], CpuMeter]

# -- the report -----------------------------------------------------------------------------------


def quotient(ours: float | None, theirs: float | None) -> float | None:
    """*ours* / *theirs*, or ``None`` when either is missing or *theirs* is 0."""
    return None if ours is None or theirs is None or not theirs else ours / theirs


def verdict(ratio: float, goal: float) -> str:
    """``meets`` when *ratio* >= *goal*, else ``MISSES``."""
    return "meets" if ratio >= goal else "MISSES"


def fmt_rate(value: float | None) -> str:
    """A rate as a whole number with thousands separators, or ``n/a``."""
    return "n/a" if value is None else f"{value:,.0f}"


def fmt_ratio(ours: float | None, theirs: float | None) -> str:
    """*ours* / *theirs* to two places (``0.25``), or ``n/a``."""
    ratio = quotient(ours, theirs)
    return "n/a" if ratio is None else f"{ratio:.2f}"


def target(ours: float | None, theirs: float | None, goal: float) -> str:
    """`` (meets the target of >= 10x)`` (or ``MISSES``); nothing when there is no ratio."""
    ratio = quotient(ours, theirs)
    return "" if ratio is None else f" ({verdict(ratio, goal)} the target of >= {goal:g}x)"


def fmt_times(ours: float | None, theirs: float | None, goal: float | None = None) -> str:
    """*ours* / *theirs* as ``0.25x``, with `` (meets >= 0.5x)`` for a *goal*; or ``n/a``."""
    ratio = quotient(ours, theirs)
    if ratio is None:
        return "n/a"
    text = f"{ratio:.2f}x"
    if goal is not None:
        text += f" ({verdict(ratio, goal)} >= {goal:g}x)"
    return text


class Results:
    """The figures a run kept (one round per case) and all its rounds, read by key."""

    def __init__(
        self, results: dict[str, Figures], rounds: dict[str, list[Figures]] | None = None
    ) -> None:
        self._results = results
        self._rounds = rounds or {}

    def rate(self, key: str) -> float | None:
        """A case's rate, or ``None`` when it was skipped."""
        found = self._results.get(key)
        return None if found is None else found["rate"]

    def rounds(self, key: str) -> list[Figures]:
        """Every round of case *key* (none when it was skipped)."""
        return self._rounds.get(key, [])

    def found(self, key: str) -> Figures | None:
        """A case's figures, or ``None`` when it was skipped."""
        return self._results.get(key)

    def spread(self, key: str, field: str) -> tuple[float, float] | None:
        """The lowest and highest *field* of case *key* over its rounds (``None``: one round)."""
        values = [figures[field] for figures in self.rounds(key) if field in figures]
        return (min(values), max(values)) if len(values) > 1 else None

    @staticmethod
    def print_spreads(out: IO[str], spreads: list[tuple[str, tuple[float, float] | None]]) -> None:
        """One item per figure, ``label low-high``, wrapped between items at 100 columns."""
        shown = [
            f"{label} {low:,.1f}-{high:,.1f}"
            for label, found in spreads
            if found
            for low, high in (found,)
        ]
        line = "  spread over the rounds (best kept):"
        for index, item in enumerate(shown):
            piece = f" {item}{',' if index < len(shown) - 1 else ''}"
            if len(line) + len(piece) > 100 and line.strip():
                print(line, file=out)
                line = "   "
            line += piece
        if shown:
            print(line, file=out)
