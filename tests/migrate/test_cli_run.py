"""``migrate run`` through the installed command: modes, --json, --plan, progress, exit codes."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

from tests.migrate.cli_support import Project, make_project, migrate_command

RUN_KEYS = {"migrated", "skipped", "failed", "unchanged", "needs_update"}


def _counts(document: dict[str, object], definition_id: str) -> dict[str, int]:
    definitions = document["definitions"]
    assert isinstance(definitions, dict)
    return {key: definitions[definition_id][key] for key in sorted(RUN_KEYS)}


def _expect(**counts: int) -> dict[str, int]:
    return {key: counts.get(key, 0) for key in sorted(RUN_KEYS)}


def test_clean_run_exits_0_and_json_has_the_issue_keys(tmp_path: Path) -> None:
    """A run without failed items exits 0; --json gives run_id, status and counts per DEF."""
    project = make_project(tmp_path, ["ok"] * 5)
    done = project.cli("run", "--all", "--json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert {"run_id", "status", "definitions"} <= set(document)
    assert document["status"] == "succeeded"
    assert RUN_KEYS | {"retries", "gave_up"} <= set(document["definitions"]["people"])
    assert document["definitions"]["people"]["retries"] == 0
    assert _counts(document, "people") == _expect(migrated=5)
    assert _counts(document, "orders") == _expect(migrated=5)
    assert project.dest_ids("orders") == [1, 2, 3, 4, 5]


def test_run_with_failed_items_exits_1(tmp_path: Path) -> None:
    """A run that finishes with failed items exits 1 and prints the most common errors."""
    project = make_project(tmp_path, ["ok", "bad", "bad", "skip"])
    done = project.cli("run", "people", "--progress", "none")
    assert done.returncode == 1, done.stderr
    assert "most common errors:" in done.stdout
    assert "2  people      process  ValueError: marked bad" in done.stdout
    header, row = done.stdout.splitlines()[2:4]
    assert header.split() == [
        "definition",
        "mode",
        "migrated",
        "skipped",
        "failed",
        "unchanged",
        "needs-update",
        "retries",
    ]
    assert row.split() == ["people", "normal", "1", "1", "2", "0", "0", "0"]


def test_run_json_and_table_show_retries_per_definition(tmp_path: Path) -> None:
    """Two items retried twice each: 4 retries for people, 0 for orders, in JSON and tables."""
    project = make_project(tmp_path, ["ok", "flaky", "flaky"])
    document = project.json("run", "--all")
    assert {"people": (4, 0), "orders": (0, 0)} == {
        key: (value["retries"], value["gave_up"]) for key, value in document["definitions"].items()
    }
    assert _counts(document, "people") == _expect(migrated=3)
    (record,) = project.json("runs")["runs"]
    assert 4 == record["definitions"]["people"]["retries"]
    assert "people: migrated 3, retries 4" in project.cli("runs").stdout
    project.write_people(["flaky", "flaky", "flaky", "flaky"])
    done = project.cli("run", "people", "--progress", "log")
    assert done.returncode == 0, done.stderr
    # Persons 2 and 3 are unchanged; 1 (now flaky) and the new 4 are retried twice each.
    assert ["people", "normal", "2", "0", "0", "2", "0", "4"] == done.stdout.splitlines()[3].split()
    assert "(migrated 2, unchanged 2, retries 4)" in done.stderr


def test_failed_run_reprocesses_only_failed_items(tmp_path: Path) -> None:
    """After fixing the source, --failed processes exactly the failed identities again."""
    project = make_project(tmp_path, ["ok", "bad", "ok", "bad", "skip"])
    assert project.cli("run", "people").returncode == 1
    project.write_people(["ok", "ok", "ok", "ok", "skip"])
    done = project.cli("run", "people", "--failed", "--json")
    assert done.returncode == 0, done.stderr
    assert _counts(json.loads(done.stdout), "people") == _expect(migrated=2)
    assert project.dest_ids("people") == [1, 2, 3, 4]
    assert project.json("failures", "people") == []


def test_skipped_run_reevaluates_skipped_items(tmp_path: Path) -> None:
    """--skipped processes exactly the skipped identities again."""
    project = make_project(tmp_path, ["ok", "skip", "skip"])
    assert project.cli("run", "people").returncode == 0
    project.write_people(["ok", "ok", "skip"])
    document = project.json("run", "people", "--skipped")
    assert _counts(document, "people") == _expect(migrated=1, skipped=1)
    assert project.dest_ids("people") == [1, 2]


def test_failed_and_skipped_together_are_refused_with_2(tmp_path: Path) -> None:
    """--failed with --skipped exits 2 and says the two cannot be combined."""
    project = make_project(tmp_path, ["ok"])
    done = project.cli("run", "--failed", "--skipped")
    assert done.returncode == 2
    assert "--failed and --skipped" in done.stderr
    assert project.json("runs")["runs"] == []


def test_id_targets_identities_whatever_their_state(tmp_path: Path) -> None:
    """--id X (repeatable) processes exactly those identities, even migrated ones."""
    project = make_project(tmp_path, ["ok", "ok", "ok", "ok"])
    assert project.cli("run", "people").returncode == 0
    document = project.json("run", "people", "--id", "2", "--id", "4")
    assert _counts(document, "people") == _expect(migrated=2)


def test_changed_source_counts_migrated_items_as_unchanged(tmp_path: Path) -> None:
    """A changed file restarts discovery; rows migrated at the same version are unchanged."""
    project = make_project(tmp_path, ["ok", "ok", "ok"])
    assert project.cli("run", "people").returncode == 0
    project.write_people(["ok", "ok", "ok", "ok"])
    document = project.json("run", "people")
    assert _counts(document, "people") == _expect(migrated=1, unchanged=3)


def test_update_processes_migrated_items_again(tmp_path: Path) -> None:
    """--update processes every migrated item again and exits 0."""
    project = make_project(tmp_path, ["ok", "ok", "skip"])
    assert project.cli("run", "people").returncode == 0
    document = project.json("run", "people", "--update")
    assert document["status"] == "succeeded"
    assert _counts(document, "people")["migrated"] == 2


def test_preflight_refuses_with_3_naming_the_dependency(tmp_path: Path) -> None:
    """A required dependency whose latest run failed refuses the run (3); --force runs it."""
    project = make_project(tmp_path, ["ok", "bad"])
    assert project.cli("run", "people").returncode == 1
    refused = project.cli("run", "orders")
    assert refused.returncode == 3
    assert "'people'" in refused.stderr
    assert "--force" in refused.stderr
    forced = project.cli("run", "orders", "--force", "--json")
    assert forced.returncode == 1  # order 2's person was never migrated
    assert _counts(json.loads(forced.stdout), "orders") == _expect(migrated=1, failed=1)


def test_plan_prints_the_plan_and_runs_nothing(tmp_path: Path) -> None:
    """--plan prints the definitions in order with mode and reason and starts no run."""
    project = make_project(tmp_path, ["ok"])
    done = project.cli("run", "orders", "--with-dependencies", "--failed", "--plan")
    assert done.returncode == 0, done.stderr
    people_line = next(line for line in done.stdout.splitlines() if "people" in line)
    orders_line = next(line for line in done.stdout.splitlines() if "orders  " in line)
    assert done.stdout.index(people_line) < done.stdout.index(orders_line)
    assert "normal" in people_line
    assert "dependency of orders" in people_line
    assert "failed" in orders_line
    assert project.json("runs")["runs"] == []


def test_plan_json_lists_steps(tmp_path: Path) -> None:
    """--plan --json prints the plan's steps as JSON."""
    project = make_project(tmp_path, ["ok"])
    done = project.cli("run", "orders", "--with-dependencies", "--plan", "--json")
    assert done.returncode == 0, done.stderr
    steps = json.loads(done.stdout)["steps"]
    assert [(s["definition"], s["mode"], s["reason"]) for s in steps] == [
        ("people", "normal", "dependency of orders"),
        ("orders", "normal", "named"),
    ]


def test_with_dependencies_runs_required_definitions_first(tmp_path: Path) -> None:
    """run DEF --with-dependencies runs its requirements first, in one run."""
    project = make_project(tmp_path, ["ok", "ok"])
    document = project.json("run", "orders", "--with-dependencies")
    assert list(document["definitions"]) == ["people", "orders"]
    assert _counts(document, "orders") == _expect(migrated=2)


def test_progress_log_prints_a_line_per_window(tmp_path: Path) -> None:
    """--progress log writes start, window and done lines to stderr."""
    project = make_project(tmp_path, ["ok"] * 25, window=10)
    done = project.cli("run", "people", "--progress", "log")
    assert done.returncode == 0
    lines = done.stderr.splitlines()
    assert lines[0].startswith("[people] start (mode normal")
    windows = [line for line in lines if line.startswith("[people] window")]
    assert [w.split(":")[0] for w in windows] == [f"[people] window {n}" for n in (1, 2, 3)]
    assert lines[-1].startswith("[people] done: 25 items")


def test_progress_none_and_json_keep_stderr_quiet(tmp_path: Path) -> None:
    """--progress none writes nothing to stderr; --json off a terminal prints no progress."""
    project = make_project(tmp_path, ["ok"] * 3)
    assert project.cli("run", "people", "--progress", "none").stderr == ""
    assert project.cli("run", "people", "--json").stderr == ""


def test_concurrency_option(tmp_path: Path) -> None:
    """-c N overrides the concurrency; -c 0 is bad usage (2)."""
    project = make_project(tmp_path, ["ok"] * 12)
    assert project.cli("run", "people", "-c", "0").returncode == 2
    document = project.json("run", "people", "-c", "4")
    assert _counts(document, "people") == _expect(migrated=12)


def test_missing_config_is_a_usage_error(tmp_path: Path) -> None:
    """A missing config file exits 2 with a message naming the file."""
    project = Project(tmp_path)
    done = project.cli("list")
    assert done.returncode == 2
    assert "migrate_config.py" in done.stderr


def test_bad_config_is_a_usage_error_naming_the_problem(tmp_path: Path) -> None:
    """A config with a dependency cycle exits 2 naming the cycle."""
    project = make_project(tmp_path, ["ok"])
    text = project.config.read_text().replace(
        "migrate_person,\n        ),",
        'migrate_person,\n            requires=("orders",),\n        ),',
    )
    project.config.write_text(text)
    done = project.cli("run")
    assert done.returncode == 2
    assert "cycle" in done.stderr
    assert "people -> orders -> people" in done.stderr


def test_bad_usage_exits_2(tmp_path: Path) -> None:
    """Unknown commands, options and definitions exit 2."""
    project = make_project(tmp_path, ["ok"])
    assert project.cli("frobnicate").returncode == 2
    assert project.cli("run", "--bogus").returncode == 2
    unknown = project.cli("run", "nope")
    assert unknown.returncode == 2
    assert "'nope'" in unknown.stderr
    assert project.cli("run", "people", "--all").returncode == 2


def test_python_dash_m_migrate_is_the_same_command(tmp_path: Path) -> None:
    """``python -m migrate`` runs the same command line."""
    project = make_project(tmp_path, ["ok"])
    done = subprocess.run(
        [sys.executable, "-m", "migrate", "--config", str(project.config), "list"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0
    assert done.stdout.splitlines()[1].startswith("people")


def test_changed_contract_is_refused_with_3_until_forced(tmp_path: Path) -> None:
    """A changed version field exits 3 saying what changed and what to do; --force accepts it."""
    project = make_project(tmp_path, ["ok", "ok", "ok"])
    assert project.cli("run", "people").returncode == 0
    text = project.config.read_text().replace('identity="id",', 'identity="id", version="name",')
    project.config.write_text(text)

    refused = project.cli("run", "people")
    assert refused.returncode == 3, refused.stderr
    assert (
        "migrate: refused: definition 'people' changed its source contract since its states were "
        "stored: version field None -> 'name'. Its 3 stored item states"
    ) in refused.stderr
    assert "run: migrate run people --force --update" in refused.stderr
    assert project.json("runs")["runs"][0]["status"] == "start-failed"

    forced = project.cli("run", "people", "--force", "--progress", "none")
    assert forced.returncode == 0, forced.stderr
    assert (
        "people: accepted the changed source contract (version field None -> 'name'); "
        "discovery starts again from the first item"
    ) in forced.stdout
    after = project.json("run", "people")
    assert (after["status"], after["notes"]) == ("succeeded", [])


def test_progress_auto_off_a_terminal_prints_a_line_per_window(tmp_path: Path) -> None:
    """The default progress (auto) off a terminal writes log lines, one per window."""
    project = make_project(tmp_path, ["ok"] * 15, window=10)
    done = project.cli("run", "people")
    assert done.returncode == 0
    assert [line.split(":")[0] for line in done.stderr.splitlines()] == [
        "[people] start (mode normal)",
        "[people] window 1",
        "[people] window 2",
        "[people] done",
    ]
    assert "\r" not in done.stderr


def test_progress_auto_on_a_terminal_draws_bars(tmp_path: Path) -> None:
    """The default progress (auto) on a terminal redraws a bar in place, no log lines."""
    project = make_project(tmp_path, ["ok"] * 15, window=10)
    primary, secondary = pty.openpty()
    try:
        process = subprocess.Popen(
            [*migrate_command(), "--config", str(project.config), "run", "people"],
            cwd=project.root,
            stdout=subprocess.PIPE,
            stderr=secondary,
            env={**os.environ, "TERM": "xterm"},
        )
        os.close(secondary)
        received = b""
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:  # the terminal closed: the process ended
                break
            if not chunk:
                break
            received += chunk
        process.communicate(timeout=60)
    finally:
        os.close(primary)
    assert process.returncode == 0
    screen = received.decode()
    assert screen.startswith("\rpeople")
    assert "15 items" in screen
    assert "[people]" not in screen


def test_a_reader_that_goes_away_ends_output_quietly(tmp_path: Path) -> None:
    """``migrate runs | head`` style: a closed stdout gives no traceback; exit codes stay."""
    project = make_project(tmp_path, ["ok", "bad"])
    for args, code in ((("run", "people", "--progress", "none"), 1), (("runs",), 0)):
        process = subprocess.Popen(
            [*migrate_command(), "--config", str(project.config), *args],
            cwd=project.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert process.stdout is not None
        process.stdout.close()  # before the command writes anything
        _out, err = process.communicate(timeout=60)
        assert (code, "") == (process.returncode, err)
