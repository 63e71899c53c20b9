"""Lines of a text file as bytes with their offsets, in any of the encodings file sources accept."""

from __future__ import annotations

import codecs
from collections.abc import Iterator
from typing import IO

import attrs

__all__ = ["Encoding", "encoding"]

_CHUNK = 65536
# Python reads "utf-16" and "utf-32" without a byte order mark as the machine's order; files
# are read the same way wherever they are, so a file without a BOM is taken as little-endian
# (what Windows writes).
_UNITS = {
    "utf-16": (2, "utf-16-le"),
    "utf-16-le": (2, "utf-16-le"),
    "utf-16-be": (2, "utf-16-be"),
    "utf-32": (4, "utf-32-le"),
    "utf-32-le": (4, "utf-32-le"),
    "utf-32-be": (4, "utf-32-be"),
}


@attrs.frozen
class Encoding:
    """
    How a file source splits and decodes its file.

    Attributes:
        name: The codec's name as given (``"utf-16"``), for messages.
        codec: The codec each line is decoded with (``"utf-16-le"``: a byte order is fixed).
        unit: Bytes per code unit: 1 for UTF-8 and other encodings where ``\\n`` is the byte
            0x0A, 2 for UTF-16, 4 for UTF-32, whose lines are split on aligned units.
    """

    name: str
    codec: str
    unit: int

    def start(self, head: bytes) -> tuple[Encoding, int]:
        """
        The encoding to read a file beginning with *head* by, and the length of its byte order
        mark, which is skipped: for UTF-16 and UTF-32 the mark also fixes the byte order.
        """
        if self.unit == 1:
            skip = self.codec == "utf-8" and head.startswith(codecs.BOM_UTF8)
            return self, len(codecs.BOM_UTF8) if skip else 0
        family = "utf-32" if self.unit == 4 else "utf-16"
        marks = (
            ((codecs.BOM_UTF32_LE, "le"), (codecs.BOM_UTF32_BE, "be"))
            if self.unit == 4
            else ((codecs.BOM_UTF16_LE, "le"), (codecs.BOM_UTF16_BE, "be"))
        )
        for bom, order in marks:
            if head.startswith(bom):
                return Encoding(self.name, f"{family}-{order}", self.unit), len(bom)
        return self, 0

    def lines(self, handle: IO[bytes]) -> Iterator[bytes]:
        """The lines from *handle*'s position on, each with its line end, as bytes."""
        if self.unit == 1:
            return iter(handle)
        return self._unit_lines(handle)

    def _unit_lines(self, handle: IO[bytes]) -> Iterator[bytes]:
        unit = self.unit
        newline = "\n".encode(self.codec)
        buffer = b""
        while True:
            chunk = handle.read(_CHUNK)
            if not chunk:
                break
            buffer += chunk
            start = 0
            search = 0
            while True:
                found = buffer.find(newline, search)
                if found < 0:
                    break
                if (found - start) % unit:
                    search = found + 1  # not on a code unit boundary: part of another char
                    continue
                end = found + unit
                yield buffer[start:end]
                start = search = end
            buffer = buffer[start:]
        if buffer:
            yield buffer


def encoding(name: str) -> Encoding:
    """
    The `Encoding` for codec *name*.

    Raises:
        ValueError: If *name* is not a codec, or one whose line ends cannot be found in its bytes.

    Example:
        >>> encoding("UTF16"), encoding("latin-1").unit
        (Encoding(name='UTF16', codec='utf-16-le', unit=2), 1)
    """
    try:
        info = codecs.lookup(name)
    except LookupError:
        raise ValueError(f"encoding {name!r} is not a codec Python knows") from None
    if info.name in _UNITS:
        unit, codec = _UNITS[info.name]
        return Encoding(name, codec, unit)
    codec = "utf-8" if info.name == "utf-8-sig" else info.name
    try:
        ascii_lines = "a\n".encode(codec) == b"a\n"
    except (UnicodeError, LookupError):
        ascii_lines = False
    if not ascii_lines:
        raise ValueError(
            f"encoding {name!r} is not supported by file sources: its line ends are not the "
            "byte 0x0A (supported: UTF-8, UTF-16, UTF-32 and ASCII-compatible encodings)"
        )
    return Encoding(name, codec, 1)
