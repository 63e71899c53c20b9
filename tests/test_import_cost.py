"""Importing schedules or effects loads only what they need (benchmarks/import_time.py times it)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Heavy modules that importing these packages must not load: each is loaded where it is first
# used (simulation, an async wait, an effect run, log_retries, Effect.timeout).
NOT_AT_IMPORT = {
    "schedules": {"attr", "attrs", "asyncio", "inspect", "random", "returns", "typing_extensions"},
    "effects": {
        "attr",
        "attrs",
        "asyncio",
        "inspect",
        "logging",
        "returns",
        "threading",
        "typing_extensions",
    },
}


@pytest.mark.parametrize("package", sorted(NOT_AT_IMPORT))
def test_importing_the_package_loads_no_heavy_module(package: str) -> None:
    """A fresh interpreter that imports only the package has none of the heavy modules loaded."""
    code = f"import sys, json; import {package}; print(json.dumps(sorted(sys.modules)))"
    shown = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = {name.split(".")[0] for name in json.loads(shown.stdout)}
    assert set() == NOT_AT_IMPORT[package] & loaded
