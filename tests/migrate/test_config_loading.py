"""Loading config files and validating definitions."""

from __future__ import annotations

import pickle
import sys
from pathlib import Path

import pytest

import migrate
from tests.migrate.helpers import noop, write_csv


def _write(tmp_path: Path, body: str, name: str = "migrate_config.py") -> Path:
    path = tmp_path / name
    path.write_text("import migrate\n\n" + body, encoding="utf-8")
    return path


def _source() -> str:
    return "src = migrate.MemorySource([{'id': 1}])\n\ndef process(item, scope):\n    pass\n\n"


def test_load_config_returns_the_config_with_base_dir_of_the_file(tmp_path: Path) -> None:
    """A config file's ``config`` is returned, its base_dir set to the file's folder."""
    path = _write(
        tmp_path,
        _source() + "config = migrate.Config([migrate.Migration('a', src, process)])\n",
    )
    config = migrate.load_config(path)
    assert config.ids == ("a",)
    assert tmp_path.resolve() == config.base_dir


def test_load_config_default_is_migrate_config_in_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a path, ``migrate_config.py`` in the working folder is loaded."""
    _write(
        tmp_path, _source() + "config = migrate.Config([migrate.Migration('b', src, process)])\n"
    )
    monkeypatch.chdir(tmp_path)
    assert migrate.load_config().ids == ("b",)


def test_store_path_is_relative_to_the_config_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A relative store URL resolves against the config file's folder, not the working folder."""
    folder = tmp_path / "project"
    folder.mkdir()
    path = _write(
        folder,
        _source()
        + "config = migrate.Config([migrate.Migration('a', src, process)], "
        + "store='sqlite:///.migrate/state.db')\n",
    )
    monkeypatch.chdir(tmp_path)
    config = migrate.load_config(path)
    with config.open_store() as store:
        assert (folder / ".migrate" / "state.db").resolve() == store.path.resolve()


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    """A missing config file raises ConfigError naming the file."""
    with pytest.raises(migrate.ConfigError, match=r"config file not found: .*nope\.py"):
        migrate.load_config(tmp_path / "nope.py")


def test_missing_config_variable_is_refused(tmp_path: Path) -> None:
    """A file that defines no ``config`` is refused, saying so."""
    path = _write(tmp_path, "x = 1\n")
    with pytest.raises(migrate.ConfigError, match="defines no 'config' variable"):
        migrate.load_config(path)


def test_config_of_wrong_type_is_refused(tmp_path: Path) -> None:
    """``config`` must be a migrate.Config; the message names the type found."""
    path = _write(tmp_path, "config = {'migrations': []}\n")
    with pytest.raises(migrate.ConfigError, match=r"must be a migrate\.Config, got dict"):
        migrate.load_config(path)


def test_error_while_executing_is_a_chained_config_error(tmp_path: Path) -> None:
    """An exception raised by the file becomes a ConfigError naming it, chained to it."""
    path = _write(tmp_path, "raise RuntimeError('boom')\n")
    with pytest.raises(migrate.ConfigError, match="RuntimeError: boom") as caught:
        migrate.load_config(path)
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_duplicate_ids_are_refused_naming_them(tmp_path: Path) -> None:
    """Two definitions with one id are refused when the config loads, naming the id."""
    path = _write(
        tmp_path,
        _source()
        + "config = migrate.Config([migrate.Migration('a', src, process), "
        + "migrate.Migration('b', src, process), migrate.Migration('a', src, process)])\n",
    )
    with pytest.raises(migrate.ConfigError, match="duplicate migration ids: a"):
        migrate.load_config(path)


def test_unknown_dependency_ids_are_refused_naming_them(tmp_path: Path) -> None:
    """A requires/optional id that is not defined is refused, naming the edge."""
    path = _write(
        tmp_path,
        _source()
        + "config = migrate.Config([migrate.Migration('books', src, process, "
        + "requires=['authors'], optional=['genres'])])\n",
    )
    with pytest.raises(migrate.ConfigError, match=r"books -> authors, books -> genres"):
        migrate.load_config(path)


def test_dependency_cycles_are_refused_naming_the_cycle(tmp_path: Path) -> None:
    """A dependency cycle is refused at load, the message showing the cycle."""
    path = _write(
        tmp_path,
        _source()
        + "config = migrate.Config([\n"
        + "    migrate.Migration('a', src, process, requires=['b']),\n"
        + "    migrate.Migration('b', src, process, optional=['c']),\n"
        + "    migrate.Migration('c', src, process, requires=['a']),\n"
        + "])\n",
    )
    with pytest.raises(migrate.ConfigError, match=r"dependency cycle: a -> b -> c -> a"):
        migrate.load_config(path)


def test_requires_given_as_a_string_is_refused() -> None:
    """``requires='authors'`` (a string, not a sequence) is refused rather than split."""
    source = migrate.MemorySource([])
    with pytest.raises(migrate.ConfigError, match="requires must be a sequence"):
        migrate.Migration("b", source, lambda item, scope: None, requires="authors")


@pytest.mark.parametrize("concurrency", [0, -1])
def test_concurrency_below_one_is_refused(concurrency: int) -> None:
    """concurrency must be >= 1, the message naming the value."""
    source = migrate.MemorySource([])
    with pytest.raises(migrate.ConfigError, match=f"concurrency must be >= 1, got {concurrency}"):
        migrate.Migration("a", source, lambda item, scope: None, concurrency=concurrency)


def test_bad_id_is_refused() -> None:
    """Ids with spaces or slashes are refused."""
    with pytest.raises(migrate.ConfigError, match="migration id must be"):
        migrate.Migration("a b", migrate.MemorySource([]), lambda item, scope: None)


def test_source_must_be_a_source() -> None:
    """A source that is not a migrate Source is refused at construction."""
    with pytest.raises(migrate.ConfigError, match="source must be a migrate Source"):
        migrate.Migration("a", [1, 2], lambda item, scope: None)  # type: ignore[arg-type]


def test_order_puts_dependencies_first_config_order_otherwise() -> None:
    """config.order() is topological (requires and optional), ties in config order."""
    source = migrate.MemorySource([])

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        pass

    config = migrate.Config(
        [
            migrate.Migration("books", source, process, requires=["authors"]),
            migrate.Migration("reviews", source, process, optional=["books"]),
            migrate.Migration("authors", source, process),
            migrate.Migration("genres", source, process),
        ]
    )
    assert config.order() == ("authors", "books", "reviews", "genres")


def test_get_unknown_id_is_a_usage_error_listing_known_ids() -> None:
    """config.get of an unknown id raises UsageError listing the known ids."""
    config = migrate.Config([migrate.Migration("a", migrate.MemorySource([]), noop)])
    with pytest.raises(migrate.UsageError, match="unknown migration 'x'; known: a"):
        config.get("x")


def test_bad_store_url_is_a_config_error(tmp_path: Path) -> None:
    """A store that is neither ``sqlite:///...`` nor ``postgresql://...`` is refused when opened."""
    config = migrate.Config([], store="mysql://x", base_dir=tmp_path)
    with pytest.raises(migrate.ConfigError, match=r"must look like 'sqlite:///.*' or 'postgr"):
        config.open_store()


def test_an_error_while_importing_names_the_file_and_line(tmp_path: Path) -> None:
    """An exception raised by the config names the config's file and line (and where it rose)."""
    (tmp_path / "helper.py").write_text("def broken():\n    raise KeyError('gone')\n")
    path = _write(tmp_path, "import helper\n\nx = 1\nhelper.broken()\n")
    with pytest.raises(migrate.ConfigError) as caught:
        migrate.load_config(path)
    assert f"{path}, line 6 (raised at {tmp_path / 'helper.py'}, line 2): KeyError: 'gone'" == (
        str(caught.value)
    )


def test_a_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    """A config that is not valid Python names its file and the line of the syntax error."""
    path = _write(tmp_path, "x = (\n")
    with pytest.raises(migrate.ConfigError, match=rf"{path}, line 3: SyntaxError"):
        migrate.load_config(path)


def test_a_config_imports_its_sibling_modules(tmp_path: Path) -> None:
    """A module beside the config can be imported by it, also from a process at run time."""
    (tmp_path / "shapes.py").write_text("def shape(data):\n    return {'n': data['id']}\n")
    path = _write(
        tmp_path,
        "import shapes\n\n"
        "def process(item, scope):\n"
        "    import shapes as again\n"
        "    scope.track(again.shape(item.data))\n\n"
        "config = migrate.Config([migrate.Migration('a', migrate.MemorySource([{'id': 5}]), "
        "process)], store='sqlite:///s.db')\n",
    )
    config = migrate.load_config(path)
    migrate.run(config)
    with config.open_store() as store:
        assert {"n": 5} == store.tracking("a", "5")


def test_what_a_config_defines_can_be_pickled(tmp_path: Path) -> None:
    """The config is a real module: its classes and functions pickle and unpickle."""
    path = _write(
        tmp_path,
        "import attrs\n\n@attrs.frozen\nclass Row:\n    n: int\n\n"
        "def process(item, scope):\n    pass\n\n"
        "config = migrate.Config([migrate.Migration('a', migrate.MemorySource([]), process)])\n",
    )
    config = migrate.load_config(path)
    module = sys.modules[config.migrations[0].process.__module__]
    row = module.Row(3)
    assert ("migrate_config", row) == (module.__name__, pickle.loads(pickle.dumps(row)))
    assert config.migrations[0].process is pickle.loads(pickle.dumps(module.process))


def test_relative_source_paths_are_relative_to_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CsvSource('data/x.csv') in a config reads next to the config, wherever migrate runs."""
    (tmp_path / "data").mkdir()
    write_csv(tmp_path / "data" / "x.csv", [{"id": "1"}])
    path = _write(
        tmp_path,
        "config = migrate.Config([migrate.Migration('a', migrate.CsvSource('data/x.csv'), "
        "lambda item, scope: None), migrate.Migration('b', migrate.CsvSource('data/none.csv'), "
        "lambda item, scope: None)], store='sqlite:///s.db')\n",
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config = migrate.load_config(path)
    summary = migrate.run(config)
    assert 1 == summary.definitions["a"].counts.migrated
    assert f"cannot read csv:{tmp_path / 'data' / 'none.csv'}" in (
        summary.definitions["b"].error or ""
    )


def test_config_naming_a_folder_says_it_is_a_folder(tmp_path: Path) -> None:
    """--config DIR is refused saying it is a folder, pointing at the config file inside."""
    _write(tmp_path, "config = migrate.Config([])\n")
    with pytest.raises(migrate.ConfigError, match="is a folder, not a config file; did you mean"):
        migrate.load_config(tmp_path)
