"""How inputs, outputs and progress become stored JSON: as they are, or through a ``Codec``."""

from __future__ import annotations

import json
import json.encoder
import re
from collections.abc import Callable
from typing import Any, Final, Protocol, cast

__all__ = ["JSON", "MAX_DEPTH", "Codec", "JsonCodec", "deeper_than", "dump", "from_data", "load"]

#: The deepest nesting of lists and objects a stored value may have. Deeper values are refused
#: before anything is written: every reader (this library's, the store's, a dashboard's) can
#: then read back whatever was written, without running out of stack.
MAX_DEPTH: Final = 100
_STRING: Final = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET: Final = re.compile(r"[\[\]{}]")


class Codec(Protocol):
    """
    Maps values to JSON data and back, for types JSON does not have (dates, dataclasses, ...).

    ``decode(encode(v))`` is what the workflow receives, on its first run and on every replay
    alike. Give a definition ``codec=`` to use one.
    """

    def encode(self, value: Any) -> Any:
        """Return JSON data for *value* (dicts, lists, strings, numbers, booleans, ``None``)."""
        ...

    def decode(self, data: Any) -> Any:
        """Return the value that *data* stands for."""
        ...


class JsonCodec:
    """The default: values are JSON data already (no NaN or infinity); tuples come back as lists."""

    __slots__ = ()

    def encode(self, value: Any) -> Any:
        """*value* itself."""
        return value

    def decode(self, data: Any) -> Any:
        """*data* itself."""
        return data

    def __repr__(self) -> str:
        return "JsonCodec()"


JSON: Final = JsonCodec()
# ASCII escapes keep lone surrogates storable (a UTF-8 store refuses them raw).
_dumps = json.JSONEncoder(allow_nan=False, separators=(",", ":")).encode
#: How ``_dumps`` writes a string (``ensure_ascii``, JSON's default).
_encode_str: Final[Callable[[str], str]] = json.encoder.encode_basestring_ascii


def deeper_than(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON *text* nests lists and objects more than *limit* levels deep."""
    if text.count("[") + text.count("{") <= limit:
        return False  # too few brackets to nest that deep: the common case, at C speed
    depth = 0
    for bracket in _BRACKET.finditer(_STRING.sub("", text)):
        if bracket.group() in "[{":
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def dump(codec: Codec, value: Any, what: str, *, hint: str = "give the definition a codec=") -> str:
    """
    *value* as stored JSON text; a value that cannot be stored is a ``TypeError`` naming *what*:
    one that is not JSON (NaN and infinities included), or nested deeper than ``MAX_DEPTH``.

    Args:
        codec: The definition's codec.
        value: The value.
        what: What the value is, for the message (``"input of step 'charge'"``).
        hint: What to do instead, at the end of the message of a value that is not JSON.
    """
    try:
        if codec is JSON:
            # The common outputs, as the encoder writes them, without its per-call set-up.
            kind: type[object] = type(cast("object", value))
            if kind is int:
                return int.__repr__(value)  # past the digits limit a ValueError, as _dumps's
            if kind is str:
                return _encode_str(value)
            if value is None:
                return "null"
            if kind is bool:
                return "true" if value else "false"
        text = _dumps(value if codec is JSON else codec.encode(value))
    except (TypeError, ValueError, OverflowError, RecursionError) as error:
        msg = f"the {what} cannot be stored as JSON: {error} ({hint})"
        raise TypeError(msg) from error
    # Nesting deeper than MAX_DEPTH takes more than 2 * MAX_DEPTH brackets: short text cannot.
    if len(text) > 2 * MAX_DEPTH and deeper_than(text):
        msg = f"the {what} cannot be stored: it nests lists and objects more than {MAX_DEPTH} deep"
        raise TypeError(msg)
    return text


def load(codec: Codec, text: str) -> Any:
    """The value stored JSON *text* stands for, as *codec* decodes it."""
    data = json.loads(text)
    return data if codec is JSON else codec.decode(data)


def from_data(codec: Codec, data: Any) -> Any:
    """The value decoded JSON *data* stands for."""
    return data if codec is JSON else codec.decode(data)
