"""
The command line: ``python -m schedules show EXPR``.

``show`` runs a schedule many times with seeded randomness (each attempt taking no time) and prints,
per attempt, the min, median and max delay and the cumulative median wait. Exit codes: 0 on
success, 1 when the plot cannot be drawn or written, 2 for bad input, 130 when Ctrl-C
interrupted it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
from array import array
from collections.abc import Callable, Sequence
from typing import Any, Final, TextIO

from schedules import RandomLike, Schedule
from schedules._expression import ExpressionError, parse_counted
from schedules._frozen import frozen
from schedules._schedule import timeline

__all__ = ["Row", "Summary", "WorkLimitError", "format_duration", "main", "summarize"]

DEFAULT_RUNS: Final = 1000
DEFAULT_ATTEMPTS: Final = 10
DEFAULT_SEED: Final = 0
MAX_RUNS: Final = 100_000
MAX_ATTEMPTS: Final = 10_000
MAX_WORK: Final = 50_000_000
"""
Most work one ``show`` does: steps simulated times (schedules in the expression + 4), about
10 s on a slow core. A step of a schedule built from *n* schedules costs about *n* + 4 units
(the constructor or combinator steps, plus the loop and the statistics).
"""
STEP_OVERHEAD: Final = 4
EXIT_INTERRUPTED: Final = 130
PLOT_HINT: Final = "pip install matplotlib (or the plot extra: pip install '.[plot]' in a checkout)"


@frozen
class Row:
    """
    Delay statistics for one attempt, in seconds.

    Attributes:
        attempt: 1-based number of the failed attempt after which this delay is waited.
        min: Shortest delay seen over the runs that reached this attempt.
        median: Median delay over those runs.
        max: Longest delay over those runs.
        cumulative: Median, over the runs that reached this attempt, of the total wait up to
            and including it (never more than any run really waited, unlike a sum of medians).
        runs: How many runs reached this attempt (the others had stopped).
    """

    attempt: int
    min: float
    median: float
    max: float
    cumulative: float
    runs: int

    def as_json(self) -> dict[str, int | float]:
        """The row in the design's JSON form (floats in seconds)."""
        return {
            "attempt": self.attempt,
            "min": self.min,
            "median": self.median,
            "max": self.max,
            "cumulative": self.cumulative,
        }


@frozen
class Summary:
    """
    What ``show`` found about a schedule.

    Attributes:
        rows: One row per attempt, in order.
        runs: Runs simulated (1 when the schedule drew no random numbers: every run is the same).
        seed: Seed of the first run; run *i* is seeded with ``seed + i``.
        cut: True if some run was still going after the last row (it was cut at the limit).
    """

    rows: tuple[Row, ...]
    runs: int
    seed: int
    cut: bool


class _CountingRandom:
    """A seeded ``random.Random`` that remembers whether it was drawn from."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)
        self.drawn = False

    def random(self) -> float:
        self.drawn = True
        return self._random.random()


def _run(schedule: Schedule[Any, Any], limit: int, rng: RandomLike) -> array[float]:
    """Delays of one simulated run, at most ``limit`` of them; each attempt takes no time."""
    steps = timeline(schedule, itertools.repeat(None, limit), rng)
    # array('d'): 8 bytes a delay, so ten million of them stay under 100 MB.
    return array("d", [delay for *_, delay in steps if delay is not None])


class WorkLimitError(ValueError):
    """``summarize`` would simulate more steps than its *max_steps* allows."""


def summarize(
    schedule: Schedule[Any, Any],
    *,
    runs: int = DEFAULT_RUNS,
    attempts: int = DEFAULT_ATTEMPTS,
    seed: int = DEFAULT_SEED,
    max_steps: int | None = None,
) -> Summary:
    """
    Simulate *schedule* *runs* times with seeds ``seed, seed + 1, ...`` and summarize each attempt.

    Every run feeds ``None`` as the input and lets each attempt take no time. Runs are cut after
    *attempts* delays. If the first run never draws a random number, every run would be the same,
    so only that one is made. Memory: 8 bytes per simulated delay.

    Args:
        schedule: The schedule to simulate.
        runs: Number of seeded runs; at least 1.
        attempts: Most attempts (rows) to simulate; at least 1.
        seed: Seed of the first run.
        max_steps: Most steps to simulate in all, or ``None`` for no bound; checked before
            the runs after the first.

    Raises:
        ValueError: If *runs* or *attempts* is below 1.
        WorkLimitError: If the runs would take more than *max_steps* steps.

    Example:
        >>> from schedules import exponential
        >>> summary = summarize(exponential("250ms").times(4))
        >>> [row.median for row in summary.rows], [row.cumulative for row in summary.rows]
        ([0.25, 0.5, 1.0, 2.0], [0.25, 0.75, 1.75, 3.75])
        >>> summary.cut, summary.runs
        (False, 1)
    """
    if runs < 1:
        msg = f"runs must be at least 1, got {runs!r}"
        raise ValueError(msg)
    if attempts < 1:
        msg = f"attempts must be at least 1, got {attempts!r}"
        raise ValueError(msg)
    # One delay past the limit tells a cut schedule from one that ended exactly there.
    first_rng = _CountingRandom(seed)
    all_runs = [_run(schedule, attempts + 1, first_rng)]
    if first_rng.drawn and runs > 1:
        steps = runs * (attempts + 1)
        if max_steps is not None and steps > max_steps:
            msg = f"{runs} runs of {attempts + 1} steps are {steps:,} steps; at most {max_steps:,}"
            raise WorkLimitError(msg)
        all_runs.extend(
            _run(schedule, attempts + 1, random.Random(seed + index)) for index in range(1, runs)
        )
    cut = any(len(delays) > attempts for delays in all_runs)
    # Running totals, one per run: the cumulative wait of each run up to the current attempt.
    totals = array("d", bytes(8 * len(all_runs)))
    rows: list[Row] = []
    for index in range(min(attempts, max(len(delays) for delays in all_runs))):
        reached = [number for number, delays in enumerate(all_runs) if len(delays) > index]
        column = [all_runs[number][index] for number in reached]
        for number, delay in zip(reached, column, strict=True):
            totals[number] += delay
        median = float(statistics.median(column))
        cumulative = float(statistics.median([totals[number] for number in reached]))
        rows.append(Row(index + 1, min(column), median, max(column), cumulative, len(column)))
    return Summary(tuple(rows), len(all_runs), seed, cut)


def format_duration(seconds: float) -> str:
    """
    Show *seconds* with a readable unit and 4 significant digits.

    Example:
        >>> [format_duration(s) for s in (0, 0.25, 1.2, 90, 7200, 2147483.647)]
        ['0s', '250ms', '1.2s', '1.5min', '2h', '24.86d']
    """
    if seconds == 0:
        return "0s"
    for limit, scale, unit in (
        (1e-3, 1e6, "us"),
        (1.0, 1e3, "ms"),
        (60.0, 1.0, "s"),
        (3600.0, 1 / 60, "min"),
        (86400.0, 1 / 3600, "h"),
    ):
        if seconds < limit:
            return f"{seconds * scale:.4g}{unit}"
    return f"{seconds / 86400:.4g}d"


def render_table(schedule: Schedule[Any, Any], summary: Summary, attempts: int) -> str:
    """The aligned text table ``show`` prints."""
    lines = [f"schedule: {schedule!r}"]
    if summary.runs == 1:
        lines.append("runs:     1 (no randomness: every run is the same)")
    else:
        last = summary.seed + summary.runs - 1
        lines.append(f"runs:     {summary.runs} seeded runs (seeds {summary.seed}..{last})")
    varying = any(row.runs != summary.runs for row in summary.rows)
    header = ["attempt", "min", "median", "max", "cumulative"] + (["runs"] if varying else [])
    table = [header]
    for row in summary.rows:
        cells = [str(row.attempt)]
        cells += [format_duration(value) for value in (row.min, row.median, row.max)]
        cells.append(format_duration(row.cumulative))
        table.append(cells + ([str(row.runs)] if varying else []))
    widths = [max(len(cells[i]) for cells in table) for i in range(len(header))]
    lines.append("")
    lines.extend(
        "  ".join(cell.rjust(width) for cell, width in zip(cells, widths, strict=True))
        for cells in table
    )
    lines.append("")
    count = len(summary.rows)
    if summary.cut:
        lines.append(f"cut at {attempts} attempts: the schedule goes on (--attempts shows more)")
    elif count == 0:
        lines.append("done: the schedule stops at once (no retries)")
    else:
        lines.append(f"done: the schedule stops after at most {count} retries")
    lines.append("delay after each failed attempt; cumulative = median total wait up to it")
    return "\n".join(lines)


def plot(schedule: Schedule[Any, Any], summary: Summary, path: str) -> None:
    """
    Draw the min/median/max band and the cumulative wait to *path* with matplotlib.

    Raises:
        ImportError: If matplotlib is not installed.
        OSError: If the file cannot be written.
    """
    # matplotlib is an optional extra; import it only when a plot is asked for. The Figure API
    # (no pyplot) needs no display and touches no global state.
    from matplotlib.figure import Figure  # noqa: PLC0415
    from matplotlib.ticker import MaxNLocator  # noqa: PLC0415

    attempts = [row.attempt for row in summary.rows]
    medians = [row.median for row in summary.rows]
    lows = [row.min for row in summary.rows]
    highs = [row.max for row in summary.rows]
    figure = Figure(figsize=(8, 6), layout="constrained")
    delay_axes, total_axes = figure.subplots(2, 1, sharex=True)
    delay_axes.fill_between(attempts, lows, highs, alpha=0.2, label="min..max")
    delay_axes.errorbar(
        attempts,
        medians,
        yerr=[
            [median - low for median, low in zip(medians, lows, strict=True)],
            [high - median for median, high in zip(medians, highs, strict=True)],
        ],
        marker="o",
        capsize=4,
        label="median (bars: min..max)",
    )
    delay_axes.set_ylabel("delay (s)")
    delay_axes.legend()
    delay_axes.set_title(repr(schedule), fontsize="small")
    total_axes.plot(
        attempts, [row.cumulative for row in summary.rows], marker="o", color="tab:orange"
    )
    total_axes.set_ylabel("cumulative median wait (s)")
    total_axes.set_xlabel("attempt" + (" (cut)" if summary.cut else ""))
    total_axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    figure.savefig(path)  # pyright: ignore[reportUnknownMemberType]


def _positive(limit: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            msg = f"expected a whole number, got {text!r}"
            raise argparse.ArgumentTypeError(msg) from None
        if not 1 <= value <= limit:
            msg = f"must be between 1 and {limit}, got {value}"
            raise argparse.ArgumentTypeError(msg)
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m schedules",
        description="Inspect retry schedules without running anything.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    show = commands.add_parser(
        "show",
        help="print the delays a schedule produces, per attempt",
        description=(
            "Print, per attempt, the min, median and max delay over seeded runs and the "
            "cumulative median wait. EXPR is parsed, never evaluated: only this package's "
            "constructors, methods, '|', '&', numbers and strings are allowed."
        ),
    )
    show.add_argument("expr", metavar="EXPR", help="e.g. \"exponential('250ms').times(4)\"")
    show.add_argument(
        "--runs",
        type=_positive(MAX_RUNS),
        default=DEFAULT_RUNS,
        help=f"seeded runs for schedules with randomness (default {DEFAULT_RUNS})",
    )
    show.add_argument(
        "--attempts",
        type=_positive(MAX_ATTEMPTS),
        default=DEFAULT_ATTEMPTS,
        help=f"cut longer schedules after this many attempts (default {DEFAULT_ATTEMPTS})",
    )
    show.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"first seed (default {DEFAULT_SEED})"
    )
    show.add_argument("--json", action="store_true", help="print the rows as JSON (seconds)")
    show.add_argument(
        "--plot", metavar="FILE", help="also draw the rows to FILE (needs matplotlib)"
    )
    return parser


def _plot_problem(path: str) -> str | None:
    """Why *path* cannot be plotted (matplotlib missing, unknown extension), or None."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase  # noqa: PLC0415
    except ImportError:
        return f"--plot needs matplotlib; install it with: {PLOT_HINT}"
    formats: dict[str, str] = FigureCanvasBase.get_supported_filetypes()
    extension = path.rpartition(".")[2].lower() if "." in path.rpartition("/")[2] else ""
    if extension not in formats:
        shown = f"'.{extension}'" if extension else "no extension"
        return (
            f"--plot {path!r} has {shown}; the file type comes from the extension, one of: "
            + ", ".join(sorted(formats))
        )
    return None


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """
    Run the command line with *argv* (default ``sys.argv[1:]``) and return the exit code.

    Output goes to *stdout* (default ``sys.stdout``), errors to ``sys.stderr``: one line, plus
    the expression with a caret under the problem where that helps. Ctrl-C prints
    ``interrupted`` and returns 130.
    """
    try:
        return _show(argv, sys.stdout if stdout is None else stdout)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _show(argv: Sequence[str] | None, out: TextIO) -> int:
    try:
        arguments = _parser().parse_args(argv)
    except SystemExit as exit_:  # argparse reports bad usage itself and exits 2 (0 for --help)
        return exit_.code if isinstance(exit_.code, int) else 2
    runs: int = arguments.runs
    attempts: int = arguments.attempts
    try:
        schedule, size = parse_counted(arguments.expr)
    except ExpressionError as error:
        pointer = error.pointer()
        print(f"error: {error}" + (f"\n{pointer}" if pointer else ""), file=sys.stderr)
        return 2
    cost = size + STEP_OVERHEAD
    max_steps = MAX_WORK // cost
    if attempts + 1 > max_steps:
        print(
            f"error: --attempts {attempts} is too much work for this {size}-part expression: "
            f"{(attempts + 1) * cost:,} units, at most {MAX_WORK:,} (lower --attempts)",
            file=sys.stderr,
        )
        return 2
    if arguments.plot is not None and (problem := _plot_problem(arguments.plot)) is not None:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    try:
        summary = summarize(
            schedule, runs=runs, attempts=attempts, seed=arguments.seed, max_steps=max_steps
        )
    except WorkLimitError:
        print(
            f"error: --runs {runs} times --attempts {attempts} is too much work for this "
            f"{size}-part expression: {runs * (attempts + 1) * cost:,} units, at most "
            f"{MAX_WORK:,} (lower --runs or --attempts)",
            file=sys.stderr,
        )
        return 2
    if arguments.json:
        print(json.dumps([row.as_json() for row in summary.rows], indent=2), file=out)
    else:
        print(render_table(schedule, summary, attempts), file=out)
    if arguments.plot is not None:
        try:
            plot(schedule, summary, arguments.plot)
        except ImportError:
            print(f"error: --plot needs matplotlib; install it with: {PLOT_HINT}", file=sys.stderr)
            return 1
        except (OSError, ValueError) as error:
            print(f"error: cannot write the plot to {arguments.plot!r}: {error}", file=sys.stderr)
            return 1
        print(f"plot written to {arguments.plot}", file=sys.stderr)
    return 0
