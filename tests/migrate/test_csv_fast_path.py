"""CsvSource's fast window read gives exactly the windows of the general record path."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import IO, Any

from hypothesis import given, settings
from hypothesis import strategies as st

import migrate
from migrate._sources._base import Fault, Item
from migrate._sources._files import _FileSource  # pyright: ignore[reportPrivateUsage]


class _General(migrate.CsvSource):
    """The same source, reading every window through `_records` and `_item_or_fault`."""

    def _window(
        self, handle: IO[bytes], start: tuple[int, int] | None, size: int
    ) -> tuple[list[Item], list[Fault], tuple[int, int] | None]:
        return _FileSource._window(self, handle, start, size)


_CELLS = st.one_of(
    st.sampled_from(["", "1", "1", "2", "07", "a", "Zoë", "x y", "é", "\u2028", "  ", "3.0"]),
    st.text(alphabet='ab,"\n\r\x00;é', max_size=6),
)
_ROW = st.lists(_CELLS, min_size=0, max_size=4)
#: Raw lines that are not rows a writer makes: bytes invalid in UTF-8, a lone CR, blank lines.
_ODD = st.sampled_from([b"\xff\xfe,x\n", b"9,\xc3\n", b"\n", b"\r\n", b"5,a\r\n", b'"6,\n'])


def _line(row: list[str]) -> bytes:
    cells = ['"' + c.replace('"', '""') + '"' if any(x in c for x in ',"\n\r') else c for c in row]
    return (",".join(cells) + "\n").encode("utf-8", "surrogatepass")


def _windows(source: migrate.CsvSource, start: Any = None) -> list[Any]:
    """Every window from *start* (cursor) to the end, as plain values."""
    seen: list[Any] = []
    cursor = start
    for _ in range(200):
        try:
            window = source.read_window(cursor)
        except migrate.SourceError as error:
            seen.append(("error", str(error)))
            return seen
        seen.append(
            (
                [(i.identity, dict(i.data), i.version, i.position) for i in window.items],
                [
                    (f.position, f.type, f.message, f.identity, dict(f.details))
                    for f in window.faults
                ],
                window.next_cursor,
                window.done,
                window.from_start,
            )
        )
        if window.done or not (window.items or window.faults):
            return seen
        cursor = window.next_cursor
    raise AssertionError("more windows than lines")


@settings(max_examples=150)
@given(
    header=st.sampled_from(
        [["id", "name"], ["id", "name", "v"], ["name", "id", "id"], ["id", "v", "v"]]
    ),
    lines=st.lists(st.one_of(_ROW.map(_line), _ODD), max_size=14),
    window_size=st.integers(1, 5),
    bom=st.booleans(),
    version=st.booleans(),
)
def test_the_fast_window_read_equals_the_general_one(
    header: list[str], lines: list[bytes], window_size: int, bom: bool, version: bool
) -> None:
    """Items, faults (bad bytes, wrong widths, no identity), cursors and done, window by window,
    from the start and from every cursor on the way: the same as the general path gives."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "rows.csv"
        head = (b"\xef\xbb\xbf" if bom else b"") + (",".join(header) + "\n").encode()
        path.write_bytes(head + b"".join(lines))
        field = "v" if version and "v" in header else None
        fast = migrate.CsvSource(path, version=field, window_size=window_size)
        general = _General(path, version=field, window_size=window_size)
        expected = _windows(general)
        assert expected == _windows(fast)
        for window in expected:
            if window[0] != "error":
                assert _windows(general, window[2]) == _windows(fast, window[2])


def test_a_record_over_several_lines_and_a_window_boundary_reads_alike(tmp_path: Path) -> None:
    """Quoted newlines, a blank line and a window ending inside them: the same windows."""
    path = tmp_path / "rows.csv"
    path.write_bytes(b'id,name\n1,"a\nb"\n\n2,c\n3,"d\r\ne"\n4,\xff\n')
    for size in (1, 2, 3):
        fast = migrate.CsvSource(path, window_size=size)
        assert _windows(_General(path, window_size=size)) == _windows(fast)


def test_a_read_from_the_end_stays_at_the_end(tmp_path: Path) -> None:
    """Reading on from the cursor after the last record finds nothing and keeps that cursor,
    so the next run reads nothing again (not the file from its start)."""
    path = tmp_path / "rows.csv"
    path.write_bytes(b"id,name\n1,a\n2,b\n")
    source = migrate.CsvSource(path, window_size=2)
    first = source.read_window(None)
    after = source.read_window(first.next_cursor)
    assert ([], True, first.next_cursor) == (list(after.items), after.done, after.next_cursor)
