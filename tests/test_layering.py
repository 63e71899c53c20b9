"""
The packages stand in layers: schedules imports nothing of ours, effects only schedules; and
effects.durable uses only the public API of effects and schedules, and nothing else in effects
imports it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = {
    "schedules": {"schedules"},
    "effects": {"schedules", "effects"},
    "migrate": {"schedules", "effects", "migrate"},
}


def _imported_packages(path: Path) -> set[str]:
    """Top-level names of every import in *path*, including imports inside functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_the_layers_below(package: str) -> None:
    """No module of a package imports a package of ours above it."""
    ours = set(ALLOWED)
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no modules found under {package}/"
    wrong = {
        str(path.relative_to(ROOT)): sorted((_imported_packages(path) & ours) - ALLOWED[package])
        for path in files
    }
    assert {} == {name: bad for name, bad in wrong.items() if bad}


def _imported_modules(path: Path) -> set[str]:
    """Full names of every module *path* imports from, including imports inside functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
    return found


def test_nothing_else_in_effects_imports_durable() -> None:
    """effects.durable sits on top of effects: no other module of effects imports it."""
    durable = ROOT / "effects" / "durable"
    importers = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "effects").rglob("*.py")
        if durable not in path.parents
        and any(name.startswith("effects.durable") for name in _imported_modules(path))
    )
    assert [] == importers


def test_durable_uses_only_public_modules_of_effects_and_schedules() -> None:
    """effects.durable imports effects and schedules only through their public modules."""
    files = sorted((ROOT / "effects" / "durable").rglob("*.py"))
    assert files
    private = {
        str(path.relative_to(ROOT)): sorted(
            name
            for name in _imported_modules(path)
            if name.split(".")[0] in {"effects", "schedules"}
            and not name.startswith("effects.durable")
            and any(part.startswith("_") for part in name.split("."))
        )
        for path in files
    }
    assert {} == {name: bad for name, bad in private.items() if bad}
