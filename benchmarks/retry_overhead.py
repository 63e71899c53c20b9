"""
Retry overhead of ``effects.retry`` beside tenacity, stamina and backoff, in one process.

Run: ``.venv/bin/python benchmarks/retry_overhead.py [--quick]``

Three cases, each timed with ``timeit`` (runs of about 20 ms, the candidates interleaved round by
round so that load from other processes hits them alike; min and median ns per call):

1. a decorated sync function that succeeds at once, against the bare call;
2. the same for an ``async def`` under asyncio, against a bare ``await``;
3. a sync function failing three times then succeeding, with zero delay, against a hand-written
   ``try``/``except`` loop: (3a) as configured, where every peer still calls ``time.sleep(0)``
   between attempts (a 0 delay never sleeps in effects, by design; ``time.sleep(0)`` is a real
   system call that can cost tens of microseconds on Linux because of timer slack), and (3b) with
   ``time.sleep`` patched to a no-op, so only the bookkeeping is compared.

Every library is set up to retry ``ValueError`` up to 5 attempts with no wait at all, so the table
compares bookkeeping, not sleeping:

- effects: ``retry(times=4, on=ValueError)`` (no schedule: zero delay, and a 0 delay never sleeps;
  such a policy is decided by a counter, see ``effects/_driver.py``); case 3 also shows
  ``effects-gen``, ``retry(forever(), times=4, on=ValueError)``: the same schedule through the
  general decision loop (schedule step, clock reading per retry);
- tenacity: ``retry(stop=stop_after_attempt(5), wait=wait_none(),
  retry=retry_if_exception_type(ValueError), reraise=True)``;
- stamina: ``retry(on=ValueError, attempts=5, timeout=None, wait_initial=0, wait_max=0,
  wait_jitter=0)`` with its instrumentation hooks set to ``[]`` (by default it logs every retry);
- backoff: ``on_exception(constant, ValueError, max_tries=5, interval=0, jitter=None,
  logger=None)``.

Targets (issue 3): success path <= 5x bare and >= 50x cheaper than tenacity; async success <= 3x a
bare await; failure path >= 20x cheaper than tenacity.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
import timeit
from collections.abc import Awaitable, Callable
from typing import Any
from unittest import mock

import backoff
import stamina
import stamina.instrumentation
import tenacity

from effects import retry
from schedules import forever

PEERS = ("tenacity", "stamina", "backoff")


def sync_wrappers() -> dict[str, Callable[[Callable[..., Any]], Callable[..., Any]]]:
    """Return each library's decorator, configured as the module docstring says."""
    return {
        "effects": retry(times=4, on=ValueError),
        "tenacity": tenacity.retry(
            stop=tenacity.stop_after_attempt(5),
            wait=tenacity.wait_none(),
            retry=tenacity.retry_if_exception_type(ValueError),
            reraise=True,
        ),
        "stamina": stamina.retry(
            on=ValueError, attempts=5, timeout=None, wait_initial=0, wait_max=0, wait_jitter=0
        ),
        "backoff": backoff.on_exception(
            backoff.constant, ValueError, max_tries=5, interval=0, jitter=None, logger=None
        ),
    }


Results = dict[str, tuple[float, float]]

# Each timed run lasts about this long; runs of all candidates are interleaved round by round, so
# a burst of load from another process hits every candidate alike instead of one of them.
_RUN_SECONDS = 0.02


def _summary(per_call: dict[str, list[float]]) -> Results:
    return {name: (min(v), statistics.median(v)) for name, v in per_call.items()}


def measure(candidates: dict[str, Callable[[], object]], repeat: int, scale: float) -> Results:
    """Return (min, median) ns per call of each candidate, over *repeat* interleaved rounds."""
    timers = {name: timeit.Timer(stmt) for name, stmt in candidates.items()}
    numbers: dict[str, int] = {}
    for name, timer in timers.items():
        number, seconds = timer.autorange()
        numbers[name] = max(1, int(number * _RUN_SECONDS * scale / seconds))
    per_call: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repeat):
        for name, timer in timers.items():
            per_call[name].append(timer.timeit(numbers[name]) / numbers[name] * 1e9)
    return _summary(per_call)


def measure_async(
    candidates: dict[str, Callable[[], Awaitable[object]]], repeat: int, scale: float
) -> Results:
    """Like measure, awaiting each candidate in a loop inside one running asyncio event loop."""

    async def timed(make: Callable[[], Awaitable[object]], number: int) -> float:
        start = time.perf_counter()
        for _ in range(number):
            await make()
        return time.perf_counter() - start

    async def rounds() -> Results:
        numbers: dict[str, int] = {}
        for name, make in candidates.items():
            number = 1
            while (seconds := await timed(make, number)) < 0.05:
                number *= 2
            numbers[name] = max(1, int(number * _RUN_SECONDS * scale / seconds))
        per_call: dict[str, list[float]] = {name: [] for name in candidates}
        for _ in range(repeat):
            for name, make in candidates.items():
                seconds = await timed(make, numbers[name])
                per_call[name].append(seconds / numbers[name] * 1e9)
        return _summary(per_call)

    return asyncio.run(rounds())


def success_sync(repeat: int, scale: float) -> Results:
    """Case 1: a function that succeeds at once."""

    def work() -> int:
        return 1

    candidates: dict[str, Callable[[], object]] = {"bare": work}
    for name, wrap in sync_wrappers().items():
        candidates[name] = wrap(work)
    return measure(candidates, repeat, scale)


def success_async(repeat: int, scale: float) -> Results:
    """Case 2: an async def that succeeds at once, awaited under asyncio."""

    async def work() -> int:
        return 1

    candidates: dict[str, Callable[[], Awaitable[object]]] = {"bare": work}
    for name, wrap in sync_wrappers().items():
        candidates[name] = wrap(work)
    return measure_async(candidates, repeat, scale)


def flaky() -> Callable[[], int]:
    """Return a function that fails three times, succeeds once, and starts over."""
    calls = 0

    def work() -> int:
        nonlocal calls
        calls += 1
        if calls % 4:
            raise ValueError(calls)
        return calls

    return work


def _no_sleep(seconds: float) -> None:
    """Stand in for time.sleep: return at once."""


def failure_sync(repeat: int, scale: float, *, no_sleep: bool) -> Results:
    """Case 3: three failures then success, zero delay; *no_sleep* makes time.sleep a no-op."""
    work = flaky()

    def bare() -> int:
        for _ in range(4):
            try:
                return work()
            except ValueError:
                continue
        raise AssertionError

    candidates: dict[str, Callable[[], object]] = {"bare": bare}
    for name, wrap in sync_wrappers().items():
        candidates[name] = wrap(flaky())
    candidates["effects-gen"] = retry(forever(), times=4, on=ValueError)(flaky())
    with mock.patch("time.sleep", _no_sleep) if no_sleep else contextlib.nullcontext():
        return measure(candidates, repeat, scale)


def table(title: str, results: Results) -> list[str]:
    """Format one case: ns/call (min, median), ours vs bare, and each peer vs ours."""
    ours = results["effects"][0]
    bare = results["bare"][0]
    lines = [
        f"## {title}",
        f"{'':<12} {'min ns':>10} {'median ns':>10} {'x bare':>8} {'x effects':>10}",
    ]
    for name, (low, median) in results.items():
        vs_ours = "" if name in ("bare", "effects") else f"{low / ours:>10.1f}"
        lines.append(f"{name:<12} {low:>10.0f} {median:>10.0f} {low / bare:>8.2f} {vs_ours}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the three cases and print their tables."""
    parser = argparse.ArgumentParser(
        description="Retry overhead beside tenacity, stamina, backoff."
    )
    parser.add_argument("--quick", action="store_true", help="fewer calls, for a smoke test")
    args = parser.parse_args(argv)
    scale = 0.25 if args.quick else 1.0
    repeat = 3 if args.quick else 9
    # stamina logs every retry through its default hooks: no output, and no cost, here.
    stamina.instrumentation.set_on_retry_hooks([])
    cases = [
        ("1. sync success", success_sync(repeat, scale)),
        ("2. async success (asyncio)", success_async(repeat, scale)),
        (
            "3a. sync: 3 failures then success, zero delay (peers call time.sleep(0))",
            failure_sync(repeat, scale, no_sleep=False),
        ),
        (
            "3b. the same with time.sleep patched to a no-op (bookkeeping only)",
            failure_sync(repeat, scale, no_sleep=True),
        ),
    ]
    print(
        f"Python {sys.version.split()[0]}; ns per call, min and median of {repeat} interleaved"
        " runs; 'x effects' is the peer's min over ours"
    )
    for title, results in cases:
        print()
        print("\n".join(table(title, results)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
