"""Items, windows and the Source base class every source implements."""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, ClassVar, Literal, TypeAlias

import attrs

from effects import Effect
from migrate._errors import SourceError

__all__ = ["Contract", "Cursor", "Item", "LookupStrategy", "Source", "Window", "content_version"]

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
            when the source is given no version field or the record's value is null or empty,
            so a changed record is processed again and an unchanged one is not. ``None`` only
            for items built by hand. (A version field the record lacks is a `SourceError`.)
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


_CONTRACT_LABELS = (
    ("kind", "source kind"),
    ("identity", "identity field"),
    ("version", "version field"),
    ("lookup", "lookup strategy"),
)


@attrs.frozen
class Contract:
    """
    What a definition's stored item states depend on in its source.

    A stored state is keyed by identity and compared by version, so the states mean what they say
    only while these stay the same. The store records a definition's contract at its first run
    and refuses a later run whose contract differs (`ContractChanged`) unless forced. Where the
    source reads from (a file path, a table, a connection) is not part of it: moving a file keeps
    the states valid.

    Attributes:
        kind: The source's kind (``"csv"``, ``"jsonl"``, ``"sql"``, ``"memory"``, or the class
            name of another source): it decides the cursor's form and how versions are computed.
        identity: The field holding each item's identity (``None`` if the source has none).
        version: The field holding the source version; ``None`` means a hash of the content.
        lookup: The lookup strategy, ``"direct"`` or ``"scan"``.

    Example:
        >>> contract = Contract("csv", identity="id", version=None, lookup="scan")
        >>> contract.fingerprint
        '78c5e87c00563f4c'
        >>> contract.changes(Contract("csv", "isbn", "updated", "scan"))
        ("identity field 'id' -> 'isbn'", "version field None -> 'updated'")
    """

    kind: str
    identity: str | None
    version: str | None
    lookup: str

    @property
    def fingerprint(self) -> str:
        """A short stable hash of the four fields (16 hex digits)."""
        text = json.dumps(self.to_json(), sort_keys=True)
        return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()

    def changes(self, new: Contract) -> tuple[str, ...]:
        """
        What differs from this contract to *new*, one phrase per changed field (see the example
        of `Contract`).
        """
        mine, theirs = self.to_json(), new.to_json()
        return tuple(
            f"{label} {mine[key]!r} -> {theirs[key]!r}"
            for key, label in _CONTRACT_LABELS
            if mine[key] != theirs[key]
        )

    def to_json(self) -> dict[str, str | None]:
        """``{"kind", "identity", "version", "lookup"}``."""
        return {
            "kind": self.kind,
            "identity": self.identity,
            "version": self.version,
            "lookup": self.lookup,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Contract:
        """Rebuild a contract from *data* stored by `to_json`."""

        def text(key: str) -> str | None:
            value = data.get(key)
            return None if value is None else str(value)

        return cls(
            str(data.get("kind", "")),
            text("identity"),
            text("version"),
            str(data.get("lookup", "")),
        )


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

    #: The kind named in the `Contract`; ``""`` means the class name.
    kind: ClassVar[str] = ""

    @abc.abstractmethod
    def describe(self) -> str:
        """A short description for listings, such as ``csv:/data/authors.csv``."""

    @abc.abstractmethod
    def read_window(self, cursor: Cursor) -> Window:
        """
        Read the window starting at *cursor*.

        Args:
            cursor: A ``next_cursor`` of an earlier window; ``None``: the beginning.

        Raises:
            SourceError: The provider failed, or the data is malformed.
        """

    @abc.abstractmethod
    def find(self, identities: Collection[str]) -> dict[str, Item]:
        """
        Find the items with these identities.

        A ``scan`` source reads itself once for all of them.

        Args:
            identities: The identities wanted.

        Returns:
            The items found, by identity; identities not found are absent.

        Raises:
            SourceError: The provider failed.
        """

    def count(self) -> int | None:
        """Number of items, when the source knows it cheaply; ``None`` otherwise."""
        return None

    def contract(self) -> Contract:
        """
        What stored item states of this source depend on (see `Contract`).

        By default: `kind` (or the class name), and the ``identity`` and ``version`` attributes
        when they are strings. A source keeping its identity or version field elsewhere
        overrides this.
        """
        identity = getattr(self, "identity", None)
        version = getattr(self, "version", None)
        return Contract(
            kind=self.kind or type(self).__name__,
            identity=identity if isinstance(identity, str) else None,
            version=version if isinstance(version, str) else None,
            lookup=self.lookup_strategy,
        )

    def read(self, cursor: Cursor) -> Effect[Window, SourceError]:
        """An effect running `read_window` (*cursor*); fails with `SourceError`."""
        return Effect.attempt(lambda: self.read_window(cursor), catch=SourceError)

    def lookup(self, identity: str) -> Effect[Item | None, SourceError]:
        """An effect finding the item of *identity* (``None``: absent); fails with `SourceError`."""
        return Effect.attempt(lambda: self.find((identity,)).get(identity), catch=SourceError)

    def lookup_many(self, identities: Collection[str]) -> Effect[dict[str, Item], SourceError]:
        """An effect running `find` (*identities*): one pass for a ``scan`` source."""
        return Effect.attempt(lambda: self.find(identities), catch=SourceError)


class MissingFieldError(SourceError):
    """
    A source's records lack its configured identity or version field: the source's arguments do
    not match its data. Not transient: the runner stops the definition and writes no state.
    """


def missing_field(where: str, role: str, field: str, present: Iterable[str]) -> MissingFieldError:
    """
    The error for a *role* (``"identity"`` or ``"version"``) *field* absent at *where*.

    Example:
        >>> error = missing_field("csv:p.csv header", "version", "rev", ["id", "name"])
        >>> print(*str(error).split("; "), sep="\\n")
        csv:p.csv header has no version field 'rev'
        its fields are 'id', 'name' (check the source's version= argument)
    """
    fields = ", ".join(repr(str(name)) for name in present) or "none"
    return MissingFieldError(
        f"{where} has no {role} field {field!r}; its fields are {fields} "
        f"(check the source's {role}= argument)"
    )


def identity_of(record: Mapping[str, Any], field: str, where: str) -> str:
    """Return ``str(record[field])``, or raise `SourceError` naming *where* it is missing."""
    try:
        value = record[field]
    except KeyError:
        raise missing_field(where, "identity", field, record) from None
    if value is None or value == "":
        raise SourceError(f"{where} has an empty identity field {field!r}")
    return str(value)


def version_of(
    record: Mapping[str, Any], field: str, where: str, content: Callable[[], str]
) -> str:
    """
    Return the version field's value as a string, or raise `SourceError` naming *where* the
    field is missing.

    A null or empty value falls back to ``content_version(content())``: a record without a
    version still counts as unchanged until its content changes.
    """
    try:
        value = record[field]
    except KeyError:
        raise missing_field(where, "version", field, record) from None
    if value is None or value == "":
        return content_version(content())
    return str(value)
