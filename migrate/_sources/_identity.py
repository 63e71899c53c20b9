"""One stable text form for every identity a source can hold, whatever type its driver returns."""

from __future__ import annotations

import datetime
import decimal
import math
import numbers
import uuid
from typing import Any, cast

from migrate._sources._long_ints import integer_text
from migrate._text import storable, stored_text, unstorable_part

__all__ = ["IdentityProblem", "identity_text"]


class IdentityProblem(ValueError):  # noqa: N818 - a verdict on a value, raised and caught inside
    """
    A value cannot be an identity. ``missing`` tells a null or empty value (the record has no
    identity) from a value of a type that cannot be one.
    """

    def __init__(self, message: str, *, missing: bool) -> None:
        super().__init__(message)
        self.missing = missing


def _number(value: float | decimal.Decimal) -> str:
    if isinstance(value, decimal.Decimal):
        if value == value.to_integral_value():
            return integer_text(int(value))
        return format(value.normalize(), "f")
    number = float(value)
    if number.is_integer():
        return str(int(number))
    return repr(number)


def identity_text(value: Any) -> str:
    """
    The identity of a record whose identity field holds *value*, as text.

    Every source uses this one encoding, so the same key read as an ``int`` from JSON, a ``str``
    from CSV or a ``Decimal`` from a SQL driver is one identity, never two:

    =====================================  ================================================
    value                                  identity
    =====================================  ================================================
    ``str``                                itself (an empty string has no identity; one with
                                           a lone surrogate or U+0000 is refused)
    ``int``                                decimal digits: ``42``, ``-7``
    ``float``, ``Decimal``                 by value: integral ones as an ``int`` (``1.0``
                                           and ``Decimal("1.00")`` are ``1``), others in
                                           plain notation (``2.5``); NaN and infinities
                                           are refused
    ``uuid.UUID``                          the canonical lowercase form
    ``bytes``, ``bytearray``, ``memoryview``  lowercase hex: ``00ff``
    ``datetime``, ``date``, ``time``       ISO 8601 (``isoformat()``), offset kept
    ``None``                               no identity
    ``bool`` and anything else             refused, naming the type
    =====================================  ================================================

    So ``1`` and ``"1"`` in one JSON Lines file are the same identity (two records holding it
    are reported as duplicates). To look such an item up again, a SQL source converts the text
    back with its ``identity_type`` (``int``, ``uuid.UUID``, ``bytes.fromhex``, ...).

    Raises:
        IdentityProblem: If *value* is null or empty (``missing`` is true) or cannot be an
            identity.

    Example:
        >>> import decimal, uuid
        >>> [identity_text(v) for v in (7, "7", 7.0, decimal.Decimal("7.00"), b"\\x00\\xff")]
        ['7', '7', '7', '7', '00ff']
        >>> identity_text(uuid.UUID(int=1))
        '00000000-0000-0000-0000-000000000001'
    """
    if type(value) is str:  # the common case first
        if not value:
            raise IdentityProblem("is empty", missing=True)
        if not storable(value):
            raise IdentityProblem(
                f"holds {unstorable_part(value)} ({stored_text(value)!r}), which no store can hold",
                missing=False,
            )
        return value
    if value is None:
        raise IdentityProblem("is null", missing=True)
    if isinstance(value, bool):
        raise IdentityProblem(f"is a bool ({value!r}), which cannot be an identity", missing=False)
    if isinstance(value, numbers.Integral):
        return integer_text(int(value))
    if isinstance(value, str):
        return identity_text(str.__str__(value))
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise IdentityProblem(f"is {value!r}, which cannot be an identity", missing=False)
        return _number(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        if not math.isfinite(number):
            raise IdentityProblem(f"is {value!r}, which cannot be an identity", missing=False)
        return _number(number)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        raw = bytes(cast("bytes", value))
        if not raw:
            raise IdentityProblem("is empty", missing=True)
        return raw.hex()
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    raise IdentityProblem(
        f"is a {type(value).__name__} ({_short(value)}), which cannot be an identity "
        "(use a string, an integer, a number, a UUID, bytes or a date and time)",
        missing=False,
    )


def _short(value: object, limit: int = 60) -> str:
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 - a value whose repr fails is still named by its type
        return f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
