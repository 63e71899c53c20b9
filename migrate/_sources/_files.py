"""CSV and JSON Lines sources: ``scan`` lookups, cursor = file fingerprint and byte position."""

from __future__ import annotations

import abc
import csv
import hashlib
import itertools
import os
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from migrate._errors import SourceError
from migrate._sources._base import (
    Cursor,
    Fault,
    Item,
    LookupStrategy,
    Source,
    Window,
    content_version,
    duplicate_fault,
    excerpt,
    identity_fault,
    missing_field,
    version_of,
)
from migrate._sources._identity import IdentityProblem, identity_text
from migrate._sources._lines import Encoding, encoding
from migrate._sources._long_ints import record_from_json
from migrate._text import plural, stored_text

__all__ = ["CsvSource", "JsonlSource"]

_FINGERPRINT_BLOCK = 65536
_REPLACEMENT = "\ufffd"
_ABSENT: Any = object()


class _BadBytes:
    """Where the first bytes invalid in the file's encoding were met in the current record."""

    __slots__ = ("error", "line", "offset")

    def __init__(self) -> None:
        self.error: UnicodeDecodeError | None = None
        self.line = 0
        self.offset = 0

    def note(self, error: UnicodeDecodeError, line: int, offset: int) -> None:
        if self.error is None:
            self.error, self.line, self.offset = error, line, offset

    def take(self) -> tuple[UnicodeDecodeError, int, int] | None:
        if self.error is None:
            return None
        taken = (self.error, self.line, self.offset)
        self.error = None
        return taken


# (line, offset after the record, the record or None if it is not one, raw text, problem):
# the problem is a fault without identity yet, or bad bytes met while decoding the record.
_Record = tuple[
    int, int, "dict[str, Any] | None", str, "Fault | tuple[UnicodeDecodeError, int, int] | None"
]


class _FileSource(Source):
    """A file read in windows; the cursor is ``{"fingerprint", "offset", "line"}``."""

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
        self._encoding: Encoding = _encoding_of(encoding)
        self.path = Path(path)
        self.identity = identity
        self.version = version
        self.window_size = window_size
        self.encoding = encoding
        #: How many times the whole file was read by `find` (lookups); tests and benchmarks use it.
        self.scans = 0
        self._describe = f"{self.kind}:{self.path}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({str(self.path)!r}, identity={self.identity!r}, "
            f"version={self.version!r})"
        )

    def describe(self) -> str:
        return self._describe

    def resolve(self, base_dir: Path) -> None:
        """Make a relative `path` relative to *base_dir* (a config file's folder)."""
        if not self.path.is_absolute():
            self.path = base_dir / self.path
            self._describe = f"{self.kind}:{self.path}"

    def _unreadable(self, error: OSError) -> SourceError:
        reason = error.strerror or str(error)
        return SourceError(f"cannot read {self.kind}:{self.path.absolute()}: {reason}", error)

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
            raise self._unreadable(error) from error
        digest = hashlib.blake2b(head, digest_size=8).hexdigest()
        return f"{stat.st_size}-{stat.st_mtime_ns}-{digest}"

    def _opening(self, handle: IO[bytes]) -> tuple[Encoding, int]:
        """The encoding of this file (its byte order mark read) and where its text starts."""
        return self._encoding.start(handle.read(4))

    @abc.abstractmethod
    def _records(self, handle: IO[bytes], start: tuple[int, int] | None) -> Iterator[_Record]:
        """Yield every record from *start* (``(offset, line)`` after a record; ``None``: first)."""

    def _decode_fault(
        self, record: Mapping[str, Any] | None, bad: tuple[UnicodeDecodeError, int, int]
    ) -> Fault:
        error, line, offset = bad
        chunk = error.object[error.start : min(error.end, error.start + 16)]
        where = f"line {line}"
        identity: str | None = None
        if record is not None and self.identity in record:
            try:
                candidate = identity_text(record[self.identity])
            except IdentityProblem:
                candidate = None
            if candidate is not None and _REPLACEMENT not in candidate:
                identity = candidate
        return Fault(
            where,
            "UnicodeDecodeError" if identity is not None else "UndecodableRecord",
            f"{self._describe} {where} has bytes that are not valid {self.encoding} "
            f"({chunk.hex(' ')} at byte {offset + error.start:,} of the file: {error.reason}); "
            "the record was not migrated: fix the file, or give the source its real encoding=",
            identity=identity,
            details={
                "source": self._describe,
                "encoding": self.encoding,
                "byte_offset": offset + error.start,
                "bytes": chunk.hex(" "),
                "reason": error.reason,
            },
        )

    def _item_or_fault(
        self,
        line: int,
        record: dict[str, Any] | None,
        raw: str,
        problem: Fault | tuple[UnicodeDecodeError, int, int] | None,
    ) -> Item | Fault:
        if problem is not None:
            if isinstance(problem, Fault):
                return problem
            return self._decode_fault(record, problem)
        assert record is not None
        identity = record.get(self.identity, _ABSENT)
        if type(identity) is not str or not identity or not identity.isascii():
            try:
                if identity is _ABSENT:
                    raise IdentityProblem("is absent", missing=True)
                identity = identity_text(identity)
            except IdentityProblem:
                return identity_fault(self._describe, f"line {line}", self.identity, record)
        if self.version is None:
            return Item(identity, record, content_version(raw), f"line {line}")
        where = f"{self._describe} line {line}"
        version = version_of(record, self.version, where, lambda: raw)
        return Item(identity, record, version, f"line {line}")

    def read_window(self, cursor: Cursor) -> Window:
        fingerprint = self.fingerprint()
        start: tuple[int, int] | None = None
        if cursor is not None and cursor.get("fingerprint") == fingerprint:
            start = (int(cursor["offset"]), int(cursor.get("line", 0)))
        try:
            with self.path.open("rb") as handle:
                items, faults, position = self._window(handle, start, self.window_size)
                if position is None:
                    # Nothing was read: the window stays where it started (the first record
                    # when it started from none; note where that is).
                    position = start if start is not None else self._first_record(handle)
        except OSError as error:
            raise self._unreadable(error) from error
        done = len(items) + len(faults) < self.window_size
        if start is None:
            self._check_identity_field(items, faults)
        cursor_out = {"fingerprint": fingerprint, "offset": position[0], "line": position[1]}
        return Window(tuple(items), cursor_out, done, tuple(faults), from_start=start is None)

    def _window(
        self, handle: IO[bytes], start: tuple[int, int] | None, size: int
    ) -> tuple[list[Item], list[Fault], tuple[int, int] | None]:
        """
        The next *size* records from *start* (see `_records`) as items and faults, and the
        position after the last one: ``(offset after it, its first line)``, ``None`` if there
        was none.
        """
        items: list[Item] = []
        faults: list[Fault] = []
        position: tuple[int, int] | None = None
        for line, offset_after, record, raw, problem in self._records(handle, start):
            found = self._item_or_fault(line, record, raw, problem)
            if isinstance(found, Item):
                items.append(found)
            else:
                faults.append(found)
            position = (offset_after, line)
            if len(items) + len(faults) >= size:
                break
        return items, faults, position

    def _check_identity_field(self, items: list[Item], faults: list[Fault]) -> None:
        """
        Refuse a first window in which no record has the identity field: the source's
        ``identity=`` does not match the file (every record would fail alike). Later windows, and
        files where some records have it, fail just the records without it.
        """
        if items or not faults:
            return
        if all(f.details.get("absent") for f in faults):
            self._refuse_identity_field(faults[0])

    def _refuse_identity_field(self, fault: Fault) -> None:
        raise missing_field(
            f"{self._describe} {fault.position}",
            "identity",
            self.identity,
            fault.details.get("fields", ()),
        )

    def _first_record(self, handle: IO[bytes]) -> tuple[int, int]:
        handle.seek(0)
        return (self._opening(handle)[1], 0)

    def find(self, identities: Collection[str]) -> dict[str, Item | Fault]:
        wanted = set(identities)
        found: dict[str, Item | Fault] = {}
        if not wanted:
            return found
        self.scans += 1
        # Every record is read, not just up to the last identity found: a second record with a
        # wanted identity must be reported, not ignored.
        positions: dict[str, list[str]] = {}
        with_field = False
        lacking: Fault | None = None
        try:
            with self.path.open("rb") as handle:
                for line, _offset, record, raw, problem in self._records(handle, None):
                    result = self._item_or_fault(line, record, raw, problem)
                    if record is not None:
                        if self.identity in record:
                            with_field = True
                        elif lacking is None and isinstance(result, Fault):
                            lacking = result
                    key = result.identity
                    if key is None or key not in wanted:
                        continue
                    if key in found:
                        positions.setdefault(key, [_position(found[key])]).append(f"line {line}")
                        continue
                    found[key] = result
        except OSError as error:
            raise self._unreadable(error) from error
        if not with_field and lacking is not None:
            self._refuse_identity_field(lacking)
        for key, places in positions.items():
            found[key] = duplicate_fault(self._describe, key, places)
        return found


def _position(found: Item | Fault) -> str:
    return found.position or "?"


def _encoding_of(name: str) -> Encoding:
    try:
        return encoding(name)
    except ValueError as error:
        raise ValueError(f"encoding: {error}") from None


class CsvSource(_FileSource):
    """
    A CSV file with a header row; each row is an item, read in file order.

    Lookup strategy ``scan``: finding items by identity reads the file (once for a whole batch).
    The cursor holds the file's fingerprint and a byte position; when the file changes, reading
    restarts from the first row (rows already migrated at the same version count as unchanged).

    Args:
        path: The CSV file; a relative path is relative to the config file's folder when the
            config is loaded from a file, else to the working folder.
        identity: The column holding each row's identity.
        version: The column holding the row's source version; ``None`` uses a hash of the row.
        window_size: Rows per window (>= 1).
        encoding: The file's text encoding: UTF-8 (the default), UTF-16 or UTF-32 (a byte order
            mark decides their byte order; without one they are read little-endian) or any
            encoding in which a line ends with the byte 0x0A. A UTF-8 byte order mark is ignored.

    Raises:
        ValueError: For a *window_size* below 1 or an *encoding* that is not supported.

    A row whose identity cell is empty, a row with the wrong number of cells and a row with
    bytes invalid in the encoding become failed items naming their line (stored under the
    row's identity when it can be read, else under ``<line N>``), and reading goes on: nothing
    is migrated with replacement characters. Reads and lookups raise `SourceError` (so a run
    stops that definition with the message and stores nothing for it) when the file cannot be
    read, or the header lacks the *identity* or *version* column; that message names the column,
    the file and the header's columns. The file is not opened before the first read, so these
    are not known when the config loads.
    """

    kind = "csv"

    def _text_lines(
        self, lines: Iterator[bytes], codec: str, position: list[int], bad: _BadBytes
    ) -> Iterator[str]:
        line = position[1]
        for raw in lines:
            start = position[0]
            position[0] = start + len(raw)
            line += 1
            position[1] = line
            try:
                yield raw.decode(codec)
            except UnicodeDecodeError as error:
                bad.note(error, line, start)
                yield raw.decode(codec, "replace")

    def _header(self, handle: IO[bytes]) -> tuple[list[str], Encoding, int, int]:
        handle.seek(0)
        opened, skip = self._opening(handle)
        handle.seek(skip)
        position = [skip, 0]
        bad = _BadBytes()
        reader = csv.reader(self._text_lines(opened.lines(handle), opened.codec, position, bad))
        try:
            header = next(reader)
        except StopIteration:
            return [], opened, position[0], 0
        except csv.Error as error:
            raise SourceError(f"{self._describe}: bad header: {error}", error) from error
        problem = bad.take()
        if problem is not None:
            fault = self._decode_fault(None, problem)
            raise SourceError(f"{self._describe}: bad header: {fault.message}")
        return header, opened, position[0], reader.line_num

    def _first_record(self, handle: IO[bytes]) -> tuple[int, int]:
        _header, _opened, offset, line = self._header(handle)
        return (offset, line)

    def _check_header(self, header: list[str]) -> None:
        for role, field in (("identity", self.identity), ("version", self.version)):
            if field is not None and field not in header:
                raise missing_field(f"{self._describe} header", role, field, header)

    def _malformed(self, first: int, fields: int, width: int) -> Fault:
        where = f"line {first}"
        return Fault(
            where,
            "MalformedRecord",
            f"{self._describe} {where} has {plural(fields, 'field')}, the header has "
            f"{width}; the record was not migrated: fix the row in the file",
            details={"source": self._describe, "fields": fields, "header": width},
        )

    def _records(self, handle: IO[bytes], start: tuple[int, int] | None) -> Iterator[_Record]:
        header, opened, header_end, header_lines = self._header(handle)
        if not header:
            return
        self._check_header(header)
        offset, base_line = (header_end, header_lines) if start is None else start
        handle.seek(offset)
        position = [offset, base_line]
        bad = _BadBytes()
        reader = csv.reader(self._text_lines(opened.lines(handle), opened.codec, position, bad))
        width = len(header)
        describe = self._describe
        line = base_line
        try:
            for row in reader:
                first = line + 1
                line = position[1]
                if not row:
                    bad.take()
                    continue
                problem = None if bad.error is None else bad.take()
                if len(row) != width:
                    yield first, position[0], None, "", self._malformed(first, len(row), width)
                    continue
                record = dict(zip(header, row))  # noqa: B905 - the width is checked above
                yield first, position[0], record, "\x1f".join(row), problem
        except csv.Error as error:
            raise SourceError(f"{describe} line {position[1]}: {error}", error) from error

    def _window(
        self, handle: IO[bytes], start: tuple[int, int] | None, size: int
    ) -> tuple[list[Item], list[Fault], tuple[int, int] | None]:
        # The hot path of a run reading a CSV file: what `_records` and `_item_or_fault` do,
        # with each window's lines decoded in bulk and no generator or call of ours per record
        # (a record that is not a plain item goes the general way).
        header, opened, header_end, header_lines = self._header(handle)
        if opened.unit != 1 or not header:
            return super()._window(handle, start, size)
        self._check_header(header)
        offset, base = (header_end, header_lines) if start is None else start
        handle.seek(offset)
        lengths: list[int] = []
        bad: dict[int, tuple[UnicodeDecodeError, int, int]] = {}
        lines = _decoded(iter(handle), opened.codec, size, (offset, base), lengths=lengths, bad=bad)
        reader = csv.reader(itertools.chain.from_iterable(lines))
        width = len(header)
        # dict(zip(header, row)) keeps a repeated column's last cell: so do these.
        key = width - 1 - header[::-1].index(self.identity)
        version_field = self.version
        at = None if version_field is None else width - 1 - header[::-1].index(version_field)
        items: list[Item] = []
        faults: list[Fault] = []
        keep, note = items.append, faults.append
        hash_ = hashlib.blake2b
        read = consumed = first = 0
        # The lines read up to the end of the last record, and where that record began.
        ended = began = 0
        try:
            for row in reader:
                first = base + consumed + 1
                consumed = reader.line_num
                if not row:
                    continue
                read += 1
                ended, began = consumed, first
                problem = _first_bad(bad, first, base + consumed) if bad else None
                if len(row) != width:
                    note(self._malformed(first, len(row), width))
                else:
                    # zip() without strict=: the width is checked above, and a keyword
                    # argument costs a slower call per record.
                    identity = row[key]
                    raw = "\x1f".join(row)
                    if problem is not None or not identity or not identity.isascii():
                        record = dict(zip(header, row))  # noqa: B905
                        found = self._item_or_fault(first, record, raw, problem)
                        if isinstance(found, Item):
                            keep(found)
                        else:
                            note(found)
                    else:
                        version = None if at is None else row[at]
                        if not version:
                            # content_version(raw), inlined: the same bytes are hashed.
                            data = raw.encode() if raw.isascii() else _utf8(raw)
                            version = hash_(data, digest_size=8).hexdigest()
                        else:
                            version = stored_text(version)
                        record = dict(zip(header, row))  # noqa: B905
                        keep(Item(identity, record, version, f"line {first}"))
                if read >= size:
                    break
        except csv.Error as error:
            line = base + reader.line_num
            raise SourceError(f"{self._describe} line {line}: {error}", error) from error
        if not read:
            return items, faults, None
        return items, faults, (offset + sum(lengths[:ended]), began)


#: Lines decoded per chunk once a window's first chunk (as many lines as records wanted) is used.
_MORE_LINES = 64


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _decoded(
    lines: Iterator[bytes],
    codec: str,
    wanted: int,
    start: tuple[int, int],
    *,
    lengths: list[int],
    bad: dict[int, tuple[UnicodeDecodeError, int, int]],
) -> Iterator[list[str]]:
    """
    The lines from *start* (``(offset, line number before it)``) decoded with *codec*, in
    chunks; their byte lengths are appended to *lengths*, and a line with bytes invalid in
    *codec* is decoded with replacement characters and noted in *bad* by its line number:
    ``(error, line number, offset of the line)``, as `_BadBytes` notes it.
    """
    offset, line = start
    size = wanted
    while True:
        chunk = list(itertools.islice(lines, size))
        if not chunk:
            return
        texts: list[str]
        try:
            texts = list(map(bytes.decode, chunk, itertools.repeat(codec)))
        except UnicodeDecodeError:
            texts = []
            at = offset
            for number, raw in enumerate(chunk, line + 1):
                try:
                    texts.append(raw.decode(codec))
                except UnicodeDecodeError as error:
                    bad[number] = (error, number, at)
                    texts.append(raw.decode(codec, "replace"))
                at += len(raw)
        sizes = list(map(len, chunk))
        lengths += sizes
        offset += sum(sizes)
        line += len(chunk)
        yield texts
        size = _MORE_LINES


def _first_bad(
    bad: dict[int, tuple[UnicodeDecodeError, int, int]], first: int, last: int
) -> tuple[UnicodeDecodeError, int, int] | None:
    """The first bad line noted from line *first* to *last*, if any."""
    for number in range(first, last + 1):
        found = bad.get(number)
        if found is not None:
            return found
    return None


class JsonlSource(_FileSource):
    """
    A JSON Lines file: one JSON object per line, read in file order; blank lines are ignored.

    Lookup strategy ``scan``; cursor and arguments as `CsvSource` (*identity* and *version* name
    fields of each object).

    An object whose identity is absent, null or empty (or of a type that cannot be an identity,
    such as a list), a line that is not a JSON object, and a line with bytes invalid in the
    encoding become failed items naming their line, and reading goes on. ``1`` and ``"1"`` are
    the same identity (see `identity_text`): two objects holding it are reported as duplicates.
    When no object of the file's first window has the identity field, the source's
    ``identity=`` does not match the file: the read fails with `SourceError` naming the field,
    the file and line, and the fields the object has, and a run stores nothing. An object
    lacking the *version* field, when one is given, fails the read the same way (a null or empty
    version value falls back to a hash of the object's line, as with no version).
    """

    kind = "jsonl"

    def _malformed(self, line: int, text: str, wrong: str) -> Fault:
        where = f"line {line}"
        return Fault(
            where,
            "MalformedRecord",
            f"{self._describe} {where} {wrong}; the record was not migrated: fix the line in "
            "the file",
            details={"source": self._describe, "text": excerpt(text)},
        )

    def _records(self, handle: IO[bytes], start: tuple[int, int] | None) -> Iterator[_Record]:
        handle.seek(0)
        opened, skip = self._opening(handle)
        offset, line = (skip, 0) if start is None else start
        handle.seek(offset)
        codec = opened.codec
        for raw in opened.lines(handle):
            begin = offset
            offset += len(raw)
            line += 1
            problem: Fault | tuple[UnicodeDecodeError, int, int] | None = None
            try:
                text = raw.decode(codec).strip()
            except UnicodeDecodeError as error:
                problem = (error, line, begin)
                text = raw.decode(codec, "replace").strip()
            if not text:
                continue
            try:
                record = record_from_json(text)
            except ValueError as error:
                if problem is not None:
                    yield line, offset, None, text, problem
                    continue
                wrong = f"is not valid JSON ({error})"
                yield line, offset, None, text, self._malformed(line, text, wrong)
                continue
            if not isinstance(record, dict):
                wrong = "is JSON but not an object"
                yield line, offset, None, text, self._malformed(line, text, wrong)
                continue
            yield line, offset, record, text, problem
