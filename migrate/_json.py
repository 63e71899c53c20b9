"""
JSON text for the store, and text of hostile objects: what one item's data cannot break.

Everything a run stores is strict JSON (no NaN, no infinities), so any JSON reader, SQLite's
``json_extract`` and PostgreSQL's ``jsonb`` among them, accepts it. An item whose journal or
tracking record cannot be encoded fails alone; evidence always encodes, whatever the error
objects it describes do when asked for their text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, cast

__all__ = ["encode", "encode_entries", "plain", "safe_text"]

_LIMIT = 2000  # characters of one object's text kept in evidence


#: ``json.dumps(value, allow_nan=False)`` without making an encoder for every call.
_STRICT = json.JSONEncoder(allow_nan=False)


def encode(value: Any) -> str:
    """
    *value* as strict JSON text.

    Raises:
        TypeError: A value JSON has no type for, or a mapping key that is not a string, number,
            bool or None.
        ValueError: A NaN or infinite float, or a circular reference.
    """
    return _STRICT.encode(value)


def safe_text(value: object, limit: int = _LIMIT) -> str:
    """
    ``str(value)``, else its ``repr``, else ``<unprintable TYPE>``: never raises.

    At most *limit* characters (longer text ends with ``...``).

    Example:
        >>> class Hostile(Exception):
        ...     def __str__(self):
        ...         raise RuntimeError("no text for you")
        ...     def __repr__(self):
        ...         raise RuntimeError("nor a repr")
        >>> safe_text(Hostile())
        '<unprintable Hostile>'
    """
    text: str | None = None
    for render in (str, repr):
        try:
            candidate = render(value)
        except Exception:  # noqa: BLE001, S112 - any failure to render moves to the next way
            continue
        text = candidate
        break
    if text is None:
        text = f"<unprintable {_type_name(value)}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(value: object) -> str:
    try:
        return str(type(value).__name__)
    except Exception:  # noqa: BLE001 - a metaclass can break even this
        return "object"


def plain(value: object, depth: int = 0) -> Any:
    """
    *value* reduced to what strict JSON holds: strings, finite numbers, bools, None, lists
    and string-keyed objects; anything else (and NaN, infinities) becomes its `safe_text`.

    Example:
        >>> plain({"n": float("nan"), 3: (1, 2), "o": object})
        {'n': 'nan', '3': [1, 2], 'o': "<class 'object'>"}
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if depth < 8:
        if isinstance(value, Mapping):
            mapping = cast("Mapping[object, object]", value)
            try:
                return {safe_text(k, 200): plain(v, depth + 1) for k, v in mapping.items()}
            except Exception:  # noqa: BLE001 - a mapping that fails to iterate is shown as text
                return safe_text(mapping)
        if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
            sequence = cast("Sequence[object]", value)
            try:
                return [plain(v, depth + 1) for v in sequence]
            except Exception:  # noqa: BLE001 - the same for a sequence
                return safe_text(sequence)
    return safe_text(value)


def encode_entries(entries: Sequence[Any]) -> tuple[str, str | None]:
    """
    A journal's entries as JSON text, and what was wrong with them (``None``: nothing).

    An entry JSON cannot hold is stored as ``{"kind": "unencodable", "index": N, "text": ...}``
    (so the entries around it, which may record destination writes, are kept), and the problem
    names it.
    """
    try:
        return encode(list(entries)), None
    except (TypeError, ValueError):
        pass
    kept: list[Any] = []
    problem: str | None = None
    for index, entry in enumerate(entries):
        try:
            encode(entry)
        except (TypeError, ValueError) as error:
            if problem is None:
                problem = f"journal entry {index} cannot be stored as JSON: {safe_text(error)}"
            kept.append({"kind": "unencodable", "index": index, "text": safe_text(entry)})
        else:
            kept.append(entry)
    return encode(kept), problem
