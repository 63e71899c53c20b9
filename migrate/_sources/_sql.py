"""A SQL table source over any DB-API 2.0 connection: ``direct`` lookups, keyset cursor."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence
from typing import Any, Literal, Protocol, cast

from migrate._errors import SourceError
from migrate._sources._base import (
    Cursor,
    Item,
    LookupStrategy,
    Source,
    Window,
    content_version,
    missing_field,
)

__all__ = ["DbApiConnection", "SqlSource", "placeholder", "quote_identifier"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

ParamStyle = Literal["qmark", "format", "pyformat", "numeric", "named"]


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
            (e.g. ``int``); by default the string is passed as is.

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

    def _query(self, sql: str, params: Any) -> tuple[list[str], Sequence[Sequence[Any]]]:
        try:
            connection = self.connect()
        except Exception as error:
            raise SourceError(f"{self.describe()}: cannot connect: {error}", error) from error
        try:
            cursor = connection.cursor()
            cursor.execute(sql, params)
            rows = cursor.fetchall()
            columns = [str(d[0]) for d in cursor.description or ()]
        except Exception as error:
            raise SourceError(f"{self.describe()}: query failed: {error}", error) from error
        finally:
            connection.close()
        return columns, rows

    def _items(self, columns: list[str], rows: Sequence[Sequence[Any]]) -> list[Item]:
        where = f"{self.describe()} table {self.table!r}"
        if self.identity not in columns:
            raise missing_field(where, "identity", self.identity, columns)
        key = columns.index(self.identity)
        versioned = self.version
        if versioned is not None and versioned not in columns:
            raise missing_field(where, "version", versioned, columns)
        at = None if versioned is None else columns.index(versioned)
        items: list[Item] = []
        for row in rows:
            data = dict(zip(columns, row, strict=True))
            value = None if at is None else row[at]
            if value is None or value == "":
                version = content_version(repr(tuple(row)))
            else:
                version = str(value)
            items.append(Item(str(row[key]), data, version))
        return items

    def count(self) -> int | None:
        try:
            _columns, rows = self._query(f"SELECT COUNT(*) FROM {self._table}", ())
        except SourceError:
            return None
        return int(rows[0][0])

    def read_window(self, cursor: Cursor) -> Window:
        style = self.paramstyle
        limit = placeholder(style, 1, "limit")
        if cursor is None or "after" not in cursor:
            sql = f"SELECT * FROM {self._table} ORDER BY {self._identity} LIMIT {limit}"
            params = parameters(style, [("limit", self.window_size)])
        else:
            after = placeholder(style, 1, "after")
            limit = placeholder(style, 2, "limit")
            sql = (
                f"SELECT * FROM {self._table} WHERE {self._identity} > {after} "
                f"ORDER BY {self._identity} LIMIT {limit}"
            )
            params = parameters(style, [("after", cursor["after"]), ("limit", self.window_size)])
        columns, rows = self._query(sql, params)
        items = self._items(columns, rows)
        if not rows:
            return Window((), cursor, True)
        last = rows[-1][columns.index(self.identity)]
        return Window(tuple(items), {"after": last}, len(rows) < self.window_size)

    def find(self, identities: Collection[str]) -> dict[str, Item]:
        found: dict[str, Item] = {}
        convert = self.identity_type
        style = self.paramstyle
        marker = placeholder(style, 1, "key")
        sql = f"SELECT * FROM {self._table} WHERE {self._identity} = {marker}"
        for identity in identities:
            key = identity if convert is None else convert(identity)
            columns, rows = self._query(sql, parameters(style, [("key", key)]))
            for item in self._items(columns, rows[:1]):
                found[identity] = item
        return found
