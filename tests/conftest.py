"""Shared test configuration: async tests run under both asyncio and trio; hypothesis settings."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

# CI runs the suite once on a shared 2-core machine: no per-example deadline and no "too slow"
# health check, both of which measure wall-clock time, not correctness. Tests still choose
# their own max_examples.
settings.register_profile(
    "suite", deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile("suite")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every ``@pytest.mark.anyio`` test once under asyncio and once under trio."""
    return str(request.param)
