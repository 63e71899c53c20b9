"""
Retry overhead of ``effects.retry`` beside tenacity, stamina and backoff, in one process.

Run: ``.venv/bin/python benchmarks/retry_overhead.py [--quick] [--no-memory]``

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

Memory, each case in a fresh process (``benchmarks/_memory.py`` says how): (4a) and (4b) are
cases 1 and 3 measured with tracemalloc: the traced peak of one call, the blocks held while the
wrapped function runs, objects left per call for the cyclic garbage collector, and what is still
allocated after 100,000 more calls (10,000 for the peers' failure path); (4c) the bytes kept by
one ``Retry`` value beside a tenacity ``Retrying``, and by one decorated function of each library.
``--no-memory`` skips them.

Targets (issue 3): success path <= 5x bare and >= 50x cheaper than tenacity; async success <= 3x a
bare await; failure path >= 20x cheaper than tenacity.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import textwrap
import time
import timeit
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any
from unittest import mock

import backoff
import stamina
import stamina.instrumentation
import tenacity
from _memory import Figures, Probe, constructed, emit, fresh, per_call, ratio

from effects import retry
from schedules import exponential, forever

PEERS = ("tenacity", "stamina", "backoff")


Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def sync_wrapper(name: str) -> Decorator:
    """Return library *name*'s decorator, configured as the module docstring says."""
    if name == "effects":
        return retry(times=4, on=ValueError)
    if name == "tenacity":
        return tenacity.retry(
            stop=tenacity.stop_after_attempt(5),
            wait=tenacity.wait_none(),
            retry=tenacity.retry_if_exception_type(ValueError),
            reraise=True,
        )
    if name == "stamina":
        return stamina.retry(
            on=ValueError, attempts=5, timeout=None, wait_initial=0, wait_max=0, wait_jitter=0
        )
    if name == "backoff":
        return backoff.on_exception(
            backoff.constant, ValueError, max_tries=5, interval=0, jitter=None, logger=None
        )
    raise ValueError(f"name must be one of effects, {', '.join(PEERS)}; got {name!r}")


def sync_wrappers() -> dict[str, Decorator]:
    """Return each library's decorator, configured as the module docstring says."""
    return {name: sync_wrapper(name) for name in ("effects", *PEERS)}


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


# --- memory ------------------------------------------------------------------------------------

MEMORY_ROWS = ("bare", "effects", *PEERS)


def memory_case(case: str, name: str, *, quick: bool) -> Figures:
    """Measure one memory case for one candidate, in this (fresh) process."""
    stamina.instrumentation.set_on_retry_hooks([])
    if case == "policy":
        return policy_size(name)
    probe = Probe()
    retained_calls = 10_000 if quick else 100_000
    if case == "success":

        def work() -> int:
            probe()
            return 1

        call: Callable[[], object] = work if name == "bare" else sync_wrapper(name)(work)
    elif case == "failure":
        calls = 0

        def flaky_probed() -> int:
            nonlocal calls
            calls += 1
            if calls % 4:
                raise ValueError(calls)
            probe()
            return calls

        def bare() -> int:
            for _ in range(4):
                try:
                    return flaky_probed()
                except ValueError:
                    continue
            raise AssertionError

        call = bare if name == "bare" else sync_wrapper(name)(flaky_probed)
        # The peers' failure path runs ~100 us a call under tracemalloc: fewer calls for them.
        if name in PEERS:
            retained_calls //= 10
    else:
        raise ValueError(f"case must be success, failure or policy; got {case!r}")
    with mock.patch("time.sleep", _no_sleep):
        return per_call(call, probe, calls=500 if quick else 2_000, retained_calls=retained_calls)


def policy_size(name: str) -> Figures:
    """Bytes kept by one policy value (``*-policy``) or one decorated function (a library)."""

    def work() -> int:
        return 1

    if name == "effects-policy":
        return constructed(lambda: retry(times=4, on=ValueError))
    if name == "effects-policy-exp":
        return constructed(
            lambda: retry(exponential(0.25).jittered().max_delay(4), times=4, on=ValueError)
        )
    if name == "tenacity-policy":
        return constructed(
            lambda: tenacity.Retrying(
                stop=tenacity.stop_after_attempt(5),
                wait=tenacity.wait_none(),
                retry=tenacity.retry_if_exception_type(ValueError),
                reraise=True,
            )
        )
    return constructed(lambda: sync_wrapper(name)(work))


def memory_tables(quick: bool) -> list[str]:
    """Run every memory case in a fresh process; return the formatted tables."""
    script = Path(__file__)
    flag = ("--quick",) if quick else ()
    lines: list[str] = []
    for case, title in (
        ("success", "4a. memory per call, sync success"),
        ("failure", "4b. memory per call, 3 failures then success (time.sleep a no-op)"),
    ):
        rows = {
            name: fresh(script, "--memory-case", f"{case}:{name}", *flag) for name in MEMORY_ROWS
        }
        ours = rows["effects"]["peak_bytes"]
        lines += [
            "",
            f"## {title}",
            f"{'':<10} {'peak B':>8} {'x effects':>10} {'live B':>7} {'blocks':>7}"
            f" {'cyclic/call':>12} {'retained B':>11} {'blocks':>7} {'after calls':>12}",
        ]
        for name, got in rows.items():
            vs_ours = "" if name in ("bare", "effects") else ratio(ours, got["peak_bytes"])
            lines.append(
                f"{name:<10} {got['peak_bytes']:>8.0f} {vs_ours:>10} {got['live_bytes']:>7.0f}"
                f" {got['live_blocks']:>7.0f} {got['cyclic_per_call']:>12.1f}"
                f" {got['retained_bytes']:>11.0f} {got['retained_blocks']:>7.0f}"
                f" {got['retained_calls']:>12,.0f}"
            )
    sizes = {
        label: fresh(script, "--memory-case", f"policy:{name}")
        for label, name in (
            ("effects Retry: retry(times=4, on=...)", "effects-policy"),
            ("effects Retry: exponential schedule, 3 layers + times", "effects-policy-exp"),
            ("tenacity Retrying (stop, wait, retry)", "tenacity-policy"),
            ("decorated function: effects", "effects"),
            *((f"decorated function: {peer}", peer) for peer in PEERS),
        )
    }
    ours_policy = sizes["effects Retry: retry(times=4, on=...)"]["bytes"]
    ours_decorated = sizes["decorated function: effects"]["bytes"]
    lines += [
        "",
        "## 4c. memory kept by one policy / one decorated function (traced, mean of 1,000)",
        f"{'':<54} {'bytes':>7} {'blocks':>7} {'x effects':>10}",
    ]
    for label, got in sizes.items():
        ours_size = ours_decorated if label.startswith("decorated") else ours_policy
        vs_ours = "" if label.startswith("effects") else ratio(ours_size, got["bytes"])
        if label == "decorated function: effects":
            vs_ours = ""
        lines.append(f"{label:<54} {got['bytes']:>7.0f} {got['blocks']:>7.1f} {vs_ours:>10}")
    return lines


def main(argv: list[str] | None = None) -> int:
    """Run the three cases and print their tables."""
    parser = argparse.ArgumentParser(
        description="Retry overhead beside tenacity, stamina, backoff."
    )
    parser.add_argument("--quick", action="store_true", help="fewer calls, for a smoke test")
    parser.add_argument("--memory-case", help=argparse.SUPPRESS)
    parser.add_argument("--no-memory", action="store_true", help="skip the memory tables")
    args = parser.parse_args(argv)
    if args.memory_case:
        case, _, name = args.memory_case.partition(":")
        emit(memory_case(case, name, quick=args.quick))
        return 0
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
    if not args.no_memory:
        print()
        print(
            textwrap.fill(
                "Memory (tracemalloc, each row in a fresh process, after imports and a warm-up;"
                " harness subtracted): peak B = traced peak of one call above what was live before"
                " it (median); live B / blocks = held while the wrapped function runs (its last"
                " attempt); retained = left after that many more calls and gc.collect() (0 = no"
                " leak); cyclic/call = objects per call left for the cyclic GC (gc off for 1,000"
                " calls); 'x effects' = peer's peak B over ours",
                width=100,
            )
        )
        print("\n".join(memory_tables(args.quick)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
