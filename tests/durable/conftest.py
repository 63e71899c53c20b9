"""Fixtures of the effects.durable tests: asyncio only, and the crash tests' engine processes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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
