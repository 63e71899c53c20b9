"""
``recurring [--json]``: the engine's recurring workflows with their schedule, next due time
(ISO-8601 UTC; epoch ms in JSON), status and catch_up; exit codes 0, 2 and 5.
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from effects.durable import Engine
from effects.testing import VirtualClock
from tests.conftest import fresh_store_url
from tests.durable.cli_support import (
    assert_one_line_error,
    durable_command,
    no_raw_controls,
    rows,
    run_async,
)

pytestmark = pytest.mark.not_on_memory("the command line runs in processes of its own")

#: 2026-01-01T00:00:00Z in epoch ms.
T0 = 1_767_225_600_000
HOUR = 3_600_000

APP = """
from effects.durable import Engine, Recurring, workflow
from schedules import cron, recurs, spaced


@workflow("tick")
async def tick(ctx, value):
    return value


RECURRING = [
    Recurring("hourly", tick, spaced("1h"), input=1),
    Recurring("nightly", tick, cron("0 3 * * *", tz="Europe/Berlin"), catch_up="all"),
    Recurring("never", tick, recurs(0), catch_up="none"),
    Recurring("monthly", tick, spaced("30d")),
    Recurring("x\\x1b[2J", tick, spaced("2h")),
]
engine = Engine(URL, workflows=[tick], recurring=RECURRING)
changed = Engine(URL, workflows=[tick], recurring=[Recurring("hourly", tick, spaced("30m"))])
bare = Engine(URL, workflows=[tick])
"""


class RecurringApp:
    """A folder holding ``app.py`` (``APP``) on one store, and its command line."""

    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.url = url
        (root / "app.py").write_text(APP.replace("URL", repr(url)))

    def module(self) -> ModuleType:
        """``app.py`` imported in this process."""
        spec = importlib.util.spec_from_file_location(
            f"_recurring_app_{id(self)}", self.root / "app.py"
        )
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    def step_once(self) -> None:
        """Let an engine with the app's recurrings see them at T0 (their first step)."""
        module = self.module()

        async def main() -> None:
            clock = VirtualClock(T0 / 1000)
            recurring = module.RECURRING
            async with Engine(
                self.url, workflows=[module.tick], recurring=recurring, clock=clock
            ) as engine:
                await engine.run_until_idle()

        run_async(main)

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``python -m effects.durable ARGS`` in the app's folder."""
        return subprocess.run(
            [*durable_command(), *args],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def json(self, app: str = "app:engine") -> Any:
        """``recurring --json`` of *app*, which must succeed."""
        done = self.cli("--app", app, "recurring", "--json")
        assert (0, "") == (done.returncode, done.stderr), done.stderr
        return json.loads(done.stdout)


@pytest.fixture(params=["sqlite", "postgresql"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> RecurringApp:
    """The app on a SQLite file in its folder, or a PostgreSQL schema of its own."""
    return RecurringApp(tmp_path, fresh_store_url(request, tmp_path / "durable.db"))


def entry(name: str, schedule: str, due: int | None, status: str, catch_up: str = "latest") -> Any:
    """One element of ``recurring --json``."""
    return {
        "name": name,
        "workflow": "tick",
        "schedule": schedule,
        "next_due": due,
        "status": status,
        "catch_up": catch_up,
    }


def berlin_3am_utc_ms() -> int:
    """2026-01-01 03:00 in Berlin, epoch ms."""
    moment = datetime.datetime(2026, 1, 1, 2, 0, tzinfo=datetime.UTC)
    return round(moment.timestamp() * 1000)


def test_json_lists_each_recurring_with_its_next_due_time_in_epoch_ms(app: RecurringApp) -> None:
    """After the first step at T0: scheduled ones with their due, a done one, a waiting one."""
    app.step_once()
    assert [
        entry("hourly", "spaced(3600)", T0 + HOUR, "scheduled"),
        entry("monthly", "spaced(2592000)", None, "waiting"),
        entry("never", "recurs(0)", None, "done", "none"),
        entry(
            "nightly",
            "cron('0 3 * * *', tz='Europe/Berlin')",
            berlin_3am_utc_ms(),
            "scheduled",
            "all",
        ),
        entry("x\x1b[2J", "spaced(7200)", T0 + 2 * HOUR, "scheduled"),
    ] == app.json()


def test_the_table_shows_iso_utc_times_and_escapes_names(app: RecurringApp) -> None:
    """Text: one row per recurring, next due as ISO-8601 UTC, '-' where none, names escaped."""
    app.step_once()
    done = app.cli("--app", "app:engine", "recurring")
    assert (0, "") == (done.returncode, done.stderr)
    assert no_raw_controls(done.stdout)
    assert [
        ["name", "workflow", "schedule", "next due", "status", "catch_up"],
        ["hourly", "tick", "spaced(3600)", "2026-01-01T01:00:00.000Z", "scheduled", "latest"],
        ["monthly", "tick", "spaced(2592000)", "-", "waiting", "latest"],
        ["never", "tick", "recurs(0)", "-", "done", "none"],
        [
            "nightly",
            "tick",
            "cron('0 3 * * *', tz='Europe/Berlin')",
            "2026-01-01T02:00:00.000Z",
            "scheduled",
            "all",
        ],
        ["x\\x1b[2J", "tick", "spaced(7200)", "2026-01-01T02:00:00.000Z", "scheduled", "latest"],
    ] == rows(done.stdout)


def test_before_any_worker_they_are_unseen_and_a_changed_schedule_says_so(
    app: RecurringApp,
) -> None:
    """On a store no worker has stepped them in: unseen; a schedule the code changed: changed."""
    made = app.cli("--app", "app:bare", "start", "tick", "--input", "1")
    assert 0 == made.returncode, made.stderr
    unseen = app.json()
    assert {"unseen"} == {e["status"] for e in unseen}
    assert {None} == {e["next_due"] for e in unseen}
    app.step_once()
    # An inspection command neither steps nor restarts anything.
    assert [entry("hourly", "spaced(1800)", None, "changed")] == app.json("app:changed")
    assert "scheduled" == app.json()[0]["status"]


def test_an_engine_without_recurring_workflows_lists_none(app: RecurringApp) -> None:
    """No recurrings: '[]' and a line saying so."""
    app.step_once()
    assert [] == app.json("app:bare")
    done = app.cli("--app", "app:bare", "recurring")
    assert (0, "no recurring workflows\n") == (done.returncode, done.stdout)


def test_a_missing_store_or_app_is_a_usage_error(app: RecurringApp) -> None:
    """No store there yet (none is made), no --app: one line, exit 2."""
    done = app.cli("--app", "app:engine", "recurring")
    assert_one_line_error(done, "no store", code=2)
    if app.url.startswith("sqlite:"):
        assert not (app.root / "durable.db").exists()
    assert_one_line_error(app.cli("recurring"), "--app MODULE:ENGINE is required", code=2)


def test_a_store_that_is_not_an_engine_store_is_exit_5(tmp_path: Path) -> None:
    """A SQLite file that is not a store: one line, exit 5."""
    made = RecurringApp(tmp_path, f"sqlite:///{tmp_path / 'durable.db'}")
    (tmp_path / "durable.db").write_bytes(b"not a database, just bytes" * 100)
    assert_one_line_error(made.cli("--app", "app:engine", "recurring", "--json"), "store", code=5)
