"""effects.durable is asyncio only: its async tests run under asyncio alone."""

from __future__ import annotations

import pytest


@pytest.fixture
def anyio_backend() -> str:
    """Run every ``@pytest.mark.anyio`` test of this folder under asyncio."""
    return "asyncio"
