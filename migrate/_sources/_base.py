"""Items, windows and the Source base class every source implements."""

from __future__ import annotations

import abc
import hashlib
import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeAlias

import attrs

from effects import Effect
from migrate._errors import SourceError
from migrate._sources._identity import IdentityProblem, identity_text
from migrate._sources._long_ints import integer_text, record_json
from migrate._text import stored_text

__all__ = [
    "Contract",
    "Cursor",
    "Fault",
    "Item",
    "LookupStrategy",
    "Source",
    "Window",
    "content_version",
    "positional_key",
]

LookupStrategy: TypeAlias = Literal["direct", "scan"]
"""``"direct"``: a lookup by identity is cheap (a key read); ``"scan"``: it reads the source."""

Cursor: TypeAlias = "dict[str, Any] | None"
"""A source's position as JSON-able plain data; ``None`` means the beginning."""


@attrs.frozen
class Item:
    """
    One record read from a source.

    Attributes:
        identity: The item's identity, always a string: the identity field's value in the one
            form `identity_text` gives every type (``1`` and ``"1"`` are both ``"1"``).
        data: The record's fields.
        version: The source version: the version field's value as a string, or a content hash
            when the source is given no version field or the record's value is null or empty,
            so a changed record is processed again and an unchanged one is not. ``None`` only
            for items built by hand. (A version field the record lacks is a `SourceError`.)
        position: Where the source holds the record, for evidence: ``"line 17"`` (files),
            ``"index 3"`` (memory); ``None`` where a source has no such place.
    """

    identity: str
    data: Mapping[str, Any]
    version: str | None = None
    position: str | None = None


def _no_details() -> dict[str, Any]:
    return {}


def positional_key(position: str) -> str:
    """
    The key a record without a usable identity is stored under: its position in angle brackets.

    Example:
        >>> positional_key("line 17")
        '<line 17>'
    """
    return f"<{position}>"


@attrs.frozen
class Fault:
    """
    A record a source read but could not turn into an item; a run stores it as a failed item.

    Attributes:
        position: Where the record is (``"line 17"``, ``"index 3"``, ``"row 2 with a null id"``).
        type: What is wrong: ``"MissingIdentity"`` (null, empty or absent), ``"BadIdentity"``
            (a value of a type that cannot be an identity), ``"UndecodableRecord"`` (bytes
            invalid in the source's encoding, identity unknown), ``"UnicodeDecodeError"`` (the
            same, identity known) or ``"DuplicateIdentity"``.
        message: What is wrong, naming the source and the position.
        identity: The record's identity when it is known; the failed state is stored under it.
            ``None``: it is stored under `key`, its `positional_key`.
        details: JSON-able evidence (the field names present, the invalid bytes, ...).
    """

    position: str
    type: str
    message: str
    identity: str | None = None
    details: Mapping[str, Any] = attrs.field(factory=_no_details)

    @property
    def key(self) -> str:
        """The identity the failed state is stored under."""
        return self.identity if self.identity is not None else positional_key(self.position)


@attrs.frozen
class Window:
    """
    A batch of items in source order and the cursor that continues after them.

    Attributes:
        items: The items of this window; empty when the source is exhausted.
        next_cursor: Where the next read starts. Saved after the window's item states.
        done: True when no item follows this window.
        faults: Records of this window that are not items (no usable identity, undecodable
            bytes): each becomes a failed state, and reading goes on past them.
        from_start: True when the window begins at the source's first record (a read from
            ``None``, or a source that started over because its data changed). A run that reads
            every window from such a one to the last (``done``) clears the failed states of
            records without identity that the pass no longer met.
    """

    items: tuple[Item, ...]
    next_cursor: Cursor
    done: bool = False
    faults: tuple[Fault, ...] = ()
    from_start: bool = False


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
    def find(self, identities: Collection[str]) -> Mapping[str, Item | Fault]:
        """
        Find the items with these identities.

        A ``scan`` source reads itself once for all of them.

        Args:
            identities: The identities wanted.

        Returns:
            The items found, by identity; identities not found are absent. An identity the
            source holds more than once, or in a record it cannot decode, maps to a `Fault`
            saying so (the run fails that item with its evidence).

        Raises:
            SourceError: The provider failed.
        """

    def count(self) -> int | None:
        """Number of items, when the source knows it cheaply; ``None`` otherwise."""
        return None

    def resolve(self, base_dir: Path) -> None:
        """
        Take relative paths as relative to *base_dir*, the config's folder (a `Config` with a
        ``base_dir`` calls this for each of its sources; file sources use it). Default: nothing.
        """
        return  # a hook: a source without paths has nothing to resolve

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

    def lookup(self, identity: str) -> Effect[Item | Fault | None, SourceError]:
        """
        An effect finding the item of *identity* (``None``: absent; a `Fault`: it cannot be
        read as one item); fails with `SourceError`.
        """
        return Effect.attempt(lambda: self.find((identity,)).get(identity), catch=SourceError)

    def lookup_many(
        self, identities: Collection[str]
    ) -> Effect[Mapping[str, Item | Fault], SourceError]:
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


def excerpt(record: object, limit: int = 200) -> str:
    """A short JSON (else ``repr``) rendering of *record* for evidence, at most *limit* chars."""
    try:
        text = record_json(record, default=str, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        try:
            text = repr(record)
        except Exception:  # noqa: BLE001 - evidence must not fail on a hostile record
            text = f"<{type(record).__name__} object>"
    text = stored_text(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def identity_fault(source: str, position: str, field: str, record: Mapping[str, Any]) -> Fault:
    """
    The `Fault` of a record at *position* whose identity *field* is absent, null, empty or of a
    type that cannot be an identity.
    """
    fields = [str(name) for name in record]
    if field not in record:
        problem = f"has no identity field {field!r} (its fields: {', '.join(fields) or 'none'})"
        fault_type = "MissingIdentity"
    else:
        try:
            identity_text(record[field])
        except IdentityProblem as error:
            problem = f"has an identity field {field!r} that {error}"
            fault_type = "MissingIdentity" if error.missing else "BadIdentity"
        else:  # pragma: no cover - only called for records without a usable identity
            problem = f"has an identity field {field!r}"
            fault_type = "BadIdentity"
    return Fault(
        position,
        fault_type,
        f"{source} {position} {problem}; the record was not migrated: give it an identity "
        "in the source",
        details={
            "source": source,
            "field": field,
            "fields": fields,
            "absent": field not in record,
            "record": excerpt(record),
        },
    )


def duplicate_fault(source: str, identity: str, positions: Sequence[str | None]) -> Fault:
    """The `Fault` of an identity that *source* holds at more than one of *positions*."""
    places = [p or "?" for p in positions]
    shown = ", ".join(places[:-1]) + f" and {places[-1]}"
    return Fault(
        places[0],
        "DuplicateIdentity",
        f"identity {identity!r} appears {len(places)} times in {source}: at {shown}; none of "
        "these records was processed: make each identity appear once in the source, then run "
        "the failed items again",
        identity=identity,
        details={"source": source, "positions": places},
    )


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
    return stored_text(integer_text(value) if type(value) is int else str(value))
