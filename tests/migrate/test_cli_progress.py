"""Progress rendering and the run summary of the CLI, in process with a fake clock."""

from __future__ import annotations

import io
from typing import Literal

from migrate import Counts, DefinitionResult, ErrorCount, ProgressEvent, RunSummary
from migrate._cli import BarProgress, LogProgress, summary_text


class FakeClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def utf8_stream() -> tuple[io.TextIOWrapper, io.BytesIO]:
    """A UTF-8 text stream, as a terminal's would be, and the bytes written to it."""
    raw = io.BytesIO()
    return io.TextIOWrapper(raw, encoding="utf-8", newline="", write_through=True), raw


def _event(
    kind: Literal["start", "item", "window", "end"],
    window: int,
    processed: int,
    total: int | None,
    failed: int = 0,
) -> ProgressEvent:
    counts = Counts(migrated=processed - failed, failed=failed)
    return ProgressEvent("r1", "books", "normal", kind, window, processed, total, counts)


def test_log_progress_prints_start_windows_and_done_with_rate() -> None:
    """Log progress prints a start line, a line per window with the rate, and a done line."""
    out, clock = io.StringIO(), FakeClock()
    progress = LogProgress(out, clock)
    progress(_event("start", 0, 0, 2000))
    clock.now += 2.0
    progress(_event("window", 1, 1000, 2000, failed=3))
    clock.now += 2.0
    progress(_event("window", 2, 2000, 2000, failed=3))
    progress(_event("window", 3, 2000, 2000, failed=3))  # the empty last window: no line
    progress(_event("end", 3, 2000, 2000, failed=3))
    assert out.getvalue().splitlines() == [
        "[books] start (mode normal, 2,000 items)",
        "[books] window 1: 1,000/2,000 items (migrated 997, failed 3), 500 items/s",
        "[books] window 2: 2,000/2,000 items (migrated 1,997, failed 3), 500 items/s",
        "[books] done: 2,000 items in 4.0s (migrated 1,997, failed 3)",
    ]


def test_bar_progress_redraws_one_line_and_ends_it() -> None:
    """Bars redraw in place with carriage returns and end the line when the definition ends."""
    (out, raw), clock = utf8_stream(), FakeClock()
    progress = BarProgress(out, clock)
    progress(_event("start", 0, 0, 100))
    clock.now += 1.0
    progress(_event("window", 1, 50, 100, failed=1))
    clock.now += 1.0
    progress(_event("end", 2, 100, 100, failed=1))
    frames = raw.getvalue().decode().split("\r")[1:]
    assert len(frames) == 3
    assert frames[1].rstrip() == "books           " + "\u2588" * 12 + "\u2591" * 12 + (
        " 50/100  50%  50/s  failed 1"
    )
    assert frames[2].endswith("100/100 100%  50/s  failed 1  2.0s\n")
    assert "\n" not in "".join(frames[:2])


def test_progress_mentions_retries_so_far() -> None:
    """Log lines and bars add the retries made so far, once there are any."""
    out, clock = io.StringIO(), FakeClock()
    counts = Counts(migrated=10)
    event = ProgressEvent("r1", "books", "normal", "window", 1, 10, None, counts, retries=1234)
    LogProgress(out, clock)(event)
    assert "[books] window 1: 10 items (migrated 10, retries 1,234)\n" == out.getvalue()
    out = io.StringIO()
    bar = BarProgress(out, clock)
    bar(_event("start", 0, 0, None))
    clock.now += 1.0
    bar(event)
    assert "books           \\ 10 items  10/s  retries 1,234" == out.getvalue().split("\r")[-1]


def test_bar_progress_skips_redraws_faster_than_a_tenth_of_a_second() -> None:
    """Windows that arrive faster than the redraw interval do not redraw the bar."""
    out, clock = io.StringIO(), FakeClock()
    progress = BarProgress(out, clock)
    progress(_event("start", 0, 0, None))
    for n in range(1, 11):
        clock.now += 0.01
        progress(_event("window", n, n * 10, None))
    assert out.getvalue().count("\r") == 2  # start, then one redraw after 0.1 s


def test_bar_progress_moves_on_item_events_between_windows() -> None:
    """Item events (inside a window) redraw the bar too, at most every 0.1 s."""
    out, clock = io.StringIO(), FakeClock()
    progress = BarProgress(out, clock)
    progress(_event("start", 0, 0, 1000))
    clock.now += 0.05
    progress(_event("item", 0, 5, 1000))  # too soon: no redraw
    clock.now += 0.1
    progress(_event("item", 0, 15, 1000))
    frames = out.getvalue().split("\r")[1:]
    assert len(frames) == 2
    assert " 15/1,000   2%" in frames[1]


def test_log_progress_ignores_item_events() -> None:
    """Log lines stay one per window: item events print nothing."""
    out, clock = io.StringIO(), FakeClock()
    progress = LogProgress(out, clock)
    progress(_event("start", 0, 0, None))
    progress(_event("item", 0, 5, None))
    assert ["[books] start (mode normal)"] == out.getvalue().splitlines()


def test_bar_progress_without_total_counts_items_in_ascii() -> None:
    """Without a known total the bar shows a count; a non-UTF-8 stream gets ASCII only."""
    out, clock = io.StringIO(), FakeClock()
    progress = BarProgress(out, clock)
    progress(_event("start", 0, 0, None))
    clock.now += 0.5
    progress(_event("end", 1, 300, None))
    assert out.getvalue().split("\r")[-1] == "books             300 items  600/s  0.5s\n"


def test_summary_text_has_counts_table_errors_and_next_steps() -> None:
    """The summary shows per-definition counts and retries, a total, the top errors, calls that
    failed after retrying, and what to do next."""
    summary = RunSummary(
        run_id="r1",
        status="failed",
        started_at=10.0,
        ended_at=12.5,
        definitions={
            "authors": DefinitionResult(
                "normal", "failed", Counts(migrated=97, failed=3), retries=1234, gave_up=1
            ),
            "books": DefinitionResult("normal", "blocked", Counts(), blocked="authors failed"),
        },
        top_errors=(ErrorCount("authors", "destination", "DestinationError", "HTTP 422", 3),),
    )
    assert summary_text(summary).splitlines() == [
        "run r1 failed in 2.5s",
        "",
        "definition  mode    migrated  skipped  failed  unchanged  needs-update  retries",
        "authors     normal        97        0       3          0             0    1,234",
        "books       normal         0        0       0          0             0        0",
        "total                     97        0       3          0             0    1,234",
        "",
        "authors: 1 retried call failed all the same (retries ran out, the retry budget refused, "
        "or a later error was not retryable)",
        "books: not run: authors failed",
        "",
        "most common errors:",
        "count  definition  kind         error",
        "    3  authors     destination  DestinationError: HTTP 422",
        "",
        "see the evidence: migrate failures authors",
        "after fixing the cause: migrate run authors --failed",
    ]


def test_log_progress_says_1_item_not_1_items() -> None:
    """Counts of one take the singular: start, window (with and without total) and done."""
    out, clock = io.StringIO(), FakeClock()
    progress = LogProgress(out, clock)
    progress(_event("start", 0, 0, 1))
    clock.now += 1.0
    progress(_event("window", 1, 1, 1))
    progress(_event("end", 1, 1, 1))
    unknown = LogProgress(out, clock)
    unknown(_event("start", 0, 0, None))
    unknown(_event("window", 1, 1, None))
    assert out.getvalue().splitlines() == [
        "[books] start (mode normal, 1 item)",
        "[books] window 1: 1/1 item (migrated 1), 1 item/s",
        "[books] done: 1 item in 1.0s (migrated 1)",
        "[books] start (mode normal)",
        "[books] window 1: 1 item (migrated 1)",
    ]


def test_bar_progress_without_total_says_1_item() -> None:
    """A bar without a known total counts "1 item", then "2 items"."""
    out, clock = io.StringIO(), FakeClock()
    progress = BarProgress(out, clock)
    progress(_event("start", 0, 1, None))
    clock.now += 1.0
    progress(_event("window", 1, 2, None))
    assert ["books           - 1 item", "books           \\ 2 items  2/s"] == (
        out.getvalue().split("\r")[1:]
    )
