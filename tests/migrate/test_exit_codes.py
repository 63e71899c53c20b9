"""Exit codes a scheduler can trust, refusals that --plan predicts, and escaped terminal output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.migrate.cli_support import make_project, run_main


def _project_config(root: Path, body: str) -> Path:
    path = root / "migrate_config.py"
    path.write_text(
        "import sys\nfrom pathlib import Path\n\nimport migrate\n\n"
        "HERE = Path(__file__).resolve().parent\n\n" + body
    )
    return path


def test_failures_left_behind_the_cursor_keep_the_exit_code_at_1(tmp_path: Path) -> None:
    """A later run with nothing new still exits 1 while failed items wait for --failed."""
    project = make_project(tmp_path, ["ok", "bad", "ok"])
    assert 1 == project.main("run", "people").returncode
    again = project.main("run", "people")
    assert 1 == again.returncode, again.stderr
    assert "1 failed item from earlier runs waits for: migrate run people --failed" in again.stdout
    document = json.loads(project.main("run", "people", "--json").stdout)
    assert ("failed", 1) == (
        document["status"],
        document["definitions"]["people"]["failed_stored"],
    )
    project.write_people(["ok", "ok", "ok"])
    assert 0 == project.main("run", "people", "--failed").returncode
    assert 0 == project.main("run", "people").returncode


def test_an_unreadable_source_has_its_own_exit_code(tmp_path: Path) -> None:
    """A source that cannot be read exits 4 naming it, not 1 "finished with failed items"."""
    project = make_project(tmp_path, ["ok"])
    (tmp_path / "people.csv").unlink()
    done = project.main("run", "people")
    assert 4 == done.returncode
    assert f"source unreadable: people: reading csv:{tmp_path}/people.csv failed" in done.stderr
    assert "No such file or directory" in done.stderr


def test_sys_exit_in_a_config_is_a_config_error(tmp_path: Path) -> None:
    """A config that calls sys.exit(0) while loading exits 2, naming the file and line."""
    config = _project_config(tmp_path, "sys.exit(0)\n")
    done = run_main(config, "run")
    assert 2 == done.returncode
    assert f"{config}, line 8: the config called sys.exit(0)" in done.stderr


def test_sys_exit_in_a_process_never_exits_0(tmp_path: Path) -> None:
    """A process calling sys.exit(0) fails its item: the run exits 1 and the others migrate."""
    config = _project_config(
        tmp_path,
        "def process(item, scope):\n"
        "    if item.identity == '2':\n"
        "        sys.exit(0)\n\n"
        "config = migrate.Config([migrate.Migration('p', migrate.MemorySource("
        "[{'id': i} for i in (1, 2, 3)]), process)], store='sqlite:///s.db')\n",
    )
    done = run_main(config, "run", "--json")
    assert 1 == done.returncode, done.stderr
    assert 2 == json.loads(done.stdout)["definitions"]["p"]["migrated"]


def test_sys_exit_in_a_source_never_exits_0(tmp_path: Path) -> None:
    """A source calling sys.exit(0) stops the run; the exit code says it did not finish."""
    config = _project_config(
        tmp_path,
        "class Quitter(migrate.MemorySource):\n"
        "    def read_window(self, cursor):\n"
        "        sys.exit(0)\n\n"
        "config = migrate.Config([migrate.Migration('p', Quitter([{'id': 1}]), "
        "lambda item, scope: None)], store='sqlite:///s.db')\n",
    )
    done = run_main(config, "run")
    assert 1 == done.returncode
    assert "sys.exit(0) was called while the command ran" in done.stderr
    runs = json.loads(run_main(config, "runs", "--json").stdout)["runs"]
    assert ["failed"] == [r["status"] for r in runs]


def test_plan_predicts_a_preflight_refusal_and_status_hides_refused_runs(tmp_path: Path) -> None:
    """--plan exits 3 with the refusal the run makes; status does not show refused runs."""
    project = make_project(tmp_path, ["ok"])
    planned = project.main("run", "orders", "--plan")
    assert 3 == planned.returncode
    assert "would be refused: refusing to run 'orders': required dependency 'people'" in (
        planned.stdout
    )
    assert "refusals" in json.loads(project.main("run", "orders", "--plan", "--json").stdout)
    refused = project.main("run", "orders")
    assert 3 == refused.returncode
    status = json.loads(project.main("status", "--json").stdout)["definitions"]["orders"]
    assert status["latest_run"] is None
    runs = json.loads(project.main("runs", "--json").stdout)["runs"]
    assert ["start-failed"] == [r["status"] for r in runs]
    assert 0 == project.main("run", "people").returncode
    assert 0 == project.main("run", "orders", "--plan").returncode


@pytest.mark.timeout(120)
def test_plan_predicts_a_held_lock(tmp_path: Path) -> None:
    """While a live run holds a lock, --plan says the run would be refused, naming the run."""
    project = make_project(tmp_path, ["ok"] * 3)
    (tmp_path / "block_at").write_text("2")
    holder = project.popen("run", "people", "--progress", "none")
    try:
        project.wait_for("blocked", holder)
        planned = project.cli("run", "people", "--plan")
        assert 3 == planned.returncode
        assert "would be refused: definition 'people' is locked by run" in planned.stdout
        assert f"pid {holder.pid}" in planned.stdout
    finally:
        holder.kill()
        holder.communicate()


def test_forget_from_the_command_line(tmp_path: Path) -> None:
    """migrate forget DEF --id X drops a state and says so; unknown ones are named."""
    project = make_project(tmp_path, ["ok", "bad"])
    project.main("run", "people")
    done = project.main("forget", "people", "--id", "2", "--id", "99")
    assert 0 == done.returncode, done.stderr
    assert "forgot people 2 (was failed)\npeople 99: no stored state\n" == done.stdout
    assert 0 == project.main("run", "people").returncode


def test_control_characters_from_the_source_never_reach_the_terminal(tmp_path: Path) -> None:
    """failures, run and runs print escape sequences from source data escaped."""
    config = _project_config(
        tmp_path,
        "def process(item, scope):\n"
        "    raise ValueError('bad name ' + item.data['name'])\n\n"
        "config = migrate.Config([migrate.Migration('p', migrate.MemorySource(["
        "{'id': 'x\\x1b]0;owned\\x07', 'name': '\\x1b[2J\\x1b[31mRED\\u202e'}]), process)], "
        "store='sqlite:///s.db')\n",
    )
    ran = run_main(config, "run")
    shown = run_main(config, "failures", "p")
    listed = run_main(config, "runs")
    for done in (ran, shown, listed):
        assert "\x1b" not in done.stdout + done.stderr
        assert "\u202e" not in done.stdout + done.stderr
    assert "bad name \\x1b[2J\\x1b[31mRED\\u202e" in shown.stdout
    assert "x\\x1b]0;owned\\x07" in shown.stdout
    assert "\\x1b[2J" in ran.stdout
