"""from_step_options: the durable engines' StepOptions policy, to the millisecond."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules import MAX_DELAY, from_step_options
from tests.schedules._support import ConstantRandom, delays_of, run


def test_seed_policy_example() -> None:
    """retries=4, backoff='exp', backoff_ms=200 waits 0.2, 0.4, 0.8 seconds, then stops."""
    assert [0.2, 0.4, 0.8] == from_step_options(retries=4, backoff="exp", backoff_ms=200).delays()


def test_default_is_a_single_try() -> None:
    """With no arguments there is one attempt: no recurrence at all."""
    assert [] == from_step_options().delays()


def test_retries_counts_total_attempts() -> None:
    """retries=3 means 2 recurrences, with no delay when backoff_ms is omitted."""
    assert [0.0, 0.0] == from_step_options(retries=3).delays()


def test_fixed_backoff_keeps_the_delay() -> None:
    """backoff='fixed' waits backoff_ms before every retry."""
    assert [0.5, 0.5, 0.5] == from_step_options(retries=4, backoff_ms=500).delays()


def test_cap_applies_before_the_jitter() -> None:
    """The exponential delay is capped at backoff_max_ms, then jittered into its top half."""
    policy = from_step_options(
        retries=6, backoff="exp", backoff_ms=200, backoff_max_ms=1000, jitter=True
    )
    # r = 0.5: round(ms * 0.75): 200 -> 150, 400 -> 300, 800 -> 600, 1000 -> 750 (capped 1600).
    steps = run(policy, 10, ConstantRandom(0.5))
    assert [0.15, 0.3, 0.6, 0.75, 0.75, None] == delays_of(steps)


def test_jitter_rounds_to_whole_milliseconds_halves_up() -> None:
    """Jittered delays are whole milliseconds; .5 rounds up as JavaScript's Math.round does."""
    policy = from_step_options(retries=2, backoff_ms=5, jitter=True)
    # 5 * (0.5 + 0.5 * 0.5) = 3.75 -> 4 ms; 5 * (0.5 + 0 * 0.5) = 2.5 -> 3 ms (Python says 2).
    assert [0.004] == delays_of(run(policy, 1, ConstantRandom(0.5)))
    assert [0.003] == delays_of(run(policy, 1, ConstantRandom(0.0)))


def test_jitter_with_r_zero_halves_and_near_one_keeps() -> None:
    """r = 0 gives half the delay; r near 1 gives the whole delay."""
    policy = from_step_options(retries=2, backoff_ms=1000, jitter=True)
    assert [0.5] == delays_of(run(policy, 1, ConstantRandom(0.0)))
    assert [1.0] == delays_of(run(policy, 1, ConstantRandom(0.9999999)))


def test_huge_attempt_numbers_clamp_without_overflow() -> None:
    """Attempt 10,000 of an exponential policy waits MAX_DELAY, with or without jitter."""
    for jitter in (False, True):
        policy = from_step_options(retries=20_000, backoff="exp", backoff_ms=200, jitter=jitter)
        assert MAX_DELAY == policy.delays(10_000, seed=1)[-1]


def test_cap_above_max_delay_still_clamps() -> None:
    """A cap larger than MAX_DELAY leaves the final clamp to MAX_DELAY."""
    policy = from_step_options(retries=100, backoff="exp", backoff_ms=1, backoff_max_ms=1e12)
    assert MAX_DELAY == policy.delays(99)[-1]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"retries": 0}, "retries"),
        ({"retries": -1}, "retries"),
        ({"backoff": "linear"}, "backoff"),
        ({"backoff_ms": -1}, "backoff_ms"),
        ({"backoff_ms": float("nan")}, "backoff_ms"),
        ({"backoff_max_ms": float("inf")}, "backoff_max_ms"),
    ],
)
def test_bad_options_name_the_argument(kwargs: dict[str, object], name: str) -> None:
    """Each invalid option raises ValueError naming it."""
    with pytest.raises(ValueError, match=name):
        from_step_options(**kwargs)  # type: ignore[arg-type]


@settings(max_examples=150)
@given(
    retries=st.integers(1, 40),
    backoff=st.sampled_from(["fixed", "exp"]),
    backoff_ms=st.integers(0, 100_000),
    backoff_max_ms=st.none() | st.integers(0, 10**10),
    jitter=st.booleans(),
    r=st.floats(0.0, 1.0, exclude_max=True),
)
def test_matches_the_reference_formula(
    *,
    retries: int,
    backoff: str,
    backoff_ms: int,
    backoff_max_ms: int | None,
    jitter: bool,
    r: float,
) -> None:
    """Every delay equals the StepOptions formula computed with exact integer arithmetic."""
    policy = from_step_options(retries, backoff, backoff_ms, backoff_max_ms, jitter)  # type: ignore[arg-type]
    expected: list[float | None] = []
    for k in range(1, retries):
        ms = backoff_ms * 2 ** (k - 1) if backoff == "exp" else backoff_ms
        if backoff_max_ms is not None:
            ms = min(ms, backoff_max_ms)
        seconds = (int(ms * (0.5 + r * 0.5) + 0.5) if jitter else ms) / 1000
        expected.append(min(seconds, MAX_DELAY))
    expected.append(None)
    assert expected == delays_of(run(policy, retries + 5, ConstantRandom(r)))


def test_exp_without_backoff_ms_retries_at_once() -> None:
    """backoff='exp' with backoff_ms omitted (0) waits 0 before every retry."""
    assert [0.0, 0.0, 0.0] == from_step_options(retries=4, backoff="exp").delays()


def test_jitter_must_be_a_bool() -> None:
    """jitter='yes' is refused rather than read as true; jitter=False gives plain delays."""
    with pytest.raises(TypeError, match="jitter must be True or False, got 'yes'"):
        from_step_options(retries=2, jitter="yes")  # type: ignore[arg-type]
    assert [0.1] == from_step_options(retries=2, backoff_ms=100, jitter=False).delays()


def test_seed_policy_with_cap_and_jitter_stays_in_the_top_half() -> None:
    """The seed's policy (retries 5, exp 200 ms, cap 10 s, jitter): each delay in [d/2, d] ms."""
    policy = from_step_options(
        retries=5, backoff="exp", backoff_ms=200, backoff_max_ms=10_000, jitter=True
    )
    for seed in range(50):
        delays = policy.delays(seed=seed)
        assert 4 == len(delays)
        for delay, full in zip(delays, [0.2, 0.4, 0.8, 1.6], strict=True):
            assert full / 2 <= delay <= full
            assert delay == round(delay * 1000) / 1000
