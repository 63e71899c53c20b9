"""Fixtures for the migrate tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.migrate.helpers import people, write_csv


@pytest.fixture
def csv_people(tmp_path: Path) -> Path:
    """A CSV file of 10 people with ids 1..10."""
    return write_csv(tmp_path / "people.csv", people(10))
