"""Hostile values meet a rollback: odd identities, rollback functions returning garbage or raising
BaseExceptions, errors that break when read, stored journals that are not lists of entries."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import migrate
from migrate import StateWrite, WindowCommit
from tests.migrate.cli_support import run_main
from tests.migrate.rollback_support import make_rollback_project

ODD = [
    "a b",
    "naïve",
    "'; DROP TABLE item_states; --",
    "<line 3>",
    "tab\there",
    "new\nline",
    "\x1b[2Jclear",
    "%_",
    "1e3",
    "007",
    "7",
    "😀",
    "x" * 3000,
    "\u202eevil",
]


def _process(item: migrate.Item, scope: migrate.Scope) -> None:
    scope.journal.change("d", "insert", key=item.identity)


def _config(
    store_url: str, undo: Callable[[migrate.RollbackItem, migrate.Scope], Any], ids: list[str]
) -> migrate.Config:
    source = migrate.MemorySource([{"id": i} for i in ids])
    return migrate.Config(
        [migrate.Migration("p", source, _process, rollback=undo)], store=store_url
    )


def _states(store_url: str) -> dict[str, migrate.ItemState]:
    with migrate.open_store(store_url) as store:
        return {s.identity: s for s in store.items("p")}


def test_odd_identities_are_rolled_back_and_shown_escaped(tmp_path: Path, store_url: str) -> None:
    """Every odd identity reaches the rollback as it is, in natural order, and goes; one whose
    undo fails is kept and shown with its control characters escaped."""
    seen: list[str] = []

    def undo(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        seen.append(item.identity)
        assert [item.identity] == [entry["key"] for entry in item.journal]
        if item.identity == "\x1b[2Jclear":
            raise ValueError(f"refused {item.identity}\x00\ud800")

    config = _config(store_url, undo, ODD)
    migrate.run(config)
    summary = migrate.rollback(config)
    assert (13, 1) == (
        summary.definitions["p"].counts.rolled_back,
        summary.definitions["p"].counts.failed,
    )
    assert sorted(ODD, key=migrate._text.natural_key) == seen  # pyright: ignore[reportPrivateUsage]
    assert ["\x1b[2Jclear"] == list(_states(store_url))
    (tmp_path / "migrate_config.py").write_text(
        "import migrate\nconfig = migrate.Config([migrate.Migration('p', "
        "migrate.MemorySource([]), lambda i, s: None)], store=" + repr(store_url) + ")\n"
    )
    shown = run_main(tmp_path / "migrate_config.py", "failures", "p")
    assert 0 == shown.returncode, shown.stderr
    assert "\x1b" not in shown.stdout
    assert "\\x1b[2Jclear  (migrated, run " in shown.stdout
    (record,) = json.loads(
        run_main(tmp_path / "migrate_config.py", "failures", "p", "--json").stdout
    )
    message = record["rollback_attempts"][0]["error"]["message"]
    assert message.startswith("refused \x1b[2Jclear")
    assert "\x00" not in message  # stored as text every store keeps


@pytest.mark.parametrize(
    ("returned", "ok"),
    [
        (42, True),
        ("garbage", True),
        (object(), True),
        (False, True),
        ("coroutine", False),
        ("generator", False),
    ],
)
def test_a_rollback_returning_garbage(store_url: str, returned: object, ok: bool) -> None:
    """Its return value is ignored, as a process's is, unless it shows the body never ran (a
    plain function returning a coroutine or a generator): then that item fails, saying so."""

    async def later() -> None: ...

    def gen() -> Any:
        yield 1

    def undo(item: migrate.RollbackItem, scope: migrate.Scope) -> object:
        if returned == "coroutine":
            return later()
        if returned == "generator":
            return gen()
        return returned

    config = _config(store_url, undo, ["1", "2"])
    migrate.run(config)
    summary = migrate.rollback(config)
    counts = summary.definitions["p"].counts
    if ok:
        assert (2, 0, {}) == (counts.rolled_back, counts.failed, _states(store_url))
        return
    assert (0, 2) == (counts.rolled_back, counts.failed)
    attempt = _states(store_url)["1"].rollback_attempts[0]
    assert "TypeError" == attempt["error"]["type"]
    assert "is not an async function but returned a" in attempt["error"]["message"]
    assert "so its body never ran" in attempt["error"]["message"]


class _Custom(BaseException):
    """A BaseException of a user's own."""


@pytest.mark.parametrize("raised", [SystemExit(3), _Custom("mine"), GeneratorExit()])
def test_base_exceptions_fail_their_item_only(store_url: str, raised: BaseException) -> None:
    """sys.exit() and other BaseExceptions (not KeyboardInterrupt) fail the item raising them;
    the rollback goes on with the others."""

    def undo(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        if item.identity == "2":
            raise raised

    config = _config(store_url, undo, ["1", "2", "3"])
    migrate.run(config)
    summary = migrate.rollback(config)
    assert (2, 1) == (
        summary.definitions["p"].counts.rolled_back,
        summary.definitions["p"].counts.failed,
    )
    (state,) = _states(store_url).values()
    assert type(raised).__name__ == state.rollback_attempts[0]["error"]["type"]


@pytest.mark.parametrize("concurrency", [None, 3])
def test_keyboard_interrupt_raised_by_a_rollback_stops_the_run_interrupted(
    store_url: str, concurrency: int | None
) -> None:
    """A KeyboardInterrupt from the rollback itself is Ctrl-C: that item keeps its state with an
    Interrupted attempt, the run is stored failed, interrupted; what was done stays done."""

    def undo(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        if item.identity == "1":
            raise KeyboardInterrupt

    config = _config(store_url, undo, ["1", "2", "3", "4", "5", "6"])
    migrate.run(config)
    with pytest.raises(KeyboardInterrupt):
        migrate.rollback(config, concurrency=concurrency)
    kept = _states(store_url)
    assert "Interrupted" == kept["1"].rollback_attempts[0]["error"]["type"]
    with migrate.open_store(store_url) as store:
        stopped = store.runs(1)[0]
    assert ("rollback", "failed") == (stopped.kind, stopped.status)
    assert (stopped.error or "").startswith("interrupted: KeyboardInterrupt")
    # The items after it were not undone (one at a time), or only those already running.
    assert len(kept) == 6 - stopped.definitions["p"].counts.rolled_back


class _UnreadableError(Exception):
    """An error whose text and entries cannot be read."""

    def __str__(self) -> str:
        raise RuntimeError("no text")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    @property
    def entries(self) -> list[object]:
        raise RuntimeError("no entries")


class _OddEntriesError(Exception):
    """An error whose entries are not JSON."""

    entries = ({"when": object(), "n": float("nan")}, "text", 3)


@pytest.mark.parametrize(
    ("error", "message", "entries"),
    [
        (_UnreadableError(), "<unprintable _UnreadableError>", []),
        (_OddEntriesError("odd"), "odd", None),
        (ValueError("entries not a list"), "entries not a list", []),
    ],
)
def test_errors_that_break_when_read_still_leave_an_attempt(
    store_url: str, error: BaseException, message: str, entries: list[object] | None
) -> None:
    """The attempt is stored whatever the error does when asked for its text or entries;
    entries that are not JSON are stored as the JSON that can be made of them."""
    if isinstance(error, ValueError):
        error.entries = "not a list"  # type: ignore[attr-defined]

    def undo(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        raise error

    config = _config(store_url, undo, ["1"])
    migrate.run(config)
    assert 1 == migrate.rollback(config).definitions["p"].counts.failed
    (attempt,) = _states(store_url)["1"].rollback_attempts
    assert (type(error).__name__, message) == (
        attempt["error"]["type"],
        attempt["error"]["message"],
    )
    if entries is not None:
        assert entries == attempt["entries"]
    else:
        stored = attempt["entries"]
        assert ["text", 3] == stored[1:]
        assert "nan" == stored[0]["n"]
        assert stored[0]["when"].startswith("<object object")


@pytest.mark.parametrize("journal", ['{"a": 1}', "5", '"text"', '["x", {"kind": "change"}]'])
def test_a_state_whose_journal_is_not_a_list_is_not_undone_and_says_why(
    store_url: str, journal: str
) -> None:
    """Its rollback is not called (it would undo from a journal that is not the one stored):
    the item fails, saying so and how to go on; the other items are rolled back."""
    called: list[str] = []

    def undo(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        called.append(item.identity)

    config = _config(store_url, undo, ["1", "2", "3"])
    migrate.run(config)
    with migrate.open_store(store_url) as store:
        store.create_run("by-hand", "normal", {})
        store.commit_window(
            WindowCommit("p", "by-hand", [StateWrite("2", "migrated", None, journal=journal)], {})
        )
    for concurrency in (None, 2):
        summary = migrate.rollback(config, concurrency=concurrency)
        assert 1 == summary.definitions["p"].counts.failed
    assert ["1", "3"] == called
    (state,) = _states(store_url).values()
    assert 2 == len(state.rollback_attempts)
    error = state.rollback_attempts[0]["error"]
    assert "UnreadableJournal" == error["type"]
    assert "stored journal" in error["message"]
    assert "migrate forget p --id 2" in error["message"]


def test_tracking_that_is_not_an_object_reaches_the_rollback_as_it_is(store_url: str) -> None:
    """A stored tracking record that is not an object is handed over; the scope has none."""
    seen: list[tuple[object, object]] = []

    def undo(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        seen.append((item.tracking, scope.tracking))

    config = _config(store_url, undo, ["1"])
    migrate.run(config)
    with migrate.open_store(store_url) as store:
        store.create_run("by-hand", "normal", {})
        store.commit_window(
            WindowCommit("p", "by-hand", [StateWrite("1", "migrated", None, tracking="[1, 2]")], {})
        )
    assert 1 == migrate.rollback(config).definitions["p"].counts.rolled_back
    assert [([1, 2], None)] == seen


def test_an_id_that_is_not_utf8_is_skipped_and_named_escaped(
    tmp_path: Path, store_url: str
) -> None:
    """``--id`` of byte 0xff (a lone surrogate once the command line is decoded) beside a real
    one: it is counted skipped and named escaped; only the real one is undone."""
    project = make_rollback_project(tmp_path, store_url, people=3)
    assert 0 == project.main("run", "people").returncode
    done = project.main("rollback", "people", "--id", "\udcff", "--id", "2")
    assert 0 == done.returncode, done.stderr
    assert "1 identity asked for had no stored state ('\\udcff'): skipped" in done.stdout
    assert (["1", "3"], [("people", "2")]) == (sorted(project.states("people")), project.calls())
    shown = project.json("rollback", "people", "--id", "\udcff")
    assert {"rolled_back": 0, "failed": 0, "skipped": 1} == shown["definitions"]["people"]
