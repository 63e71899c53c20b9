"""An in-memory source, for tests, examples and small fixed data."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from typing import Any

from migrate._sources._base import (
    Cursor,
    Item,
    LookupStrategy,
    Source,
    Window,
    content_version,
    identity_of,
    version_of,
)
from migrate._text import plural

__all__ = ["MemorySource"]


class MemorySource(Source):
    """
    Items held in memory, read in the order given; the cursor is a position.

    Args:
        items: The records (mappings), each with an identity field.
        identity: The field holding each record's identity.
        lookup: The lookup strategy to declare: ``"direct"`` (an index) or ``"scan"`` (a pass over
            the items, counted in `scans`).
        version: The field holding the source version; ``None`` uses a hash of the record, and
            so does a record whose value is null or empty.
        window_size: Items per window (>= 1).

    Raises:
        ValueError: If *lookup* is neither ``"direct"`` nor ``"scan"``, or *window_size* < 1.
        SourceError: If a record lacks the *identity* field (or its value is empty) or lacks the
            *version* field; the message names the field, the item's position and the fields
            it has. Raised here, so a config building the source fails to load.

    Example:
        >>> source = MemorySource([{"id": 1, "name": "Ada"}, {"id": 2, "name": "Alan"}])
        >>> [item.identity for item in source.read_window(None).items]
        ['1', '2']
    """

    kind = "memory"

    def __init__(
        self,
        items: Iterable[Mapping[str, Any]],
        identity: str = "id",
        lookup: LookupStrategy = "direct",
        *,
        version: str | None = None,
        window_size: int = 1000,
    ) -> None:
        if lookup not in ("direct", "scan"):
            raise ValueError(f"lookup must be 'direct' or 'scan', got {lookup!r}")
        if window_size < 1:
            raise ValueError(f"window_size must be >= 1, got {window_size!r}")
        self.identity = identity
        self.version = version
        self.lookup_strategy = lookup
        self.window_size = window_size
        self.scans = 0
        self._items = [self._item(dict(record), i) for i, record in enumerate(items)]
        self._index = {item.identity: item for item in self._items}

    def _item(self, record: dict[str, Any], position: int) -> Item:
        where = f"memory item {position}"
        identity = identity_of(record, self.identity, where)

        def content() -> str:
            return json.dumps(record, sort_keys=True, default=str)

        if self.version is None:
            return Item(identity, record, content_version(content()))
        return Item(identity, record, version_of(record, self.version, where, content))

    def __repr__(self) -> str:
        return (
            f"MemorySource(<{len(self._items)} items>, identity={self.identity!r}, "
            f"lookup={self.lookup_strategy!r})"
        )

    def describe(self) -> str:
        return f"memory:{plural(len(self._items), 'item')}"

    def count(self) -> int:
        return len(self._items)

    def read_window(self, cursor: Cursor) -> Window:
        start = 0 if cursor is None else int(cursor["position"])
        end = min(start + self.window_size, len(self._items))
        return Window(tuple(self._items[start:end]), {"position": end}, end >= len(self._items))

    def find(self, identities: Collection[str]) -> dict[str, Item]:
        if self.lookup_strategy == "direct":
            return {i: self._index[i] for i in identities if i in self._index}
        wanted = set(identities)
        if not wanted:
            return {}
        self.scans += 1
        found: dict[str, Item] = {}
        for item in self._items:
            if item.identity in wanted and item.identity not in found:
                found[item.identity] = item
        return found
