"""The public surface of migrate: a complete, sorted __all__ and the names the issue fixes."""

from __future__ import annotations

import inspect
import pickle
import traceback

import pytest

import migrate


def test_all_is_complete() -> None:
    """__all__ names every public attribute exported by the package, once (ruff RUF022 sorts it)."""
    public = {
        name
        for name, value in vars(migrate).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert len(set(migrate.__all__)) == len(migrate.__all__)
    assert public == set(migrate.__all__)


def test_fixed_constructor_signatures() -> None:
    """The constructors other tools rely on keep their names and defaults."""
    csv = inspect.signature(migrate.CsvSource)
    assert ("id", None) == (csv.parameters["identity"].default, csv.parameters["version"].default)
    memory = inspect.signature(migrate.MemorySource)
    assert ("id", "direct") == (
        memory.parameters["identity"].default,
        memory.parameters["lookup"].default,
    )
    sql = inspect.signature(migrate.SqlSource)
    assert ["connect", "table", "identity", "version"] == list(sql.parameters)[:4]
    assert ["connect", "table", "key"] == list(
        inspect.signature(migrate.SqlDestination).parameters
    )[:3]


def test_error_tree() -> None:
    """Operational errors sit under MigrateError; misuse errors are ValueErrors."""
    assert issubclass(migrate.SourceError, migrate.MigrateError)
    assert issubclass(migrate.DestinationError, migrate.MigrateError)
    assert issubclass(migrate.LockHeld, migrate.RefusedError)
    assert issubclass(migrate.PreflightRefused, migrate.RefusedError)
    assert issubclass(migrate.StoreSchemaError, migrate.RefusedError)
    assert issubclass(migrate.ConfigError, ValueError)
    assert issubclass(migrate.UsageError, ValueError)
    assert issubclass(migrate.TrackingError, ValueError)
    assert issubclass(migrate.ContractChanged, migrate.RefusedError)
    assert not issubclass(migrate.Skip, migrate.MigrateError)


def test_public_classes_show_the_public_module() -> None:
    """Every exported class reads ``migrate.X`` in reprs, tracebacks and pickles."""
    private = sorted(
        name
        for name in migrate.__all__
        if isinstance(getattr(migrate, name), type)
        and getattr(migrate, name).__module__ != "migrate"
    )
    assert [] == private
    assert "<class 'migrate.ConfigError'>" == repr(migrate.ConfigError)
    with pytest.raises(migrate.ConfigError) as caught:
        migrate.Config([], store=1)  # type: ignore[arg-type]
    assert traceback.format_exception_only(caught.value)[-1].startswith("migrate.ConfigError: ")
    counts = migrate.Counts(migrated=2)
    assert counts == pickle.loads(pickle.dumps(counts))


def test_errors_module_holds_only_errors() -> None:
    """format_time, plural and LockInfo live outside the errors module."""
    import migrate._errors as errors_module

    assert not {"format_time", "plural", "LockInfo"} & set(errors_module.__all__)
    assert "migrate._text" == migrate.format_time.__module__
