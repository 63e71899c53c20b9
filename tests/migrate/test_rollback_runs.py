"""migrate rollback: undo stored items through rollback=, on the SQLite and PostgreSQL stores."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

import migrate
from tests.migrate.rollback_support import RollbackProject, make_rollback_project

NATURAL = [str(i) for i in range(1, 13)]  # 1, 2, ..., 10, 11, 12: not 1, 10, 11, 12, 2


def _migrated(tmp_path: Path, url: str, **kwargs: object) -> RollbackProject:
    project = make_rollback_project(tmp_path, url, **kwargs)  # type: ignore[arg-type]
    done = project.main("run", "--all")
    assert 0 == done.returncode, done.stderr
    return project


def test_a_rollback_undoes_every_item_and_the_next_run_migrates_them_again(
    tmp_path: Path, store_url: str
) -> None:
    """Every state goes (journal and all), the destination rows with them, in natural order;
    the run is of kind rollback; the cursor is reset, so the next run reads from the start."""
    project = _migrated(tmp_path, store_url)
    assert project.cursor("people") is not None  # the run saved where it stopped

    document = project.json("rollback", "people")
    run_id = document["run_id"]
    assert {
        "run_id": run_id,
        "kind": "rollback",
        "definitions": {"people": {"rolled_back": 12, "failed": 0, "skipped": 0}},
    } == document
    assert [("people", i) for i in NATURAL] == project.calls()
    assert {} == project.states("people")
    assert [] == project.dest_ids("people")
    assert project.cursor("people") is None

    newest = project.runs()[0]
    assert (run_id, "rollback", "succeeded", "rollback") == (
        newest["run_id"],
        newest["kind"],
        newest["status"],
        newest["mode"],
    )
    assert {"rolled_back": 12, "failed": 0, "skipped": 0} == {
        key: newest["definitions"]["people"][key] for key in ("rolled_back", "failed", "skipped")
    }
    assert "migrated" not in newest["definitions"]["people"]

    again = project.json("run", "people")
    assert (12, 0) == (
        again["definitions"]["people"]["migrated"],
        again["definitions"]["people"]["unchanged"],
    )
    assert list(range(1, 13)) == project.dest_ids("people")


def test_the_text_summary_and_the_runs_table_show_the_rollback(
    tmp_path: Path, store_url: str
) -> None:
    """The summary counts rolled-back, failed and skipped; ``runs`` gains a kind column."""
    project = _migrated(tmp_path, store_url)
    done = project.main("rollback", "people")
    assert 0 == done.returncode, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("rollback ")
    assert " succeeded in " in lines[0]
    assert ["definition", "rolled-back", "failed", "skipped", "retries"] == lines[2].split()
    assert ["people", "12", "0", "0", "0"] == lines[3].split()
    table = project.main("runs").stdout.splitlines()
    assert ["run", "kind", "status", "mode"] == table[0].split()[:4]
    assert ["rollback", "succeeded", "rollback"] == table[1].split()[1:4]
    assert "people: rolled-back 12" in table[1]
    assert ["run", "succeeded", "normal"] == table[2].split()[1:4]


def test_one_failing_identity_keeps_its_state_and_each_failure_adds_an_attempt(
    tmp_path: Path, store_url: str
) -> None:
    """Exit 1: the failing item keeps its state with one attempt; a second failure shows two
    (``failures --json``); once fixed, a rollback undoes it and nothing is left."""
    project = _migrated(tmp_path, store_url)
    project.fail("4")
    first = project.json("rollback", "people", codes=(1,))
    assert {"rolled_back": 11, "failed": 1, "skipped": 0} == first["definitions"]["people"]
    assert ["4"] == list(project.states("people"))
    assert [4] == project.dest_ids("people")

    (record,) = project.json("failures", "people")
    assert ("4", "migrated") == (record["identity"], record["status"])
    (attempt,) = record["rollback_attempts"]
    assert (first["run_id"], [], {"type": "ValueError", "message": "cannot undo 4"}) == (
        attempt["run_id"],
        attempt["entries"],
        attempt["error"],
    )
    assert isinstance(attempt["failed_at"], float)
    assert ("rollback", "ValueError", 1) == (
        record["error"]["kind"],
        record["error"]["type"],
        record["error"]["attempts"],
    )

    second = project.json("rollback", "people", codes=(1,))
    assert {"rolled_back": 0, "failed": 1, "skipped": 0} == second["definitions"]["people"]
    (record,) = project.json("failures", "people")
    assert [first["run_id"], second["run_id"]] == [a["run_id"] for a in record["rollback_attempts"]]
    text = project.main("failures", "people").stdout
    assert "people: 1 item whose rollback failed" in text
    assert f"rollback attempt 2 (run {second['run_id']}" in text
    assert "ValueError: cannot undo 4; 0 entries undone before it failed" in text

    project.fail()
    third = project.json("rollback", "people")
    assert {"rolled_back": 1, "failed": 0, "skipped": 0} == third["definitions"]["people"]
    assert ({}, []) == (project.states("people"), project.dest_ids("people"))
    assert [] == project.json("failures", "people")


def test_ids_count_once_and_one_without_a_state_is_skipped(tmp_path: Path, store_url: str) -> None:
    """``--id 3 --id 3 --id 10 --id 99``: 2 rolled back, 99 skipped; the rest stay."""
    project = _migrated(tmp_path, store_url)
    args = ("rollback", "people", "--id", "10", "--id", "3", "--id", "3", "--id", "99")
    document = project.json(*args)
    assert {"rolled_back": 2, "failed": 0, "skipped": 1} == document["definitions"]["people"]
    assert [("people", "3"), ("people", "10")] == project.calls()  # natural order
    assert set(NATURAL) - {"3", "10"} == set(project.states("people"))
    assert 3 not in project.dest_ids("people")
    assert 10 not in project.dest_ids("people")
    text = project.main("rollback", "people", "--id", "98").stdout
    assert "people: 1 identity asked for had no stored state ('98'): skipped" in text


def test_a_dependent_holding_states_refuses_the_rollback_and_nothing_is_recorded(
    tmp_path: Path, store_url: str
) -> None:
    """Exit 3 naming the dependent and the ways on; no run recorded, nothing undone; --plan says
    so too; --force rolls back people alone."""
    project = _migrated(tmp_path, store_url, orders=3)
    before = project.runs()
    refused = project.main("rollback", "people")
    assert 3 == refused.returncode
    assert (
        "refusing to roll back 'people': 'orders' depends on it and still holds 3 stored item "
        "states; rollback orders first, rerun with --with-dependencies, or use --force"
    ) in refused.stderr
    assert before == project.runs()
    assert ([], 12) == (project.calls(), len(project.states("people")))

    plan = project.main("rollback", "people", "--plan")
    assert 3 == plan.returncode
    assert "  1. people  12 states  named" in plan.stdout
    assert "  would be refused: refusing to roll back 'people': 'orders' depends" in plan.stdout
    assert before == project.runs()

    forced = project.json("rollback", "people", "--force")
    assert {"people"} == set(forced["definitions"])
    assert ({}, 3) == (project.states("people"), len(project.states("orders")))


def test_with_dependencies_rolls_back_the_dependents_first(tmp_path: Path, store_url: str) -> None:
    """``rollback people --with-dependencies``: orders first, then people, each in natural
    order; the plan shows the order and the state counts."""
    project = _migrated(tmp_path, store_url, orders=12)
    plan = project.json("rollback", "people", "--with-dependencies", "--plan")
    assert [
        {"definition": "orders", "reason": "dependent of people", "states": 12},
        {"definition": "people", "reason": "named", "states": 12},
    ] == plan["steps"]
    assert [] == plan["refusals"]
    document = project.json("rollback", "people", "--with-dependencies")
    assert ["orders", "people"] == list(document["definitions"])
    assert [("orders", i) for i in NATURAL] + [("people", i) for i in NATURAL] == project.calls()
    assert ({}, {}) == (project.states("orders"), project.states("people"))
    # A required dependency rolled back is not "run cleanly": orders waits for people again.
    refused = project.main("run", "orders")
    assert 3 == refused.returncode
    assert "required dependency 'people' was rolled back by run" in refused.stderr


def test_a_definition_without_rollback_is_refused_even_forced_and_nothing_is_recorded(
    tmp_path: Path, store_url: str
) -> None:
    """States but no rollback=: exit 3, no run recorded, nothing undone (--force or not)."""
    project = _migrated(tmp_path, store_url, orders=2, orders_rollback=False)
    before = project.runs()
    for extra in ((), ("--force",)):
        refused = project.main("rollback", "--all", *extra)
        assert 3 == refused.returncode
        assert (
            "refusing to roll back 'orders': it has 2 stored item states but no rollback= to undo "
            "them with"
        ) in refused.stderr
    assert before == project.runs()
    assert [] == project.calls()
    # Without states there is nothing to undo: a definition without rollback= is no obstacle.
    done = project.json("rollback", "orders", "--id", "77")
    assert {"rolled_back": 0, "failed": 0, "skipped": 1} == done["definitions"]["orders"]


def test_a_lock_another_run_holds_refuses_the_rollback(tmp_path: Path, store_url: str) -> None:
    """Exit 3 naming the lock, nothing undone nor recorded; once released, it rolls back."""
    project = _migrated(tmp_path, store_url)
    before = project.runs()
    with migrate.open_store(store_url) as store:
        store.acquire_locks("other-run", ["people"])
        refused = project.main("rollback", "people")
        assert 3 == refused.returncode
        assert "definition 'people' is locked by run other-run" in refused.stderr
        plan = project.main("rollback", "--plan")
        assert 3 == plan.returncode
        assert "would be refused: definition 'people' is locked by run other-run" in plan.stdout
        assert (before, []) == (project.runs(), project.calls())
        store.release_locks("other-run")
    assert 0 == project.main("rollback", "people").returncode
    with migrate.open_store(store_url) as store:
        assert () == store.locks()  # released at the end


def test_usage_errors(tmp_path: Path, store_url: str) -> None:
    """--id needs one definition; not with --with-dependencies; names or --all, not both."""
    project = _migrated(tmp_path, store_url)
    for args, message in (
        (("--id", "1"), "--id needs the one definition"),
        (("people", "orders", "--id", "1"), "--id needs the one definition"),
        (("people", "--id", "1", "--with-dependencies"), "cannot be used together"),
        (("people", "--all"), "name definitions or pass --all, not both"),
        (("nobody",), "unknown migration 'nobody'"),
    ):
        done = project.main("rollback", *args)
        assert (2, True) == (done.returncode, message in done.stderr), done.stderr


def test_ctrl_c_stops_after_the_item_and_keeps_what_was_done(
    tmp_path: Path, store_url: str
) -> None:
    """KeyboardInterrupt in an undo: the undos before it are committed, its item keeps its
    state with an Interrupted attempt, the run is stored failed (interrupted), exit 130; the
    next rollback finishes."""

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        scope.journal.change("d", "insert", key=item.identity)

    done: list[str] = []

    def undo(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        if item.identity == "5" and "stopped" not in done:
            done.append("stopped")
            raise KeyboardInterrupt
        done.append(item.identity)

    config = migrate.Config(
        [
            migrate.Migration(
                "p", migrate.MemorySource([{"id": i} for i in range(1, 9)]), process, rollback=undo
            )
        ],
        store=store_url,
    )
    migrate.run(config)
    with pytest.raises(KeyboardInterrupt):
        migrate.rollback(config)
    with migrate.open_store(store_url) as store:
        kept = {s.identity: s for s in store.items("p")}
        stopped = store.runs(1)[0]
        assert () == store.locks()
    assert ["1", "2", "3", "4"] == done[:4]
    assert ["5", "6", "7", "8"] == sorted(kept)
    assert ["Interrupted"] == [a["error"]["type"] for a in kept["5"].rollback_attempts]
    assert () == kept["6"].rollback_attempts
    assert ("rollback", "failed") == (stopped.kind, stopped.status)
    assert (stopped.error or "").startswith("interrupted: KeyboardInterrupt")
    result = stopped.definitions["p"]
    assert (4, 1, "failed") == (result.counts.rolled_back, result.counts.failed, result.status)

    summary = migrate.rollback(config)
    assert (4, 0) == (
        summary.definitions["p"].counts.rolled_back,
        summary.definitions["p"].counts.failed,
    )
    with migrate.open_store(store_url) as store:
        assert () == store.items("p")


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_concurrent_undos_roll_back_everything_and_fail_alone(
    tmp_path: Path, store_url: str, kind: str
) -> None:
    """``concurrency=4``: plain rollbacks in threads, async ones as tasks, 4 at a time; one that
    fails keeps its state with its attempt."""

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        scope.journal.change("d", "insert", key=item.identity)

    lock = threading.Lock()
    running = [0]
    most = [0]
    scopes: list[tuple[str, str, str]] = []

    def enter(scope: migrate.Scope) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            scopes.append((scope.run_id, scope.definition_id, scope.identity))

    def leave(identity: str) -> None:
        with lock:
            running[0] -= 1
        if identity == "13":
            raise RuntimeError("no undo for 13")

    def undo_sync(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        enter(scope)
        assert migrate.current_scope() is scope
        threading.Event().wait(0.005)
        leave(item.identity)

    async def undo_async(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        enter(scope)
        assert migrate.current_scope() is scope
        await asyncio.sleep(0.005)
        leave(item.identity)

    config = migrate.Config(
        [
            migrate.Migration(
                "p",
                migrate.MemorySource([{"id": i} for i in range(1, 41)]),
                process,
                rollback=undo_sync if kind == "sync" else undo_async,
            )
        ],
        store=store_url,
    )
    migrate.run(config)
    summary = migrate.rollback(config, concurrency=4)
    counts = summary.definitions["p"].counts
    assert (39, 1, 0, "failed") == (
        counts.rolled_back,
        counts.failed,
        counts.skipped,
        summary.status,
    )
    assert 1 < most[0] <= 4
    assert {(summary.run_id, "p", str(i)) for i in range(1, 41)} == set(scopes)
    with migrate.open_store(store_url) as store:
        (state,) = store.items("p")
    assert "13" == state.identity
    assert [("RuntimeError", "no undo for 13")] == [
        (a["error"]["type"], a["error"]["message"]) for a in state.rollback_attempts
    ]


def test_the_rollback_item_holds_the_stored_evidence(tmp_path: Path, store_url: str) -> None:
    """RollbackItem: identity, status, source version, the change entries (no diagnostics),
    earlier attempts, tracking; the scope names the run, definition and identity."""

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        scope.journal.change("sql:a", "insert", key=1, created=True)
        scope.journal.diagnostic("between")
        scope.journal.change("http:b", "POST /b", key="x")
        scope.track({"dest": item.identity})
        if item.identity == "2":
            raise ValueError("half done")

    seen: list[tuple[migrate.RollbackItem, migrate.Scope]] = []

    def undo(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        seen.append((item, scope))
        if not item.rollback_attempts:
            error = RuntimeError("b refused")
            error.entries = [dict(item.journal[1])]  # type: ignore[attr-defined]
            raise error

    source = migrate.MemorySource([{"id": 1, "v": "a"}, {"id": 2, "v": "b"}], version="v")
    config = migrate.Config(
        [migrate.Migration("p", source, process, rollback=undo)], store=store_url
    )
    migrate.run(config)
    first = migrate.rollback(config)
    second = migrate.rollback(config)
    assert [(0, 2), (2, 0)] == [
        (s.definitions["p"].counts.rolled_back, s.definitions["p"].counts.failed)
        for s in (first, second)
    ]
    item, scope = seen[0]
    entries = (
        {
            "kind": "change",
            "destination": "sql:a",
            "operation": "insert",
            "key": 1,
            "created": True,
        },
        {"kind": "change", "destination": "http:b", "operation": "POST /b", "key": "x"},
    )
    assert ("1", "migrated", "a", entries, (), {"dest": "1"}) == (
        item.identity,
        item.status,
        item.source_version,
        tuple(item.journal),
        tuple(item.rollback_attempts),
        item.tracking,
    )
    assert (first.run_id, "p", "1") == (scope.run_id, scope.definition_id, scope.identity)
    failed_item = seen[1][0]
    assert ("2", "failed") == (failed_item.identity, failed_item.status)
    again = seen[2][0]
    (attempt,) = again.rollback_attempts
    assert (first.run_id, [entries[1]]) == (attempt["run_id"], attempt["entries"])


class _FailingCommits(migrate.MemoryStore):
    """A memory store whose second rollback commit fails, as a full disk would."""

    def __init__(self) -> None:
        super().__init__()
        self.commits = 0

    def commit_rollback(self, commit: migrate.RollbackCommit) -> None:
        self.commits += 1
        if self.commits == 2:
            raise migrate.StoreError("store memory failed while committing: disk full")
        super().commit_rollback(commit)


@pytest.mark.parametrize("concurrency", [None, 3])
def test_a_failed_commit_stops_the_rollback_keeping_what_was_committed(
    concurrency: int | None,
) -> None:
    """A StoreError on a batch's commit: that batch's states are kept (undone again by the
    next rollback), the run is stored failed (stopped), its locks released."""
    store = _FailingCommits()

    def undo(item: migrate.RollbackItem, scope: migrate.Scope) -> None:
        pass

    source = migrate.MemorySource([{"id": i} for i in range(1, 3001)])
    config = migrate.Config(
        [migrate.Migration("p", source, _journaled, rollback=undo)], store=store
    )
    migrate.run(config)
    with pytest.raises(migrate.StoreError, match="disk full"):
        migrate.rollback(config, concurrency=concurrency)
    stopped = store.runs(1)[0]
    assert ("rollback", "failed") == (stopped.kind, stopped.status)
    assert (stopped.error or "").startswith("stopped: store memory failed")
    assert () == store.locks()
    committed = stopped.definitions["p"].counts.rolled_back
    assert 0 < committed == 3000 - len(store.items("p"))
    assert 3000 - committed == migrate.rollback(config).definitions["p"].counts.rolled_back


def _journaled(item: migrate.Item, scope: migrate.Scope) -> None:
    scope.journal.change("d", "insert", key=item.identity)
