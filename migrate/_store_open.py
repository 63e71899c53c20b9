"""Opening a store from its URL: ``sqlite:///path`` (the default) or ``postgresql://...``."""

from __future__ import annotations

import os

from migrate._errors import StoreError
from migrate._postgres_url import is_postgres_url, masked, parse_postgres_url
from migrate._store import Store
from migrate._store_memory import MemoryStore
from migrate._store_sqlite import open_sqlite, sqlite_exists, store_path

__all__ = ["open_store", "store_exists"]

_INSTALL = "pip install 'effect-schedules[postgres]'"


def open_store(
    url: str,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    read_only: bool = False,
) -> Store:
    """
    Open (creating on demand, unless *read_only*) the store at *url*.

    Args:
        url: ``"sqlite:///relative/path.db"`` or ``"sqlite:////absolute/path.db"``, optionally
            with ``?timeout=SECONDS``: how long a write waits for a lock another connection holds
            before it fails (default 30). Or ``"postgresql://user:password@host:5432/db"``
            (``postgres://`` too; needs the ``postgres`` extra), optionally with ``?schema=NAME``
            (default ``migrate``, created on demand) and ``reconnect_timeout_ms=MS`` (how long a
            call keeps reconnecting to a server it lost, default 30000); its other query
            parameters (``sslmode``, ``connect_timeout``, ...) go to libpq.
        base_dir: Where a relative SQLite path starts; ``None``: the working folder.
        read_only: Open for reading only: nothing is created or written (a read-only file or
            mount works), and a store that does not exist yet (no file, no schema) reads as an
            empty store.

    Raises:
        ConfigError: If *url* is neither kind of store URL, or has an unknown or invalid option.
        StoreSchemaError: If the store was written by a newer version of ``migrate``.
        StoreError: If the file or schema is not a migrate store, is corrupt or truncated, or
            cannot be opened (for writing, unless *read_only*; also when the SQLite path is a
            folder, or a folder on its way is a file); if the PostgreSQL server cannot be
            reached or refuses the credentials, or psycopg is not installed. A PostgreSQL URL is
            shown with its password masked.
    """
    if is_postgres_url(url):
        return _open_postgres(url, read_only=read_only)
    return open_sqlite(url, base_dir=base_dir, read_only=read_only)


def _open_postgres(url: str, *, read_only: bool) -> Store:
    parse_postgres_url(url)  # a bad URL is a ConfigError, with psycopg or without
    try:
        from migrate._store_postgres import PostgresStore  # noqa: PLC0415 - an optional extra
    except ImportError as error:
        msg = f"store {masked(url)} needs psycopg 3, which is not installed ({error}): {_INSTALL}"
        raise StoreError(msg, error) from error
    store = PostgresStore(url, read_only=read_only)
    if read_only and not store.exists:
        store.close()
        return MemoryStore(name=f"{store.describe()} (not created yet)")
    return store


def store_exists(url: str, base_dir: str | os.PathLike[str] | None = None) -> bool:
    """
    Whether the store at *url* exists already (its file, or its schema), so a query need not
    create it.

    Raises:
        ConfigError: As `open_store`.
        StoreError: As `open_store`: for a PostgreSQL store it cannot read, and for a SQLite
            path that can hold no store (a folder, or under a file).
    """
    if not is_postgres_url(url):
        return sqlite_exists(store_path(url, base_dir))
    with _open_postgres(url, read_only=True) as store:
        return not isinstance(store, MemoryStore)
