"""A destination's journal key given as a parameter name (``key="path"``), as users write it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import migrate
from tests.migrate.helpers import config_of


def _journal_of_failed_item(tmp_path: Path, process: migrate.Process) -> list[dict[str, Any]]:
    """Run *process* over one item and return the journal kept with its failure."""
    source = migrate.MemorySource([{"id": "1", "title": "Dune"}])
    config = config_of(tmp_path, migrate.Migration("books", source, process))
    migrate.run(config)
    (failure,) = migrate.failures(config, "books")
    return list(failure.journal)


def test_key_names_a_parameter_given_positionally(tmp_path: Path) -> None:
    """key="path" journals the positional argument bound to the parameter path."""

    @migrate.destination(name="catalogue", key="path")
    def put(path: str, record: dict[str, Any]) -> str:
        return path

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        put(f"/books/{item.identity}", dict(item.data)).run_or_raise()
        raise RuntimeError("after the write")

    assert [
        {"kind": "change", "destination": "catalogue", "operation": "put", "key": "/books/1"}
    ] == _journal_of_failed_item(tmp_path, process)


def test_key_names_a_parameter_given_by_keyword_or_default(tmp_path: Path) -> None:
    """The named argument is found when passed by keyword, and its default when omitted."""

    @migrate.destination(name="crm", key="region")
    def upsert(record: dict[str, Any], region: str = "eu") -> None:
        pass

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        upsert(dict(item.data)).run_or_raise()
        upsert(record=dict(item.data), region="us").run_or_raise()
        raise RuntimeError("after the writes")

    assert ["eu", "us"] == [entry["key"] for entry in _journal_of_failed_item(tmp_path, process)]


@pytest.mark.anyio
async def test_key_names_a_parameter_of_an_async_function() -> None:
    """An async destination takes a parameter name too; the call still runs as an AsyncEffect."""

    @migrate.destination(name="catalogue", key="path")
    async def put(path: str) -> str:
        return path.upper()

    assert "/A" == await put("/a").run_or_raise()


def test_key_naming_no_parameter_is_refused_at_decoration() -> None:
    """A key naming no parameter raises ValueError naming key, the value and the parameters."""

    def put(path: str, record: dict[str, Any]) -> None:
        pass

    with pytest.raises(
        ValueError, match=r"key must name a parameter of .*put\(\); got 'id'"
    ) as info:
        migrate.destination(put, key="id")
    assert "parameters: path, record" in str(info.value)
