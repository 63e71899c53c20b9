"""
A store of a previous schema version is upgraded in place: its pickles are dropped unread,
its errors keep their order, and attempts left behind a settled step are withdrawn; sagas,
telemetry and the workflow primitives add their columns to a store from before them, recurring
workflows their table.
"""

from __future__ import annotations

import json
import pickle
import sqlite3
from pathlib import Path
from typing import Any, Final

import psycopg
import pytest
from psycopg import sql

import effects.durable._store.postgres as pg
import effects.durable._store.postgres_sql as pg_sql
import effects.durable._store.sqlite as lite
import effects.durable._store.sqlite_sql as lite_sql
from effects.durable import Engine, Recurring, StepFailedError, WorkflowContext, step, workflow
from effects.durable._store.postgres import parse_postgres_url
from effects.durable.instrumentation import _ids  # pyright: ignore[reportPrivateUsage]
from effects.testing import VirtualClock
from schedules import spaced
from tests.durable.support import rows
from tests.durable.telemetry_support import Telemetry

pytestmark = [pytest.mark.anyio, pytest.mark.not_on_memory("stores of older versions")]


class Payload:
    """What a hostile store would hold: a pickle that writes a file when it is loaded."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.write_text, (self.marker, "pickle ran"))


@step("pay")
async def pay(_: Any) -> str:
    """Never to run: its only attempt is left behind a settled step."""
    raise AssertionError("a withdrawn attempt ran")


seen: list[str] = []


@workflow("old")
async def old(ctx: WorkflowContext, _: Any) -> str:
    """The run of the older store: its local step 1 failed; its step 2 failed for good."""
    try:
        await ctx.local_step("charge", lambda: None)
    except StepFailedError as error:
        seen.append(f"StepFailedError: {error}")
    except Exception as error:  # noqa: BLE001 - the point: what replay raises
        seen.append(f"{type(error).__name__}: {error}")
    try:
        await ctx.step(pay, None)
    except Exception as error:  # noqa: BLE001
        seen.append(f"{type(error).__name__}: {len(getattr(error, 'errors', ()))}")
    return "done"


ERRORS = [
    {"message": "first", "code": None, "details": None, "type": "builtins.OSError"},
    {"message": "second", "code": "x", "details": {"n": 1e16}, "type": "builtins.OSError"},
]
ERROR = {"message": "boom", "type": "builtins.ValueError", "retryable": True}


def _old_rows(marker: Path) -> list[tuple[str, tuple[Any, ...]]]:
    """The statements (SQLite style) that fill an older store with one run in mid-flight."""
    hostile = pickle.dumps(Payload(marker))
    return [
        (
            "INSERT INTO runs (run_id, workflow, version, status, input, created_at, updated_at)"
            " VALUES ('r', 'old', '1', 'pending', '1', 0, 0)",
            (),
        ),
        (
            "INSERT INTO checkpoints (run_id, seq, name, kind, step_id, status, attempts, error,"
            " errors, final, exception, created_at, updated_at) VALUES ('r', 1, 'charge',"
            " 'local', 'r:1', 'failed', 1, ?, ?, ?, ?, 0, 0)",
            (json.dumps(ERROR), json.dumps([ERROR]), True, hostile),
        ),
        (
            "INSERT INTO checkpoints (run_id, seq, name, kind, step_id, status, attempts, error,"
            " errors, final, created_at, updated_at) VALUES ('r', 2, 'pay', 'remote', 'r:2',"
            " 'failed', 2, ?, ?, ?, 0, 0)",
            (json.dumps(ERRORS[-1]), json.dumps(ERRORS), True),
        ),
        (
            "INSERT INTO tasks (run_id, seq, step_id, name, grp, input, attempt, status,"
            " available_at, created_at) VALUES ('r', 2, 'r:2', 'pay', 'default', 'null', 2,"
            " 'queued', 0, 0)",
            (),
        ),
    ]


def _sqlite_v2(path: Path, marker: Path) -> str:
    with sqlite3.connect(path) as db:
        for statements in lite._MIGRATIONS[:2]:
            for statement in statements:
                db.execute(statement)
        db.execute(
            "INSERT INTO durable_meta VALUES ('schema', 'effects.durable'), ('version', '2')"
        )
        for statement, params in _old_rows(marker):
            db.execute(statement, params)
    db.close()
    return f"sqlite:///{path}"


def _postgres_v1(url: str, marker: Path) -> str:
    libpq, options = parse_postgres_url(url)
    with psycopg.connect(libpq, autocommit=True) as db:
        db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(options.schema)))
        db.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(options.schema)))
        for statement in pg._MIGRATIONS[0]:
            db.execute(statement)
        db.execute(
            "INSERT INTO durable_meta VALUES ('schema', 'effects.durable'), ('version', '1')"
        )
        for statement, params in _old_rows(marker):
            db.execute(statement.replace("?", "%s"), params)  # type: ignore[arg-type]
    return url


@pytest.fixture
def older_store(durable_store_url: str, tmp_path: Path) -> tuple[str, Path]:
    """A store of the previous schema version holding a run in mid-flight, and the marker."""
    marker = tmp_path / "pickle-ran"
    if durable_store_url.startswith("sqlite:"):
        return _sqlite_v2(tmp_path / "old.db", marker), marker
    return _postgres_v1(durable_store_url, marker), marker


async def test_an_upgraded_store_replays_without_unpickling_or_running_leftovers(
    older_store: tuple[str, Path],
) -> None:
    """The pickle is never loaded, errors keep their order, the leftover attempt is gone."""
    url, marker = older_store
    seen.clear()
    async with Engine(url, workflows=[old], steps=[pay]) as engine:
        await engine.run_until_idle()
        run = await engine.get_run("r")
        checkpoints = await engine.checkpoints("r")
    assert ("completed", "done") == (run.status, run.output)
    assert not marker.exists()
    assert ["ValueError: boom", "RemoteStepError: 2"] == seen
    assert [["boom"], ["first", "second"]] == [[e.message for e in cp.errors] for cp in checkpoints]
    assert {"n": 1e16} == checkpoints[1].errors[1].details
    assert [(0,)] == rows(url, "SELECT COUNT(*) FROM tasks")


@step("echo")
async def echo(value: Any) -> Any:
    """Return the input."""
    return value


@workflow("mid-flight")
async def mid_flight(ctx: WorkflowContext, value: Any) -> Any:
    """One dispatched step, which the older store had dispatched already."""
    return await ctx.step(echo, value)


#: The schema versions of each dialect before sagas, and before telemetry (the two latest).
BEFORE_SAGAS: Final = {"sqlite": 3, "postgresql": 2}
BEFORE_TELEMETRY: Final = {"sqlite": (4, 5), "postgresql": (3, 4)}


def version_before(url: str, marker: str) -> int:
    """
    The schema version of a store from before the upgrade step that holds the statement
    *marker* (a part of its text): steps are sequenced when branches merge, so a test names its
    step, not its number.
    """
    migrations = lite_sql.MIGRATIONS if url.startswith("sqlite:") else pg_sql.MIGRATIONS
    return next(i for i, step in enumerate(migrations) if any(marker in s for s in step))


def _older(url: str, tmp_path: Path, version: int) -> str:
    """A store of schema *version*, its run suspended on a queued step."""
    sqlite = url.startswith("sqlite:")
    migrations = (lite._MIGRATIONS if sqlite else pg._MIGRATIONS)[:version]
    filled = [
        "INSERT INTO runs (run_id, workflow, version, status, input, created_at, updated_at)"
        " VALUES ('r', 'mid-flight', '1', 'suspended', '5', 0, 0)",
        "INSERT INTO checkpoints (run_id, seq, name, kind, step_id, status, attempts, input,"
        " created_at, updated_at, dispatched_at) VALUES ('r', 1, 'echo', 'remote', 'r:1',"
        " 'pending', 1, '5', 0, 0, 0)",
        "INSERT INTO tasks (run_id, seq, step_id, name, grp, input, attempt, status,"
        " available_at, created_at) VALUES ('r', 1, 'r:1', 'echo', 'default', '5', 1,"
        " 'queued', 0, 0)",
        "INSERT INTO durable_meta VALUES ('schema', 'effects.durable'),"
        f" ('version', '{len(migrations)}')",
    ]
    if sqlite:
        path = tmp_path / f"version-{version}.db"
        with sqlite3.connect(path) as db:
            for statement in [s for step in migrations for s in step] + filled:
                db.execute(statement)
        db.close()
        return f"sqlite:///{path}"
    libpq, options = parse_postgres_url(url)
    with psycopg.connect(libpq, autocommit=True) as db:
        db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(options.schema)))
        db.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(options.schema)))
        for statement in [s for step in migrations for s in step] + filled:
            db.execute(statement)  # type: ignore[call-overload]
    return url


async def test_a_store_from_before_sagas_gains_their_columns_in_place_and_its_run_goes_on(
    durable_store_url: str, tmp_path: Path
) -> None:
    """One upgrade adds runs.cancel and checkpoints.handler; the suspended run completes."""
    dialect = "sqlite" if durable_store_url.startswith("sqlite:") else "postgresql"
    url = _older(durable_store_url, tmp_path, BEFORE_SAGAS[dialect])
    async with Engine(url, workflows=[mid_flight], steps=[echo]) as engine:
        await engine.run_until_idle()
        run = await engine.get_run("r")
        (cp,) = await engine.checkpoints("r")
    assert ("completed", 5, None) == (run.status, run.output, run.cancel)
    assert ("completed", None) == (cp.status, cp.handler)
    current = lite.SCHEMA_VERSION if url.startswith("sqlite:") else pg.SCHEMA_VERSION
    assert [(str(current),)] == rows(url, "SELECT value FROM durable_meta WHERE key = 'version'")
    assert [(None, None)] == rows(
        url, "SELECT r.cancel, c.handler FROM runs r JOIN checkpoints c ON c.run_id = r.run_id"
    )


def _before_policies(url: str, tmp_path: Path) -> str:
    """A store of the schema version before stored policies, its run suspended on a step."""
    sqlite = url.startswith("sqlite:")
    # The policy column is SQLite's 5th migration, PostgreSQL's 4th.
    migrations = lite._MIGRATIONS[:4] if sqlite else pg._MIGRATIONS[:3]
    filled = [
        "INSERT INTO runs (run_id, workflow, version, status, input, created_at, updated_at)"
        " VALUES ('r', 'two-steps', '1', 'suspended', '5', 0, 0)",
        "INSERT INTO checkpoints (run_id, seq, name, kind, step_id, status, attempts, input,"
        " created_at, updated_at, dispatched_at) VALUES ('r', 1, 'echo', 'remote', 'r:1',"
        " 'pending', 1, '5', 0, 0, 0)",
        "INSERT INTO tasks (run_id, seq, step_id, name, grp, input, attempt, status,"
        " available_at, created_at) VALUES ('r', 1, 'r:1', 'echo', 'default', '5', 1,"
        " 'queued', 0, 0)",
        "INSERT INTO durable_meta VALUES ('schema', 'effects.durable'),"
        f" ('version', '{len(migrations)}')",
    ]
    statements = [s for step in migrations for s in step] + filled
    if sqlite:
        path = tmp_path / "before-policies.db"
        with sqlite3.connect(path) as db:
            for statement in statements:
                db.execute(statement)
        db.close()
        return f"sqlite:///{path}"
    libpq, options = parse_postgres_url(url)
    with psycopg.connect(libpq, autocommit=True) as db:
        db.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(options.schema)))
        db.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(options.schema)))
        for statement in statements:
            db.execute(statement)  # type: ignore[call-overload]
    return url


@workflow("two-steps")
async def two_steps(ctx: WorkflowContext, value: Any) -> Any:
    """The older store's dispatched step, then one the upgraded engine dispatches."""
    first = await ctx.step(echo, value)
    return await ctx.step(echo, first + 1, retries=4, backoff="exp", backoff_ms=5)


async def test_a_store_from_before_policies_gains_the_column_and_new_checkpoints_fill_it(
    durable_store_url: str, tmp_path: Path
) -> None:
    """One upgrade adds checkpoints.policy (NULL for the old row) and the keyset index."""
    url = _before_policies(durable_store_url, tmp_path)
    async with Engine(url, workflows=[two_steps], steps=[echo]) as engine:
        await engine.run_until_idle()
        run = await engine.get_run("r")
        old_cp, new_cp = await engine.checkpoints("r")
    assert ("completed", 6) == (run.status, run.output)
    assert None is old_cp.policy
    assert {"retries": 4, "backoff": "exp", "backoff_ms": 5, "backoff_max_ms": None,
            "jitter": False} == new_cp.policy  # fmt: skip
    current = lite.SCHEMA_VERSION if url.startswith("sqlite:") else pg.SCHEMA_VERSION
    assert [(str(current),)] == rows(url, "SELECT value FROM durable_meta WHERE key = 'version'")
    if url.startswith("sqlite:"):
        indexes = rows(url, "SELECT name FROM sqlite_master WHERE type = 'index' ORDER BY name")
    else:
        indexes = rows(url, "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")
    assert {("runs_by_created",), ("checkpoints_retrying",)} <= set(indexes)


@pytest.mark.parametrize("step", [0, 1], ids=["current", "after-policy"])
async def test_a_store_from_before_telemetry_gains_its_columns_and_its_run_is_traced(
    durable_store_url: str, tmp_path: Path, step: int
) -> None:
    """
    From the version before the policy column, or the one with it, one upgrade adds the
    traceparent columns; the run, started before, is traced in a trace its id derives.
    """
    dialect = "sqlite" if durable_store_url.startswith("sqlite:") else "postgresql"
    url = _older(durable_store_url, tmp_path, BEFORE_TELEMETRY[dialect][step])
    telemetry = Telemetry()
    async with Engine(url, workflows=[mid_flight], steps=[echo]) as engine:
        telemetry.attach(engine)
        await engine.run_until_idle()
        run = await engine.get_run("r")
    spans = telemetry.spans()
    telemetry.shutdown()
    assert ("completed", 5, None) == (run.status, run.output, run.traceparent)
    current = lite.SCHEMA_VERSION if dialect == "sqlite" else pg.SCHEMA_VERSION
    assert [(str(current),)] == rows(url, "SELECT value FROM durable_meta WHERE key = 'version'")
    assert [(None,)] == rows(url, "SELECT traceparent FROM runs")
    # The attempt's row is gone with its result; the query fails unless the columns exist.
    assert [] == rows(url, "SELECT traceparent, workflow FROM tasks")
    (attempt,) = [s for s in spans if s["name"] == "durable.step echo"]
    trace_id, span_id, _ = _ids(None, "r")
    assert (f"{trace_id:032x}", f"{span_id:016x}") == (attempt["trace_id"], attempt["parent"])
    assert "unknown" == attempt["attributes"]["durable.workflow.name"]


async def test_a_store_from_before_the_workflow_primitives_gains_the_deadline_in_place(
    durable_store_url: str, tmp_path: Path
) -> None:
    """
    From the version before the deadline's step (later steps follow), the upgrade adds
    runs.deadline (NULL for the old run, which goes on) and the prune index; a new run's
    timeout is kept there.
    """
    sqlite = durable_store_url.startswith("sqlite:")
    current = lite.SCHEMA_VERSION if sqlite else pg.SCHEMA_VERSION
    url = _older(
        durable_store_url, tmp_path, version_before(durable_store_url, "ADD COLUMN deadline")
    )
    async with Engine(url, workflows=[mid_flight], steps=[echo]) as engine:
        await engine.run_until_idle()
        run = await engine.get_run("r")
        timed = await engine.start(mid_flight, 1, run_id="timed", timeout=60)
        new = await engine.get_run(timed)
    assert ("completed", 5, None) == (run.status, run.output, run.deadline)
    assert new.deadline == new.created_at + 60_000
    assert [(str(current),)] == rows(url, "SELECT value FROM durable_meta WHERE key = 'version'")
    assert [("r", None), ("timed", new.deadline)] == rows(
        url, "SELECT run_id, deadline FROM runs ORDER BY run_id"
    )
    if sqlite:
        indexes = rows(url, "SELECT name FROM sqlite_master WHERE type = 'index'")
    else:
        indexes = rows(url, "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")
    assert ("runs_by_status_updated",) in indexes


async def test_a_store_from_before_recurring_workflows_gains_their_table_in_place(
    durable_store_url: str, tmp_path: Path
) -> None:
    """
    From the version before it, one upgrade adds the recurring table (and its index): the
    suspended run completes, and a recurring is first seen, stepped and started there.
    """
    sqlite = durable_store_url.startswith("sqlite:")
    current = lite.SCHEMA_VERSION if sqlite else pg.SCHEMA_VERSION
    url = _older(
        durable_store_url, tmp_path, version_before(durable_store_url, "CREATE TABLE recurring")
    )
    assert [] == [t for (t,) in rows(url, _TABLES if sqlite else _PG_TABLES) if t == "recurring"]
    clock = VirtualClock(1_767_225_600)
    hourly = Recurring("hourly", mid_flight, spaced("1h"), input=7)
    async with Engine(
        url, workflows=[mid_flight], steps=[echo], recurring=[hourly], clock=clock
    ) as engine:
        await engine.run_until_idle()
        await engine.run_for("1h")
        run = await engine.get_run("r")
        started = await engine.get_run("hourly@1767229200000")
    assert ("completed", 5) == (run.status, run.output)
    assert ("completed", 7) == (started.status, started.output)
    assert [(str(current),)] == rows(url, "SELECT value FROM durable_meta WHERE key = 'version'")
    if sqlite:
        indexes = rows(url, "SELECT name FROM sqlite_master WHERE type = 'index'")
    else:
        indexes = rows(url, "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()")
    assert ("recurring_due",) in indexes


_TABLES: Final = "SELECT name FROM sqlite_master WHERE type = 'table'"
_PG_TABLES: Final = (
    "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
)
