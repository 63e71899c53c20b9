"""Sources: where a migration definition reads its items."""

from migrate._sources._base import (
    Contract,
    Cursor,
    Fault,
    Item,
    LookupStrategy,
    Source,
    Window,
    content_version,
    positional_key,
)
from migrate._sources._files import CsvSource, JsonlSource
from migrate._sources._identity import identity_text
from migrate._sources._memory import MemorySource
from migrate._sources._sql import DbApiConnection, SqlSource, quote_identifier

__all__ = [
    "Contract",
    "CsvSource",
    "Cursor",
    "DbApiConnection",
    "Fault",
    "Item",
    "JsonlSource",
    "LookupStrategy",
    "MemorySource",
    "Source",
    "SqlSource",
    "Window",
    "content_version",
    "identity_text",
    "positional_key",
    "quote_identifier",
]
