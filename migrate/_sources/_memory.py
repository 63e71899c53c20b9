"""An in-memory source, for tests, examples and small fixed data."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

from migrate._sources._base import (
    Cursor,
    Fault,
    Item,
    LookupStrategy,
    Source,
    Window,
    content_version,
    duplicate_fault,
    identity_fault,
    missing_field,
    version_of,
)
from migrate._sources._identity import IdentityProblem, identity_text
from migrate._sources._long_ints import record_json
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
        SourceError: If no record has the *identity* field, or a record lacks the *version*
            field; the message names the field, the item's index and the fields it has. Raised
            here, so a config building the source fails to load.

    A record whose identity is absent, null, empty or of a type that cannot be an identity
    becomes a failed item naming its index (``<index 3>``); two records with one identity are
    reported as duplicates. Identities are encoded by `identity_text`.

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
        records = [dict(record) for record in items]
        self._size = len(records)
        entries = [self._entry(record, i) for i, record in enumerate(records)]
        self._entries: list[Item | Fault] = entries
        faults = [e for e in entries if isinstance(e, Fault)]
        if entries and len(faults) == len(entries) and all(f.details.get("absent") for f in faults):
            raise missing_field(
                f"memory item {faults[0].position}",
                "identity",
                identity,
                faults[0].details["fields"],
            )
        self._index = self._indexed()

    def _indexed(self) -> dict[str, Item | Fault]:
        index: dict[str, Item | Fault] = {}
        positions: dict[str, list[str | None]] = {}
        for entry in self._entries:
            key = entry.identity
            if key is None:
                continue
            if key in index:
                positions.setdefault(key, [index[key].position]).append(entry.position)
            else:
                index[key] = entry
        for key, places in positions.items():
            index[key] = duplicate_fault(self.describe(), key, places)
        return index

    def _entry(self, record: dict[str, Any], index: int) -> Item | Fault:
        position = f"index {index}"
        try:
            identity = identity_text(record[self.identity])
        except (KeyError, IdentityProblem):
            return identity_fault(self.describe(), position, self.identity, record)

        def content() -> str:
            return record_json(record, sort_keys=True, default=str)

        if self.version is None:
            return Item(identity, record, content_version(content()), position)
        where = f"memory item {index}"
        return Item(identity, record, version_of(record, self.version, where, content), position)

    def __repr__(self) -> str:
        return (
            f"MemorySource(<{len(self._entries)} items>, identity={self.identity!r}, "
            f"lookup={self.lookup_strategy!r})"
        )

    def describe(self) -> str:
        return f"memory:{plural(self._size, 'item')}"

    def count(self) -> int:
        return len(self._entries)

    def read_window(self, cursor: Cursor) -> Window:
        start = 0 if cursor is None else int(cursor["position"])
        end = min(start + self.window_size, len(self._entries))
        items: list[Item] = []
        faults: list[Fault] = []
        for entry in self._entries[start:end]:
            if isinstance(entry, Item):
                items.append(entry)
            else:
                faults.append(entry)
        return Window(
            tuple(items),
            {"position": end},
            end >= len(self._entries),
            tuple(faults),
            from_start=start == 0,
        )

    def find(self, identities: Collection[str]) -> dict[str, Item | Fault]:
        if self.lookup_strategy == "direct":
            return {i: self._index[i] for i in identities if i in self._index}
        wanted = set(identities)
        if not wanted:
            return {}
        self.scans += 1
        found: dict[str, Item | Fault] = {}
        for entry in self._entries:
            key = entry.identity
            if key is not None and key in wanted and key not in found:
                found[key] = self._index[key]  # the index holds the duplicate faults
        return found
