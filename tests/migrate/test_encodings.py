"""Encodings of file sources: invalid bytes fail their records with evidence; UTF-16/32; BOMs."""

from __future__ import annotations

import codecs
import io
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given
from hypothesis import strategies as st

import migrate
from migrate._sources._lines import encoding
from tests.migrate.helpers import config_of, recorder, states

CSV_TEXT = "id,name\n1,Ada\n2,Zoë\n3,Grace\n4,Alan\n5,Edsger\n"
JSONL_TEXT = "".join(
    f'{{"id": {i}, "name": "{n}"}}\n'
    for i, n in enumerate(["Ada", "Zoë", "Grace", "Alan", "Edsger"], 1)
)


def _data_seen(seen: list[str], data: list[dict[str, object]]) -> migrate.Process:
    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        seen.append(item.identity)
        data.append(dict(item.data))

    return process


def test_csv_row_with_invalid_utf8_fails_alone_and_nothing_is_replaced(tmp_path: Path) -> None:
    """A row with bytes invalid in UTF-8 fails under its identity; no U+FFFD is migrated."""
    path = tmp_path / "p.csv"
    path.write_bytes(b"id,name\n1,Ada\n2,Zo\xeb\n3,Grace\n")
    seen: list[str] = []
    data: list[dict[str, object]] = []
    config = config_of(
        tmp_path, migrate.Migration("p", migrate.CsvSource(path), _data_seen(seen, data))
    )
    summary = migrate.run(config)
    (failure,) = migrate.failures(config, "p")
    assert (["1", "3"], "2", "UnicodeDecodeError", "line 3") == (
        seen,
        failure.identity,
        failure.error.type,
        failure.position,
    )
    assert ("eb", 18) == (failure.error.details["bytes"], failure.error.details["byte_offset"])
    assert "\ufffd" not in repr(data)
    assert "failed" == summary.status


def test_jsonl_line_with_invalid_bytes_in_its_identity_fails_by_position(tmp_path: Path) -> None:
    """When the invalid bytes are in the identity itself, the record fails as <line N>."""
    path = tmp_path / "p.jsonl"
    path.write_bytes(b'{"id": "a"}\n{"id": "b\xff"}\n{"id": "c"}\n')
    seen: list[str] = []
    config = config_of(tmp_path, migrate.Migration("p", migrate.JsonlSource(path), recorder(seen)))
    migrate.run(config)
    (failure,) = migrate.failures(config, "p")
    assert (["a", "c"], "<line 2>", "UndecodableRecord") == (
        seen,
        failure.identity,
        failure.error.type,
    )
    assert "not valid utf-8" in failure.error.message


def test_a_failed_run_meets_the_bad_bytes_again_until_the_file_is_fixed(tmp_path: Path) -> None:
    """--failed looks the item up: still undecodable it stays failed; fixed, it migrates."""
    path = tmp_path / "p.csv"
    path.write_bytes(b"id,name\n1,Ada\n2,Zo\xeb\n")
    seen: list[str] = []
    config = config_of(tmp_path, migrate.Migration("p", migrate.CsvSource(path), recorder(seen)))
    migrate.run(config)
    again = migrate.run(config, migrate.RunOptions(failed=True))
    assert 1 == again.definitions["p"].counts.failed
    path.write_bytes("id,name\n1,Ada\n2,Zoë\n".encode())
    migrate.run(config, migrate.RunOptions(failed=True))
    assert (["1", "2"], {"1": "migrated", "2": "migrated"}) == (seen, states(config, "p"))


ENCODINGS = [
    ("utf-16", codecs.BOM_UTF16_LE, "utf-16-le"),
    ("utf-16", codecs.BOM_UTF16_BE, "utf-16-be"),
    ("utf-16-le", b"", "utf-16-le"),
    ("utf-16", b"", "utf-16-le"),
    ("utf-32", codecs.BOM_UTF32_LE, "utf-32-le"),
    ("utf-32-be", b"", "utf-32-be"),
    ("utf-8", codecs.BOM_UTF8, "utf-8"),
    ("utf-8-sig", codecs.BOM_UTF8, "utf-8"),
    ("latin-1", b"", "latin-1"),
]


@pytest.mark.parametrize(("given", "bom", "codec"), ENCODINGS, ids=repr)
@pytest.mark.parametrize("kind", ["csv", "jsonl"])
def test_wide_and_marked_encodings_read_in_windows(
    tmp_path: Path, given: str, bom: bytes, codec: str, kind: str
) -> None:
    """UTF-16/32 (either byte order, with or without a BOM), UTF-8 BOMs: every record, resumed."""
    text = CSV_TEXT if kind == "csv" else JSONL_TEXT
    path = tmp_path / f"p.{kind}"
    path.write_bytes(bom + text.replace("\n", "\r\n").encode(codec))
    cls = migrate.CsvSource if kind == "csv" else migrate.JsonlSource
    source = cls(path, window_size=2, encoding=given)
    seen: list[str] = []
    data: list[dict[str, object]] = []
    config = config_of(tmp_path, migrate.Migration("p", source, _data_seen(seen, data)))
    summary = migrate.run(config)
    assert (["1", "2", "3", "4", "5"], "Zoë", 5) == (
        seen,
        data[1]["name"],
        summary.definitions["p"].counts.migrated,
    )
    assert isinstance(source.lookup("4").run_or_raise(), migrate.Item)
    (found,) = source.find(["5"]).values()
    assert isinstance(found, migrate.Item)
    assert "Edsger" == found.data["name"]


def test_an_unknown_or_unsplittable_encoding_is_refused_at_once(tmp_path: Path) -> None:
    """An encoding Python lacks, or one whose line ends are not 0x0A, is a ValueError."""
    with pytest.raises(ValueError, match="'nope' is not a codec"):
        migrate.CsvSource(tmp_path / "p.csv", encoding="nope")
    with pytest.raises(ValueError, match="not supported by file sources"):
        migrate.JsonlSource(tmp_path / "p.jsonl", encoding="cp037")


@given(
    st.lists(
        st.text(st.characters(exclude_characters="\n", exclude_categories=("Cs",)), max_size=12),
        max_size=12,
    ),
    st.sampled_from(["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"]),
    st.integers(1, 9),
)
def test_wide_encodings_split_into_the_lines_written(
    lines: list[str], codec: str, chunk: int
) -> None:
    """UTF-16/32 bytes split on whole code units give back every line, whatever the chunking."""
    data = "".join(line + "\n" for line in lines).encode(codec)
    with mock.patch("migrate._sources._lines._CHUNK", chunk):
        raws = list(encoding(codec).lines(io.BytesIO(data)))
    assert lines == [raw.decode(codec)[:-1] for raw in raws]
