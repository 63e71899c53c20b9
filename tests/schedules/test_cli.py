"""The ``python -m schedules show`` command line and its safe expression parser."""

from __future__ import annotations

import builtins
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from schedules import exponential, forever, recurs, spaced
from schedules._cli import format_duration, main, summarize
from schedules._expression import CONSTRUCTORS, ExpressionError, parse_schedule

EXPONENTIAL_4 = "exponential('250ms').times(4)"
JITTERED_4 = "exponential('250ms').jittered().max_delay('4s').times(4)"


def run(*argv: str) -> tuple[int, str]:
    """Run the CLI in-process; return the exit code and what it printed to stdout."""
    out = io.StringIO()
    code = main(list(argv), stdout=out)
    return code, out.getvalue()


def run_json(*argv: str) -> list[dict[str, Any]]:
    code, text = run(*argv, "--json")
    assert code == 0
    rows: list[dict[str, Any]] = json.loads(text)
    return rows


def table_rows(text: str) -> list[list[str]]:
    """The cells of the table's data rows (lines starting with an attempt number)."""
    return [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]


def test_table_rows_match_hand_computed_exponential() -> None:
    """The table shows 250ms, 500ms, 1s, 2s and their running sums for exponential 250ms x4."""
    code, text = run("show", EXPONENTIAL_4)

    assert code == 0
    expected = [
        ["1", "250ms", "250ms", "250ms", "250ms"],
        ["2", "500ms", "500ms", "500ms", "750ms"],
        ["3", "1s", "1s", "1s", "1.75s"],
        ["4", "2s", "2s", "2s", "3.75s"],
    ]
    assert expected == table_rows(text)
    assert "attempt" in text
    assert "done: the schedule stops after at most 4 retries" in text
    assert f"schedule: {exponential('250ms').times(4)!r}" in text


def test_table_columns_are_aligned() -> None:
    """Every line of the table has the same width, numbers right-aligned under their headers."""
    _, text = run("show", "exponential(0.001).times(12)", "--attempts", "12")
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("attempt"))
    table = lines[start : lines.index("", start)]

    assert len(table) == 13
    assert len({len(line) for line in table}) == 1
    assert table[0].endswith("cumulative")


def test_json_rows_match_hand_computed_exponential() -> None:
    """``--json`` prints a list of {attempt, min, median, max, cumulative} in float seconds."""
    rows = run_json("show", EXPONENTIAL_4)

    expected = [
        {"attempt": 1, "min": 0.25, "median": 0.25, "max": 0.25, "cumulative": 0.25},
        {"attempt": 2, "min": 0.5, "median": 0.5, "max": 0.5, "cumulative": 0.75},
        {"attempt": 3, "min": 1.0, "median": 1.0, "max": 1.0, "cumulative": 1.75},
        {"attempt": 4, "min": 2.0, "median": 2.0, "max": 2.0, "cumulative": 3.75},
    ]
    assert expected == rows
    assert all(isinstance(row[key], float) for row in rows for key in row if key != "attempt")


def test_jittered_rows_are_ordered_and_within_jitter_bounds() -> None:
    """For a jittered schedule min <= median <= max and all lie in [0.8 d, 1.2 d) (capped)."""
    rows = run_json("show", JITTERED_4, "--runs", "400")
    nominal = [0.25, 0.5, 1.0, 2.0]

    assert [row["attempt"] for row in rows] == [1, 2, 3, 4]
    for row, delay in zip(rows, nominal, strict=True):
        assert 0.8 * delay <= row["min"] <= row["median"] <= row["max"] < 1.2 * delay
        assert row["min"] < row["max"]  # 400 runs of a continuous jitter are not all equal
    cumulative = [row["cumulative"] for row in rows]
    assert sorted(cumulative) == cumulative
    # The median total wait lies between the smallest and largest totals any run can reach.
    for row_index, total in enumerate(cumulative):
        assert 0.8 * sum(nominal[: row_index + 1]) <= total < 1.2 * sum(nominal[: row_index + 1])


def test_cumulative_never_exceeds_what_a_run_waited() -> None:
    """With within(d), the cumulative median wait stays within d (a sum of medians would not)."""
    rows = run_json("show", "fibonacci('100ms').jittered().within('5s')", "--runs", "200")
    assert all(row["cumulative"] <= 5.0 for row in rows)


def test_seeded_output_is_reproducible_and_seed_dependent() -> None:
    """The same seed prints the same table; another seed prints other jittered values."""
    first = run("show", JITTERED_4, "--runs", "50", "--seed", "7")
    again = run("show", JITTERED_4, "--runs", "50", "--seed", "7")
    other = run("show", JITTERED_4, "--runs", "50", "--seed", "8")

    assert first == again
    assert first != other


def test_summary_of_deterministic_schedule_makes_one_run() -> None:
    """A schedule that draws no random numbers is simulated once, whatever --runs says."""
    code, text = run("show", EXPONENTIAL_4, "--runs", "5000")

    assert code == 0
    assert "runs:     1 (no randomness" in text
    assert summarize(exponential(1).times(3), runs=5000).runs == 1


def test_jittered_summary_counts_all_runs() -> None:
    """A jittered schedule is simulated --runs times."""
    assert summarize(exponential(1).jittered().times(3), runs=123).runs == 123


def test_infinite_schedule_is_cut_at_attempts() -> None:
    """An infinite schedule stops at --attempts rows and the table says it was cut."""
    code, text = run("show", "exponential(1)", "--attempts", "3")
    rows = run_json("show", "exponential(1)", "--attempts", "3")

    assert code == 0
    assert [row["median"] for row in rows] == [1.0, 2.0, 4.0]
    assert "cut at 3 attempts" in text
    assert "done:" not in text


def test_schedule_ending_exactly_at_the_limit_is_not_cut() -> None:
    """A schedule with exactly --attempts recurrences is reported done, not cut."""
    code, text = run("show", "recurs(3)", "--attempts", "3")

    assert code == 0
    assert len(table_rows(text)) == 3
    assert "done: the schedule stops after at most 3 retries" in text


def test_stop_has_no_rows() -> None:
    """``stop()`` gives an empty JSON list and a table saying it stops at once."""
    code, text = run("show", "stop()")

    assert run_json("show", "stop()") == []
    assert code == 0
    assert "stops at once" in text


def test_runs_reaching_each_attempt_are_shown_when_they_differ() -> None:
    """When jitter makes some runs stop earlier, the table shows how many reached each attempt."""
    summary = summarize(spaced(1).jittered(min=0.5, max=1.5).within(3.2), runs=200)
    _, text = run("show", "spaced(1).jittered(min=0.5, max=1.5).within(3.2)", "--runs", "200")

    assert summary.rows[0].runs == 200
    assert summary.rows[-1].runs < 200
    assert text.splitlines()[3].split()[-1] == "runs"
    assert [str(row.runs) for row in summary.rows] == [cells[-1] for cells in table_rows(text)]


def test_operators_build_union_and_intersection() -> None:
    """``|`` and ``&`` in an expression build the same schedules as union and intersect."""
    union = parse_schedule("exponential(1).times(3) | spaced(2)")
    intersection = parse_schedule("exponential(1).times(3) & spaced(2)")

    assert exponential(1).times(3).union(spaced(2)).delays(5) == union.delays(5)
    assert exponential(1).times(3).intersect(spaced(2)).delays(5) == intersection.delays(5)


def test_allowed_methods_and_keywords_parse() -> None:
    """Allowed methods take positional and keyword values, strings and negative numbers."""
    text = (
        "exponential(base='100ms', factor=3).jittered(min=0.5, max=1.0).max_delay('1s')"
        ".add_delay(0.1).within('10 s').reset_after(60).and_then(recurs(2)).times(8)"
    )
    expected = (
        exponential("100ms", factor=3)
        .jittered(min=0.5, max=1.0)
        .max_delay("1s")
        .add_delay(0.1)
        .within("10 s")
        .reset_after(60)
        .and_then(recurs(2))
        .times(8)
    )

    assert repr(expected) == repr(parse_schedule(text))
    assert expected.delays(10, seed=3) == parse_schedule(text).delays(10, seed=3)


def test_every_public_constructor_is_callable_from_an_expression() -> None:
    """Each constructor the issue names is reachable by name in an expression."""
    import schedules

    names = {
        "cron",
        "forever",
        "recurs",
        "once",
        "stop",
        "spaced",
        "fixed",
        "exponential",
        "fibonacci",
        "linear",
        "from_delays",
        "decorrelated",
        "elapsed",
        "from_step_options",
    }

    assert names == set(CONSTRUCTORS)
    assert all(CONSTRUCTORS[name] is getattr(schedules, name) for name in names)
    step = parse_schedule("from_step_options(retries=4, backoff='exp', backoff_ms=200)")
    assert step.delays() == [0.2, 0.4, 0.8]
    # From the epoch (simulations start at 0): 03:00 on 1970-01-01, then daily.
    assert [10800.0, 86400.0] == parse_schedule("cron('0 3 * * *')").delays(2)


REFUSED = [
    ("__import__('os').system('touch {marker}')", "'.system()' is not allowed", 18),
    ("__import__('os')", "unknown function '__import__'", 1),
    ("exponential(1).__class__", "'.__class__' is not allowed (dunder attribute)", 16),
    ("exponential(1).__class__.__subclasses__()", "dunder attribute", 26),
    ("open('{marker}', 'w')", "unknown function 'open'", 1),
    ("(lambda: open('{marker}', 'w'))()", "calling a lambda is not allowed", 2),
    ("exponential(lambda: 1)", "a lambda is not allowed", 13),
    ("forever", "the name 'forever' is not allowed; call it: forever(...)", 1),
    ("os", "the name 'os' is not allowed", 1),
    ("exponential(1).times(2).delays(3)", "'.delays()' is not allowed; allowed methods:", 25),
    ("exponential(1).while_input(print)", "'.while_input()' is not allowed", 16),
    ("exponential(1)._replace()", "'._replace' is not allowed", 16),
    ("'x'.times(2)", "'.times()' applies to schedules only, not str 'x'", 5),
    ("(1).times(2)", "'.times()' applies to schedules only, not int 1", 5),
    ("'x'.join('ab')", "the method call '.join()' is not allowed", 5),
    ("exponential([1][0])", "a subscript is not allowed", 13),
    ("from_delays(*[1, 2])", "a starred argument (*args) is not allowed", 13),
    ("exponential(**{{'base': 1}})", "a keyword unpacking (**kwargs) is not allowed", 13),
    ("from_delays([x for x in (1, 2)])", "a list comprehension is not allowed", 13),
    ("spaced(f'{{1}}s')", "an f-string is not allowed", 8),
    ("spaced(1 + 1)", "the operator '+' is not allowed", 8),
    ("spaced(1) | 2", "'|' joins schedules only, not int 2", 13),
    ("spaced(1).union(2)", ".union() takes a schedule, not int 2", 17),
    ("spaced(1).union(other=2)", ".union() takes a schedule, not int 2", 23),
    ("spaced(b'1')", "the literal b'1' is not allowed", 8),
    ("spaced(1j)", "the literal 1j is not allowed", 8),
    ("spaced(-'1')", "unary minus or plus applies to numbers only", 8),
    ("spaced(not 1)", "the operator 'not' is not allowed", 8),
    ("spaced(1 if True else 2)", "a conditional expression is not allowed", 8),
    ("spaced(1).times", "attribute access '.times' is not allowed", 11),
    ("1.5", "the expression builds float 1.5, not a schedule", 1),
    ("exponential(1).times(", "invalid syntax", 21),
]


@pytest.mark.parametrize("case", REFUSED, ids=[case[0] for case in REFUSED])
def test_refused_expressions_name_construct_and_column(
    case: tuple[str, str, int],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Refused expressions exit 2 naming the construct and its column, and nothing runs."""
    template, message, column = case
    marker = tmp_path / "marker"
    expression = template.format(marker=marker)
    calls: list[str] = []

    def system(command: str) -> int:
        calls.append(command)
        return 0

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(os, "system", system)

    code, out = run("show", expression)
    err = capsys.readouterr().err

    assert code == 2
    assert out == ""
    assert message in err
    assert f"column {column})" in err
    assert "Traceback" not in err
    assert calls == []
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ExpressionError) as caught:
        parse_schedule(expression)
    assert column == caught.value.column


def test_error_pointer_marks_the_column_in_characters() -> None:
    """The caret sits under the offending construct, counting characters, not UTF-8 bytes."""
    with pytest.raises(ExpressionError) as caught:
        parse_schedule("from_delays('é', 'ü', x)")

    assert caught.value.column == 23
    assert caught.value.pointer() == "  from_delays('é', 'ü', x)\n" + " " * 24 + "^"


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("exponential(-1)", "exponential() rejected its arguments: base"),
        ("spaced('soon')", "'soon'"),
        ("recurs(-1)", "-1"),
        ("exponential(1, factor=0)", "factor"),
        ("exponential(1).jittered(min=2, max=1)", ".jittered() rejected its arguments"),
        ("exponential(1).times(-1)", ".times() rejected its arguments"),
        ("exponential()", "exponential() rejected its arguments"),
        ("forever(nonsense=1)", "forever() rejected its arguments"),
        ("spaced(10 ** 400)", "the operator '**' is not allowed"),
        ("spaced(1" + "0" * 400 + ")", "spaced() rejected its arguments"),
    ],
)
def test_constructor_errors_are_reported_without_traceback(
    expression: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Errors raised by constructors and methods become a one-line message and exit code 2."""
    code, out = run("show", expression)
    err = capsys.readouterr().err

    assert code == 2
    assert out == ""
    assert err.startswith("error: ")
    assert message in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("expression", "column"),
    [("exponential(1).times(-1)", 16), ("spaced(1).jittered(min=2, max=1)", 11)],
)
def test_method_errors_point_at_the_method(expression: str, column: int) -> None:
    """A method's own ValueError is reported at the method's name, not the start of the chain."""
    with pytest.raises(ExpressionError, match="rejected its arguments") as caught:
        parse_schedule(expression)

    assert caught.value.column == column


def test_parse_never_calls_eval_or_exec(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parser builds schedules without eval or exec."""

    def forbidden(*_: object) -> None:
        raise AssertionError("eval/exec called")

    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(builtins, "exec", forbidden)

    assert parse_schedule("exponential(1).times(2)").delays() == [1.0, 2.0]


def test_overlong_and_deeply_nested_expressions_are_refused() -> None:
    """Hostile sizes give an ExpressionError, not a crash."""
    with pytest.raises(ExpressionError, match="at most 10000"):
        parse_schedule("forever()" + " " * 10_000)
    with pytest.raises(ExpressionError):
        parse_schedule("(" * 3000 + "forever()" + ")" * 3000)
    with pytest.raises(ExpressionError, match="nested too deeply"):
        parse_schedule("forever()" + ".times(9)" * 1100)
    assert parse_schedule("forever()" + ".union(forever())" * 50).delays(2) == [0.0, 0.0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["show", "forever()", "--runs", "0"], "--runs: must be between 1 and 100000, got 0"),
        (["show", "forever()", "--attempts", "x"], "--attempts: expected a whole number, got 'x'"),
        (["show"], "EXPR"),
        (
            ["show", "spaced(1).jittered()", "--runs", "100000", "--attempts", "101"],
            "too much work",
        ),
        (["plot", "forever()"], "invalid choice: 'plot'"),
    ],
)
def test_bad_options_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Bad command-line options exit with code 2 and say what is wrong."""
    code, _ = run(*argv)

    assert code == 2
    assert message in capsys.readouterr().err


def test_plot_writes_a_png(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--plot out.png`` writes a real PNG file next to the printed table."""
    pytest.importorskip("matplotlib")
    target = tmp_path / "out.png"

    code, text = run("show", JITTERED_4, "--runs", "50", "--plot", str(target))

    assert code == 0
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert target.stat().st_size > 1000
    assert len(table_rows(text)) == 4
    assert f"plot written to {target}" in capsys.readouterr().err


def test_plot_without_matplotlib_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without matplotlib, --plot exits 1 saying how to install it."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    target = tmp_path / "out.png"

    code, _ = run("show", EXPONENTIAL_4, "--plot", str(target))

    assert code == 1
    assert "pip install matplotlib" in capsys.readouterr().err
    assert not target.exists()


def test_plot_to_unwritable_path_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plot path that cannot be written is reported, not raised."""
    pytest.importorskip("matplotlib")

    code, _ = run("show", EXPONENTIAL_4, "--plot", str(tmp_path / "missing" / "out.png"))

    assert code == 1
    assert "cannot write the plot" in capsys.readouterr().err


def test_format_duration_picks_readable_units() -> None:
    """Durations print with a unit from microseconds to days."""
    assert [format_duration(s) for s in (0.0, 0.0005, 0.25, 1.2, 90.0, 7200.0, 2147483.647)] == [
        "0s",
        "500us",
        "250ms",
        "1.2s",
        "1.5min",
        "2h",
        "24.86d",
    ]


def test_summarize_rejects_non_positive_counts() -> None:
    """summarize() names the bad count."""
    with pytest.raises(ValueError, match="runs must be at least 1, got 0"):
        summarize(forever(), runs=0)
    with pytest.raises(ValueError, match="attempts must be at least 1, got -2"):
        summarize(forever(), attempts=-2)


def test_real_subprocess_prints_json_and_refuses_bad_input(tmp_path: Path) -> None:
    """``python -m schedules show`` works as a real process: JSON rows, then exit 2 on bad input."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    ok = subprocess.run(
        [sys.executable, "-m", "schedules", "show", EXPONENTIAL_4, "--json"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=60,
    )
    marker = tmp_path / "marker"
    refused = subprocess.run(
        [sys.executable, "-m", "schedules", "show", f"__import__('os').system('touch {marker}')"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=60,
    )

    assert (ok.returncode, ok.stderr) == (0, "")
    assert [row["cumulative"] for row in json.loads(ok.stdout)] == [0.25, 0.75, 1.75, 3.75]
    assert refused.returncode == 2
    assert "the method call '.system()' is not allowed" in refused.stderr
    assert not marker.exists()


@pytest.mark.parametrize("expression", ["", "   ", "\n\t "])
def test_an_empty_expression_is_one_clear_line(
    expression: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An empty (or all-whitespace) expression exits 2 with one line saying so."""
    code, _ = run("show", expression)
    error = capsys.readouterr().err
    assert (2, 1) == (code, len(error.splitlines()))
    assert "the expression is empty" in error


@pytest.mark.parametrize(
    "expression", [" exponential(1).times(2)", "\n\t exponential(1).times(2) "]
)
def test_whitespace_around_the_expression_is_ignored(expression: str) -> None:
    """Leading whitespace (spaces, tabs, newlines) is ignored, as trailing whitespace is."""
    assert [1.0, 2.0] == [row["median"] for row in run_json("show", expression)]


def test_positions_count_from_the_text_as_given(capsys: pytest.CaptureFixture[str]) -> None:
    """After ignored leading whitespace, an error still points at the right column."""
    code, _ = run("show", "   spaced(1).nope()")
    error = capsys.readouterr().err.splitlines()
    assert code == 2
    assert "(line 1, column 14)" in error[0]
    assert error[2].index("^") - 2 == 13


def test_an_integer_beyond_the_digit_limit_is_one_clear_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A literal longer than Python converts gets one line naming its length, not a traceback."""
    code, _ = run("show", "spaced(1) | recurs(" + "7" * 5000 + ")")
    error = capsys.readouterr().err
    assert (2, 1) == (code, len(error.splitlines()))
    assert f"has 5000 digits; at most {sys.get_int_max_str_digits()} digits are" in error
    assert "(line 1, column 20)" in error


def test_a_long_line_is_cut_around_the_caret(capsys: pytest.CaptureFixture[str]) -> None:
    """The pointer under an error shows the part of a long expression around the problem."""
    expression = " | ".join(["spaced(1)"] * 200) + " | oops()"
    code, _ = run("show", expression)
    _, source, caret = capsys.readouterr().err.splitlines()
    assert code == 2
    assert len(source) < 90
    assert "oops()" in source
    assert "o" == source[caret.index("^")]


def test_a_short_expression_with_too_much_work_is_refused_at_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A 300-way jittered union, 1,000 runs of 1,000 attempts, would run for minutes: refused."""
    expression = " | ".join(["spaced(1).jittered()"] * 300)
    code, text = run("show", expression, "--runs", "1000", "--attempts", "1000")
    error = capsys.readouterr().err
    assert (2, "") == (code, text)
    assert "too much work for this 899-part expression" in error
    assert "at most 50,000,000" in error


def test_runs_count_only_for_schedules_with_randomness() -> None:
    """Many runs of a schedule without randomness are one run, so they are never refused."""
    rows = run_json("show", "exponential(1).times(3)", "--runs", "100000", "--attempts", "200")
    assert [1.0, 2.0, 4.0] == [row["median"] for row in rows]


@pytest.mark.parametrize("name", ["out.xyz", "out", "dir.d/plot"])
def test_plot_with_an_unsupported_extension_exits_1(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--plot to a file type matplotlib cannot write exits 1 with the types it can, at once."""
    pytest.importorskip("matplotlib")
    code, text = run("show", EXPONENTIAL_4, "--plot", str(tmp_path / name))
    error = capsys.readouterr().err
    assert (1, "") == (code, text)
    assert "the file type comes from the extension" in error
    assert "png" in error
    assert "Traceback" not in error


def test_a_broken_extension_is_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An installed constructor that cannot be imported is an exit 2 naming it."""
    import importlib.metadata

    broken = importlib.metadata.EntryPoint("broken", "no_such_module_here:make", "schedules.show")

    def entry_points(**selection: str) -> list[importlib.metadata.EntryPoint]:
        return [broken] if selection.get("group") == "schedules.show" else []

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    code, _ = run("show", "broken(1)")
    assert code == 2
    assert "the constructor 'broken' could not be loaded" in capsys.readouterr().err


def test_respect_retry_after_can_be_shown() -> None:
    """effects.http.respect_retry_after, installed as a show constructor, shows its schedule."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "schedules",
            "show",
            "respect_retry_after(exponential(1).max_delay(4), limit=60).times(3)",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=60,
    )
    assert (0, "") == (shown.returncode, shown.stderr)
    assert [1.0, 2.0, 4.0] == [row["median"] for row in json.loads(shown.stdout)]


def test_an_installed_constructor_checks_its_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    """respect_retry_after(1) in an expression is an exit 2 naming the problem, no traceback."""
    code, _ = run("show", "respect_retry_after(1, limit=60)")
    error = capsys.readouterr().err
    assert code == 2
    assert "respect_retry_after() rejected its arguments: a schedule must be" in error


def test_bytes_that_are_not_utf8_are_one_clear_line() -> None:
    """A command-line argument with invalid UTF-8 exits 2 naming where, not a traceback."""
    shown = subprocess.run(
        [sys.executable, "-m", "schedules", "show", b"  spaced('\xff')"],
        capture_output=True,
        check=False,
        timeout=60,
    )
    error = shown.stderr.decode("utf-8", "replace")
    assert (2, 1) == (shown.returncode, len(error.splitlines()))
    assert "not UTF-8 text (line 1, column 11)" in error
