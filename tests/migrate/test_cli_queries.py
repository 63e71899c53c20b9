"""The read-only commands through the installed ``migrate`` command: list, graph, status, runs,
failures, unlock."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.migrate.cli_support import Project, make_project
from tests.migrate.conftest import STORES
from tests.postgres_server import PostgresServer


@pytest.fixture(scope="module", params=STORES)
def project(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Project:
    """Six people (one bad, one skipped) and their orders; people run once. Tests only read.
    Its store: SQLite, or a PostgreSQL schema of its own."""
    store = None
    if request.param == "postgresql":
        server: PostgresServer = request.getfixturevalue("postgres_server")
        store = server.url()
    project = make_project(
        tmp_path_factory.mktemp("queries"), ["ok", "bad", "ok", "skip", "ok", "ok"], store=store
    )
    done = project.cli("run", "people")
    assert done.returncode == 1, done.stderr
    return project


def test_list_names_each_definition_with_its_source_and_requirements(project: Project) -> None:
    """``list`` prints one row per definition: id, source, lookup strategy, requires."""
    done = project.cli("list")
    assert done.returncode == 0
    lines = done.stdout.splitlines()
    assert lines[0].split() == [
        "definition",
        "source",
        "lookup",
        "requires",
        "optional",
        "concurrency",
    ]
    people = lines[1].split()
    orders = lines[2].split()
    assert (people[0], people[2], people[3]) == ("people", "scan", "-")
    assert people[1].startswith("csv:")
    assert people[1].endswith("people.csv")
    assert tuple(orders[:4]) == ("orders", "sql:orders", "direct", "people")


def test_graph_shows_requires_edges_and_the_run_order(project: Project) -> None:
    """``graph`` lists each definition's dependencies and the order runs follow."""
    done = project.cli("graph")
    assert done.returncode == 0
    assert "`-- requires people" in done.stdout
    assert "run order: people -> orders" in done.stdout


def test_status_json_has_stored_counts_and_latest_run(project: Project) -> None:
    """``status --json`` gives stored state counts per definition and its latest run."""
    document = project.json("status")
    people = document["definitions"]["people"]
    assert {key: people[key] for key in ("migrated", "skipped", "failed", "needs_update")} == {
        "migrated": 4,
        "skipped": 1,
        "failed": 1,
        "needs_update": 0,
    }
    assert people["latest_run"]["status"] == "failed"
    assert {"run_id", "status", "started_at", "ended_at"} <= set(people["latest_run"])
    assert None is document["definitions"]["orders"]["latest_run"]


def test_status_of_named_definitions_only(project: Project) -> None:
    """``status people`` reports only the definitions named; ``--all`` every one."""
    assert list(project.json("status", "people")["definitions"]) == ["people"]
    assert list(project.json("status", "--all")["definitions"]) == ["people", "orders"]
    assert project.cli("status", "people", "--all").returncode == 2


def test_status_table_shows_counts(project: Project) -> None:
    """``status`` without --json prints a table row per definition."""
    done = project.cli("status")
    assert done.returncode == 0
    rows = {line.split()[0]: line.split() for line in done.stdout.splitlines()[1:]}
    assert rows["people"][1:5] == ["4", "1", "1", "0"]
    assert rows["orders"][1:6] == ["0", "0", "0", "0", "-"]


def test_failures_json_lists_evidence(project: Project) -> None:
    """``failures DEF --json`` lists identity, run id and the error evidence of each failure."""
    (failure,) = project.json("failures", "people")
    assert failure["identity"] == "2"
    assert failure["run_id"]
    error = failure["error"]
    assert {"kind", "type", "message", "details", "attempts"} <= set(error)
    assert (error["kind"], error["type"], error["attempts"]) == ("process", "ValueError", 1)
    assert error["message"] == "marked bad"


def test_failures_text_shows_identity_and_error(project: Project) -> None:
    """``failures DEF`` prints each failed identity with its error."""
    done = project.cli("failures", "people")
    assert done.returncode == 0
    assert "people: 1 failed item\n" in done.stdout
    assert "\n2  (run " in done.stdout
    assert "process error ValueError: marked bad" in done.stdout


def test_failures_limit_caps_the_list(tmp_path: Path) -> None:
    """``failures DEF --limit N`` returns at most N records and says how many exist."""
    project = make_project(tmp_path, ["bad"] * 5)
    assert project.cli("run", "people").returncode == 1
    assert len(project.json("failures", "people", "--limit", "2")) == 2
    assert (
        "people: 5 failed items (showing 3)"
        in project.cli("failures", "people", "--limit", "3").stdout
    )


def test_failures_of_a_clean_definition(project: Project) -> None:
    """``failures`` of a definition without failures says so and exits 0."""
    done = project.cli("failures", "orders")
    assert (done.returncode, done.stdout) == (0, "orders: no failed items\n")


def test_runs_json_lists_runs_newest_first_with_counts(tmp_path: Path) -> None:
    """``runs --json`` lists runs newest first, each with its status and counts."""
    project = make_project(tmp_path, ["ok", "bad", "ok", "skip", "ok", "ok"])
    assert project.cli("run", "people").returncode == 1
    assert project.cli("run", "people", "--failed").returncode == 1  # person 2 is still bad
    records = project.json("runs")["runs"]
    assert len(records) == 2
    newest, oldest = records
    assert newest["started_at"] >= oldest["started_at"]
    assert newest["mode"] == "failed"
    assert {k: oldest["definitions"]["people"][k] for k in ("migrated", "skipped", "failed")} == {
        "migrated": 4,
        "skipped": 1,
        "failed": 1,
    }
    assert len(project.json("runs", "--limit", "1")["runs"]) == 1


def test_runs_table_shows_each_run(project: Project) -> None:
    """``runs`` prints a row per run with its status, mode and counts."""
    done = project.cli("runs")
    assert done.returncode == 0
    (row,) = done.stdout.splitlines()[1:]
    assert row.split()[1:3] == ["failed", "normal"]
    assert "people: migrated 4, skipped 1, failed 1" in row


def test_runs_before_any_run(tmp_path: Path) -> None:
    """``runs`` on a fresh store says there are none."""
    project = make_project(tmp_path, ["ok"])
    assert project.cli("runs").stdout == "no runs yet\n"


def test_unlock_without_a_lock_says_so(project: Project) -> None:
    """``unlock DEF`` when nothing holds the lock exits 0 and says so."""
    done = project.cli("unlock", "people")
    assert (done.returncode, done.stdout) == (0, "people was not locked\n")


def test_unknown_definition_is_a_usage_error(project: Project) -> None:
    """Naming an unknown definition exits 2 with a message naming it."""
    for args in (("failures", "nope"), ("unlock", "nope"), ("status", "nope")):
        done = project.cli(*args)
        assert done.returncode == 2, args
        assert "'nope'" in done.stderr
