"""A SQL table source over any DB-API 2.0 connection: ``direct`` lookups, keyset cursor."""

from __future__ import annotations

import contextlib
import datetime
import decimal
import math
import re
import uuid
from collections.abc import Callable, Collection, Generator, Sequence
from typing import Any, Literal, Protocol, cast

from migrate._errors import SourceError
from migrate._sources._base import (
    Cursor,
    Fault,
    Item,
    LookupStrategy,
    Source,
    Window,
    content_version,
    duplicate_fault,
    excerpt,
    identity_fault,
    missing_field,
)
from migrate._sources._identity import IdentityProblem, identity_text

__all__ = ["DbApiConnection", "SqlSource", "placeholder", "quote_identifier"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

ParamStyle = Literal["qmark", "format", "pyformat", "numeric", "named"]
Query = Callable[[str, Any], tuple[list[str], Sequence[Sequence[Any]]]]


class DbApiCursor(Protocol):
    """The part of a DB-API 2.0 cursor this package uses."""

    @property
    def description(self) -> Sequence[Sequence[Any]] | None: ...
    def execute(self, operation: str, parameters: Any = ..., /) -> Any: ...
    def fetchall(self) -> Sequence[Sequence[Any]]: ...


class DbApiConnection(Protocol):
    """The part of a DB-API 2.0 connection this package uses."""

    def cursor(self) -> Any: ...
    def commit(self) -> Any: ...
    def rollback(self) -> Any: ...
    def close(self) -> Any: ...


def quote_identifier(name: str, *, argument: str = "identifier") -> str:
    """
    Quote a table or column name (``schema.table`` allowed) after checking it is a plain name.

    Raises:
        ValueError: Naming *argument*, if *name* is not letters, digits and underscores.

    Example:
        >>> quote_identifier("public.authors")
        '"public"."authors"'
    """
    value = cast(object, name)
    parts = value.split(".") if isinstance(value, str) else []
    if not 1 <= len(parts) <= 2 or not all(_IDENTIFIER.fullmatch(p) for p in parts):
        raise ValueError(
            f"{argument} must be a plain SQL name (letters, digits, _; optionally schema.name), "
            f"got {name!r}"
        )
    return ".".join(f'"{p}"' for p in name.split("."))


def placeholder(style: ParamStyle, position: int, name: str) -> str:
    """
    The parameter marker for DB-API *style* (``position`` is 1-based).

    Example:
        >>> placeholder("qmark", 1, "key"), placeholder("pyformat", 1, "key")
        ('?', '%(key)s')
    """
    if style == "qmark":
        return "?"
    if style == "format":
        return "%s"
    if style == "numeric":
        return f":{position}"
    if style == "named":
        return f":{name}"
    if style == "pyformat":
        return f"%({name})s"
    raise ValueError(
        f"paramstyle must be one of qmark, format, pyformat, numeric, named: {style!r}"
    )


def parameters(style: ParamStyle, values: Sequence[tuple[str, Any]]) -> Any:
    """The parameters object for *style*: a dict for named styles, a tuple otherwise."""
    if style in ("named", "pyformat"):
        return dict(values)
    return tuple(v for _n, v in values)


class SqlSource(Source):
    """
    Rows of a SQL table, in identity order, read with a keyset cursor (``WHERE id > last``).

    Lookup strategy ``direct``: an identity is found by key. Works with any DB-API 2.0 driver
    (sqlite3 is tested); a connection is opened per read and closed after it.

    Args:
        connect: Returns a new DB-API connection, e.g. ``lambda: sqlite3.connect("src.db")``.
        table: Table name (``schema.table`` allowed); checked, then quoted.
        identity: Identity column (unique, ordered); checked, then quoted.
        version: Column holding the row's version; ``None`` uses a hash of the row.
        window_size: Rows per window (>= 1).
        paramstyle: The driver's DB-API ``paramstyle`` (sqlite3: ``"qmark"``).
        identity_type: Converts an identity string back to the column's type for lookups
            (e.g. ``int``); by default the string is passed as is. An identity it refuses
            (``ValueError``, ``TypeError`` or ``ArithmeticError``, as ``int("abc")``) is not in
            the table. For integer keys of more than 4300 digits (Python's limit for ``int``)
            use ``decimal.Decimal``.

    Raises:
        ValueError: If *table*, *identity* or *version* is not a plain SQL name.

    Reads and lookups raise `SourceError` when the driver fails, or when the table has no
    *identity* or *version* column (the message names the column, the table and the columns it
    has; a run then stops the definition and stores nothing for it). The database is not
    queried before the first read, so these are not known when the config loads. A null or
    empty version value falls back to a hash of the row, as with no version column.
    """

    lookup_strategy: LookupStrategy = "direct"
    kind = "sql"

    def __init__(
        self,
        connect: Callable[[], DbApiConnection],
        table: str,
        identity: str = "id",
        version: str | None = None,
        *,
        window_size: int = 1000,
        paramstyle: ParamStyle = "qmark",
        identity_type: Callable[[str], Any] | None = None,
    ) -> None:
        if window_size < 1:
            raise ValueError(f"window_size must be >= 1, got {window_size!r}")
        self._table = quote_identifier(table, argument="table")
        self._identity = quote_identifier(identity, argument="identity")
        if version is not None:
            quote_identifier(version, argument="version")
        placeholder(paramstyle, 1, "x")
        self.connect = connect
        self.table = table
        self.identity = identity
        self.version = version
        self.window_size = window_size
        self.paramstyle: ParamStyle = paramstyle
        self.identity_type = identity_type

    def __repr__(self) -> str:
        return f"SqlSource(<connect>, {self.table!r}, identity={self.identity!r})"

    def describe(self) -> str:
        return f"sql:{self.table}"

    @contextlib.contextmanager
    def _connected(self) -> Generator[Query]:
        """One connection for all the queries of a read or lookup, closed after it."""
        try:
            connection = self.connect()
        except Exception as error:
            raise SourceError(f"{self.describe()}: cannot connect: {error}", error) from error

        def query(sql: str, params: Any) -> tuple[list[str], Sequence[Sequence[Any]]]:
            try:
                cursor = connection.cursor()
                cursor.execute(sql, params)
                rows = cursor.fetchall()
                columns = [str(d[0]) for d in cursor.description or ()]
            except Exception as error:
                raise SourceError(f"{self.describe()}: query failed: {error}", error) from error
            return columns, rows

        try:
            yield query
        finally:
            connection.close()

    def _columns_of(self, columns: list[str]) -> tuple[int, int | None]:
        where = f"{self.describe()} table {self.table!r}"
        if self.identity not in columns:
            raise missing_field(where, "identity", self.identity, columns)
        versioned = self.version
        if versioned is not None and versioned not in columns:
            raise missing_field(where, "version", versioned, columns)
        return columns.index(self.identity), None if versioned is None else columns.index(versioned)

    def _entries(
        self,
        columns: list[str],
        rows: Sequence[Sequence[Any]],
        *,
        null_base: int | None = None,
    ) -> list[Item | Fault]:
        """Items of *rows*; rows without a usable identity become faults (null ones counted
        from *null_base*)."""
        key, at = self._columns_of(columns)
        entries: list[Item | Fault] = []
        nulls = null_base or 0
        describe = self.describe()
        for row in rows:
            data = dict(zip(columns, row, strict=True))
            value = row[key]
            try:
                identity = identity_text(value)
            except IdentityProblem:
                if value is None:
                    nulls += 1
                    position = f"row {nulls} with a null {self.identity}"
                else:
                    position = f"row with {self.identity} {excerpt(value, 40)}"
                entries.append(identity_fault(describe, position, self.identity, data))
                continue
            version_value = None if at is None else row[at]
            if version_value is None or version_value == "":
                version = content_version(repr(tuple(row)))
            else:
                version = str(version_value)
            entries.append(Item(identity, data, version))
        return entries

    def count(self) -> int | None:
        try:
            with self._connected() as query:
                _columns, rows = query(f"SELECT COUNT(*) FROM {self._table}", ())
        except SourceError:
            return None
        return int(rows[0][0])

    def _null_rows(self, query: Query, offset: int) -> tuple[list[str], Sequence[Sequence[Any]]]:
        style = self.paramstyle
        limit = placeholder(style, 1, "limit")
        skip = placeholder(style, 2, "offset")
        sql = (
            f"SELECT * FROM {self._table} WHERE {self._identity} IS NULL "
            f"LIMIT {limit} OFFSET {skip}"
        )
        return query(sql, parameters(style, [("limit", self.window_size), ("offset", offset)]))

    def _keyset(
        self, query: Query, after: Any, *, first: bool
    ) -> tuple[list[str], Sequence[Sequence[Any]]]:
        style = self.paramstyle
        size = self.window_size
        if first:
            limit = placeholder(style, 1, "limit")
            sql = (
                f"SELECT * FROM {self._table} WHERE {self._identity} IS NOT NULL "
                f"ORDER BY {self._identity} LIMIT {limit}"
            )
            columns, rows = query(sql, parameters(style, [("limit", size)]))
        else:
            marker = placeholder(style, 1, "after")
            limit = placeholder(style, 2, "limit")
            sql = (
                f"SELECT * FROM {self._table} WHERE {self._identity} > {marker} "
                f"ORDER BY {self._identity} LIMIT {limit}"
            )
            columns, rows = query(sql, parameters(style, [("after", after), ("limit", size)]))
        if len(rows) < size or not rows:
            return columns, rows
        # The next window starts after the last key, so rows sharing it must all be in this one:
        # else the ones past the limit would never be read (and never reported as duplicates).
        key = columns.index(self.identity) if self.identity in columns else 0
        last = rows[-1][key]
        marker = placeholder(style, 1, "key")
        _same_columns, same = query(
            f"SELECT * FROM {self._table} WHERE {self._identity} = {marker}",
            parameters(style, [("key", last)]),
        )
        held = sum(1 for row in rows if row[key] == last)
        if len(same) > held:
            rows = [*(row for row in rows if row[key] != last), *same]
        return columns, rows

    def read_window(self, cursor: Cursor) -> Window:
        """
        Read the window at *cursor*: from the start (``None``), rows with a null identity first
        (``{"nulls": N}``: from the N-th on), then by key (``{"keys": true}``: from the first;
        ``{"after": KEY}``: after KEY, where a key of a type JSON lacks is saved tagged, e.g.
        ``{"after": {"uuid": "..."}}``).
        """
        state = cursor or {}
        entries: list[Item | Fault] = []
        with self._connected() as query:
            if state.get("after") is not None:
                from_start = False
                columns, rows = self._keyset(query, _decode_key(state["after"]), first=False)
            else:
                offset = int(state.get("nulls", 0))
                from_start = offset == 0 and "keys" not in state
                if "keys" not in state:
                    columns, nulls = self._null_rows(query, offset)
                    entries = self._entries(columns, nulls, null_base=offset)
                    if len(nulls) >= self.window_size:
                        faults = tuple(e for e in entries if isinstance(e, Fault))
                        after_nulls = {"nulls": offset + len(nulls)}
                        return Window((), after_nulls, False, faults, from_start=from_start)
                columns, rows = self._keyset(query, None, first=True)
        entries += self._entries(columns, rows)
        items = tuple(e for e in entries if isinstance(e, Item))
        faults = tuple(e for e in entries if isinstance(e, Fault))
        if not rows:
            at_end = cursor if state.get("after") is not None else {"keys": True}
            return Window(items, at_end, True, faults, from_start=from_start)
        last = rows[-1][columns.index(self.identity)]
        after = {"after": _encode_key(last, self.describe())}
        return Window(items, after, len(rows) < self.window_size, faults, from_start=from_start)

    def find(self, identities: Collection[str]) -> dict[str, Item | Fault]:
        found: dict[str, Item | Fault] = {}
        convert = self.identity_type
        style = self.paramstyle
        marker = placeholder(style, 1, "key")
        sql = f"SELECT * FROM {self._table} WHERE {self._identity} = {marker}"
        describe = self.describe()
        with self._connected() as query:
            for identity in identities:
                try:
                    key = identity if convert is None else convert(identity)
                except (ValueError, TypeError, ArithmeticError):
                    continue  # not a value of the column's type: no row has it
                columns, rows = query(sql, parameters(style, [("key", key)]))
                matches = [e for e in self._entries(columns, rows) if e.identity == identity]
                if len(matches) > 1:
                    places = [f"row {excerpt(e.data, 80)}" for e in matches if isinstance(e, Item)]
                    found[identity] = duplicate_fault(describe, identity, places)
                elif matches:
                    found[identity] = matches[0]
        return found


_KEY_TYPES: dict[str, Callable[[Any], Any]] = {
    "decimal": decimal.Decimal,
    "uuid": uuid.UUID,
    "bytes": bytes.fromhex,
    "datetime": datetime.datetime.fromisoformat,
    "date": datetime.date.fromisoformat,
    "time": datetime.time.fromisoformat,
}


def _encode_key(value: Any, source: str) -> Any:
    """*value* as JSON for a saved cursor: plain JSON types as they are, others tagged."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, uuid.UUID):
        return {"uuid": str(value)}
    if isinstance(value, bytes | bytearray | memoryview):
        return {"bytes": bytes(cast("bytes", value)).hex()}
    if isinstance(value, datetime.datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, datetime.date):
        return {"date": value.isoformat()}
    if isinstance(value, datetime.time):
        return {"time": value.isoformat()}
    raise SourceError(
        f"{source}: cannot keep a cursor after a key of type {type(value).__name__} "
        f"({excerpt(value, 40)}); use an identity column of a plain type"
    )


def _decode_key(value: Any) -> Any:
    if isinstance(value, dict):
        tagged = cast("dict[str, Any]", value)
        if len(tagged) == 1:
            ((tag, text),) = tagged.items()
            convert = _KEY_TYPES.get(tag)
            if convert is not None:
                return convert(text)
    return cast(Any, value)
