"""The retry and repeat options are declared once, travel in the policy, and import no circle."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from effects import (
    AsyncEffect,
    Effect,
    Repeat,
    RepeatOptions,
    Retry,
    RetryOptions,
    RetryUsageError,
    repeat,
    retry,
)
from effects._options import CHECKS
from schedules import spaced

EFFECTS = Path(__file__).resolve().parents[2] / "effects"

RETRYING: list[Callable[..., Any]] = [retry, Retry.__init__, Effect.retry, AsyncEffect.retry]
REPEATING: list[Callable[..., Any]] = [repeat, Repeat.__init__, Effect.repeat, AsyncEffect.repeat]


@pytest.mark.parametrize(
    ("functions", "options"), [(RETRYING, "RetryOptions"), (REPEATING, "RepeatOptions")]
)
def test_every_entry_point_takes_the_one_declaration(
    functions: list[Callable[..., Any]], options: str
) -> None:
    """retry, Retry, Effect.retry and AsyncEffect.retry (and repeat's four) share one TypedDict."""
    for function in functions:
        parameters = inspect.signature(function).parameters
        keywords = [p for p in parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
        assert [f"Unpack[{options}]"] == [str(p.annotation) for p in keywords], function
        assert {"schedule", "options"} <= set(parameters)
        assert len(parameters) - ("self" in parameters) == 2


def test_each_option_has_one_check() -> None:
    """The checks cover exactly the declared options, no more, no fewer."""
    declared = RetryOptions.__optional_keys__ | RepeatOptions.__optional_keys__
    assert sorted(declared | {"schedule"}) == sorted(CHECKS)
    assert {"times", "while_", "until", "name", "budget", "on", "on_retry"} == set(
        RetryOptions.__optional_keys__
    )
    assert {"times", "while_", "until", "name", "on_repeat"} == set(RepeatOptions.__optional_keys__)


@pytest.mark.parametrize(
    "build",
    [
        lambda: retry(spaced(1), time=3),
        lambda: Retry(spaced(1), on_repeat=print),
        lambda: Effect.succeed(1).retry(spaced(1), budjet=None),
        lambda: repeat(spaced(1), on=KeyError),
        lambda: AsyncEffect.succeed(1).repeat(spaced(1), budget=None),
    ],
)
def test_an_unknown_option_is_refused_naming_the_known_ones(build: Callable[[], object]) -> None:
    """A misspelt or foreign option is a RetryUsageError listing the options that exist."""
    with pytest.raises(RetryUsageError, match=r"unknown options .* its options are"):
        build()


def test_on_travels_inside_the_policy() -> None:
    """The on= types are part of the policy the runners read, not a separate argument."""
    policy = retry(times=2, on=KeyError)
    assert (KeyError,) == policy.on
    assert (KeyError,) == policy._policy.on  # pyright: ignore[reportPrivateUsage]


def test_retry_values_compare_hash_and_pickle_by_their_options() -> None:
    """Equal options give equal, equally hashed values that survive pickling."""
    import pickle

    one = retry(spaced(1), times=2, on=KeyError, name="load")
    assert one == retry(spaced(1), times=2, on=KeyError, name="load")
    assert hash(one) == hash(retry(spaced(1), times=2, on=KeyError, name="load"))
    assert one != retry(spaced(1), times=3, on=KeyError, name="load")
    assert one == pickle.loads(pickle.dumps(one))
    assert repeat(spaced(1), times=2) == pickle.loads(pickle.dumps(repeat(spaced(1), times=2)))


def _imports(module: Path) -> set[str]:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_effect_does_not_import_retry_or_repeat() -> None:
    """_effect builds on the policies, not on _retry or _repeat: there is no import circle."""
    imported = _imports(EFFECTS / "_effect.py")
    assert set() == {name for name in imported if "_retry" in name or name.endswith("_repeat")}


def test_importing_effect_alone_does_not_pull_in_retry() -> None:
    """In a fresh interpreter, importing effects._effect first works and loads neither value."""
    code = (
        "import sys, effects._effect as e; "
        "print(sorted(m for m in ('effects._retry', 'effects._repeat') if m in sys.modules))"
    )
    # Importing the package runs effects/__init__, which imports everything; go around it.
    probe = (
        "import importlib.util, sys, types; "
        "spec = importlib.util.find_spec('effects'); "
        "package = types.ModuleType('effects'); "
        "package.__path__ = spec.submodule_search_locations; "
        "sys.modules['effects'] = package; " + code
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert "[]" == shown.stdout.strip()


@pytest.mark.parametrize(("name", "error"), [("", ValueError), ("  ", ValueError), (3, TypeError)])
def test_a_bad_name_is_refused(name: object, error: type[Exception]) -> None:
    """name= must be a non-empty str: ValueError for an empty one, TypeError for another type."""
    with pytest.raises(error, match="name must"):
        retry(times=1, name=name)  # type: ignore[arg-type]
    with pytest.raises(error, match="name must"):
        repeat(times=1, name=name)  # type: ignore[arg-type]
