"""Algebraic laws over arbitrary drawn schedules (hypothesis, with schedules.testing)."""

from __future__ import annotations

import math
import random
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from schedules import MAX_DELAY, Schedule, forever, simulate, spaced
from schedules._durations import whole_ms
from schedules.testing import schedules
from tests.schedules._support import ConstantRandom, delays_of, run

AnySchedule = Schedule[Any, Any]
STEPS = 25
seeds = st.integers(0, 2**32 - 1)
# A constant random source makes a drawn schedule deterministic whatever order it draws in.
constants = st.floats(0.0, 1.0, exclude_max=True)
took = st.lists(st.floats(0.0, 30.0), max_size=STEPS)


@settings(max_examples=150)
@given(schedules(), schedules(), constants, took)
def test_union_is_commutative_in_delays(
    a: AnySchedule, b: AnySchedule, r: float, t: list[float]
) -> None:
    """a | b and b | a give the same delays."""
    rng = ConstantRandom(r)
    assert delays_of(run(a | b, STEPS, rng, durations=t)) == delays_of(
        run(b | a, STEPS, rng, durations=t)
    )


@settings(max_examples=150)
@given(schedules(), schedules(), constants, took)
def test_intersect_is_commutative_in_delays(
    a: AnySchedule, b: AnySchedule, r: float, t: list[float]
) -> None:
    """a & b and b & a give the same delays."""
    rng = ConstantRandom(r)
    assert delays_of(run(a & b, STEPS, rng, durations=t)) == delays_of(
        run(b & a, STEPS, rng, durations=t)
    )


@settings(max_examples=100)
@given(schedules(max_leaves=3), schedules(max_leaves=3), schedules(max_leaves=3), constants, took)
def test_union_and_intersect_are_associative(
    a: AnySchedule, b: AnySchedule, c: AnySchedule, r: float, t: list[float]
) -> None:
    """(a | b) | c equals a | (b | c) in delays, and the same for &."""
    rng = ConstantRandom(r)
    assert delays_of(run((a | b) | c, STEPS, rng, durations=t)) == delays_of(
        run(a | (b | c), STEPS, rng, durations=t)
    )
    assert delays_of(run((a & b) & c, STEPS, rng, durations=t)) == delays_of(
        run(a & (b & c), STEPS, rng, durations=t)
    )


@settings(max_examples=150)
@given(schedules(), seeds, took)
def test_intersect_with_forever_keeps_the_delays(a: AnySchedule, seed: int, t: list[float]) -> None:
    """a & forever() has exactly a's delays."""
    alone = delays_of(run(a, STEPS, random.Random(seed), durations=t))
    paired = delays_of(run(a & forever(), STEPS, random.Random(seed), durations=t))
    assert alone == paired


@settings(max_examples=150)
@given(schedules(), st.integers(0, 10), seeds)
def test_times_never_exceeds_n(a: AnySchedule, n: int, seed: int) -> None:
    """times(n) recurs at most n times."""
    assert len(a.times(n).delays(n + 10, seed=seed)) <= n


@settings(max_examples=150)
@given(schedules(), st.floats(0.0, 100.0), seeds)
def test_max_delay_never_exceeds_the_cap(a: AnySchedule, cap: float, seed: int) -> None:
    """max_delay(c) never waits longer than c."""
    assert all(delay <= cap for delay in a.max_delay(cap).delays(STEPS, seed=seed))


@settings(max_examples=150)
@given(
    schedules(),
    st.tuples(st.floats(0.0, 3.0), st.floats(0.0, 3.0)).map(sorted),
    st.floats(0.0, 0.999),
)
# Float edges where low + r * (high - low) rounds up to high: always tried, not only when drawn.
@example(spaced(1), [0.0, 5e-324], 0.75)
@example(spaced(7), [0.5, 0.5 + 2**-52], 0.9)
def test_jittered_delays_lie_in_the_scaled_range(
    a: AnySchedule, bounds: list[float], r: float
) -> None:
    """Each jittered delay lies in [min*d, max*d) (clamped to MAX_DELAY), d the plain delay."""
    low, high = bounds
    rng = ConstantRandom(r)
    jittered = a.jittered(min=low, max=high)
    # Step both at the same times, so time-based parts of `a` decide alike.
    plain_state, jittered_state, now = a.initial(), jittered.initial(), 0.0
    for _ in range(STEPS):
        plain_state, _, d = a.step(now, None, plain_state, rng)
        jittered_state, _, j = jittered.step(now, None, jittered_state, rng)
        if d is None or j is None:
            assert d is j
            break
        assert min(low * d, MAX_DELAY) <= j <= min(high * d, MAX_DELAY)
        if low * d < high * d < MAX_DELAY:
            assert j < high * d
        now += j


@settings(max_examples=150)
@given(schedules(), st.floats(0.0, 200.0), seeds, took)
def test_within_never_schedules_a_wait_past_the_limit(
    a: AnySchedule, limit: float, seed: int, t: list[float]
) -> None:
    """Every wait of within(d) ends at most d after the first step, to the millisecond."""
    steps = run(a.within(limit), STEPS, random.Random(seed), durations=t, start=5.0)
    first = steps[0][2]
    for _, delay, now in steps:
        if delay is not None:
            assert whole_ms(now - first + delay) <= whole_ms(limit)


@settings(max_examples=200)
@given(schedules(max_delay=1e6), seeds, took)
def test_every_delay_is_finite_and_in_range(a: AnySchedule, seed: int, t: list[float]) -> None:
    """Every delay of every schedule is a finite float in [0, MAX_DELAY]."""
    for _, delay, _ in run(a, 60, random.Random(seed), durations=t):
        if delay is not None:
            assert isinstance(delay, float)
            assert math.isfinite(delay)
            assert 0.0 <= delay <= MAX_DELAY


@settings(max_examples=100)
@given(schedules(), seeds)
def test_seeded_runs_repeat(a: AnySchedule, seed: int) -> None:
    """The same seed gives the same delays and the same simulated steps."""
    assert a.delays(STEPS, seed=seed) == a.delays(STEPS, seed=seed)
    inputs = list(range(STEPS))
    assert simulate(a, inputs, seed=seed) == simulate(a, inputs, seed=seed)


@settings(max_examples=100)
@given(schedules(finite=True), seeds)
def test_finite_strategy_stops(a: AnySchedule, seed: int) -> None:
    """schedules(finite=True) draws schedules that stop within 20 recurrences."""
    assert len(a.delays(seed=seed)) <= 20


@settings(max_examples=150)
@given(schedules(max_leaves=4), schedules(max_leaves=4), constants, took)
def test_union_and_intersect_step_both_sides_and_pair_their_outputs(
    a: AnySchedule, b: AnySchedule, r: float, t: list[float]
) -> None:
    """Beside a and b alone: | takes the shorter continuing delay, & the longer; outputs pair."""
    rng = ConstantRandom(r)
    for combined, pick in ((a | b, "union"), (a & b, "intersect")):
        state, state_a, state_b, now = combined.initial(), a.initial(), b.initial(), 0.0
        for k in range(STEPS):
            now += t[k] if k < len(t) else 0.0
            state, output, delay = combined.step(now, None, state, rng)
            state_a, out_a, delay_a = a.step(now, None, state_a, rng)
            state_b, out_b, delay_b = b.step(now, None, state_b, rng)
            going = [d for d in (delay_a, delay_b) if d is not None]
            if pick == "union":
                expected = min(going) if going else None
            else:
                expected = max(going) if len(going) == 2 else None
            assert ((out_a, out_b), expected) == (output, delay)
            if delay is None:
                break
            now += delay


# Each built-in constructor and combinator, as its repr shows it.
PARTS = [
    "forever(", "recurs(", "spaced(", "fixed(", "exponential(", "fibonacci(", "linear(",
    "from_delays(", "decorrelated(", "elapsed(", "from_step_options(", ".jittered(",
    ".modify_delay(", ".add_delay(_", ".add_delay(0", ".max_delay(", ".times(", ".within(",
    ".while_input(", ".until_input(", ".while_output(", ".until_output(", ".union(",
    ".intersect(", ".and_then(", ".map(", ".tap_input(", ".tap_output(", ".reset_after(",
]  # fmt: skip


def test_the_law_strategy_draws_every_constructor_and_combinator() -> None:
    """schedules() reaches every built-in, so the laws above range over all of them."""
    seen: set[str] = set()

    # Derandomized: the same 400 draws every run, so this check cannot flake.
    @settings(max_examples=400, derandomize=True, database=None)
    @given(schedules())
    def collect(schedule: AnySchedule) -> None:
        text = repr(schedule)
        seen.update(part for part in PARTS if part in text)

    collect()
    assert [] == [part for part in PARTS if part not in seen]
