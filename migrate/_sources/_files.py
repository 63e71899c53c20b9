"""CSV and JSON Lines sources: ``scan`` lookups, cursor = file fingerprint and byte position."""

from __future__ import annotations

import abc
import csv
import hashlib
import json
import os
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import IO, Any

from migrate._errors import SourceError
from migrate._sources._base import (
    Cursor,
    Item,
    LookupStrategy,
    Source,
    Window,
    content_version,
    identity_of,
    missing_field,
    version_of,
)
from migrate._text import plural

__all__ = ["CsvSource", "JsonlSource"]

_FINGERPRINT_BLOCK = 65536
_BOM = b"\xef\xbb\xbf"


class _FileSource(Source):
    """A file read in windows; the cursor is ``{"fingerprint", "offset"}``."""

    lookup_strategy: LookupStrategy = "scan"
    kind = "file"

    def __init__(
        self,
        path: str | os.PathLike[str],
        identity: str = "id",
        version: str | None = None,
        *,
        window_size: int = 1000,
        encoding: str = "utf-8",
    ) -> None:
        if window_size < 1:
            raise ValueError(f"window_size must be >= 1, got {window_size!r}")
        self.path = Path(path)
        self.identity = identity
        self.version = version
        self.window_size = window_size
        self.encoding = encoding
        #: How many times the whole file was read by `find` (lookups); tests and benchmarks use it.
        self.scans = 0

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({str(self.path)!r}, identity={self.identity!r}, "
            f"version={self.version!r})"
        )

    def describe(self) -> str:
        return f"{self.kind}:{self.path}"

    def fingerprint(self) -> str:
        """
        Identify the file's current content: size, modification time and a hash of its first block.

        Raises:
            SourceError: The file cannot be read.
        """
        try:
            with self.path.open("rb") as handle:
                stat = os.fstat(handle.fileno())
                head = handle.read(_FINGERPRINT_BLOCK)
        except OSError as error:
            raise SourceError(f"cannot read {self.describe()}: {error}", error) from error
        digest = hashlib.blake2b(head, digest_size=8).hexdigest()
        return f"{stat.st_size}-{stat.st_mtime_ns}-{digest}"

    @abc.abstractmethod
    def _records(
        self, handle: IO[bytes], start: tuple[int, int] | None
    ) -> Iterator[tuple[int, int, dict[str, Any], str]]:
        """
        Yield ``(line, offset_after, record, raw)`` from *start*, ``(offset, line)`` of the place
        after a record (``None``: the first record). *line* is the record's last line number.
        """

    def _item(self, record: dict[str, Any], raw: str, line: int) -> Item:
        where = f"{self.describe()} line {line}"
        identity = identity_of(record, self.identity, where)
        if self.version is None:
            return Item(identity, record, content_version(raw))
        return Item(identity, record, version_of(record, self.version, where, lambda: raw))

    def read_window(self, cursor: Cursor) -> Window:
        fingerprint = self.fingerprint()
        start: tuple[int, int] | None = None
        if cursor is not None and cursor.get("fingerprint") == fingerprint:
            start = (int(cursor["offset"]), int(cursor.get("line", 0)))
        items: list[Item] = []
        position = start
        done = True
        try:
            with self.path.open("rb") as handle:
                for line, offset_after, record, raw in self._records(handle, start):
                    items.append(self._item(record, raw, line))
                    position = (offset_after, line)
                    if len(items) >= self.window_size:
                        done = False
                        break
                if position is None:
                    # Nothing was read: the window started at the first record; note where.
                    position = self._first_record(handle)
        except OSError as error:
            raise SourceError(f"cannot read {self.describe()}: {error}", error) from error
        cursor_out = {"fingerprint": fingerprint, "offset": position[0], "line": position[1]}
        return Window(tuple(items), cursor_out, done)

    def _first_record(self, handle: IO[bytes]) -> tuple[int, int]:
        return (0, 0)

    def find(self, identities: Collection[str]) -> dict[str, Item]:
        wanted = set(identities)
        found: dict[str, Item] = {}
        if not wanted:
            return found
        self.scans += 1
        try:
            with self.path.open("rb") as handle:
                for line, _offset, record, raw in self._records(handle, None):
                    key = identity_of(record, self.identity, f"{self.describe()} line {line}")
                    if key in wanted and key not in found:
                        found[key] = self._item(record, raw, line)
                        if len(found) == len(wanted):
                            break
        except OSError as error:
            raise SourceError(f"cannot read {self.describe()}: {error}", error) from error
        return found


class CsvSource(_FileSource):
    """
    A CSV file with a header row; each row is an item, read in file order.

    Lookup strategy ``scan``: finding items by identity reads the file (once for a whole batch).
    The cursor holds the file's fingerprint and a byte position; when the file changes, reading
    restarts from the first row (rows already migrated at the same version count as unchanged).

    Args:
        path: The CSV file.
        identity: The column holding each row's identity.
        version: The column holding the row's source version; ``None`` uses a hash of the row.
        window_size: Rows per window (>= 1).
        encoding: The file's text encoding (a UTF-8 byte order mark is ignored).

    Reads and lookups raise `SourceError` (so a run stops that definition with the message and
    stores nothing for it) when the file cannot be read, a row is malformed, a row's identity is
    empty, or the header lacks the *identity* or *version* column; that message names the column,
    the file and the header's columns. The file is not opened before the first read, so these
    are not known when the config loads.
    """

    kind = "csv"

    def _lines(self, handle: IO[bytes], position: list[int]) -> Iterator[str]:
        encoding = self.encoding
        for raw in handle:
            position[0] += len(raw)
            yield raw.decode(encoding)

    def _header(self, handle: IO[bytes]) -> tuple[list[str], int, int]:
        head = handle.read(len(_BOM))
        position = [len(_BOM)] if head == _BOM else [0]
        handle.seek(position[0])
        reader = csv.reader(self._lines(handle, position))
        try:
            header = next(reader)
        except StopIteration:
            return [], position[0], reader.line_num
        except (csv.Error, UnicodeDecodeError) as error:
            raise SourceError(f"{self.describe()}: bad header: {error}", error) from error
        return header, position[0], reader.line_num

    def _first_record(self, handle: IO[bytes]) -> tuple[int, int]:
        handle.seek(0)
        _header, offset, line = self._header(handle)
        return (offset, line)

    def _records(
        self, handle: IO[bytes], start: tuple[int, int] | None
    ) -> Iterator[tuple[int, int, dict[str, Any], str]]:
        header, header_end, header_lines = self._header(handle)
        if not header:
            return
        for role, field in (("identity", self.identity), ("version", self.version)):
            if field is not None and field not in header:
                raise missing_field(f"{self.describe()} header", role, field, header)
        offset, base_line = (header_end, header_lines) if start is None else start
        handle.seek(offset)
        position = [offset]
        reader = csv.reader(self._lines(handle, position))
        width = len(header)
        describe = self.describe()
        try:
            for row in reader:
                if not row:
                    continue
                if len(row) != width:
                    line = base_line + reader.line_num
                    raise SourceError(
                        f"{describe} line {line}: {plural(len(row), 'field')}, "
                        f"the header has {width}"
                    )
                record = dict(zip(header, row, strict=True))
                yield base_line + reader.line_num, position[0], record, "\x1f".join(row)
        except (csv.Error, UnicodeDecodeError) as error:
            line = base_line + reader.line_num
            raise SourceError(f"{describe} line {line}: {error}", error) from error


class JsonlSource(_FileSource):
    """
    A JSON Lines file: one JSON object per line, read in file order; blank lines are ignored.

    Lookup strategy ``scan``; cursor and arguments as `CsvSource` (*identity* and *version* name
    fields of each object).

    Every object must have the *identity* field and, when given, the *version* field (a null
    or empty version value falls back to a hash of the object's line, as with no version). An object
    lacking either fails the read or lookup with `SourceError` naming the field, the file and
    line, and the fields the object has; a run then stops that definition at that window and
    stores nothing for the window.
    """

    kind = "jsonl"

    def _records(
        self, handle: IO[bytes], start: tuple[int, int] | None
    ) -> Iterator[tuple[int, int, dict[str, Any], str]]:
        offset, line = (0, 0) if start is None else start
        handle.seek(offset)
        describe = self.describe()
        encoding = self.encoding
        for raw in handle:
            offset += len(raw)
            line += 1
            text = raw.decode(encoding, "replace").strip()
            if line == 1 and text.startswith("\ufeff"):
                text = text[1:]
            if not text:
                continue
            try:
                record = json.loads(text)
            except ValueError as error:
                raise SourceError(
                    f"{describe} line {line}: invalid JSON: {error}", error
                ) from error
            if not isinstance(record, dict):
                raise SourceError(f"{describe} line {line}: not a JSON object")
            yield line, offset, record, text
