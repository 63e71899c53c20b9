"""Every package's ``__all__`` is complete, sorted and importable."""

from __future__ import annotations

import importlib
import types

import pytest

PACKAGES = [
    "effects",
    "effects.durable",
    "effects.durable.errors",
    "effects.durable.instrumentation",
    "effects.http",
    "effects.instrumentation",
    "effects.testing",
    "migrate",
    "migrate.instrumentation",
    "schedules",
    "schedules.testing",
]


def _public_names(module: types.ModuleType) -> set[str]:
    """
    Public names the module defines.

    A package counts what its private submodules define (it re-exports them); a plain module
    counts only what it defines itself, not helpers it imports.
    """
    is_package = hasattr(module, "__path__")

    def defined_here(value: object) -> bool:
        origin = str(getattr(value, "__module__", module.__name__))
        if is_package:
            return origin.startswith(module.__name__ + "._") or origin == module.__name__
        return origin == module.__name__

    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name not in {"annotations", "TYPE_CHECKING"}
        and defined_here(value)
    }


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted(name: str) -> None:
    """``__all__`` is sorted so additions are easy to review."""
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert sorted(exported) == exported


@pytest.mark.parametrize("name", PACKAGES)
def test_all_names_exist(name: str) -> None:
    """Every name in ``__all__`` can be imported from the package."""
    module = importlib.import_module(name)
    missing = [n for n in module.__all__ if not hasattr(module, n)]
    assert [] == missing


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_complete(name: str) -> None:
    """Every public name the package defines is listed in ``__all__``."""
    module = importlib.import_module(name)
    unlisted = sorted(_public_names(module) - set(module.__all__))
    assert [] == unlisted
