"""
Where the time of a durable step goes: store statements, JSON, values, the event loop.

Run: ``.venv/bin/python benchmarks/durable_profile.py [--path local|local-sync|dispatch|retry]
[--runs N] [--full] [--top N]``

One engine in this process runs the workflows of ``benchmarks/durable_steps.py`` (from
``_durable_ours.py``) one after another (``start`` + ``run_until_idle``): ``local`` is the 10-step
workflow of ``async def`` local steps (the unit is a step), ``local-sync`` the same with ``def``
steps, ``dispatch`` a workflow dispatching one step that the same engine serves (the unit is a
round trip, no polling), ``retry`` that step failing once. Three passes, each on a fresh SQLite
file:

1. **timing**: nothing instrumented; microseconds per unit, wall-clock and CPU (the engine's
   thread). Less the CPU the counting pass's statements took in SQLite, its CPU is **our Python
   per unit**: the engine's and the store's own work around the statements (the event loop
   included). CPU time grows far less than wall-clock time when other processes load the
   machine.
2. **counting**: the store's connection is a ``sqlite3.Connection`` subclass (this script sets
   ``sqlite3.connect``'s factory) that counts every statement and the CPU it took, tells empty write
   transactions (no row changed) from real ones, and runs with ``wal_autocheckpoint=0`` so the
   WAL's growth is the pages written per unit. These counts do not depend on the machine's load.
3. **profile**: ``cProfile``, own time per function grouped: SQLite (the C calls), JSON, the
   store's Python, the engine's Python, attrs values, the event loop, threads, the rest. The
   profiler inflates Python calls more than C calls, so read the shares as an upper bound on the
   Python side.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from _durable_harness import STEPS_PER_RUN
from _durable_ours import bump, flaky, one_flaky_step, one_step, ten_async, ten_sync
from _sqlite_counting import Tally, counted
from durable_steps import store_url

from effects.durable import Engine, WorkflowDef


class Profiled(NamedTuple):
    """A profiled path: its workflow, whether the engine serves the steps, units per run."""

    workflow: WorkflowDef[int, int]
    serves_steps: bool
    units: int
    unit: str


PATHS = {
    "local": Profiled(ten_async, False, STEPS_PER_RUN, "step"),
    "local-sync": Profiled(ten_sync, False, STEPS_PER_RUN, "step"),
    "dispatch": Profiled(one_step, True, 1, "round trip"),
    "retry": Profiled(one_flaky_step, True, 1, "round trip with one retry"),
}


class Spent(NamedTuple):
    """A pass's time: wall-clock seconds, and the CPU seconds of this (the engine's) thread."""

    wall: float
    cpu: float


async def run_path(
    path: Profiled, url: str, runs: int, *, before: Callable[[], None], after: Callable[[], None]
) -> Spent:
    """Run *runs* runs of *path* after a warm-up; *before*/*after* bracket the timed part."""
    steps = [bump, flaky] if path.serves_steps else []
    async with Engine(url, workflows=[path.workflow], steps=steps) as engine:
        for n in range(20):
            await engine.start(path.workflow, n)
            await engine.run_until_idle()
        before()
        start, cpu = time.perf_counter(), time.thread_time()
        for n in range(runs):
            await engine.start(path.workflow, n)
            await engine.run_until_idle()
        elapsed = Spent(time.perf_counter() - start, time.thread_time() - cpu)
        after()
    return elapsed


def _nothing() -> None:
    pass


_CATEGORIES = (
    ("SQLite (C)", ("sqlite3.",)),
    ("JSON", ("json/", "_json", "json.")),
    ("store (Python)", ("effects/durable/_store",)),
    ("attrs values", ("<attrs generated", "attr/")),
    ("engine (Python)", ("effects/durable/", "effects/", "schedules/")),
    ("event loop", ("asyncio/", "_asyncio", "selectors", "select.")),
    ("threads", ("threading", "concurrent/", "_thread", "lock")),
)


def categorize(stats: pstats.Stats) -> dict[str, float]:
    """Own time (seconds) per category of the profiled functions."""
    spent: dict[str, float] = {}
    raw: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    for (file, _, name), (_, _, own, _, _) in raw.items():
        where = f"{file}:{name}"
        label = next(
            (label for label, marks in _CATEGORIES if any(mark in where for mark in marks)),
            "other (stdlib, builtins, benchmark)",
        )
        spent[label] = spent.get(label, 0.0) + own
    return spent


def main(argv: list[str] | None = None) -> int:
    """Profile one path and print the three passes."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--path", choices=sorted(PATHS), default="local")
    parser.add_argument("--runs", type=int, default=300, help="timed runs per pass (300)")
    parser.add_argument("--full", action="store_true", help="?synchronous=full (default NORMAL)")
    parser.add_argument("--top", type=int, default=12, help="statements and functions shown")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.top < 0:
        parser.error("--runs must be >= 1 and --top >= 0")
    path = PATHS[args.path]
    setting = "full" if args.full else "normal"
    units = args.runs * path.units
    print(
        f"durable_profile: {args.path} ({path.workflow.name}), {args.runs} runs,"
        f" WAL+{setting.upper()}; per {path.unit}"
    )
    with tempfile.TemporaryDirectory(prefix="durable-profile-") as tmp:
        folder = Path(tmp)

        def one_pass(name: str, before: Callable[[], None], after: Callable[[], None]) -> Spent:
            url = store_url(folder / name, setting)
            return asyncio.run(run_path(path, url, args.runs, before=before, after=after))

        timing = one_pass("t.db", _nothing, _nothing)
        print(
            f"  timing: {timing.wall / units * 1e6:,.1f} us per {path.unit}"
            f" ({timing.cpu / units * 1e6:,.1f} us of CPU)"
        )

        tally = Tally()
        wal = folder / "c.db-wal"
        sizes: list[int] = []

        def mark() -> None:
            sizes.append(wal.stat().st_size)

        def start_counting() -> None:
            tally.clear()
            mark()

        # Statements timed by the CPU they take: that does not grow when other processes load
        # the machine, as wall-clock time does (an fsync's wait is not in it).
        with counted(tally, clock=time.thread_time):
            counted_pass = one_pass("c.db", start_counting, mark)
        page = 4096 + 24  # a WAL frame: the page and its header
        statements = sum(int(count) for count, _ in tally.statements.values())
        in_sqlite = sum(seconds for _, seconds in tally.statements.values())
        print(
            f"  counting: {statements / units:.1f} statements, {tally.writes / units:.2f} write"
            f" transactions ({tally.empty_writes / units:.2f} of them empty),"
            f" {(sizes[1] - sizes[0]) / page / units:.1f} WAL pages;"
            f" {in_sqlite / units * 1e6:,.1f} of {counted_pass.cpu / units * 1e6:,.1f} us of CPU"
            " in SQLite"
        )
        python_us = (timing.cpu - in_sqlite) / units * 1e6
        print(
            f"  our Python per {path.unit} (us): {python_us:,.1f} (the timing pass's"
            f" {timing.cpu / units * 1e6:,.1f} us of CPU less the {in_sqlite / units * 1e6:,.1f}"
            " us its statements took in SQLite, as counted)"
        )
        ranked = sorted(tally.statements.items(), key=lambda item: -item[1][1])
        for sql, (count, seconds) in ranked[: args.top]:
            print(f"    {seconds / units * 1e6:7.1f} us {count / units:5.2f}x  {sql}")

        profiler = cProfile.Profile()
        profiled = one_pass("p.db", profiler.enable, profiler.disable).wall
    stats = pstats.Stats(profiler)
    spent = categorize(stats)
    total = sum(spent.values())
    print(f"  profile: {profiled / units * 1e6:,.1f} us per {path.unit} under cProfile")
    for label, seconds in sorted(spent.items(), key=lambda item: -item[1]):
        print(f"    {seconds / total:6.1%}  {seconds / units * 1e6:7.1f} us  {label}")
    print("  functions by own time:")
    raw: dict[tuple[str, int, str], tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    ranked_functions = sorted(raw.items(), key=lambda item: -item[1][2])
    for (file, line, name), (_, calls, own, _, _) in ranked_functions[: args.top]:
        where = f"{Path(file).name}:{line}({name})" if line else name
        print(f"    {own / units * 1e6:7.1f} us {calls / units:5.2f}x  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
