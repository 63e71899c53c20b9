"""Poison items: whatever one item does, it fails alone with evidence and the run goes on."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest
from hypothesis import given
from hypothesis import strategies as st

import migrate
from migrate._pipeline import evidence_for
from migrate._window_loop import encode_evidence
from tests.migrate.helpers import config_of, people, states


class HostileError(Exception):
    """An error that fails every way a library asks it for text."""

    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    @property
    def details(self) -> dict[str, Any]:
        raise RuntimeError("no details")

    @property
    def message(self) -> str:
        raise RuntimeError("no message")


class UnprintableError(Exception):
    """An error without text, whose details can be set."""

    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        raise RuntimeError("no repr")


class OddDetailsError(Exception):
    """An error whose details JSON cannot hold as they are."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.details = {"nan": float("nan"), "set": {1, 2}, 3: b"\xff", "inf": [float("inf")]}


class Stop(BaseException):
    """A BaseException that is neither an Exception nor an interrupt."""


def _run_with(tmp_path: Path, poison: Callable[[], object], *, concurrency: int = 1) -> Any:
    """Run 3 items whose second does *poison*; return (summary, failure of item 2, states)."""

    def process(item: migrate.Item, scope: migrate.Scope) -> object:
        if item.identity == "2":
            return poison()
        return None

    config = config_of(
        tmp_path,
        migrate.Migration("p", migrate.MemorySource(people(3)), process, concurrency=concurrency),
    )
    summary = migrate.run(config)
    (failure,) = migrate.failures(config, "p")
    return summary, failure, states(config, "p")


def _raise(error: BaseException) -> Callable[[], NoReturn]:
    def poison() -> NoReturn:
        raise error

    return poison


@pytest.mark.parametrize("concurrency", [1, 3])
def test_an_error_whose_text_and_details_raise_fails_its_item(
    tmp_path: Path, concurrency: int
) -> None:
    """__str__, __repr__, .details and .message that raise still give evidence."""
    summary, failure, stored = _run_with(tmp_path, _raise(HostileError()), concurrency=concurrency)
    assert ("HostileError", "<unprintable HostileError>", "2") == (
        failure.error.type,
        failure.error.message,
        failure.identity,
    )
    assert {"1": "migrated", "2": "failed", "3": "migrated"} == stored
    assert 2 == summary.definitions["p"].counts.migrated


def test_details_json_cannot_hold_are_stored_as_text(tmp_path: Path) -> None:
    """NaN, sets, bytes keys in an error's details are kept as text; the evidence is JSON."""
    _summary, failure, _stored = _run_with(tmp_path, _raise(OddDetailsError("odd")))
    assert ("nan", "{1, 2}", "b'\\xff'") == (
        failure.error.details["nan"],
        failure.error.details["set"],
        failure.error.details["3"],
    )


@pytest.mark.parametrize("concurrency", [1, 3])
@pytest.mark.parametrize("code", [0, None, 3])
def test_sys_exit_in_a_process_fails_that_item_only(
    tmp_path: Path, code: int | None, concurrency: int
) -> None:
    """sys.exit() inside a process fails the item; the run goes on and ends failed."""
    summary, failure, stored = _run_with(tmp_path, lambda: sys.exit(code), concurrency=concurrency)
    assert ("SystemExit", "failed", "migrated") == (
        failure.error.type,
        summary.status,
        stored["3"],
    )


def test_another_base_exception_fails_its_item(tmp_path: Path) -> None:
    """A BaseException that is not an interrupt fails the item, not the run."""
    _summary, failure, stored = _run_with(tmp_path, _raise(Stop("halt")))
    assert ("Stop", "migrated") == (failure.error.type, stored["3"])


def test_skip_with_a_reason_that_is_not_a_string_fails_the_item(tmp_path: Path) -> None:
    """Skip(42) is a TypeError naming the reason's type, at the line that raised it."""
    _summary, failure, _stored = _run_with(tmp_path, _raise(migrate.Skip(42)))  # type: ignore[arg-type]
    assert "TypeError" == failure.error.type
    assert "Skip(reason) needs a string reason, got int: 42" in failure.error.message
    assert __file__ in failure.error.details["where"]


def test_a_skip_whose_reason_was_changed_to_a_non_string_fails_too(tmp_path: Path) -> None:
    """A Skip whose reason attribute was replaced afterwards is caught by the runner as well."""
    skip = migrate.Skip("fine")
    skip.reason = ["not", "text"]  # type: ignore[assignment]
    _summary, failure, _stored = _run_with(tmp_path, _raise(skip))
    assert "got list: ['not', 'text']" in failure.error.message


def test_a_sync_process_returning_a_coroutine_fails_and_the_coroutine_is_closed(
    tmp_path: Path,
) -> None:
    """A plain function returning a coroutine did none of its work: the item fails, quietly."""
    ran: list[str] = []

    async def work() -> None:
        ran.append("ran")

    _summary, failure, _stored = _run_with(tmp_path, work)
    assert ([], "TypeError") == (ran, failure.error.type)
    assert "returned a coroutine, so its body never ran: declare it `async def`" in (
        failure.error.message
    )


@pytest.mark.parametrize("concurrency", [1, 2])
def test_a_sync_process_returning_a_generator_fails(tmp_path: Path, concurrency: int) -> None:
    """A plain function returning a generator did none of its work: the item fails."""

    def lines() -> object:
        yield "never"

    _summary, failure, _stored = _run_with(tmp_path, lines, concurrency=concurrency)
    assert "returned a generator, so its body never ran" in failure.error.message


def test_a_generator_function_is_refused_as_a_process_at_load_time(tmp_path: Path) -> None:
    """A generator function (sync or async, or as __call__) is a ConfigError when defined."""

    def gen(item: migrate.Item, scope: migrate.Scope) -> object:
        yield item

    class Agen:
        async def __call__(self, item: migrate.Item, scope: migrate.Scope) -> object:
            yield item

    for process in (gen, Agen()):
        with pytest.raises(migrate.ConfigError, match="uses yield"):
            migrate.Migration("p", migrate.MemorySource([]), process)
    path = tmp_path / "migrate_config.py"
    path.write_text(
        "import migrate\n\ndef gen(item, scope):\n    yield item\n\n"
        "config = migrate.Config([migrate.Migration('p', migrate.MemorySource([]), gen)])\n"
    )
    with pytest.raises(migrate.ConfigError, match="process gen\\(\\) is a generator function"):
        migrate.load_config(path)


def test_a_journal_entry_json_cannot_hold_fails_the_item_keeping_the_others(
    tmp_path: Path,
    store_url: str,
) -> None:
    """An unencodable journal entry fails the item; the other entries are stored with it."""

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        scope.journal.change("crm", "upsert", key=1)
        if item.identity == "2":
            scope.journal.diagnostic("odd", value={1, 2})

    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(3)), process), store=store_url
    )
    migrate.run(config)
    (failure,) = migrate.failures(config, "p")
    assert ("2", "TypeError") == (failure.identity, failure.error.type)
    assert "journal entry 1 cannot be stored as JSON" in failure.error.message
    assert ("change", "unencodable") == (failure.journal[0]["kind"], failure.journal[1]["kind"])
    assert {"1": "migrated", "2": "failed", "3": "migrated"} == states(config, "p")


def test_a_tracking_record_changed_after_track_fails_the_item(
    tmp_path: Path, store_url: str
) -> None:
    """A record made unencodable after track() fails the item (tracking) and keeps the old one."""
    first = {"round": 1}

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        record = dict(first)
        scope.track(record)
        if item.identity == "2" and first["round"] == 2:
            assert scope.tracking is not None
            scope.tracking["later"] = float("nan")

    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(3)), process), store=store_url
    )
    migrate.run(config)
    first["round"] = 2
    migrate.run(config, migrate.RunOptions(ids=("2",)))
    (failure,) = migrate.failures(config, "p")
    with config.open_store() as store:
        kept = store.tracking("p", "2")
    assert ("tracking", "TrackingError", {"round": 1}) == (
        failure.error.kind,
        failure.error.type,
        kept,
    )


def test_track_refuses_nan_at_once(tmp_path: Path) -> None:
    """scope.track with a NaN (not JSON) raises TrackingError inside the process."""
    _summary, failure, _stored = _run_with(tmp_path, _raise_from_track({"ratio": float("nan")}))
    assert ("tracking", "TrackingError") == (failure.error.kind, failure.error.type)


def _raise_from_track(record: dict[str, Any]) -> Callable[[], None]:
    def poison() -> None:
        scope = migrate.current_scope()
        assert scope is not None
        scope.track(record)

    return poison


def test_a_poison_item_never_wedges_the_rerun(tmp_path: Path, store_url: str) -> None:
    """The next run meets the poison item again, fails it again, and finishes the rest."""
    rows = people(6)
    seen: list[str] = []

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        seen.append(item.identity)
        if item.identity == "2":
            raise HostileError

    source = migrate.MemorySource(rows, window_size=2)
    config = config_of(tmp_path, migrate.Migration("p", source, process), store=store_url)
    migrate.run(config)
    migrate.run(config, migrate.RunOptions(failed=True))
    assert ["1", "2", "3", "4", "5", "6", "2"] == seen


def test_async_process_errors_are_poison_safe_too(tmp_path: Path, store_url: str) -> None:
    """An async process raising a hostile error or sys.exit fails its item alone."""

    async def process(item: migrate.Item, scope: migrate.Scope) -> None:
        await asyncio.sleep(0)
        if item.identity == "1":
            raise HostileError
        if item.identity == "2":
            sys.exit(0)

    config = config_of(
        tmp_path, migrate.Migration("p", migrate.MemorySource(people(3)), process), store=store_url
    )
    migrate.run(config)
    assert {"1": "failed", "2": "failed", "3": "migrated"} == states(config, "p")


def _strict(text: str) -> Any:
    def refuse(constant: str) -> NoReturn:
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


hostile_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text()
    | st.binary()
    | st.builds(set, st.lists(st.integers(), max_size=3))
    | st.builds(HostileError),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.text() | st.integers(), children, max_size=3)
    ),
    max_leaves=10,
)


@given(hostile_values, st.text(), st.booleans())
def test_evidence_always_encodes_as_strict_json(value: object, message: str, hostile: bool) -> None:
    """Whatever an error's details, message or text hold, its evidence is strict JSON."""
    error: Exception = UnprintableError() if hostile else ValueError(message)
    error.details = {"value": value, "again": [value]}  # type: ignore[attr-defined]
    document = _strict(encode_evidence(evidence_for(error, None)))
    assert {"kind", "type", "message", "details", "attempts"} == set(document)


def test_text_no_store_can_hold_fails_alone_and_never_wedges(
    tmp_path: Path, store_url: str
) -> None:
    """A lone surrogate (JSON allows "\\ud800") in an identity, version or Skip reason is safe."""
    path = tmp_path / "p.jsonl"
    path.write_text(
        '{"id": "a\\ud800", "v": "1"}\n{"id": "b", "v": "x\\udfff"}\n{"id": "c", "v": "1"}\n'
        '{"id": "d", "v": "1"}\n'
    )

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if item.identity == "c":
            raise migrate.Skip("no \udc80 thanks")

    source = migrate.JsonlSource(path, version="v")
    config = config_of(tmp_path, migrate.Migration("p", source, process), store=store_url)
    for _ in range(2):  # the rerun meets the same records and gets past them again
        migrate.run(config)
    (failure,) = migrate.failures(config, "p")
    assert ("<line 1>", "BadIdentity") == (failure.identity, failure.error.type)
    assert "lone surrogate" in failure.error.message
    with config.open_store() as store:
        skipped = store.item("p", "c")
        versioned = store.item("p", "b")
    assert skipped is not None
    assert versioned is not None
    assert ("no \\udc80 thanks", "x\\udfff") == (skipped.reason, versioned.version)
    assert {"b": "migrated", "c": "skipped", "d": "migrated"} == {
        k: v for k, v in states(config, "p").items() if k != "<line 1>"
    }
