"""
Shared test configuration: async tests run under both asyncio and trio; hypothesis settings; a
throwaway PostgreSQL server, started the first time a test asks for it.
"""

from __future__ import annotations

import os
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
