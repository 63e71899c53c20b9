"""
Shared test configuration: async tests run under both asyncio and trio; hypothesis settings; a
throwaway PostgreSQL server, started the first time a test asks for it.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.postgres_server import PostgresServer, ServerUnavailableError

# CI runs the suite once on a shared 2-core machine: no per-example deadline and no "too slow"
# health check, both of which measure wall-clock time, not correctness. Tests still choose
# their own max_examples.
settings.register_profile(
    "suite", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("suite")


def _utf8(text: str) -> str:
    """*text* with lone surrogates escaped, so that it encodes as UTF-8."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    """
    Under pytest-xdist, a worker sends each report to the controller as UTF-8: the hostile-value
    tests log lone surrogates, which would kill the worker. Their captured output is escaped there.
    """
    report: pytest.TestReport = yield
    if hasattr(item.config, "workerinput"):
        report.sections = [(name, _utf8(content)) for name, content in report.sections]
        if report.failed and report.longrepr is not None:
            report.longrepr = _utf8(str(report.longrepr))
    return report


# What the suite may leave in the checkout: caches, each in a folder of this name.
_CACHES = frozenset(
    {"__pycache__", ".venv", ".hypothesis", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
)
_ROOT = Path(__file__).resolve().parent.parent


def _left_in_checkout() -> frozenset[str] | None:
    """Untracked and ignored paths of the checkout (caches aside); None outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "status", "--porcelain", "--ignored", "-z"],
            cwd=_ROOT,
            capture_output=True,
            check=True,
            timeout=60,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    entries = [entry for entry in done.stdout.decode("utf-8", "replace").split("\0") if entry]
    return frozenset(
        entry[3:]
        for entry in entries
        if entry[:2] in ("??", "!!")
        and not _CACHES.intersection(Path(entry[3:]).parts)
        and not entry[3:].rstrip("/").endswith(".egg-info")
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    """Note what the checkout holds beside its tracked files before any test runs."""
    if not hasattr(session.config, "workerinput"):
        session.config.stash[_CHECKOUT_BEFORE] = _left_in_checkout()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """
    Fail the run when a test left a file in the checkout (a store opened by a relative path, a
    report written to the current folder): tests write under their tmp_path only.
    """
    before = session.config.stash.get(_CHECKOUT_BEFORE, None)
    after = _left_in_checkout() if before is not None else None
    if before is None or after is None or not after - before:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.ensure_newline()
        reporter.write_line(
            "the tests left these in the checkout (write under tmp_path instead): "
            + ", ".join(sorted(after - before)),
            red=True,
        )
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


_CHECKOUT_BEFORE = pytest.StashKey[frozenset[str] | None]()


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every ``@pytest.mark.anyio`` test once under asyncio and once under trio."""
    return str(request.param)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """
    A throwaway PostgreSQL server for the whole session (see tests/postgres_server.py), stopped
    and deleted at its end. Where none can be started the test is skipped, saying why; under CI
    (``$CI`` set) that is an error instead.
    """
    server = PostgresServer()
    try:
        server.start()
    except ServerUnavailableError as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the PostgreSQL tests, but no server could be started: {error}")
        pytest.skip(f"no PostgreSQL server can be started here: {error}")
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> str:
    """A store URL on the session's server, with a schema of its own for this test."""
    return postgres_server.url()


def fresh_store_url(request: pytest.FixtureRequest, sqlite_file: Path) -> str:
    """
    For a fixture parametrized over ``"sqlite"`` and ``"postgresql"``: a SQLite file URL at
    *sqlite_file*, or a PostgreSQL URL with a schema of its own (``postgres_url``).
    """
    if request.param == "sqlite":
        return f"sqlite:///{sqlite_file}"
    url: str = request.getfixturevalue("postgres_url")
    return url
