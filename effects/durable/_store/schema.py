"""
Whether a store's tables are ours, once for every dialect: its ``durable_meta`` rows name the
schema and its version, and a version newer than this library's is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from effects.durable.errors import StoreError

__all__ = ["SCHEMA_NAME", "check_tables", "schema_version"]

#: The schema's name in ``durable_meta``, in every dialect.
SCHEMA_NAME: Final = "effects.durable"


def check_tables(where: str, tables: Sequence[str]) -> None:
    """
    Refuse the non-empty *tables* (in the order to show them) of a store that is not ours.

    Raises:
        StoreError: If they hold no ``durable_meta``.
    """
    if "durable_meta" not in tables:
        shown = ", ".join(tables[:5])
        msg = f"{where} is not an effects.durable store (it holds tables {shown})"
        raise StoreError(msg)


def schema_version(where: str, meta: Mapping[str, str], understands: int) -> int:
    """
    The schema version the *meta* rows of the store *where* say, at most *understands*.

    Raises:
        StoreError: If they name another schema or no version, or a newer one.
    """
    if meta.get("schema") != SCHEMA_NAME or not str(meta.get("version", "")).isdigit():
        msg = f"{where} is not an effects.durable store (schema {meta.get('schema')!r})"
        raise StoreError(msg)
    version = int(meta["version"])
    if version > understands:
        msg = (
            f"{where} has schema version {version}, newer than this version of "
            f"effects.durable understands ({understands}); upgrade effect-schedules"
        )
        raise StoreError(msg)
    return version
