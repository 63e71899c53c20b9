"""Dependencies: plans with dependencies, order, preflight refusals and --force."""

from __future__ import annotations

from pathlib import Path

import pytest

import migrate
from tests.migrate.helpers import config_of, people, recorder


def _config(tmp_path: Path, fail_authors: set[str] | None = None) -> migrate.Config:
    authors = migrate.Migration(
        "authors", migrate.MemorySource(people(3)), recorder([], fail=fail_authors)
    )
    books = migrate.Migration(
        "books", migrate.MemorySource(people(2)), recorder([]), requires=["authors"]
    )
    reviews = migrate.Migration(
        "reviews", migrate.MemorySource(people(1)), recorder([]), optional=["books"]
    )
    return config_of(tmp_path, reviews, books, authors)


def test_plan_orders_dependencies_first(tmp_path: Path) -> None:
    """Without names the plan covers all definitions, dependencies first."""
    steps = migrate.plan(_config(tmp_path)).steps
    assert [s.definition_id for s in steps] == ["authors", "books", "reviews"]


def test_with_dependencies_pulls_required_dependencies_in_normal_mode(tmp_path: Path) -> None:
    """--with-dependencies adds required deps, which run normal whatever the named mode."""
    options = migrate.RunOptions(definitions=("books",), failed=True, with_dependencies=True)
    the_plan = migrate.plan(_config(tmp_path), options)
    assert [
        migrate.PlanStep("authors", "normal", "dependency of books"),
        migrate.PlanStep("books", "failed", "named"),
    ] == list(the_plan.steps)
    text = str(the_plan)
    assert "authors  normal   dependency of books" in text


def test_optional_dependencies_are_not_pulled_in(tmp_path: Path) -> None:
    """Optional dependencies only order a plan; with_dependencies does not add them."""
    options = migrate.RunOptions(definitions=("reviews",), with_dependencies=True)
    assert migrate.plan(_config(tmp_path), options).definition_ids == ("reviews",)


def test_preflight_refuses_a_never_run_dependency(tmp_path: Path) -> None:
    """Running books before authors ever ran is refused, saying which and how to proceed."""
    config = _config(tmp_path)
    with pytest.raises(migrate.PreflightRefused) as caught:
        migrate.run(config, migrate.RunOptions(definitions=("books",)))
    message = str(caught.value)
    assert "refusing to run 'books': required dependency 'authors' has never run" in message
    assert "migrate run authors" in message
    assert "--force" in message
    (record,) = migrate.runs(config)
    assert record.status == "start-failed"


def test_preflight_refuses_a_dependency_with_failed_items(tmp_path: Path) -> None:
    """A dependency whose latest run had failed items blocks the dependent definition."""
    config = _config(tmp_path, fail_authors={"2"})
    migrate.run(config, migrate.RunOptions(definitions=("authors",)))
    with pytest.raises(migrate.PreflightRefused, match="ended with 1 failed item"):
        migrate.run(config, migrate.RunOptions(definitions=("books",)))


def test_preflight_passes_after_a_clean_dependency_run(tmp_path: Path) -> None:
    """Once the dependency's latest run succeeded cleanly, the dependent runs."""
    fail = {"2"}
    config = _config(tmp_path, fail_authors=fail)
    migrate.run(config, migrate.RunOptions(definitions=("authors",)))
    fail.clear()
    migrate.run(config, migrate.RunOptions(definitions=("authors",), failed=True))
    summary = migrate.run(config, migrate.RunOptions(definitions=("books",)))
    assert (summary.status, summary.definitions["books"].counts.migrated) == ("succeeded", 2)


def test_force_skips_the_preflight(tmp_path: Path) -> None:
    """--force runs the dependent even though its dependency never ran."""
    config = _config(tmp_path)
    summary = migrate.run(config, migrate.RunOptions(definitions=("books",), force=True))
    assert summary.status == "succeeded"


def test_dependency_failing_in_the_same_run_blocks_its_dependents(tmp_path: Path) -> None:
    """In one plan, a dependency that ends with failures blocks the definitions requiring it."""
    config = _config(tmp_path, fail_authors={"1"})
    summary = migrate.run(config)
    books = summary.definitions["books"]
    assert (books.status, summary.status) == ("blocked", "failed")
    assert books.blocked is not None
    assert "required dependency 'authors' did not succeed" in books.blocked
    assert summary.definitions["reviews"].status == "succeeded"


def test_with_dependencies_runs_dependency_then_named(tmp_path: Path, store_url: str) -> None:
    """A with-dependencies run processes the dependency first, then the named definition."""
    order: list[str] = []

    def process_for(name: str) -> migrate.Process:
        def process(item: migrate.Item, scope: migrate.Scope) -> None:
            order.append(name)

        return process

    config = config_of(
        tmp_path,
        migrate.Migration(
            "books", migrate.MemorySource(people(1)), process_for("books"), requires=["authors"]
        ),
        migrate.Migration("authors", migrate.MemorySource(people(1)), process_for("authors")),
        store=store_url,
    )
    migrate.run(config, migrate.RunOptions(definitions=("books",), with_dependencies=True))
    assert order == ["authors", "books"]


def test_unknown_definition_in_options_is_a_usage_error(tmp_path: Path) -> None:
    """Naming an unknown definition is a usage error listing the known ones."""
    with pytest.raises(migrate.UsageError, match="unknown migration 'nope'"):
        migrate.plan(_config(tmp_path), migrate.RunOptions(definitions=("nope",)))


def test_plan_json(tmp_path: Path) -> None:
    """Plan.to_json lists the steps and the checked dependencies."""
    document = migrate.plan(_config(tmp_path), migrate.RunOptions(definitions=("books",))).to_json()
    assert document["steps"] == [{"definition": "books", "mode": "normal", "reason": "named"}]
    assert document["checked"] == [{"definition": "books", "requires": "authors"}]


def test_plan_reasons_say_why_each_step_is_there(tmp_path: Path) -> None:
    """Reasons: "all" when nothing is named (or --all), "named", "dependency of X"."""
    config = _config(tmp_path)
    reasons = {
        label: [(s.definition_id, s.mode, s.reason) for s in migrate.plan(config, opts).steps]
        for label, opts in {
            "none": migrate.RunOptions(failed=True),
            "all": migrate.RunOptions(all=True),
            "named": migrate.RunOptions(definitions=("reviews", "books"), with_dependencies=True),
        }.items()
    }
    assert {
        "none": [
            ("authors", "failed", "all"),
            ("books", "failed", "all"),
            ("reviews", "failed", "all"),
        ],
        "all": [
            ("authors", "normal", "all"),
            ("books", "normal", "all"),
            ("reviews", "normal", "all"),
        ],
        "named": [
            ("authors", "normal", "dependency of books"),
            ("books", "normal", "named"),
            ("reviews", "normal", "named"),
        ],
    } == reasons


def test_printed_plan_pluralises_definitions(tmp_path: Path) -> None:
    """--plan says "1 definition" and "3 definitions", and each step's reason."""
    config = _config(tmp_path)
    one = str(migrate.plan(config, migrate.RunOptions(definitions=("authors",))))
    three = str(migrate.plan(config))
    assert ("Plan: 1 definition, mode normal", "Plan: 3 definitions, mode normal") == (
        one.splitlines()[0],
        three.splitlines()[0],
    )
    assert three.splitlines()[1].split() == ["1.", "authors", "normal", "all"]
