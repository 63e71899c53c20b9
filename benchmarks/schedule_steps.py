"""
Steps per second of a 4-layer schedule, side by side with the peers computing the same delays.

Run: ``.venv/bin/python benchmarks/schedule_steps.py [--steps N]``

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
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

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


def main() -> None:
    """Print steps per second per implementation and the ratio to ours."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=1_000_000)
    args = parser.parse_args()
    n: int = args.steps

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


if __name__ == "__main__":
    main()
