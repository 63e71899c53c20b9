"""cron(...) prints as the call that built it, parses back, pickles, and works in ``show``."""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
from typing import Any

import pytest

from schedules import Schedule, cron, spaced
from schedules._cli import main
from schedules._expression import parse_schedule
from tests.schedules._cron_support import dues


@pytest.mark.parametrize(
    ("built", "text"),
    [
        (cron("0 3 * * *"), "cron('0 3 * * *')"),
        (cron("0 3 * * *", tz="UTC"), "cron('0 3 * * *')"),
        (cron("0 3 * * *", tz="Europe/Berlin"), "cron('0 3 * * *', tz='Europe/Berlin')"),
        (cron(" */15\t9-17 * * MON-fri "), "cron('*/15 9-17 * * MON-fri')"),
        (cron("0 3 * * *").times(3), "cron('0 3 * * *').times(3)"),
        (cron("0 3 * * *") | spaced(60), "cron('0 3 * * *').union(spaced(60))"),
    ],
)
def test_repr_is_the_call_and_parses_back(built: Schedule[Any, Any], text: str) -> None:
    """The repr reads as the call (whitespace normalized, UTC left out) and parses back equal."""
    assert text == repr(built)
    parsed = parse_schedule(text)
    assert text == repr(parsed)
    assert built.delays(5) == parsed.delays(5)


def test_equality_is_the_expression_and_the_zone() -> None:
    """Same text (up to whitespace) and zone: equal and same hash; another zone or text: not."""
    assert cron("0 3 * * *") == cron("0  3 * * *")
    assert hash(cron("0 3 * * *")) == hash(cron("0\t3 * * *"))
    assert cron("0 3 * * *") != cron("0 3 * * *", tz="Europe/Berlin")
    assert cron("0 3 * * 0") != cron("0 3 * * 7")


@pytest.mark.parametrize("tz", ["UTC", "Europe/Berlin"])
def test_a_cron_pickles(tz: str) -> None:
    """Pickled and loaded (as a worker process gets it), a cron gives the same due times."""
    schedule = cron("30 2 * * *", tz=tz)

    loaded = pickle.loads(pickle.dumps(schedule))

    assert schedule == loaded
    assert dues(schedule, "2026-03-28T12:00Z", 3) == dues(loaded, "2026-03-28T12:00Z", 3)


def test_show_prints_the_waits_from_the_epoch() -> None:
    """``show --json`` simulates from 0 (1970-01-01 UTC): 3 h to 03:00, then a day each."""
    out = io.StringIO()

    code = main(["show", "cron('0 3 * * *')", "--json", "--attempts", "3"], stdout=out)

    assert 0 == code
    assert [10800.0, 86400.0, 86400.0] == [row["median"] for row in json.loads(out.getvalue())]


def test_show_in_a_real_process_with_a_zone() -> None:
    """``python -m schedules show "cron('0 3 * * *', tz='Europe/Berlin')"`` runs and prints it."""
    shown = subprocess.run(
        [sys.executable, "-m", "schedules", "show", "cron('0 3 * * *', tz='Europe/Berlin')"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        timeout=60,
    )

    assert (0, "") == (shown.returncode, shown.stderr)
    assert "schedule: cron('0 3 * * *', tz='Europe/Berlin')" in shown.stdout
    # 1970-01-01 00:00 UTC is 01:00 in Berlin: 2 h to 03:00.
    assert "      1   2h      2h   2h          2h" in shown.stdout


@pytest.mark.parametrize(
    ("expression", "says"),
    [
        ("cron('61 * * * *')", "the minute field '61' has 61, out of range: allowed are 0-59"),
        ("cron('0 0 3 * * *')", "has 6 fields"),
        ("cron('0 3 * * *', tz='Nowhere/City')", "tz 'Nowhere/City' is not a time zone"),
        ("cron(b'0 3 * * *')", "the literal b'0 3 * * *' is not allowed"),
        ("cron('0 3 * * *', 'Europe/Berlin')", "takes 1 positional argument"),
    ],
)
def test_show_refuses_a_bad_cron_in_one_line(
    expression: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bad cron in ``show``: exit 2 and an error naming what was wrong, no traceback."""
    code = main(["show", expression], stdout=io.StringIO())
    error = capsys.readouterr().err

    assert 2 == code
    assert says in error
    assert "Traceback" not in error
