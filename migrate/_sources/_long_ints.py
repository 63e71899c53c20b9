"""
Integers of any length in records: to text, and from and to JSON.

Python refuses to convert an ``int`` of more than ``sys.get_int_max_str_digits()`` digits (4300
by default) to or from decimal text, with a ``ValueError``; ``json`` inherits the limit. A
record may hold such a number (a JSON Lines identity of 5,000 digits), so the sources convert
through ``Decimal``, which is exact and has no such limit. The fast paths stay as they are: the
slow ones run only where the plain conversion failed.
"""

from __future__ import annotations

import decimal
import json
from typing import Any, cast

__all__ = ["integer_text", "record_json", "record_from_json"]


def integer_text(value: int) -> str:
    """
    *value* in decimal digits, however many.

    Example:
        >>> integer_text(-42), len(integer_text(10**5000))
        ('-42', 5001)
    """
    try:
        return str(value)
    except ValueError:
        return str(decimal.Decimal(value))


def _long_int(digits: str) -> int:
    try:
        return int(digits)
    except ValueError:
        return int(decimal.Decimal(digits))


def record_from_json(text: str) -> Any:
    """
    *text* decoded as JSON, integers of any length included.

    Raises:
        ValueError: If *text* is not valid JSON.

    Example:
        >>> len(str(record_from_json('{"id": ' + "9" * 5000 + "}")["id"] // 10**4990))
        10
    """
    try:
        return json.loads(text)
    except ValueError:
        # Invalid JSON fails again here, with the same message.
        return json.loads(text, parse_int=_long_int)


def _digits_as_text(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        return integer_text(value)
    if isinstance(value, dict):
        mapping = cast("dict[object, object]", value)
        return {key: _digits_as_text(item) for key, item in mapping.items()}
    if isinstance(value, list | tuple):
        sequence = cast("list[object] | tuple[object, ...]", value)
        return [_digits_as_text(item) for item in sequence]
    return value


def record_json(record: object, **options: Any) -> str:
    """
    ``json.dumps(record, **options)``, where an integer too long for ``json`` is written as its
    digits in a string.

    Raises:
        TypeError, ValueError: As ``json.dumps`` does for anything else.

    Example:
        >>> record_json({"id": 10**5000})[:12]
        '{"id": "1000'
    """
    try:
        return json.dumps(record, **options)
    except ValueError as error:
        if "integer string conversion" not in str(error):
            raise
        return json.dumps(_digits_as_text(record), **options)
