"""Fixtures of the durable tests: asyncio only, and an app folder for the CLI tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.durable.cli_support import App, make_app


@pytest.fixture
def anyio_backend() -> str:
    """Run every ``@pytest.mark.anyio`` test of this folder under asyncio."""
    return "asyncio"


@pytest.fixture
def cli_app(tmp_path: Path) -> Iterator[App]:
    """An app module and its store folder for the CLI tests; its processes end with the test."""
    app = make_app(tmp_path)
    yield app
    app.reap()
