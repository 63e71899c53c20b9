"""
A throwaway PostgreSQL server for the test suite (and benchmarks): ``initdb`` into a temporary
folder, ``pg_ctl start`` on a free port of 127.0.0.1 with a socket folder of its own, stopped and
deleted at the end whatever happens.

The server is run by a small keeper process (this file run as a script) that holds it for as long
as its standard input stays open: when the test session ends, is interrupted, or dies (even by
``kill -9``), the pipe closes and the keeper stops the server and deletes its folder. The keeper
runs in a session of its own, so a Ctrl-C in the terminal reaches pytest, not the server.

As root, the server runs as an unprivileged user (``nobody``; PostgreSQL refuses root), which owns
the folder. The binaries come from ``pg_config --bindir``, or ``$PG_BINDIR``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

__all__ = [
    "NoSmallDiskError",
    "PostgresServer",
    "ServerUnavailableError",
    "find_bindir",
    "no_small_disk",
    "tablespace_on_tmpfs",
]

#: How long a start may take before it counts as failed (seconds).
START_TIMEOUT = 60.0
#: The role every test connects as (trust authentication on 127.0.0.1).
SUPERUSER = "postgres"
#: A role that must give the right password (for the bad-credentials test).
PASSWORD_USER = "pw_user"
PASSWORD = "right-password"

# Tuned for a test server on a shared machine: no fsync (a crash of the machine is not under
# test; a restart with -m fast still checkpoints everything), few connections' memory.
_FAST = ("fsync=off", "synchronous_commit=off", "full_page_writes=off")
_COMMON = ("max_connections=300", "log_min_messages=fatal", "deadlock_timeout=200ms")


class ServerUnavailableError(RuntimeError):
    """No PostgreSQL server could be started here (binaries missing, or the start failed)."""


class NoSmallDiskError(RuntimeError):
    """No tmpfs can be mounted here (not root, or not permitted): no real full disk for a test."""


def find_bindir() -> Path:
    """
    The folder of PostgreSQL's server binaries (``initdb``, ``pg_ctl``, ``postgres``).

    Raises:
        ServerUnavailableError: If ``$PG_BINDIR`` and ``pg_config --bindir`` name no such folder.
    """
    named = os.environ.get("PG_BINDIR")
    candidates: list[str] = [named] if named else []
    if not named:
        try:
            found = subprocess.run(
                ["pg_config", "--bindir"], capture_output=True, text=True, check=True, timeout=10
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            # Debian's layout, newest version first.
            found = ""
            candidates.extend(
                str(path) for path in sorted(Path("/usr/lib/postgresql").glob("*/bin"))[::-1]
            )
        if found:
            candidates.append(found)
    if not candidates:
        msg = "no PostgreSQL binaries: pg_config is missing and /usr/lib/postgresql is empty"
        raise ServerUnavailableError(msg)
    for folder in candidates:
        if (Path(folder) / "initdb").is_file() and (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    msg = f"no PostgreSQL server binaries (initdb, pg_ctl) in {', '.join(candidates)}"
    raise ServerUnavailableError(msg)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _as_server_user(command: Sequence[str | Path]) -> list[str]:
    args = [str(part) for part in command]
    if os.geteuid() != 0:
        return args
    return ["runuser", "-u", "nobody", "--", *args]


def _run(
    command: Sequence[str | Path], *, timeout: float = START_TIMEOUT, cwd: Path | None = None
) -> str:
    done = subprocess.run(
        _as_server_user(command),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )
    if done.returncode != 0:
        msg = f"{Path(str(command[0])).name} failed ({done.returncode}): {done.stderr.strip()}"
        raise ServerUnavailableError(msg)
    return done.stdout


class _Cluster:
    """The server itself (used by the keeper process)."""

    def __init__(self, bindir: Path, *, durable: bool, folder: str | None) -> None:
        self.bindir = bindir
        self.settings = _COMMON if durable else (*_FAST, *_COMMON)
        self.folder = Path(tempfile.mkdtemp(prefix="effects-pg-", dir=folder))
        self.data = self.folder / "data"
        self.sockets = self.folder / "sockets"
        self.log = self.folder / "server.log"
        self.port = 0
        self.options = ""

    def start(self) -> None:
        self.sockets.mkdir()
        self.data.mkdir(mode=0o700)
        if os.geteuid() == 0:
            import pwd

            nobody = pwd.getpwnam("nobody")
            for path in (self.folder, self.data, self.sockets):
                os.chown(path, nobody.pw_uid, nobody.pw_gid)
        _run(
            [
                self.bindir / "initdb",
                "-D",
                self.data,
                "-U",
                SUPERUSER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "--no-instructions",
            ],
            cwd=self.folder,
        )
        (self.data / "pg_hba.conf").write_text(
            "local all all trust\n"
            f"host all {PASSWORD_USER} 127.0.0.1/32 scram-sha-256\n"
            "host all all 127.0.0.1/32 trust\n"
        )
        for attempt in range(3):
            self.port = _free_port()
            self.options = " ".join(
                [
                    "-c listen_addresses=127.0.0.1",
                    f"-c port={self.port}",
                    f"-c unix_socket_directories='{self.sockets}'",
                    *(f"-c {setting}" for setting in self.settings),
                ]
            )
            try:
                self.pg_ctl("start", "-o", self.options, "-l", str(self.log))
                return
            except ServerUnavailableError:
                if attempt == 2:
                    raise
        raise AssertionError  # pragma: no cover

    def pg_ctl(self, action: str, *args: str) -> None:
        _run(
            [self.bindir / "pg_ctl", action, "-D", self.data, "-w", "-t", "60", *args],
            timeout=START_TIMEOUT + 10,
            cwd=self.folder,
        )

    def stop(self) -> None:
        try:
            if (self.data / "postmaster.pid").exists():
                self.pg_ctl("stop", "-m", "immediate")
        except (ServerUnavailableError, subprocess.SubprocessError, OSError):
            pass
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def _keep(bindir: Path, *, durable: bool, folder: str | None) -> int:
    """The keeper: start a server, say where it is, run commands from stdin until EOF."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    cluster = _Cluster(bindir, durable=durable, folder=folder)
    try:
        try:
            cluster.start()
        except (ServerUnavailableError, OSError, subprocess.SubprocessError) as error:
            log = cluster.log.read_text() if cluster.log.exists() else ""
            print(json.dumps({"error": f"{error} {log.strip()[-500:]}".strip()}), flush=True)
            return 1
        print(json.dumps({"port": cluster.port, "sockets": str(cluster.sockets)}), flush=True)
        for line in sys.stdin:
            command = line.strip()
            try:
                if command == "restart":
                    cluster.pg_ctl("restart", "-m", "fast", "-l", str(cluster.log))
                elif command == "stop":
                    cluster.pg_ctl("stop", "-m", "fast")
                elif command == "start":
                    cluster.pg_ctl("start", "-o", cluster.options, "-l", str(cluster.log))
                reply: dict[str, Any] = {"ok": command}
            except (ServerUnavailableError, subprocess.SubprocessError) as error:
                reply = {"error": str(error)}
            print(json.dumps(reply), flush=True)
        return 0
    finally:
        cluster.stop()


class PostgresServer:
    """
    A throwaway server held by a keeper process; ``url()`` gives a URL with a schema of its own.
    *durable*: the server's default durability (fsync, synchronous commit) instead of the test
    suite's fast settings, for benchmarks; *folder*: where its temporary folder goes.

    Raises:
        ServerUnavailableError: From ``start`` when the binaries are missing or the server cannot
            be started.
    """

    def __init__(self, *, durable: bool = False, folder: str | None = None) -> None:
        self.durable = durable
        self.folder = folder
        self.port = 0
        self.host = "127.0.0.1"
        self._keeper: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self._schemas = 0

    def start(self) -> PostgresServer:
        """Start the server (a few seconds); return self."""
        bindir = find_bindir()
        keeper = subprocess.Popen(
            [
                sys.executable,
                __file__,
                str(bindir),
                "--durable" if self.durable else "--fast",
                self.folder or "",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )
        self._keeper = keeper
        reply = self._reply()
        if "port" not in reply:
            self.close()
            msg = f"PostgreSQL did not start: {reply.get('error', 'no reply from its keeper')}"
            raise ServerUnavailableError(msg)
        self.port = int(reply["port"])
        return self

    def _reply(self) -> dict[str, Any]:
        keeper = self._keeper
        assert keeper is not None
        stdout: IO[str] | None = keeper.stdout
        assert stdout is not None
        line = stdout.readline()
        if not line:
            return {"error": "its keeper exited"}
        parsed: dict[str, Any] = json.loads(line)
        return parsed

    def _command(self, command: str) -> None:
        with self._lock:
            keeper = self._keeper
            assert keeper is not None
            assert keeper.stdin is not None
            keeper.stdin.write(command + "\n")
            keeper.stdin.flush()
            reply = self._reply()
        if "error" in reply:
            raise ServerUnavailableError(f"pg_ctl {command}: {reply['error']}")

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every connection is cut, the server comes back."""
        self._command("restart")

    def stop_server(self) -> None:
        """``pg_ctl stop -m fast`` (``start_server`` brings it back)."""
        self._command("stop")

    def start_server(self) -> None:
        """``pg_ctl start`` after ``stop_server``."""
        self._command("start")

    def dsn(self, database: str = "postgres", user: str = SUPERUSER) -> str:
        """A libpq URL of the server's *database*."""
        return f"postgresql://{user}@{self.host}:{self.port}/{database}"

    def url(self, schema: str | None = None, **options: str) -> str:
        """A store URL with a schema no other call gets (unless *schema* is given)."""
        if schema is None:
            with self._lock:
                self._schemas += 1
                schema = f"t{os.getpid()}_{self._schemas}_{time.monotonic_ns() % 10**6}"
        query = "&".join(f"{key}={value}" for key, value in {"schema": schema, **options}.items())
        return f"{self.dsn()}?{query}"

    def close(self) -> None:
        """Stop the server and delete its folder (closing the keeper's pipe does it)."""
        keeper, self._keeper = self._keeper, None
        if keeper is None:
            return
        if keeper.stdin is not None:
            keeper.stdin.close()
        try:
            keeper.wait(timeout=30)
        except subprocess.TimeoutExpired:
            keeper.kill()
            keeper.wait()
        if keeper.stdout is not None:
            keeper.stdout.close()

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    sys.exit(
        _keep(Path(sys.argv[1]), durable=sys.argv[2] == "--durable", folder=sys.argv[3] or None)
    )


@contextlib.contextmanager
def tablespace_on_tmpfs(
    server: PostgresServer, size: str, schema: str
) -> Iterator[tuple[str, Path]]:
    """
    A tablespace of *server* on a tmpfs of *size* (e.g. ``"8m"``): its name and folder, for a
    disk that really fills (write a file into the folder to use up its space). At the end the
    test's *schema* (whose tables live there) and the tablespace are dropped and the tmpfs is
    unmounted.

    Raises:
        NoSmallDiskError: If no tmpfs can be mounted here.
    """
    import psycopg
    from psycopg import sql

    if os.geteuid() != 0:
        raise NoSmallDiskError("mounting a tmpfs needs root")
    import pwd

    # The server runs as "nobody" under root (see _Cluster.start): it must own the folder.
    owner = pwd.getpwnam("nobody")
    folder = Path(tempfile.mkdtemp(prefix="pg-small-disk-"))
    os.chmod(folder, 0o755)
    mode = f"size={size},mode=0700,uid={owner.pw_uid},gid={owner.pw_gid}"
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", mode, "tmpfs", str(folder)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        folder.rmdir()
        raise NoSmallDiskError(f"no tmpfs could be mounted: {mounted.stderr.strip()}")
    name = f"small_{secrets.token_hex(4)}"
    try:
        with psycopg.connect(server.dsn(), autocommit=True) as admin:
            admin.execute(
                sql.SQL("CREATE TABLESPACE {} LOCATION {}").format(
                    sql.Identifier(name), sql.Literal(str(folder))
                )
            )
        try:
            yield name, folder
        finally:
            for leftover in folder.iterdir():
                if leftover.is_file():
                    leftover.unlink()
            with psycopg.connect(server.dsn(), autocommit=True) as admin:
                admin.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
                )
                admin.execute(sql.SQL("DROP TABLESPACE IF EXISTS {}").format(sql.Identifier(name)))
    finally:
        if subprocess.run(["umount", str(folder)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], check=False)
        folder.rmdir()


def no_small_disk(error: NoSmallDiskError) -> NoReturn:
    """
    A test that needs a real full disk, where none can be made: skipped, saying why. A tmpfs
    needs root to mount, which a developer's machine may not give; CI runs as root, so there
    (``$CI`` set) this is a failure instead, and the full-disk tests always run in CI.
    """
    import pytest

    if os.environ.get("CI"):
        pytest.fail(f"CI runs the full-disk tests, but no tmpfs could be mounted: {error}")
    pytest.skip(f"no real full disk can be made here: {error}")
