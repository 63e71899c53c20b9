"""Shared test configuration: async tests run under both asyncio and trio."""

from __future__ import annotations

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every ``@pytest.mark.anyio`` test once under asyncio and once under trio."""
    return str(request.param)
