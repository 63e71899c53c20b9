"""VirtualClock and the ``virtual_clock`` pytest fixture."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from effects import retry
from effects._services import current_clock
from effects.testing import VirtualClock
from schedules import exponential


def test_now_sleep_and_advance() -> None:
    """sleep records the delay and moves time; advance moves time without recording."""
    clock = VirtualClock(start=2.5)
    assert 2.5 == clock.now()
    clock.sleep(1.0)
    clock.advance("250ms")
    clock.sleep(0.5)
    assert 4.25 == clock.now()
    assert [1.0, 0.5] == clock.sleeps


def test_advance_rejects_negative_durations() -> None:
    """advance validates its duration and names the argument."""
    with pytest.raises(ValueError, match="duration"):
        VirtualClock().advance(-1)


def test_repr_shows_time_and_sleep_count() -> None:
    """The repr shows the current time and how many sleeps were recorded."""
    clock = VirtualClock(start=1)
    clock.sleep(2)
    assert "VirtualClock(now=3.0, sleeps=1)" == repr(clock)


@pytest.mark.anyio
async def test_async_sleep_advances_instantly() -> None:
    """sleep_async records and advances at once, under asyncio and trio."""
    clock = VirtualClock()
    await clock.sleep_async(30.0)
    assert (30.0, [30.0]) == (clock.now(), clock.sleeps)


def test_fixture_installs_a_fresh_clock(virtual_clock: VirtualClock) -> None:
    """The fixture's clock is the active one, starts at 0 with no sleeps."""
    assert virtual_clock is current_clock()
    assert (0.0, []) == (virtual_clock.now(), virtual_clock.sleeps)


def test_fixture_makes_long_retries_instant(virtual_clock: VirtualClock) -> None:
    """A retry waiting hours of virtual time finishes at once, its waits on record."""
    calls: list[int] = []

    @retry(exponential(3600), times=3, on=ValueError)
    def f() -> None:
        calls.append(1)
        raise ValueError

    with pytest.raises(ValueError):  # noqa: PT011
        f()
    assert [3600.0, 7200.0, 14400.0] == virtual_clock.sleeps
    assert 25200.0 == virtual_clock.now()


@pytest.fixture
async def async_resource() -> str:
    """An async fixture, set up by the anyio runner (it may start the runner's task)."""
    return "resource"


@pytest.mark.anyio
async def test_fixture_is_seen_by_async_tests_with_async_fixtures(
    async_resource: str, virtual_clock: VirtualClock
) -> None:
    """The async test body sees the fixture's clock even when an async fixture ran first."""
    assert "resource" == async_resource
    assert virtual_clock is current_clock()


def test_plugin_is_registered_through_the_entry_point(tmp_path: Path) -> None:
    """A fresh pytest process (no conftest) gets the virtual_clock fixture from the plugin."""
    (tmp_path / "test_uses_fixture.py").write_text(
        textwrap.dedent(
            """
            from effects import retry
            from schedules import spaced

            def test_waits(virtual_clock):
                @retry(spaced(60), times=2, on=KeyError)
                def f():
                    raise KeyError

                try:
                    f()
                except KeyError:
                    pass
                assert virtual_clock.sleeps == [60.0, 60.0]
            """
        )
    )
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
        timeout=60,
    )
    assert 0 == completed.returncode, completed.stdout + completed.stderr
