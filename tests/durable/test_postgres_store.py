"""
The PostgreSQL store on a real server: schema creation and upgrade under an advisory lock,
foreign and newer schemas refused, clear errors for a server that cannot be used, NOTIFY as a
hint over polling, flow-control slots across engines, idempotent recovery, and a server restart
in the middle of a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

import effects.durable._store.postgres as pg
from effects.durable import (
    Engine,
    Queue,
    StoreError,
    WorkflowContext,
    step,
    workflow,
)
from effects.durable._records import Checkpoint
from effects.durable._store import (
    CheckpointWrite,
    NewEvent,
    NewRun,
    NewTask,
    RunAdvance,
    StaleTurnError,
    TurnCommit,
)
from effects.durable._store.postgres import PostgresStore, parse_postgres_url
from tests.durable.support import START_MS, execute, rows
from tests.postgres_server import PASSWORD, PASSWORD_USER, PostgresServer

pytestmark = pytest.mark.anyio

#: How long a test waits for work that must finish (a bound on a hang, not a timing claim).
PATIENCE = 60.0


@step("echo")
async def echo(value: Any) -> Any:
    """Return the input."""
    return value


@workflow("simple")
async def simple(ctx: WorkflowContext, value: Any) -> Any:
    """A local step, then a dispatched one."""
    local = await ctx.local_step("local", lambda: value)
    return await ctx.step(echo, local)


@workflow("local-only")
async def local_only(ctx: WorkflowContext, value: Any) -> Any:
    """One local step."""
    return await ctx.local_step("local", lambda: value)


def connect(url: str) -> psycopg.Connection[Any]:
    """A plain connection to the store's database, its schema first on the search path."""
    libpq, options = parse_postgres_url(url)
    conn = psycopg.connect(libpq, autocommit=True)
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(options.schema)))
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(options.schema)))
    return conn


@contextlib.asynccontextmanager
async def working(*engines: Engine, poll_ms: int = 50) -> AsyncIterator[None]:
    """Run ``work()`` of each engine in the background for the block, then stop them."""
    tasks = [asyncio.create_task(engine.work(poll_ms=poll_ms)) for engine in engines]
    try:
        yield
    finally:
        for engine in engines:
            engine.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), PATIENCE)


async def finished(engine: Engine, run_ids: list[str]) -> list[Any]:
    """Wait until every run has finished; their records."""

    async def poll() -> list[Any]:
        while True:
            runs = [await engine.get_run(run_id) for run_id in run_ids]
            if all(run.status in ("completed", "failed", "dead") for run in runs):
                return runs
            await asyncio.sleep(0.02)

    return await asyncio.wait_for(poll(), PATIENCE)


# -- schema -----------------------------------------------------------------------------------


async def test_engines_opening_a_new_schema_together_all_work(postgres_url: str) -> None:
    """Four engines open one new schema at once: it is made once, and each can use it."""
    engines = [Engine(postgres_url, workflows=[simple], steps=[echo]) for _ in range(4)]
    await asyncio.gather(*(engine.open() for engine in engines))
    try:
        ids = [await engine.start(simple, n) for n, engine in enumerate(engines)]
        async with working(*engines):
            runs = await finished(engines[0], ids)
    finally:
        for engine in engines:
            await engine.close()
    assert [0, 1, 2, 3] == [run.output for run in runs]
    meta = rows(postgres_url, "SELECT key, value FROM durable_meta ORDER BY key")
    assert [("schema", "effects.durable"), ("version", str(pg.SCHEMA_VERSION))] == meta


async def test_an_older_schema_is_upgraded_in_place_under_the_lock(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store of the previous version is upgraded by the first of two engines; runs are kept."""
    async with Engine(postgres_url, workflows=[simple], steps=[echo]) as engine:
        run_id = await engine.start(simple, "kept")
        await engine.run_until_idle()
    upgrade = ("CREATE TABLE upgraded (n integer)", "INSERT INTO upgraded VALUES (1)")
    monkeypatch.setattr(pg, "_MIGRATIONS", (*pg._MIGRATIONS, upgrade))
    monkeypatch.setattr(pg, "SCHEMA_VERSION", pg.SCHEMA_VERSION + 1)
    first, second = Engine(postgres_url), Engine(postgres_url)
    await asyncio.gather(first.open(), second.open())
    try:
        run = await first.get_run(run_id)
    finally:
        await first.close()
        await second.close()
    assert ("completed", "kept") == (run.status, run.output)
    assert [(1,)] == rows(postgres_url, "SELECT n FROM upgraded")
    assert [(str(pg.SCHEMA_VERSION),)] == rows(
        postgres_url, "SELECT value FROM durable_meta WHERE key = 'version'"
    )


async def test_a_schema_with_foreign_tables_is_refused_and_left_as_it_was(
    postgres_url: str,
) -> None:
    """A schema holding tables of something else is not an engine store; nothing is written."""
    with connect(postgres_url) as conn:
        conn.execute("CREATE TABLE orders (id integer)")
        conn.execute("INSERT INTO orders VALUES (1)")
    with pytest.raises(
        StoreError, match=r"is not an effects\.durable store \(it holds tables orders\)"
    ):
        await Engine(postgres_url).open()
    assert [("orders",)] == rows(
        postgres_url,
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()",
    )


async def test_a_store_of_a_newer_version_is_refused(postgres_url: str) -> None:
    """A schema version this library does not know is refused with the upgrade hint."""
    async with Engine(postgres_url):
        pass
    execute(postgres_url, "UPDATE durable_meta SET value = '99' WHERE key = 'version'")
    with pytest.raises(StoreError, match="schema version 99, newer than") as caught:
        await Engine(postgres_url).open()
    assert 1 == len(str(caught.value).splitlines())


# -- servers that cannot be used --------------------------------------------------------------


async def test_an_unreachable_server_is_one_clear_line(postgres_server: PostgresServer) -> None:
    """Nothing listens on the port: StoreError, one line, naming the store."""
    with socket_free_port() as port:
        url = f"postgresql://postgres@127.0.0.1:{port}/postgres?connect_timeout=5"
        with pytest.raises(
            StoreError, match=re.escape(f"cannot connect to store {url}: ")
        ) as caught:
            await Engine(url).open()
    assert 1 == len(str(caught.value).splitlines())


@contextlib.contextmanager
def socket_free_port() -> Any:
    """A port of 127.0.0.1 nothing listens on (held bound, not listening, for the block)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


async def test_bad_credentials_are_one_line_that_hides_the_password(
    postgres_server: PostgresServer,
) -> None:
    """A wrong password: StoreError, one line, the password masked in it and in the repr."""
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(PASSWORD_USER)))
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                sql.Identifier(PASSWORD_USER), sql.Literal(PASSWORD)
            )
        )
    url = f"postgresql://{PASSWORD_USER}:wrong-secret@127.0.0.1:{postgres_server.port}/postgres"
    engine = Engine(url)
    with pytest.raises(StoreError, match="password authentication failed") as caught:
        await engine.open()
    message = str(caught.value)
    assert 1 == len(message.splitlines())
    assert "wrong-secret" not in message
    assert "wrong-secret" not in repr(engine)
    right = url.replace("wrong-secret", PASSWORD) + "?schema=pw_store"
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute(
            sql.SQL("GRANT CREATE ON DATABASE postgres TO {}").format(sql.Identifier(PASSWORD_USER))
        )
    async with Engine(right, workflows=[simple], steps=[echo]) as engine:
        run_id = await engine.start(simple, 5)
        await engine.run_until_idle()
        assert 5 == (await engine.get_run(run_id)).output


async def test_a_database_that_does_not_exist_is_one_clear_line(
    postgres_server: PostgresServer,
) -> None:
    """A database name the server lacks: StoreError saying so, in one line."""
    url = postgres_server.dsn(database="no_such_db")
    with pytest.raises(StoreError, match='database "no_such_db" does not exist') as caught:
        await Engine(url).open()
    assert 1 == len(str(caught.value).splitlines())


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://h/db?schema=", "schema must be 1 to 48 letters"),
        ("postgresql://h/db?schema=a%20b", "schema must be 1 to 48 letters"),
        ("postgresql://h/db?schema=9lives", "schema must be 1 to 48 letters"),
        ("postgresql://h/db?pool_size=1", "pool_size must be a whole number >= 2"),
        ("postgresql://h/db?pool_size=many", "pool_size must be a whole number"),
        ("postgresql://h/db?reconnect_timeout_ms=-1", "reconnect_timeout_ms must be"),
        ("postgresql://h/db?listen=maybe", "listen must be true or false"),
        ("mysql://h/db", "looks like 'postgresql://"),
    ],
)
def test_bad_store_urls_are_refused_by_name(url: str, message: str) -> None:
    """Each bad option is a ValueError naming it."""
    with pytest.raises(ValueError, match=message):
        PostgresStore(url)


def test_libpq_options_pass_through_and_ours_are_taken_out() -> None:
    """Our options leave the URL libpq sees; the others stay; the password is masked in url."""
    libpq, options = parse_postgres_url(
        "postgres://u:p%40ss@h:5433/db?schema=s1&sslmode=disable&pool_size=4&listen=off"
    )
    assert "postgresql://u:p%40ss@h:5433/db?sslmode=disable" == libpq
    assert pg.PostgresOptions(schema="s1", pool_size=4, listen=False) == options


async def test_server_options_in_the_url_are_kept_beside_the_schema(postgres_url: str) -> None:
    """libpq's ``options`` from the URL still reach the server, with our search_path."""
    url = f"{postgres_url}&options=-c%20application_name%3Dbilling"
    async with Engine(url, workflows=[simple], steps=[echo]) as engine:
        run_id = await engine.start(simple, 1)
        await engine.run_until_idle()
        assert 1 == (await engine.get_run(run_id)).output
        named = rows(
            url, "SELECT COUNT(*) > 0 FROM pg_stat_activity WHERE application_name = 'billing'"
        )
    assert [(1,)] == named
    store = PostgresStore("postgresql://u:secret@h/db")
    assert "postgresql://u:***@h/db" == store.url


# -- hostile payloads -------------------------------------------------------------------------


# -- NOTIFY, a hint over polling --------------------------------------------------------------


async def _woken(url: str, value: str) -> Any:
    """A run of ``simple`` by engines polling once in ten minutes: only NOTIFY can move it."""
    async with (
        Engine(url, workflows=[simple]) as orchestrator,
        Engine(url, steps=[echo]) as worker,
        working(orchestrator, worker, poll_ms=600_000),
    ):
        # Both are idle in their long wait before the run appears.
        await asyncio.sleep(0.3)
        run_id = await orchestrator.start(simple, value)
        (run,) = await finished(orchestrator, [run_id])
    return run


async def test_a_notification_wakes_an_idle_worker_long_before_its_poll(
    postgres_url: str,
) -> None:
    """A worker polling once a minute runs a step dispatched by another engine: NOTIFY woke it."""
    assert "woken" == (await _woken(postgres_url, "woken")).output


async def test_with_notifications_dropped_polling_still_finds_the_work(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every notification lost: the engines still find the runs and tasks by polling."""
    heard: list[None] = []
    monkeypatch.setattr(PostgresStore, "_hint", lambda self: heard.append(None))
    async with (
        Engine(postgres_url, workflows=[simple]) as orchestrator,
        Engine(postgres_url, steps=[echo]) as worker,
        working(orchestrator, worker, poll_ms=100),
    ):
        await asyncio.sleep(0.2)
        ids = [await orchestrator.start(simple, n) for n in range(5)]
        runs = await finished(orchestrator, ids)
    assert [0, 1, 2, 3, 4] == [run.output for run in runs]
    assert heard  # the notifications did arrive, and were dropped


async def test_listen_off_takes_no_listening_connection(postgres_url: str) -> None:
    """``listen=false`` (for poolers that cannot LISTEN): work goes on by polling alone."""
    url = f"{postgres_url}&listen=false"
    async with Engine(url, workflows=[simple], steps=[echo]) as engine:
        async with working(engine, poll_ms=50):
            run_id = await engine.start(simple, "polled")
            (run,) = await finished(engine, [run_id])
        listening = rows(
            url,
            "SELECT COUNT(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'"
            " AND datname = current_database()",
        )
    assert "polled" == run.output
    assert [(0,)] == listening


@pytest.mark.parametrize(
    ("payload", "wanted", "expected"),
    [
        ("other:r", "r", True),
        ("other:r", "t", False),
        ("other:t", "t", True),
        ("other:t", "r", False),
        ("other:rt", "t", True),
        ("other:rt", "", False),
        ("me:rt", "rt", False),
        ("other", "", True),
        ("other:", "t", True),
        ("other:td", "t", True),
    ],
)
def test_a_notification_wakes_only_stores_that_want_its_kind(
    payload: str, wanted: str, expected: bool
) -> None:
    """Runs ("r") wake stores of turns, tasks ("t") stores of workers; no kind wakes all."""
    assert expected == pg.wakes(payload, "me", wanted)


@pytest.mark.parametrize(
    ("payload", "expected"),
    [
        ("other:rd", True),
        ("other:td", True),
        ("other:rt", False),
        ("other:r", False),
        ("old", True),
    ],
)
def test_a_notification_says_whether_it_brings_a_time_to_come(payload: str, expected: bool) -> None:
    """A timer or a task available later ("d") makes engines read their due times again."""
    assert expected == pg.brings_due(payload)


async def test_a_run_its_step_and_the_result_notify_runs_tasks_runs(postgres_url: str) -> None:
    """The start says "r", the dispatch "t", the result "r": a worker sleeps through starts."""
    schema = parse_postgres_url(postgres_url)[1].schema
    with connect(postgres_url) as listener:
        for kind in "rt":
            channel = sql.Identifier(pg.channel_name(schema, kind))
            listener.execute(sql.SQL("LISTEN {}").format(channel))
        async with Engine(postgres_url, workflows=[simple], steps=[echo]) as engine:
            run_id = await engine.start(simple, "told")
            await engine.run_until_idle()
            run = await engine.get_run(run_id)
        kinds = [
            note.payload.partition(":")[2]
            for note in listener.notifies(timeout=PATIENCE, stop_after=3)
        ]
    assert ("completed", "told") == (run.status, run.output)
    assert ["r", "t", "r"] == kinds


async def test_news_reaches_only_the_engines_that_want_its_kind(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A channel per kind: runs finishing locally deliver nothing to an engine of workers."""
    delivered: list[str] = []
    wakes = pg.wakes

    def counted(payload: str, sender: str, wanted: str) -> bool:
        delivered.append(wanted)
        return wakes(payload, sender, wanted)

    monkeypatch.setattr(pg, "wakes", counted)
    async with (
        Engine(postgres_url, workflows=[local_only]) as orchestrator,
        Engine(postgres_url, steps=[echo]) as worker,
        working(worker, poll_ms=600_000),
    ):
        await asyncio.sleep(0.2)  # the worker listens
        for n in range(3):
            await orchestrator.start(local_only, n)
            await orchestrator.run_until_idle()
        # Starting another engine of runs delivers to it, and proves the listener was up.
        async with Engine(postgres_url, workflows=[local_only]):
            await asyncio.sleep(0.2)
            await orchestrator.start(local_only, 9)
            for _ in range(int(PATIENCE * 100)):
                if "r" in delivered:
                    break
                await asyncio.sleep(0.01)
    assert "r" in delivered
    assert "t" not in delivered


async def test_a_schema_name_of_the_longest_length_notifies_as_any_other(
    postgres_server: PostgresServer,
) -> None:
    """48 characters (the most a schema may have): its channels fit PostgreSQL's limit."""
    run = await _woken(postgres_server.url(schema="s" * 47 + "x"), "long")
    assert ("completed", "long") == (run.status, run.output)


async def test_worker_and_turn_engines_each_hear_only_their_kind(postgres_url: str) -> None:
    """An engine of steps alone asks for tasks, one of workflows alone for runs."""
    asked: dict[str, tuple[bool, bool]] = {}

    class Asking(PostgresStore):
        name = ""

        async def wake_hint(
            self, callback: Any, *, runs: bool = True, tasks: bool = True, due: Any = None
        ) -> None:
            asked[self.name] = (runs, tasks)
            await super().wake_hint(callback, runs=runs, tasks=tasks, due=due)

    turns, workers, both = Asking(postgres_url), Asking(postgres_url), Asking(postgres_url)
    turns.name, workers.name, both.name = "turns", "workers", "both"
    async with (
        Engine(turns, workflows=[simple]),
        Engine(workers, steps=[echo]),
        Engine(both, workflows=[simple], steps=[echo]),
    ):
        pass
    assert {"turns": (True, False), "workers": (False, True), "both": (True, True)} == asked


# -- a turn's commit in one statement --------------------------------------------------------


async def test_a_one_statement_commit_meeting_a_written_row_lands_nothing(
    postgres_url: str,
) -> None:
    """A dispatch whose checkpoint row exists already: stale, and no advance, task or event."""
    store = PostgresStore(postgres_url)
    await store.open()
    try:
        await store.create_run(NewRun("r1", "simple", "", "1", START_MS), [])
        (claimed,) = await store.claim_runs(
            workflows=[("simple", "")],
            now=START_MS,
            lease_until=START_MS + 30_000,
            owner="e1",
            limit=1,
        )
        await store.record_local_step(
            "r1", claimed.token, seq=1, name="local", output="1", started=START_MS, now=START_MS
        )
        checkpoint = Checkpoint(
            "r1", 1, "echo", "remote", "r1:1", "pending", 1, None, None, None, (), False,
            START_MS, START_MS, input=1,
        )  # fmt: skip
        commit = TurnCommit(
            "r1",
            claimed.token,
            START_MS,
            RunAdvance("suspend"),
            checkpoints=(CheckpointWrite(checkpoint, None, input="1"),),
            tasks=(NewTask("r1", 1, "r1:1", "echo", "default", "1", 1, START_MS),),
            events=(NewEvent("step.dispatched", START_MS, 1),),
        )
        with pytest.raises(StaleTurnError, match="written meanwhile"):
            await store.commit_turn(commit)
        run = await store.get_run("r1")
        (kept,) = await store.checkpoints("r1")
    finally:
        await store.close()
    assert run is not None
    assert ("running", "local", "completed") == (run.status, kept.kind, kept.status)
    assert [(0,)] == rows(postgres_url, "SELECT COUNT(*) FROM tasks")
    assert [(0,)] == rows(
        postgres_url, "SELECT COUNT(*) FROM events WHERE name = 'step.dispatched'"
    )


async def test_a_call_cut_off_inside_a_transaction_leaves_nothing_open(postgres_url: str) -> None:
    """The connection kept for calls in a row was left mid-transaction: the next call is clean."""
    store = PostgresStore(postgres_url)
    await store.open()

    async def leave_open(conn: psycopg.AsyncConnection[Any], _: Any) -> None:
        await conn.execute("BEGIN")
        await conn.execute("INSERT INTO durable_meta (key, value) VALUES ('leak', 'x')")
        msg = "cut off"
        raise RuntimeError(msg)

    async def status(conn: psycopg.AsyncConnection[Any], _: Any) -> Any:
        return conn.info.transaction_status

    try:
        with pytest.raises(RuntimeError, match="cut off"):
            await store._call(leave_open)
        after = await store._call(status)
        runs = await store.list_runs()
    finally:
        await store.close()
    assert psycopg.pq.TransactionStatus.IDLE == after
    assert [] == runs
    assert [] == rows(postgres_url, "SELECT key FROM durable_meta WHERE key = 'leak'")


async def test_closing_the_store_under_a_cancelled_call_raises_nothing_else(
    postgres_url: str,
) -> None:
    """A call cancelled mid-query while the store closes ends with its CancelledError alone."""
    store = PostgresStore(postgres_url)
    await store.open()
    started = asyncio.Event()

    async def slow(conn: psycopg.AsyncConnection[Any], _: Any) -> None:
        started.set()
        await conn.execute("SELECT pg_sleep(30)")

    call = asyncio.get_running_loop().create_task(store._call(slow))
    await asyncio.wait_for(started.wait(), 30)
    call.cancel()
    await store.close()  # before the cancelled call has finished unwinding
    with pytest.raises(asyncio.CancelledError):
        await call


async def test_names_with_quotes_backslashes_and_commas_are_claimed(postgres_url: str) -> None:
    """Workflow, version and group names travel as text[] literals: odd characters survive."""
    odd = 'we"ird\\name, {x} NULL'

    @step("odd-step", group=odd)
    async def odd_step(value: Any) -> Any:
        return value

    @workflow(odd, version='v"1\\')
    async def odd_flow(ctx: WorkflowContext, value: Any) -> Any:
        return await ctx.step(odd_step, value)

    async with Engine(postgres_url, workflows=[odd_flow], steps=[odd_step]) as engine:
        run_id = await engine.start(odd_flow, "kept")
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ("completed", "kept") == (run.status, run.output)


# -- many engines on one store ----------------------------------------------------------------


async def test_a_queue_slot_is_never_taken_by_two_engines(postgres_url: str) -> None:
    """Three engines serve a concurrency-2 queue: at most two attempts run at once, all finish."""
    running: list[int] = [0]
    most: list[int] = [0]

    @step("slow", queue="narrow")
    async def slow(n: int) -> int:
        running[0] += 1
        most[0] = max(most[0], running[0])
        try:
            await asyncio.sleep(0.02)
        finally:
            running[0] -= 1
        return n

    @workflow("fan-narrow")
    async def fan_narrow(ctx: WorkflowContext, n: int) -> list[int]:
        return await ctx.all(slow, [n, n + 1, n + 2])

    queues = [Queue("narrow", concurrency=2)]
    engines = [
        Engine(postgres_url, workflows=[fan_narrow], steps=[slow], queues=queues) for _ in range(3)
    ]
    for engine in engines:
        await engine.open()
    try:
        ids = [await engines[n % 3].start(fan_narrow, n * 10) for n in range(8)]
        async with working(*engines, poll_ms=20):
            runs = await finished(engines[0], ids)
    finally:
        for engine in engines:
            await engine.close()
    assert [[n * 10, n * 10 + 1, n * 10 + 2] for n in range(8)] == [run.output for run in runs]
    assert 2 == most[0]


async def test_two_engines_recovering_one_run_at_once_recover_it_once(postgres_url: str) -> None:
    """An expired lease recovered by two stores at the same moment counts one recovery."""
    first, second = PostgresStore(postgres_url), PostgresStore(postgres_url)
    await first.open()
    await second.open()
    try:
        await first.create_run(NewRun("r1", "simple", "1", "null", START_MS), ())
        (claimed,) = await first.claim_runs(
            workflows=[("simple", "1")],
            now=START_MS,
            lease_until=START_MS + 10,
            owner="dead",
            limit=5,
        )
        later = START_MS + 1000
        reports = await asyncio.gather(
            *(
                store.recover(now=later, max_recovery_attempts=None, reconcile_ms=1000)
                for store in (first, second, first, second)
            )
        )
        run = await first.get_run("r1")
        events = [e.name for e in await first.events("r1")]
    finally:
        await first.close()
        await second.close()
    assert "dead" in claimed.token
    assert ["r1"] == [r for report in reports for r in report.recovered_runs]
    assert run is not None
    assert ("pending", 1) == (run.status, run.recovery_attempts)
    assert ["run.recovered"] == events


async def test_an_error_on_one_run_does_not_stop_recovery_of_the_others(
    postgres_url: str,
) -> None:
    """A run whose recovery fails (a trigger refuses it) is skipped; the others are recovered."""
    store = PostgresStore(postgres_url)
    await store.open()
    try:
        for run_id in ("a", "bad", "c"):
            await store.create_run(NewRun(run_id, "simple", "1", "null", START_MS), ())
        await store.claim_runs(
            workflows=[("simple", "1")],
            now=START_MS,
            lease_until=START_MS + 10,
            owner="gone",
            limit=5,
        )
        with connect(postgres_url) as conn:
            conn.execute(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN"
                " IF NEW.run_id = 'bad' AND NEW.status = 'pending' THEN"
                " RAISE EXCEPTION 'refused for the test'; END IF; RETURN NEW; END $$"
            )
            conn.execute(
                "CREATE TRIGGER refuse BEFORE UPDATE ON runs FOR EACH ROW EXECUTE FUNCTION refuse()"
            )
        report = await store.recover(
            now=START_MS + 1000, max_recovery_attempts=None, reconcile_ms=1000
        )
        statuses = {run.run_id: run.status for run in await store.list_runs()}
    finally:
        await store.close()
    assert ["a", "c"] == sorted(report.recovered_runs)
    assert {"a": "pending", "bad": "running", "c": "pending"} == statuses


# -- a server restart -------------------------------------------------------------------------

STEPS = 12


@step("bump")
async def bump(n: int) -> int:
    """Add one (dispatched)."""
    return n + 1


@workflow("long")
async def long_run(ctx: WorkflowContext, n: int) -> int:
    """Alternate local and dispatched steps, slowly enough for a restart to land mid-run."""
    for i in range(STEPS):
        n = await ctx.local_step(f"local-{i}", lambda n=n: n + 1)
        n = await ctx.step(bump, n)
        await asyncio.sleep(0.05)
    return n


async def test_a_server_restart_mid_run_is_survived(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """pg_ctl restart -m fast while runs go on: they reconnect and finish, every step once."""
    async with (
        Engine(postgres_url, workflows=[long_run]) as orchestrator,
        Engine(postgres_url, steps=[bump]) as worker,
    ):
        ids = [await orchestrator.start(long_run, 0) for _ in range(3)]
        async with working(orchestrator, worker, poll_ms=100):
            await asyncio.sleep(0.4)
            await asyncio.to_thread(postgres_server.restart)
            runs = await finished(orchestrator, ids)
        checkpoints = [await orchestrator.checkpoints(run_id) for run_id in ids]
    assert [2 * STEPS] * 3 == [run.output for run in runs]
    assert [["completed"] * (2 * STEPS)] * 3 == [[c.status for c in cps] for cps in checkpoints]
    assert [[1] * (2 * STEPS)] * 3 == [[c.attempts for c in cps] for cps in checkpoints]


async def test_a_server_down_past_the_reconnect_timeout_is_a_store_error(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """A call that cannot reach the server within reconnect_timeout_ms raises StoreError."""
    store = PostgresStore(f"{postgres_url}&reconnect_timeout_ms=300")
    await store.open()
    try:
        await asyncio.to_thread(postgres_server.stop_server)
        try:
            with pytest.raises(StoreError, match=re.escape(f"store {store.url}: ")) as caught:
                await store.get_run("x")
        finally:
            await asyncio.to_thread(postgres_server.start_server)
        assert 1 == len(str(caught.value).splitlines())

        async def back() -> Any:
            while True:
                with contextlib.suppress(StoreError):
                    return await store.get_run("x")

        assert await asyncio.wait_for(back(), PATIENCE) is None
    finally:
        await store.close()


class LosingReplies(PostgresStore):
    """A store whose named calls lose their first reply: the work commits, then the line drops."""

    def __init__(self, url: str, *lossy: str) -> None:
        super().__init__(url)
        self.lossy = set(lossy)
        self.lost: list[str] = []

    async def _call(self, fn: Any, **options: Any) -> Any:
        name = getattr(fn, "__qualname__", "").split(".")[1]
        if name not in self.lossy:
            return await super()._call(fn, **options)
        self.lossy.discard(name)

        async def then_drop(conn: Any, retry: Any) -> Any:
            if not self.lost or self.lost[-1] != name:
                await fn(conn, retry)
                self.lost.append(name)
                msg = "server closed the connection unexpectedly"
                raise psycopg.OperationalError(msg)
            return await fn(conn, retry)

        return await super()._call(then_drop, **options)


async def test_claims_whose_reply_was_lost_are_taken_up_by_the_retry(postgres_url: str) -> None:
    """A claim of runs and one of tasks commit, their replies are lost: the retries return them."""
    store = LosingReplies(postgres_url, "claim_runs", "claim_tasks")
    async with Engine(store, workflows=[simple], steps=[echo]) as engine:
        run_id = await engine.start(simple, "once")
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
        events = [(e.name, e.seq) for e in await engine.events(run_id)]
    assert ["claim_runs", "claim_tasks"] == store.lost
    assert ("completed", "once", 0) == (run.status, run.output, run.recovery_attempts)
    assert 1 == events.count(("step.started", 2))


async def test_a_start_whose_reply_was_lost_still_runs_the_run_it_took(postgres_url: str) -> None:
    """A working engine's leased insert commits, its reply is lost: the retry runs the run."""
    store = LosingReplies(postgres_url, "create_run")
    async with Engine(store, workflows=[local_only]) as engine, working(engine, poll_ms=600_000):
        await asyncio.sleep(0.1)
        run_id = await engine.start(local_only, "once")
        # Taken by the lost try: no claim and no recovery would run it before its lease ends.
        run = await asyncio.wait_for(engine.wait(run_id), 10)
        events = [e.name for e in await engine.events(run_id)]
    assert ["create_run"] == store.lost
    assert ("completed", "once", 0) == (run.status, run.output, run.recovery_attempts)
    assert 1 == events.count("run.started")


async def test_a_turn_commit_whose_reply_was_lost_gives_the_run_back(postgres_url: str) -> None:
    """A step's and a turn's commits land, their replies are lost: nothing runs twice."""
    calls: list[int] = []

    @workflow("counted")
    async def counted(ctx: WorkflowContext, n: int) -> int:
        def once() -> int:
            calls.append(n)
            return n + 1

        n = await ctx.local_step("a", once)
        return await ctx.step(echo, n)

    store = LosingReplies(postgres_url, "record_local_step", "commit_turn")
    async with Engine(store, workflows=[counted], steps=[echo]) as engine:
        run_id = await engine.start(counted, 1)
        await engine.run_until_idle()
        run = await engine.get_run(run_id)
    assert ["record_local_step", "commit_turn"] == store.lost
    assert ("completed", 2, 0) == (run.status, run.output, run.recovery_attempts)
    assert [1] == calls
