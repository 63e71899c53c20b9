"""
What only the PostgreSQL store has: its URL and schema, the server's errors, reconnection after a
server restart, and liveness told by the server. Its shared behaviour is in the store-contract
and store-facing tests, which run on both stores.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import attrs
import psycopg
import pytest
from psycopg import sql

import migrate
from migrate import DefinitionResult, StateWrite, WindowCommit
from migrate._store_postgres import SCHEMA_VERSION, PostgresStore
from tests.migrate.cli_support import make_project
from tests.postgres_server import (
    NoSmallDiskError,
    PostgresServer,
    no_small_disk,
    tablespace_on_tmpfs,
)


def _schema_of(url: str) -> str:
    return url.rsplit("schema=", 1)[1].split("&", 1)[0]


def _tables(server: PostgresServer, schema: str) -> list[str]:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
            "ORDER BY table_name",
            (schema,),
        ).fetchall()
    return [row[0] for row in rows]


def _server_started(server: PostgresServer) -> object:
    with psycopg.connect(server.dsn(), autocommit=True) as conn:
        return conn.execute("SELECT pg_postmaster_start_time()").fetchone()


def _gated(at: str, action: Callable[[], None]) -> migrate.Process:
    """A pipeline that calls *action* once, at the item *at*, between two window commits."""

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if item.identity == at:
            action()
        scope.track({"seen": item.identity})

    return process


def _rows(n: int) -> list[dict[str, Any]]:
    return [{"id": str(i), "name": f"person {i}"} for i in range(1, n + 1)]


def test_processes_opening_a_new_schema_together_all_get_one_store(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """Six stores opening one new schema at once: all open, and the schema is made once."""
    errors: list[BaseException] = []
    stores: list[PostgresStore] = []
    start = threading.Barrier(6)

    def open_one() -> None:
        start.wait()
        try:
            stores.append(PostgresStore(postgres_url))
        except BaseException as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=open_one) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for store in stores:
        store.close()
    assert ([], 6) == (errors, len(stores))
    tables = ["contracts", "cursors", "item_states", "locks", "migrate_meta", "runs"]
    assert [*tables, "update_requests"] == _tables(postgres_server, _schema_of(postgres_url))


def test_a_schema_of_other_tables_is_refused_and_left_as_it_was(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """A schema that holds another program's tables: StoreError naming it; nothing added."""
    schema = _schema_of(postgres_url)
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE TABLE {}.orders (id int)").format(sql.Identifier(schema)))
    with pytest.raises(
        migrate.StoreError, match=r"is not a migrate store .*holds the tables orders"
    ):
        migrate.open_store(postgres_url)
    assert ["orders"] == _tables(postgres_server, schema)


def test_a_store_of_a_newer_version_is_refused(postgres_url: str) -> None:
    """A schema written by a newer migrate: StoreSchemaError naming both versions."""
    with PostgresStore(postgres_url):
        pass
    with psycopg.connect(postgres_url.split("?", 1)[0], autocommit=True) as conn:
        conn.execute(
            sql.SQL("UPDATE {}.migrate_meta SET value = '99' WHERE key = 'version'").format(
                sql.Identifier(_schema_of(postgres_url))
            )
        )
    with pytest.raises(
        migrate.StoreSchemaError, match=f"version 99.*understands \\({SCHEMA_VERSION}"
    ):
        migrate.open_store(postgres_url)


def test_a_version_1_store_gains_update_requests_keeping_its_data(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """A schema-1 store (before update requests) is upgraded in place; read-only, it is not."""
    with PostgresStore(postgres_url) as store:
        store.create_run("old-run", "normal", {})
        store.commit_window(WindowCommit("p", "old-run", [StateWrite("1", "migrated", "v1")], {}))
    schema = sql.Identifier(_schema_of(postgres_url))
    with psycopg.connect(postgres_url.split("?", 1)[0], autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE {}.update_requests").format(schema))
        conn.execute(
            sql.SQL("UPDATE {}.migrate_meta SET value = '1' WHERE key = 'version'").format(schema)
        )
    with migrate.open_store(postgres_url, read_only=True) as store:
        assert (None, "migrated") == (store.update_request("p"), store.items("p")[0].status)
    assert "update_requests" not in _tables(postgres_server, _schema_of(postgres_url))
    with migrate.open_store(postgres_url) as store:
        store.request_update("p", "old-run")
        assert (["1"], "old-run") == (
            [s.identity for s in store.items("p")],
            getattr(store.update_request("p"), "run_id", None),
        )
    with psycopg.connect(postgres_url.split("?", 1)[0], autocommit=True) as conn:
        version = conn.execute(
            sql.SQL("SELECT value FROM {}.migrate_meta WHERE key = 'version'").format(schema)
        ).fetchall()
    assert [(str(SCHEMA_VERSION),)] == version


def test_an_unreachable_server_is_one_clear_line_with_the_password_masked() -> None:
    """No server at the address: StoreError naming the URL, its password masked."""
    url = "postgresql://ada:s3cret@127.0.0.1:1/app?schema=m&connect_timeout=2"
    with pytest.raises(migrate.StoreError) as caught:
        migrate.open_store(url)
    message = str(caught.value)
    assert message.startswith("cannot connect to store postgresql://ada:***@127.0.0.1:1/app")
    assert ("s3cret" in message, "\n" in message) == (False, False)


def test_without_psycopg_the_message_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """psycopg missing: StoreError saying what to install, the password masked."""
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.delitem(sys.modules, "migrate._store_postgres", raising=False)
    with pytest.raises(migrate.StoreError) as caught:
        migrate.open_store("postgresql://ada:s3cret@db/app")
    assert "pip install 'effect-schedules[postgres]'" in str(caught.value)
    assert "postgresql://ada:***@db/app" in str(caught.value)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgresql://db/app?schema=1bad", "schema must be 1 to 48 letters"),
        ("postgresql://db/app?schema=a-b", "schema must be 1 to 48 letters"),
        ("postgresql://db/app?reconnect_timeout_ms=soon", "reconnect_timeout_ms must be"),
        ("postgresql://ada:pw@db:port/app", "is not a valid URL"),
    ],
)
def test_bad_store_urls_are_config_errors_naming_the_option(url: str, message: str) -> None:
    """A bad option in the URL is a ConfigError naming it (without a server, or psycopg)."""
    with pytest.raises(migrate.ConfigError, match=message) as caught:
        migrate.open_store(url)
    assert ":pw@" not in str(caught.value)


def test_a_query_on_a_store_not_created_yet_creates_nothing(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """``status`` of a config whose schema does not exist reads an empty store, making none."""
    config = migrate.Config(
        [migrate.Migration("p", migrate.MemorySource(_rows(2)), _gated("-", lambda: None))],
        store=postgres_url,
    )
    report = migrate.status(config)
    assert (0, []) == (
        report.definitions["p"].migrated,
        _tables(postgres_server, _schema_of(postgres_url)),
    )


def test_a_server_restart_mid_run_is_survived(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """pg_ctl restart -m fast between two windows: the run reconnects and finishes, each once."""
    config = migrate.Config(
        [
            migrate.Migration(
                "p",
                migrate.MemorySource(_rows(40), window_size=5),
                _gated("23", postgres_server.restart),
            )
        ],
        store=postgres_url,
    )
    started = _server_started(postgres_server)
    summary = migrate.run(config)
    assert (40, "succeeded") == (summary.definitions["p"].counts.migrated, summary.status)
    assert started != _server_started(postgres_server)  # it did restart
    with migrate.open_store(postgres_url) as store:
        (record,) = store.runs()
        assert (migrate.Counts(migrated=40), migrate.Counts(migrated=40), ()) == (
            store.counts("p"),
            record.definitions["p"].counts,
            store.locks(),
        )


def test_a_server_down_past_the_reconnect_timeout_fails_clearly_and_loses_nothing(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """Server stopped for longer than reconnect_timeout_ms: StoreError; the rerun finishes."""
    url = f"{postgres_url}&reconnect_timeout_ms=300"
    stopped = threading.Event()

    def stop() -> None:
        postgres_server.stop_server()
        stopped.set()

    config = migrate.Config(
        [migrate.Migration("p", migrate.MemorySource(_rows(20), window_size=5), _gated("8", stop))],
        store=url,
    )
    try:
        with pytest.raises(migrate.StoreError, match="reconnect_timeout_ms=300") as caught:
            migrate.run(config)
    finally:
        if stopped.is_set():
            postgres_server.start_server()
    assert "committing a window of 'p'" in str(caught.value)
    rerun = migrate.Config(
        [migrate.Migration("p", migrate.MemorySource(_rows(20), window_size=5), _gated("-", stop))],
        store=url,
    )
    summary = migrate.run(rerun)
    with migrate.open_store(url) as store:
        runs = store.runs()
        assert (migrate.Counts(migrated=20), 5, 15) == (
            store.counts("p"),
            runs[1].definitions["p"].counts.migrated,
            summary.definitions["p"].counts.migrated,
        )


def test_a_commit_cut_off_at_commit_is_not_written_twice(postgres_url: str) -> None:
    """A window commit whose connection dies at COMMIT is checked by its token, not resent."""
    with PostgresStore(postgres_url) as store:
        store.create_run("r", "update", {})
        store.commit_window(WindowCommit("d", "r", [StateWrite("1", "migrated", None)], {}))
        store.create_run("u", "update", {})
        real = psycopg.Transaction.__exit__
        real_execute = psycopg.Connection.execute
        cut: list[bool] = []
        upserts: list[str] = []

        def counting(self: psycopg.Connection[Any], query: Any, *args: Any, **kw: Any) -> Any:
            if str(query).startswith("INSERT INTO item_states"):
                upserts.append(str(query))
            return real_execute(self, query, *args, **kw)

        def exit_then_cut(self: psycopg.Transaction, *exc: Any) -> Any:
            result = real(self, *exc)
            if not cut and exc[0] is None:
                cut.append(True)
                # The COMMIT landed, but its reply is lost with the connection.
                self.connection.pgconn.finish()
                raise psycopg.OperationalError("the connection was lost at COMMIT")
            return result

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(psycopg.Transaction, "__exit__", exit_then_cut)
            patch.setattr(psycopg.Connection, "execute", counting)
            store.commit_window(
                WindowCommit(
                    "d",
                    "u",
                    [StateWrite("2", "migrated", None)],
                    {"d": DefinitionResult("update", "running", migrate.Counts(migrated=1))},
                    mark_needs_update=True,
                )
            )
        assert ([True], 1, {"1": "needs-update", "2": "migrated"}) == (
            cut,
            len(upserts),
            {s.identity: s.status for s in store.items("d")},
        )
        record = store.run("u")
        assert record is not None
        assert 1 == record.definitions["d"].counts.migrated


def test_a_lock_taken_while_its_holder_was_disconnected_stops_the_holder(
    postgres_url: str,
) -> None:
    """A lock another run took while our session was gone: our next call says so."""
    with PostgresStore(postgres_url) as first, PostgresStore(postgres_url) as second:
        first.create_run("a", "normal", {})
        first.acquire_locks("a", ["d"])
        second.create_run("b", "normal", {})
        with pytest.raises(migrate.LockHeld):
            second.acquire_locks("b", ["d"])
        # The server loses first's session (as in a restart); second takes the lock before
        # first reconnects.
        assert first._conn is not None
        pid = first._conn.info.backend_pid
        with psycopg.connect(postgres_url.split("?", 1)[0], autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))
        second.acquire_locks("b", ["d"])
        with pytest.raises(migrate.StoreError, match="lock of 'd' was taken by another run"):
            first.counts("d")
        assert [("d", "b")] == [(lock.definition_id, lock.run_id) for lock in second.locks()]


def _until_gone(url: str, backend_pid: int) -> None:
    """Wait until the server has ended the session *backend_pid* (its locks go with it)."""
    with psycopg.connect(url.split("?", 1)[0], autocommit=True) as admin:
        for _ in range(1000):
            rows = admin.execute(
                "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (backend_pid,)
            ).fetchall()
            if not rows:
                return
            time.sleep(0.01)
    raise AssertionError(f"session {backend_pid} did not end")


def test_a_lock_of_another_host_is_broken_once_its_session_is_gone(postgres_url: str) -> None:
    """Another host's lock: refused while its holder's session lives, broken once it ended."""
    with PostgresStore(postgres_url) as taker:
        holder = PostgresStore(postgres_url)
        holder.create_run("far", "normal", {})
        holder.acquire_locks("far", ["d"])
        assert holder._conn is not None
        backend = holder._conn.info.backend_pid
        holder._conn.execute("UPDATE locks SET host = 'elsewhere', pid = 1")
        holder._conn.execute("UPDATE runs SET host = 'elsewhere', pid = 1, status = 'running'")
        taker.create_run("near", "normal", {})
        with pytest.raises(migrate.LockHeld, match="on host elsewhere"):
            taker.acquire_locks("near", ["d"])
        assert () == taker.recover_dead_runs()
        holder.close()  # the machine is gone: so is its session
        _until_gone(postgres_url, backend)
        assert ("far",) == taker.recover_dead_runs()
        taker.acquire_locks("near", ["d"])
        far = taker.run("far")
        assert far is not None
        assert (["near"], "failed", "process 1 died") == (
            [lock.run_id for lock in taker.locks()],
            far.status,
            far.error,
        )


def test_a_lock_of_a_dead_process_here_is_broken_at_once(postgres_url: str) -> None:
    """A process of this host that is gone holds nothing, even while its session lingers."""
    with PostgresStore(postgres_url) as holder, PostgresStore(postgres_url) as taker:
        holder.create_run("gone", "normal", {})
        holder.acquire_locks("gone", ["d"])
        assert holder._conn is not None
        child = subprocess.Popen([sys.executable, "-c", "pass"])
        child.wait()
        holder._conn.execute("UPDATE locks SET pid = %s, process = NULL", (child.pid,))
        taker.create_run("here", "normal", {})
        taker.acquire_locks("here", ["d"])  # the holder's session still lives
        assert ["here"] == [lock.run_id for lock in taker.locks()]


def test_the_command_line_store_replaces_the_configs(tmp_path: Path, postgres_url: str) -> None:
    """``migrate --store URL run`` keeps its states in that store, not in the config's."""
    project = make_project(tmp_path / "p", ["ok", "bad", "ok"])
    done = project.main("--store", postgres_url, "run", "people")
    assert 1 == done.returncode, done.stderr
    with migrate.open_store(postgres_url) as store:
        assert migrate.Counts(migrated=2, failed=1) == store.counts("people")
    assert not (project.root / "state").exists()  # the config's SQLite store was never made
    listed = project.main("--store", postgres_url, "failures", "people", "--json")
    assert ["2"] == [f["identity"] for f in json.loads(listed.stdout)]


def test_a_relative_sqlite_store_on_the_command_line_starts_at_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--store sqlite:///here.db`` is the working folder's file, not the config folder's."""
    project = make_project(tmp_path / "p", ["ok"])
    work = tmp_path / "elsewhere"
    work.mkdir()
    monkeypatch.chdir(work)
    done = project.main("--store", "sqlite:///here.db", "run", "people")
    assert (0, True, False) == (
        done.returncode,
        (work / "here.db").exists(),
        (project.root / "here.db").exists(),
    )


def test_a_role_that_may_only_read_queries_and_is_refused_a_run(
    postgres_server: PostgresServer, postgres_url: str
) -> None:
    """A role with SELECT only: status and failures read the store; a run is a StoreError."""
    schema = _schema_of(postgres_url)
    role = f"ro_{schema}"
    writer = migrate.Config(
        [migrate.Migration("p", migrate.MemorySource(_rows(3)), _gated("-", lambda: None))],
        store=postgres_url,
    )
    migrate.run(writer)
    with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
        admin.execute(
            sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(
                sql.Identifier(schema), sql.Identifier(role)
            )
        )
        admin.execute(
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA {} TO {}").format(
                sql.Identifier(schema), sql.Identifier(role)
            )
        )
    try:
        url = postgres_url.replace("postgresql://postgres@", f"postgresql://{role}@")
        reader = attrs.evolve(writer, store=url)
        assert 3 == migrate.status(reader).definitions["p"].migrated
        with pytest.raises(migrate.StoreError, match="permission denied") as caught:
            migrate.run(reader)
        assert (True, "a role that may write") == (
            caught.value.read_only,
            str(caught.value).rsplit("give it ", 1)[1],
        )
        assert 3 == migrate.status(reader).definitions["p"].migrated
    finally:
        with psycopg.connect(postgres_server.dsn(), autocommit=True) as admin:
            admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_a_session_of_ours_the_server_still_keeps_is_ended_on_reconnect(
    postgres_url: str,
) -> None:
    """Our connection is gone but the server still holds our key in a session: reconnecting
    ends that session and takes the key, instead of waiting on it for ever."""
    dsn = postgres_url.split("?", 1)[0]
    with PostgresStore(postgres_url) as store, psycopg.connect(dsn, autocommit=True) as lingering:
        store.create_run("r", "normal", {})
        store.acquire_locks("r", ["d"])
        key = store._holder
        assert store._conn is not None
        current = store._conn.info.backend_pid
        # The lingering session plays our old one: it holds our key, and is the one we knew.
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 10000)", (current,))
        lingering.execute("SELECT pg_advisory_lock(%s)", (key,))
        store._backend = lingering.info.backend_pid
        assert migrate.Counts() == store.counts("d")  # reconnected, key taken back
        with psycopg.connect(dsn, autocommit=True) as admin:
            holders = admin.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 "
                "AND (classid::bigint << 32 | objid::bigint) = %s",
                (key,),
            ).fetchall()
        assert store._conn is not None
        assert [(store._conn.info.backend_pid,)] == holders
        assert ("d", "r") == (store.locks()[0].definition_id, store.locks()[0].run_id)


def test_a_full_disk_fails_the_run_clearly_and_the_rerun_counts_each_item_once(
    postgres_server: PostgresServer,
) -> None:
    """
    The store's tables live on a 1 MiB tmpfs (a tablespace) that fills mid-run: a StoreError
    naming the cause, nothing counted twice; once the disk has room, the rerun finishes.
    """
    schema = f"full_disk_{time.monotonic_ns() % 10**9}"
    with contextlib.ExitStack() as stack:
        try:
            name, folder = stack.enter_context(tablespace_on_tmpfs(postgres_server, "1m", schema))
        except NoSmallDiskError as error:
            no_small_disk(error)
        url = postgres_server.url(
            schema, options=quote(f"-c default_tablespace={name}"), reconnect_timeout_ms="300"
        )

        def process(item: migrate.Item, scope: migrate.Scope) -> None:
            scope.track({"seen": item.identity, "pad": "x" * 300})

        config = migrate.Config(
            [migrate.Migration("p", migrate.MemorySource(_rows(5000), window_size=100), process)],
            store=url,
        )
        with pytest.raises(migrate.StoreError, match="No space left on device"):
            migrate.run(config)
        with migrate.open_store(url) as store:
            first = store.counts("p").migrated
        assert 0 < first < 5000
        subprocess.run(["mount", "-o", "remount,size=64m", str(folder)], check=True)
        summary = migrate.run(config)
        with migrate.open_store(url) as store:
            assert migrate.Counts(migrated=5000) == store.counts("p")
        assert 5000 - first == summary.definitions["p"].counts.migrated
