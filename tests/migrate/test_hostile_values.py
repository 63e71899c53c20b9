"""
Hostile values reach the store the same way on SQLite and PostgreSQL: NUL, lone surrogates, huge
text, odd identities and JSON that ``jsonb`` would rewrite; one run on each, compared item by item.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import migrate
from tests.migrate.helpers import config_of

HUGE = "x" * 2_000_000  # 2 MB of text in one tracking record

ROWS: list[dict[str, Any]] = [
    {"id": "nul\x00id", "do": "track"},  # no store can hold it: a BadIdentity failure
    {"id": "lone\ud800", "do": "track"},  # neither
    {"id": "Zoë 😀", "do": "track"},
    {"id": "<line 2>", "do": "track"},  # looks like a positional key
    {"id": "a%b_c", "do": "track"},  # LIKE's wildcards
    {"id": "'; DROP TABLE item_states; --", "do": "track"},
    {"id": " ", "do": "track"},
    {"id": "k" * 10_000, "do": "track"},
    {"id": 7, "do": "skip"},
    {"id": "8", "do": "fail"},
    {"id": "huge", "do": "huge"},
]


def _process(item: migrate.Item, scope: migrate.Scope) -> None:
    action = item.data["do"]
    if action == "skip":
        raise migrate.Skip("reason with a NUL \x00 and a lone surrogate \udc80")
    if action == "fail":
        raise ValueError("message with a NUL \x00, \ud800 and\nnewlines")
    if action == "huge":
        scope.track({"text": HUGE})
        return
    # JSON that jsonb would change: key order, duplicate-free but reordered keys, -0.0, 1e300,
    # and escapes jsonb refuses.
    scope.track(
        {"z": 1, "a": -0.0, "big": 1e300, "nul": "a\x00b", "lone": "\ud800", "n": [1.5, None]}
    )


def _outcome(store_url: str, tmp_path: Path) -> list[tuple[Any, ...]]:
    config = config_of(
        tmp_path,
        migrate.Migration("h", migrate.MemorySource(ROWS, window_size=4), _process),
        store=store_url,
    )
    migrate.run(config)
    with config.open_store() as store:
        return [
            (
                s.identity,
                s.status,
                s.reason,
                None if s.error is None else (s.error.type, s.error.message),
                json.dumps(s.tracking),
                s.version,
                s.position,
            )
            for s in store.items("h")
        ]


def test_hostile_values_are_stored_alike_by_both_stores(tmp_path: Path, postgres_url: str) -> None:
    """The same run on SQLite and on PostgreSQL stores the same states, byte for byte."""
    on_sqlite = _outcome("sqlite:///state.db", tmp_path)
    on_postgres = _outcome(postgres_url, tmp_path)
    assert on_sqlite == on_postgres
    by_identity = {row[0]: row for row in on_postgres}
    assert 11 == len(by_identity)  # the NUL and lone-surrogate ids: failures at positions
    tracked = json.loads(by_identity["Zoë 😀"][4])
    assert ["z", "a", "big", "nul", "lone", "n"] == list(tracked)
    assert (-0.0, 1e300, "a\x00b", "\ud800") == (
        tracked["a"],
        tracked["big"],
        tracked["nul"],
        tracked["lone"],
    )
    assert isinstance(tracked["big"], float)
    assert HUGE == json.loads(by_identity["huge"][4])["text"]
    assert ("skipped", "reason with a NUL \\x00 and a lone surrogate \\udc80") == (
        by_identity["7"][1],
        by_identity["7"][2],
    )
    bad = sorted(row[3][1] for row in on_postgres if row[3] and row[3][0] == "BadIdentity")
    assert 2 == len(bad)
    assert "U+0000 (NUL)" in bad[0] + bad[1]
    assert "a lone surrogate" in bad[0] + bad[1]


@pytest.mark.parametrize("identity", ["nul\x00", "\x00"])
def test_a_nul_identity_fails_alone_on_both_stores(
    tmp_path: Path, store_url: str, identity: str
) -> None:
    """A NUL in an identity fails that record alone, naming U+0000; the others migrate."""
    rows = [{"id": "1"}, {"id": identity}, {"id": "2"}]
    config = config_of(
        tmp_path,
        migrate.Migration("n", migrate.MemorySource(rows), lambda item, scope: None),
        store=store_url,
    )
    summary = migrate.run(config)
    failures = migrate.failures(config, "n")
    assert (2, 1) == (summary.definitions["n"].counts.migrated, len(failures))
    assert "U+0000 (NUL)" in failures[0].error.message
