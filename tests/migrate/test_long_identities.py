"""Identities of any length: beyond Python's 4300-digit limit on integer conversions."""

from __future__ import annotations

import decimal
import json
import sqlite3
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

import migrate
from migrate._text import natural_key
from tests.migrate.cli_support import run_main
from tests.migrate.helpers import config_of, states, write_csv, write_jsonl

LONG = "9" * 5000
LONGER_SEVEN = "7" + "0" * 5000  # 5001 digits: after LONG in natural order
CONFIG = """
import migrate


def process(item, scope):
    raise ValueError("bad record")


config = migrate.Config(
    [migrate.Migration("p", migrate.CsvSource("p.csv"), process)], store="sqlite:///state.db"
)
"""


def _failing(item: migrate.Item, scope: migrate.Scope) -> None:
    raise ValueError("bad record")


def test_the_limit_is_the_default_one() -> None:
    """These tests run under Python's default limit, so the identities really exceed it."""
    assert 4300 == sys.get_int_max_str_digits()


def test_failures_lists_identities_of_5000_digits_in_natural_order(tmp_path: Path) -> None:
    """``migrate failures`` (text and --json) orders a 5000-digit identity by its number."""
    write_csv(tmp_path / "p.csv", [{"id": i} for i in (LONGER_SEVEN, LONG, "12", "007", "7")])
    (tmp_path / "migrate_config.py").write_text(CONFIG)
    config = tmp_path / "migrate_config.py"
    assert 1 == run_main(config, "run", "--progress", "none").returncode
    listed = run_main(config, "failures", "p", "--json")
    assert (0, "") == (listed.returncode, listed.stderr)
    expected = ["007", "7", "12", LONG, LONGER_SEVEN]
    assert expected == [record["identity"] for record in json.loads(listed.stdout)]
    shown = run_main(config, "failures", "p", "--limit", "4")
    assert (0, "") == (shown.returncode, shown.stderr)
    assert "p: 5 failed items (showing 4)" == shown.stdout.splitlines()[0]
    assert LONG in shown.stdout


# A short random head, then a long run of one digit: numbers up to 6,000 digits, cheaply.
_DIGIT_RUNS = st.builds(
    lambda head, fill, length: head + fill * length,
    st.text("0123456789", max_size=4),
    st.sampled_from("0123456789"),
    st.integers(min_value=0, max_value=6000),
).filter(bool)


@given(st.lists(_DIGIT_RUNS, min_size=2, max_size=5))
def test_natural_order_of_digit_runs_is_numeric_order(runs: list[str]) -> None:
    """Digit runs of any length sort as their numbers (then by text: "007" before "7")."""
    expected = sorted(runs, key=lambda digits: (decimal.Decimal(digits), digits))
    assert expected == sorted(runs, key=natural_key)


def test_integer_identities_of_5000_digits_are_their_digits(tmp_path: Path) -> None:
    """An ``int`` identity (memory source) and a JSON integer (JSON Lines) beyond the limit."""
    big = 10**5000
    path = write_jsonl(tmp_path / "p.jsonl", [{"id": 1, "rev": 1}])
    with path.open("a") as handle:
        handle.write('{"id": ' + LONG + ', "rev": ' + LONG + "}\n")
    config = config_of(
        tmp_path,
        migrate.Migration("memory", migrate.MemorySource([{"id": big}, {"id": 2}]), _failing),
        migrate.Migration("lines", migrate.JsonlSource(path), _failing),
        migrate.Migration("revs", migrate.JsonlSource(path, version="rev"), _failing),
    )
    summary = migrate.run(config)
    assert [2, 2, 2] == [summary.definitions[d].counts.failed for d in ("memory", "lines", "revs")]
    assert ["2", "1" + "0" * 5000] == [f.identity for f in migrate.failures(config, "memory")]
    assert ["1", LONG] == [f.identity for f in migrate.failures(config, "lines")]
    with config.open_store() as store:
        assert LONG == store.item("revs", LONG).version  # type: ignore[union-attr]


def test_a_json_record_holding_the_same_long_number_twice_is_one_identity(
    tmp_path: Path,
) -> None:
    """A 5000-digit identity as a number and as a string is one identity: a duplicate."""
    path = write_jsonl(tmp_path / "p.jsonl", [{"id": LONG}])
    with path.open("a") as handle:
        handle.write('{"id": ' + LONG + "}\n")
    config = config_of(tmp_path, migrate.Migration("p", migrate.JsonlSource(path), _failing))
    migrate.run(config)
    (failure,) = migrate.failures(config, "p")
    assert (LONG, "DuplicateIdentity") == (failure.identity, failure.error.type)


def test_an_id_the_identity_type_refuses_is_not_in_the_table(tmp_path: Path) -> None:
    """``--id abc`` or 5000 digits where ``identity_type=int``: reported absent, no crash."""
    db = sqlite3.connect(tmp_path / "src.db")
    with db:
        db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
        db.execute("INSERT INTO t VALUES (1, 'one')")
    db.close()
    source = migrate.SqlSource(lambda: sqlite3.connect(tmp_path / "src.db"), "t", identity_type=int)
    config = config_of(tmp_path, migrate.Migration("p", source, lambda item, scope: None))
    summary = migrate.run(config, migrate.RunOptions(ids=("abc", LONG, "1")))
    assert migrate.Counts(migrated=1) == summary.definitions["p"].counts
    (note,) = summary.notes
    assert note.startswith("p: 2 identities not in sql:t ('abc', '999")
    assert {"1": "migrated"} == states(config, "p")
