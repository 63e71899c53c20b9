"""Fixtures of the effects.durable tests: asyncio only, the crash tests' engine processes, and an
app folder for the CLI tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.durable.cli_support import App, make_app
from tests.durable.crash_support.harness import Nodes


@pytest.fixture
def anyio_backend() -> str:
    """Run every ``@pytest.mark.anyio`` test of this folder under asyncio."""
    return "asyncio"


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[Nodes]:
    """The engine processes of a crash test; those still running at its end are killed."""
    spawned = Nodes(tmp_path)
    yield spawned
    spawned.kill_all()


@pytest.fixture
def cli_app(tmp_path: Path) -> Iterator[App]:
    """An app module and its store folder for the CLI tests; its processes end with the test."""
    app = make_app(tmp_path)
    yield app
    app.reap()
