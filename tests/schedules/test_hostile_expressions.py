"""``python -m schedules show`` on hostile expressions: one clear line, never a traceback."""

from __future__ import annotations

import io
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedules import recurs
from schedules._cli import main
from schedules._expression import MAX_LENGTH

LIMIT = sys.get_int_max_str_digits()
# Enough hex digits that the value has more decimal digits than Python converts.
HEX = "0x" + "f" * (LIMIT * 5 // 6 + 100)
OCTAL = "0o" + "7" * (LIMIT * 7 // 6 + 100)
DECIMAL = "7" * (LIMIT + 700)
UNDERSCORED = "1" + "_0000" * (LIMIT // 4 + 100)
# The longest error line: fixed wording plus a value cut short (a hostile one may be huge).
LONGEST_LINE = 400


def run(expression: str) -> tuple[int, str, str]:
    """Run ``show EXPR`` in-process with few runs; return the code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    saved, sys.stderr = sys.stderr, err
    try:
        code = main(["show", expression, "--attempts", "3", "--runs", "5"], stdout=out)
    finally:
        sys.stderr = saved
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    ("expression", "literal"),
    [
        (f"recurs({HEX})", HEX),
        (f"recurs({OCTAL})", OCTAL),
        (f"spaced(1).times({HEX})", HEX),
        (f"from_step_options(retries={HEX})", HEX),
        (f"exponential(1, {HEX})", HEX),
        (f"spaced(1).reset_after({HEX})", HEX),
        (f"recurs({DECIMAL})", DECIMAL),
        (f"recurs({UNDERSCORED})", UNDERSCORED),
        (f"spaced(1) | recurs(-{DECIMAL})", DECIMAL),
    ],
    ids=["hex", "octal", "times", "step-options", "factor", "reset-after", "decimal", "_", "neg"],
)
def test_an_integer_beyond_the_digit_limit_is_one_line_naming_it(
    expression: str, literal: str
) -> None:
    """An int literal (any base) past Python's digit limit: exit 2, one short line naming it."""
    code, out, err = run(expression)

    assert (2, "", 1) == (code, out, len(err.splitlines()))
    assert f"error: the number {literal[:20]}" in err
    assert f"at most {LIMIT} digits" in err
    assert len(err) < LONGEST_LINE
    assert f"(line 1, column {expression.index(literal) + 1})" in err


@pytest.mark.parametrize("literal", ["1e99999", "1.5e400", "9" * 400 + ".0"])
def test_a_float_literal_that_overflows_is_named(literal: str) -> None:
    """A float literal too large for a float (it would be infinite) is refused naming it."""
    code, out, err = run(f"spaced(1).within({literal})")

    assert (2, "", 1) == (code, out, len(err.splitlines()))
    assert f"error: the number {literal[:20]}" in err
    assert "is too large: as a float it is infinite" in err
    assert len(err) < LONGEST_LINE


@pytest.mark.parametrize(
    "expression",
    [
        "spaced(" + "9" * (LIMIT - 1) + ")",
        "exponential(1, " + "9" * (LIMIT - 1) + ")",
        "spaced(1).jittered(0, -" + "9" * (LIMIT - 1) + ")",
        "from_step_options(retries=2, backoff_ms=" + "9" * (LIMIT - 1) + ")",
        "spaced('" + "9" * (MAX_LENGTH - 20) + "s')",
    ],
    ids=["spaced", "factor", "jitter", "backoff-ms", "string"],
)
def test_a_long_value_a_constructor_refuses_is_clipped_in_the_message(expression: str) -> None:
    """A long literal within the limits that a constructor refuses is shown cut short."""
    code, out, err = run(expression)

    assert (2, "") == (code, out)
    assert "rejected its arguments" in err
    assert all(len(line) < LONGEST_LINE for line in err.splitlines())
    assert "characters)" in err


def test_a_large_count_within_the_limit_still_works() -> None:
    """A count with many digits, but within the limit, is a valid schedule and is shown."""
    count = int("9" * (LIMIT - 1))
    code, out, err = run(f"recurs({count})")

    assert (0, "") == (code, err)
    assert f"schedule: {recurs(count)!r}" in out


def test_ctrl_c_during_show_exits_130_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C while ``show`` simulates prints ``interrupted`` and exits 130, no traceback."""

    def interrupted(*_: object, **__: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("schedules._cli.summarize", interrupted)
    code, out, err = run("spaced(1)")

    assert (130, "", "interrupted\n") == (code, out, err)


NAMES = ["spaced", "fixed", "exponential", "linear", "fibonacci", "recurs", "from_delays"]
METHODS = ["times", "within", "reset_after", "max_delay", "add_delay", "jittered"]


@st.composite
def hostile_numbers(draw: st.DrawFn) -> str:
    """Number literals at and past every limit: huge ints in each base, huge exponents."""
    digits = draw(st.integers(1, LIMIT + 50))
    kind = draw(st.sampled_from(["dec", "hex", "oct", "under", "exp", "frac", "small"]))
    if kind == "dec":
        return "9" * digits
    if kind == "hex":
        return "0x" + "f" * digits
    if kind == "oct":
        return "0o" + "7" * digits
    if kind == "under":
        return "1" + "_0" * digits
    if kind == "exp":
        return f"1e{draw(st.integers(-99999, 99999))}"
    if kind == "frac":
        return "0." + "0" * digits + "1"
    return str(draw(st.integers(-(2**64), 2**64)))


@st.composite
def hostile_expressions(draw: st.DrawFn) -> str:
    """A constructor and a chain of methods, each given hostile numbers or strings."""
    literal = st.one_of(hostile_numbers(), st.text(max_size=30).map(repr), st.just("None"))
    arguments = st.lists(literal, max_size=2).map(", ".join)
    text = f"{draw(st.sampled_from(NAMES))}({draw(arguments)})"
    for method in draw(st.lists(st.sampled_from(METHODS), max_size=3)):
        text += f".{method}({draw(arguments)})"
    return text


@settings(max_examples=150)
@given(hostile_expressions())
def test_show_never_raises_on_hostile_literals(expression: str) -> None:
    """Whatever literals an expression holds, ``show`` exits 0 or 2 with short lines."""
    code, _, err = run(expression)

    assert code in {0, 2}
    assert (code == 0) == (err == "")
    assert all(len(line) < LONGEST_LINE for line in err.splitlines())
