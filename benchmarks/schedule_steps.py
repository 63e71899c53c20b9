"""
Steps per second of a 4-layer schedule, side by side with the peers computing the same delays.

Run: ``.venv/bin/python benchmarks/schedule_steps.py [--steps N] [--no-memory]``

Ours: ``exponential(0.25).jittered().max_delay(4).times(8)``, stepped N times through the public
contract, the state reset whenever the schedule stops (every 9th step). Peers compute the same
curve (250 ms doubling, jittered, capped at 4 s, 8 retries) their own way:

- tenacity: ``wait_random_exponential(multiplier=0.25, max=4)`` (its jittered exponential) and
  ``wait_exponential_jitter(initial=0.25, max=4)``, each with ``stop_after_attempt(9)`` checked
  per attempt, as tenacity's loop does. stamina computes its waits with tenacity's
  ``wait_exponential_jitter``, so that row stands for stamina too.
- backoff: ``backoff.expo(factor=0.25, max_value=4)`` generator plus ``backoff.full_jitter``,
  a new generator every 8 retries.

Each row is the best of 3 runs, on one core. The target for ours is >= 500,000 steps/s.

Then memory, each row in a fresh process: the size of the state one retried call keeps (ours: the
JSON-able state tuple; tenacity: its ``RetryCallState``; backoff: its generator), the tracemalloc
peak of one step, and what is still allocated after min(N, 100,000) steps.
"""

from __future__ import annotations

import argparse
import json
import random
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _memory import Figures, emit, fresh, owned_size, per_call, ratio

from schedules import exponential

RETRIES = 8


def ours(n: int) -> float:
    """Step the 4-layer schedule *n* times; return the seconds taken."""
    policy = exponential(0.25).jittered().max_delay(4).times(RETRIES)
    step = policy.step
    initial = policy.initial()
    rng = random.Random(1)
    state = initial
    started = time.perf_counter()
    for _ in range(n):
        state, _, delay = step(0.0, None, state, rng)
        if delay is None:
            state = initial
    return time.perf_counter() - started


def tenacity_wait(make_wait: Callable[[], object]) -> Callable[[int], float]:
    """Time a tenacity wait strategy plus its stop check over *n* attempts."""
    import tenacity

    def run(n: int) -> float:
        wait = make_wait()
        stop = tenacity.stop_after_attempt(RETRIES + 1)
        retrying = tenacity.Retrying(wait=wait, stop=stop)  # type: ignore[arg-type]
        state = tenacity.RetryCallState(retrying, None, (), {})
        started = time.perf_counter()
        attempt = 1
        for _ in range(n):
            state.attempt_number = attempt
            if stop(state):
                attempt = 1
            else:
                wait(state)  # type: ignore[operator]
                attempt += 1
        return time.perf_counter() - started

    return run


def _exponential_jitter() -> object:
    """tenacity's wait_exponential_jitter at 250 ms (its base argument was renamed in 9.x)."""
    import tenacity

    try:
        return tenacity.wait_exponential_jitter(multiplier=0.25, max=4)
    except TypeError:
        return tenacity.wait_exponential_jitter(initial=0.25, max=4)


def backoff_expo(n: int) -> float:
    """Draw *n* delays from backoff's expo generator with full jitter."""
    import backoff

    started = time.perf_counter()
    gen = backoff.expo(factor=0.25, max_value=4)
    next(gen)  # backoff primes its generators once before use
    used = 0
    for _ in range(n):
        if used == RETRIES:
            gen = backoff.expo(factor=0.25, max_value=4)
            next(gen)
            used = 0
        else:
            backoff.full_jitter(next(gen))
            used += 1
    return time.perf_counter() - started


def best_of(run: Callable[[int], float], n: int, repeats: int = 3) -> float:
    """Best steps per second over *repeats* runs."""
    return max(n / run(n) for _ in range(repeats))


# --- memory ------------------------------------------------------------------------------------

MEMORY_ROWS = {
    "ours": "schedules (4 layers)",
    "tenacity": "tenacity wait_random_exponential",
    "backoff": "backoff expo + full_jitter",
}


def memory_case(name: str, steps: int) -> Figures:
    """State size and memory per step of one implementation, in this (fresh) process."""
    rng = random.Random(1)
    if name == "ours":
        policy = exponential(0.25).jittered().max_delay(4).times(RETRIES)
        step = policy.step
        initial = policy.initial()
        state: Any = initial
        longest = 0

        def ours_step() -> None:
            nonlocal state, longest
            state, _, delay = step(0.0, None, state, rng)
            if delay is None:
                state = initial

        # The state kept between steps, at its largest over one run of the schedule.
        for _ in range(RETRIES + 1):
            longest = max(longest, len(json.dumps(state)))
            ours_step()
        sizes: list[int] = []
        state = initial
        for _ in range(RETRIES):
            ours_step()
            sizes.append(owned_size(state))
        figures = per_call(ours_step, None, calls=2_000, retained_calls=steps)
        return {**figures, "state_json": longest, "state_bytes": max(sizes)}
    if name == "tenacity":
        import tenacity

        wait = tenacity.wait_random_exponential(multiplier=0.25, max=4)
        stop = tenacity.stop_after_attempt(RETRIES + 1)
        retrying = tenacity.Retrying(wait=wait, stop=stop)
        call_state = tenacity.RetryCallState(retrying, None, (), {})
        attempt = 1

        def tenacity_step() -> None:
            nonlocal attempt
            call_state.attempt_number = attempt
            if stop(call_state):
                attempt = 1
            else:
                wait(call_state)
                attempt += 1

        # tenacity's state per retried call is its RetryCallState.
        size = owned_size(tenacity.RetryCallState(retrying, None, (), {}), shared=(retrying,))
        figures = per_call(tenacity_step, None, calls=2_000, retained_calls=steps)
        return {**figures, "state_bytes": size}
    if name == "backoff":
        import backoff

        def primed() -> Any:
            gen = backoff.expo(factor=0.25, max_value=4)
            next(gen)
            return gen

        gen = primed()
        used = 0

        def backoff_step() -> None:
            nonlocal gen, used
            if used == RETRIES:
                gen = primed()
                used = 0
            else:
                backoff.full_jitter(next(gen))
                used += 1

        # backoff's state per retried call is its primed generator.
        size = owned_size(primed())
        figures = per_call(backoff_step, None, calls=2_000, retained_calls=steps)
        return {**figures, "state_bytes": size}
    raise ValueError(f"name must be one of {', '.join(MEMORY_ROWS)}; got {name!r}")


def memory_table(steps: int) -> list[str]:
    """Run each implementation's memory case in a fresh process; return the table."""
    rows = {
        label: fresh(Path(__file__), "--memory-case", name, "--steps", str(steps))
        for name, label in MEMORY_ROWS.items()
    }
    ours = rows[MEMORY_ROWS["ours"]]
    lines = [
        "",
        *textwrap.wrap(
            "Memory (each row in a fresh process, after a warm-up): state B = sys.getsizeof"
            " summed over the state one retried call keeps, at its largest (ours: the state"
            " tuple, its JSON length beside it; tenacity: a RetryCallState, its Retrying not"
            " counted; backoff: a primed generator); peak B/step = tracemalloc peak of one"
            " step above what was live before it (median; tuples and floats reused from"
            " CPython's free lists never reach malloc, so 0 means none did); retained ="
            f" traced bytes left after {steps:,} steps and gc.collect()",
            width=100,
        ),
        f"{'implementation':<36}{'state B':>9}{'JSON B':>8}{'x ours':>8}{'peak B/step':>13}"
        f"{'x ours':>10}{'retained B':>12}",
    ]
    for label, got in rows.items():
        is_ours = got is ours
        json_b = f"{got['state_json']:.0f}" if "state_json" in got else "-"
        lines.append(
            f"{label:<36}{got['state_bytes']:>9.0f}{json_b:>8}"
            f"{'' if is_ours else ratio(ours['state_bytes'], got['state_bytes']):>8}"
            f"{got['peak_bytes']:>13.0f}"
            f"{'' if is_ours else ratio(ours['peak_bytes'], got['peak_bytes']):>10}"
            f"{got['retained_bytes']:>12.0f}"
        )
    return lines


def main() -> None:
    """Print steps per second per implementation and the ratio to ours."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    parser.add_argument("--memory-case", help=argparse.SUPPRESS)
    parser.add_argument("--no-memory", action="store_true", help="skip the memory table")
    args = parser.parse_args()
    n: int = args.steps
    # A step under tracemalloc is several times slower: the memory cases take fewer steps.
    memory_steps = min(n, 100_000)
    if args.memory_case:
        emit(memory_case(args.memory_case, memory_steps))
        return

    rows: list[tuple[str, float]] = [("schedules (4 layers)", best_of(ours, n))]
    try:
        import tenacity
    except ImportError:
        print("tenacity not installed: skipped")
    else:
        rows.append(
            (
                "tenacity wait_random_exponential",
                best_of(
                    tenacity_wait(lambda: tenacity.wait_random_exponential(multiplier=0.25, max=4)),
                    n,
                ),
            )
        )
        rows.append(
            (
                "tenacity wait_exponential_jitter",
                best_of(tenacity_wait(_exponential_jitter), n),
            )
        )
    try:
        import backoff  # noqa: F401
    except ImportError:
        print("backoff not installed: skipped")
    else:
        rows.append(("backoff expo + full_jitter", best_of(backoff_expo, n)))

    ours_rate = rows[0][1]
    print(f"{'implementation':<36}{'steps/s':>14}{'us/step':>10}{'ours is x':>11}")
    for name, rate in rows:
        print(f"{name:<36}{rate:>14,.0f}{1e6 / rate:>10.3f}{ours_rate / rate:>11.2f}")
    verdict = "meets" if ours_rate >= 500_000 else "MISSES"
    print(f"target >= 500,000 steps/s: {verdict}")
    if not args.no_memory:
        print("\n".join(memory_table(memory_steps)))


if __name__ == "__main__":
    main()
