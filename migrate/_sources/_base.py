"""Items, windows and the Source base class every source implements."""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Collection, Mapping
from typing import Any, Literal, TypeAlias

import attrs

from effects import Effect
from migrate._errors import SourceError

__all__ = ["Cursor", "Item", "LookupStrategy", "Source", "Window", "content_version"]

LookupStrategy: TypeAlias = Literal["direct", "scan"]
"""``"direct"``: a lookup by identity is cheap (a key read); ``"scan"``: it reads the source."""

Cursor: TypeAlias = "dict[str, Any] | None"
"""A source's position as JSON-able plain data; ``None`` means the beginning."""


@attrs.frozen
class Item:
    """
    One record read from a source.

    Attributes:
        identity: The item's identity, always a string (``str()`` of the identity field).
        data: The record's fields.
        version: The source version: the version field's value as a string, or a content hash
            when the source has no version field, so a changed record is processed again.
    """

    identity: str
    data: Mapping[str, Any]
    version: str | None = None


@attrs.frozen
class Window:
    """
    A batch of items in source order and the cursor that continues after them.

    Attributes:
        items: The items of this window; empty when the source is exhausted.
        next_cursor: Where the next read starts. Saved after the window's item states.
        done: True when no item follows this window.
    """

    items: tuple[Item, ...]
    next_cursor: Cursor
    done: bool = False


def content_version(text: str) -> str:
    """
    Return a short stable hash of a record's content, used as its version when it has none.

    Example:
        >>> content_version("1,Ada")
        'b7d19067c2738d66'
    """
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).hexdigest()


class Source(abc.ABC):
    """
    Where a migration definition reads its items.

    A source reads windows in a stable order from a cursor, and finds items by identity. Reads
    are effects failing with `SourceError`, whose ``cause`` keeps the provider's error so that a
    retry strategy can classify it.

    Subclasses implement `read_window` and `find` (plain methods that raise `SourceError`), or
    override `read` and `lookup` directly to return their own effects.
    """

    #: ``"direct"`` or ``"scan"``; decides how a failed-item run reads identities.
    lookup_strategy: LookupStrategy = "direct"

    @abc.abstractmethod
    def describe(self) -> str:
        """A short description for listings, such as ``csv:/data/authors.csv``."""

    @abc.abstractmethod
    def read_window(self, cursor: Cursor) -> Window:
        """
        Read the window starting at *cursor* (``None``: the beginning).

        Raises:
            SourceError: The provider failed, or the data is malformed.
        """

    @abc.abstractmethod
    def find(self, identities: Collection[str]) -> dict[str, Item]:
        """
        Find the items with these identities; identities not found are absent from the result.

        A ``scan`` source reads itself once for all of them.

        Raises:
            SourceError: The provider failed.
        """

    def count(self) -> int | None:
        """Number of items, when the source knows it cheaply; ``None`` otherwise."""
        return None

    def read(self, cursor: Cursor) -> Effect[Window, SourceError]:
        """An effect reading the window at *cursor*; fails with `SourceError`."""
        return Effect.attempt(lambda: self.read_window(cursor), catch=SourceError)

    def lookup(self, identity: str) -> Effect[Item | None, SourceError]:
        """An effect finding one item by identity (``None`` if absent); fails with `SourceError`."""
        return Effect.attempt(lambda: self.find((identity,)).get(identity), catch=SourceError)

    def lookup_many(self, identities: Collection[str]) -> Effect[dict[str, Item], SourceError]:
        """An effect finding many items at once (one scan for a ``scan`` source)."""
        return Effect.attempt(lambda: self.find(identities), catch=SourceError)


def identity_of(record: Mapping[str, Any], field: str, where: str) -> str:
    """Return ``str(record[field])``, or raise `SourceError` naming *where* it is missing."""
    try:
        value = record[field]
    except KeyError:
        raise SourceError(f"{where} has no identity field {field!r}") from None
    if value is None or value == "":
        raise SourceError(f"{where} has an empty identity field {field!r}")
    return str(value)
