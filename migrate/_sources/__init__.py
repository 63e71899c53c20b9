"""Sources: where a migration definition reads its items."""

from migrate._sources._base import (
    Contract,
    Cursor,
    Item,
    LookupStrategy,
    Source,
    Window,
    content_version,
)
from migrate._sources._files import CsvSource, JsonlSource
from migrate._sources._memory import MemorySource
from migrate._sources._sql import DbApiConnection, SqlSource, quote_identifier

__all__ = [
    "Contract",
    "CsvSource",
    "Cursor",
    "DbApiConnection",
    "Item",
    "JsonlSource",
    "LookupStrategy",
    "MemorySource",
    "Source",
    "SqlSource",
    "Window",
    "content_version",
    "quote_identifier",
]
