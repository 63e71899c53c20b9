"""The Store protocol, held by every store: SQLite, PostgreSQL and in-memory, the same tests."""

from __future__ import annotations

import json
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import migrate
from migrate import DefinitionResult, StateWrite, WindowCommit
from tests.migrate.helpers import noop, people


@pytest.fixture(params=["sqlite", "postgresql", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[migrate.Store]:
    """A fresh store of each kind."""
    if request.param == "memory":
        yield migrate.MemoryStore()
        return
    url = (
        "sqlite:///state.db"
        if request.param == "sqlite"
        else str(request.getfixturevalue("postgres_url"))
    )
    with migrate.open_store(url, base_dir=tmp_path) as opened:
        yield opened


def _running(count: int) -> dict[str, DefinitionResult]:
    return {"d": DefinitionResult("normal", "running", migrate.Counts(migrated=count))}


def test_every_store_is_a_store(store: migrate.Store) -> None:
    """Both implementations satisfy the runtime-checkable protocol."""
    assert isinstance(store, migrate.Store)


def test_window_states_counts_and_cursor_commit_together(store: migrate.Store) -> None:
    """commit_window writes the states, the run's counts and the cursor in one go."""
    store.create_run("r1", "normal", {})
    journal = '[{"kind": "change", "destination": "crm", "operation": "put"}]'
    write = StateWrite(
        "1", "migrated", "v1", journal=journal, tracking='{"n": 1}', position="line 2"
    )
    store.commit_window(
        WindowCommit("d", "r1", [write], _running(1), cursor={"position": 1}, save_cursor=True)
    )
    assert {"position": 1} == store.cursor("d")
    assert migrate.Counts(migrated=1) == store.counts("d")
    record = store.run("r1")
    assert record is not None
    assert migrate.Counts(migrated=1) == record.definitions["d"].counts
    state = store.item("d", "1")
    assert state is not None
    assert ("migrated", "v1", {"n": 1}, "line 2", "r1") == (
        state.status,
        state.version,
        state.tracking,
        state.position,
        state.run_id,
    )
    assert {"1": ("migrated", "v1", '{"n": 1}', "r1", journal)} == {
        k: tuple(v) for k, v in store.prior_states("d", ["1", "2"]).items()
    }


def test_a_failed_commit_changes_nothing(store: migrate.Store) -> None:
    """A commit that fails (here: a cursor JSON cannot hold) keeps states, counts and cursor."""
    store.create_run("r1", "normal", {})
    first = StateWrite("1", "migrated", "v1")
    store.commit_window(
        WindowCommit("d", "r1", [first], _running(1), cursor={"position": 1}, save_cursor=True)
    )
    second = StateWrite("2", "migrated", "v1")
    with pytest.raises(TypeError):
        store.commit_window(
            WindowCommit(
                "d", "r1", [second], _running(2), cursor={"bad": object()}, save_cursor=True
            )
        )
    record = store.run("r1")
    assert record is not None
    assert ({"position": 1}, ["1"], 1) == (
        store.cursor("d"),
        [s.identity for s in store.items("d")],
        record.definitions["d"].counts.migrated,
    )


def test_one_state_per_definition_and_identity(store: migrate.Store) -> None:
    """Writing an identity again replaces its state: never two states for one item."""
    store.create_run("r", "normal", {})
    for status in ("failed", "migrated"):
        write = StateWrite("1", status, None)  # type: ignore[arg-type]
        store.commit_window(WindowCommit("d", "r", [write], {}))
    assert [("1", "migrated")] == [(s.identity, s.status) for s in store.items("d")]


_SHAPES = [
    StateWrite("plain", "migrated", "v1", position="line 2"),
    StateWrite("no-version", "migrated", None, position="line 3"),
    StateWrite("no-position", "migrated", "v1"),
    StateWrite("bare", "migrated", None),
    StateWrite("journaled", "migrated", "v1", journal='[{"kind": "change"}]', position="x"),
    StateWrite("tracked", "migrated", "v1", tracking='{"n": 1}', journal="[]"),
    StateWrite("skipped", "skipped", "v1", reason="why", position="line 9"),
    StateWrite(
        "failed",
        "failed",
        "v1",
        error='{"kind": "process", "type": "E", "message": "m", "details": {}, "attempts": 1}',
        journal='[{"kind": "diagnostic", "message": "m"}]',
        tracking='{"id": 7}',
        position="line 4",
    ),
]


@pytest.mark.parametrize("shapes", [_SHAPES[:1], _SHAPES[4:5], _SHAPES])
def test_a_window_of_states_of_any_shape_reads_back_as_written(
    store: migrate.Store, shapes: list[StateWrite]
) -> None:
    """States with any of their optional fields absent, alone or mixed in one window, read back
    with exactly the fields they were written with (absent ones None)."""
    store.create_run("r", "normal", {})
    store.commit_window(WindowCommit("d", "r", shapes, {}))
    prior = store.prior_states("d", [s.identity for s in shapes])
    assert {s.identity: (s.status, s.version, s.tracking, "r", s.journal) for s in shapes} == {
        k: tuple(v) for k, v in prior.items()
    }
    items = {state.identity: state for state in store.items("d")}
    assert {s.identity: (s.reason, s.position) for s in shapes} == {
        k: (v.reason, v.position) for k, v in items.items()
    }
    assert {s.identity for s in shapes if s.error} == {
        k for k, v in items.items() if v.error is not None
    }


def test_two_states_of_one_identity_in_a_window_keep_the_last(store: migrate.Store) -> None:
    """A window holding an identity twice stores one state: the last (as SQLite's replace)."""
    store.create_run("r", "normal", {})
    window = [
        StateWrite("1", "migrated", "v1", position="line 2"),
        StateWrite("2", "migrated", "v1", position="line 3"),
        StateWrite("1", "failed", "v2", error='{"type": "E"}'),
    ]
    store.commit_window(WindowCommit("d", "r", window, {}))
    assert [("1", "failed", "v2", None), ("2", "migrated", "v1", "line 3")] == [
        (s.identity, s.status, s.version, s.position) for s in store.items("d")
    ]


def test_forget_removes_states_and_returns_them(store: migrate.Store) -> None:
    """forget removes the named states (unknown ones are ignored) and returns what it removed."""
    store.create_run("r", "normal", {})
    writes = [StateWrite(str(i), "failed", None, error='{"type": "X"}') for i in range(3)]
    store.commit_window(WindowCommit("d", "r", writes, {}))
    removed = store.forget("d", ["2", "0", "nope"])
    assert (["0", "2"], ["1"]) == (
        [s.identity for s in removed],
        [s.identity for s in store.items("d")],
    )


def test_commit_forgets_and_clears_stale_positional_failures(store: migrate.Store) -> None:
    """forget= and clear_positional= act in the commit; this run's positional failures stay."""
    positional = json.dumps({"kind": "source", "type": "MissingIdentity", "message": "m"})
    other = json.dumps({"kind": "process", "type": "ValueError", "message": "m"})
    store.create_run("old", "normal", {})
    store.commit_window(
        WindowCommit(
            "d",
            "old",
            [
                StateWrite("<line 2>", "failed", None, error=positional),
                StateWrite("<line 3>", "failed", None, error=positional),
                StateWrite("7", "failed", None, error=other),
                StateWrite("8", "migrated", None),
            ],
            {},
        )
    )
    store.create_run("new", "normal", {})
    store.commit_window(
        WindowCommit(
            "d",
            "new",
            [StateWrite("<line 3>", "failed", None, error=positional)],
            {},
            forget=("8",),
            clear_positional=True,
        )
    )
    assert ["7", "<line 3>"] == [s.identity for s in store.items("d")]


def test_mark_needs_update_in_the_commit_happens_first(store: migrate.Store) -> None:
    """mark_needs_update marks migrated states before the window's own states are written."""
    store.create_run("r", "normal", {})
    store.commit_window(
        WindowCommit(
            "d",
            "r",
            [StateWrite("1", "migrated", None), StateWrite("2", "skipped", None)],
            {},
            cursor={"position": 2},
            save_cursor=True,
        )
    )
    store.create_run("u", "update", {})
    store.commit_window(
        WindowCommit("d", "u", [StateWrite("3", "migrated", None)], {}, mark_needs_update=True)
    )
    assert ({"1": "needs-update", "2": "skipped", "3": "migrated"}, None) == (
        {s.identity: s.status for s in store.items("d")},
        store.cursor("d"),
    )
    assert (1, 1) == (
        store.count_status("d", "needs-update", "u"),
        store.count_status("d", "migrated"),
    )


def test_locks_are_all_or_none_and_released_by_run(store: migrate.Store) -> None:
    """acquire_locks takes every lock or none; a held one raises LockHeld naming it."""
    store.create_run("a", "normal", {})
    store.create_run("b", "normal", {})
    store.acquire_locks("a", ["x", "y"])
    with pytest.raises(migrate.LockHeld) as caught:
        store.acquire_locks("b", ["z", "y"])
    assert ("y", "a") == (caught.value.definition_id, caught.value.lock.run_id)
    assert ["x", "y"] == [lock.definition_id for lock in store.locks()]
    store.release_locks("a")
    store.acquire_locks("b", ["z", "y"])
    unlocked = store.unlock("z")
    assert (unlocked is not None, store.unlock("z")) == (True, None)


def test_latest_run_skips_refused_runs(store: migrate.Store) -> None:
    """latest_run_for skips start-failed runs unless asked to include them."""
    store.create_run("ran", "normal", {"d": DefinitionResult("normal", "succeeded")})
    store.update_run("ran", status="succeeded", ended=True)
    store.create_run("refused", "normal", {"d": DefinitionResult("normal", "queued")})
    store.update_run("refused", status="start-failed", ended=True)
    latest = store.latest_run_for("d")
    newest = store.latest_run_for("d", include_start_failed=True)
    assert ("ran", "refused") == (
        None if latest is None else latest.run_id,
        None if newest is None else newest.run_id,
    )
    assert ["refused", "ran"] == [r.run_id for r in store.runs()]


def test_contracts_and_cursor_reset(store: migrate.Store) -> None:
    """save_contract records a contract and can forget the cursor with it."""
    store.create_run("r", "normal", {})
    store.commit_window(WindowCommit("d", "r", [], {}, cursor={"position": 3}, save_cursor=True))
    assert store.has_state("d")
    contract = migrate.Contract("csv", "id", None, "scan")
    store.save_contract("d", contract, "r", reset_cursor=True)
    assert (contract, None, False) == (store.contract("d"), store.cursor("d"), store.has_state("d"))


def test_failures_in_natural_order_with_evidence(store: migrate.Store) -> None:
    """failures() lists failed states in natural identity order, with evidence and position."""
    store.create_run("r", "normal", {})
    evidence = migrate.ErrorEvidence("process", "ValueError", "bad").to_json()
    writes = [
        StateWrite(i, "failed", None, error=json.dumps(evidence), position=f"line {i}")
        for i in ("13", "7", "b")
    ]
    store.commit_window(WindowCommit("d", "r", writes, {}))
    assert [("7", "line 7"), ("13", "line 13"), ("b", "line b")] == [
        (f.identity, f.position) for f in store.failures("d")
    ]
    assert "bad" == store.failures("d", limit=1)[0].error.message


def test_a_memory_store_serves_several_runs_of_a_config() -> None:
    """A MemoryStore given as a config's store keeps the state from one run to the next."""
    config = migrate.Config(
        [migrate.Migration("p", migrate.MemorySource(people(3)), noop)],
        store=migrate.MemoryStore(),
    )
    first = migrate.run(config)
    second = migrate.run(config)
    assert (3, 0) == (first.definitions["p"].counts.migrated, second.definitions["p"].counts.total)
    assert 3 == migrate.status(config).definitions["p"].migrated


statuses = st.sampled_from(["migrated", "skipped", "failed", "interrupted"])
windows = st.lists(
    st.tuples(
        st.dictionaries(st.sampled_from("abcdefgh"), statuses, max_size=5),
        st.sets(st.sampled_from("abcdefgh"), max_size=2),
        st.booleans(),
    ),
    max_size=6,
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=40)
@given(windows)
def test_the_sqlite_store_and_the_memory_store_agree(tmp_path: Path, sequence: Any) -> None:
    """Any sequence of window commits (writes, forgets, needs-update marks) leaves both alike."""
    memory = migrate.MemoryStore()
    with (
        tempfile.TemporaryDirectory(dir=tmp_path) as folder,
        migrate.open_store(f"sqlite:///{folder}/s.db") as sqlite_store,
    ):
        for store in (memory, sqlite_store):
            store.create_run("r", "normal", {})
            for written, forgotten, mark in sequence:
                states = [StateWrite(k, v, f"v{k}") for k, v in sorted(written.items())]
                store.commit_window(
                    WindowCommit(
                        "d",
                        "r",
                        states,
                        {},
                        forget=tuple(sorted(forgotten)),
                        mark_needs_update=mark,
                    )
                )
        expected = [(s.identity, s.status, s.version) for s in memory.items("d")]
        assert expected == [(s.identity, s.status, s.version) for s in sqlite_store.items("d")]
        assert memory.counts("d") == sqlite_store.counts("d")


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=25)
@given(windows)
def test_the_postgres_store_and_the_memory_store_agree(postgres_url: str, sequence: Any) -> None:
    """Any sequence of window commits leaves PostgreSQL's states as the memory store's."""
    memory = migrate.MemoryStore()
    definition = f"d{secrets.token_hex(6)}"  # the schema serves every example
    with migrate.open_store(postgres_url) as postgres_store:
        for store in (memory, postgres_store):
            run_id = f"r{secrets.token_hex(6)}"
            store.create_run(run_id, "normal", {})
            for written, forgotten, mark in sequence:
                states = [StateWrite(k, v, f"v{k}") for k, v in sorted(written.items())]
                store.commit_window(
                    WindowCommit(
                        definition,
                        run_id,
                        states,
                        {},
                        forget=tuple(sorted(forgotten)),
                        mark_needs_update=mark,
                    )
                )
        expected = [(s.identity, s.status, s.version) for s in memory.items(definition)]
        assert expected == [
            (s.identity, s.status, s.version) for s in postgres_store.items(definition)
        ]
        assert memory.counts(definition) == postgres_store.counts(definition)


def test_an_update_request_is_kept_until_its_pass_is_done(store: migrate.Store) -> None:
    """request_update: unmarked; the marking commit marks it; update_done clears it alone."""
    store.create_run("u", "update", {})
    assert store.update_request("d") is None
    store.request_update("d", "u")
    store.request_update("other", "u")
    request = store.update_request("d")
    assert request is not None
    assert ("u", False) == (request.run_id, request.marked)
    store.commit_window(WindowCommit("d", "u", [], {}, mark_needs_update=True))
    assert (True, False) == (
        getattr(store.update_request("d"), "marked", None),
        getattr(store.update_request("other"), "marked", None),
    )
    store.create_run("v", "update", {})
    store.request_update("d", "v")  # asked again: it starts over
    again = store.update_request("d")
    assert ("v", False) == (getattr(again, "run_id", None), getattr(again, "marked", None))
    store.commit_window(WindowCommit("d", "v", [], {}, update_done=True))
    assert (None, "u") == (
        store.update_request("d"),
        getattr(store.update_request("other"), "run_id", None),
    )
