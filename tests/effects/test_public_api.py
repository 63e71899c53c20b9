"""The public surface of ``effects``: exports and the error tree."""

from __future__ import annotations

import builtins

import effects
from effects import EffectsError, EffectTimeoutError, FatalError, RetryUsageError


def test_all_is_sorted_and_complete() -> None:
    """effects.__all__ is sorted and every name in it exists."""
    assert sorted(effects.__all__) == effects.__all__
    assert [] == [name for name in effects.__all__ if not hasattr(effects, name)]


def test_contract_names_are_exported() -> None:
    """The names other packages code against are all public."""
    contract = {
        "AsyncEffect", "Clock", "Effect", "EffectsError", "FatalError", "Retry", "RetryBudget",
        "RetryEvent", "add_hook", "log_retries", "retry", "use_clock", "use_random",
    }  # fmt: skip
    assert set() == contract - set(effects.__all__)


def test_error_tree() -> None:
    """Operational errors sit under EffectsError; misuse errors under the builtin they mean."""
    assert issubclass(FatalError, EffectsError)
    assert issubclass(EffectTimeoutError, EffectsError)
    assert issubclass(EffectTimeoutError, builtins.TimeoutError)
    assert issubclass(RetryUsageError, TypeError)
    assert not issubclass(RetryUsageError, EffectsError)


def test_error_reprs_read_like_their_construction() -> None:
    """FatalError and EffectTimeoutError print the arguments that built them."""
    assert "FatalError('declined', code='card')" == repr(FatalError("declined", "card"))
    assert "EffectTimeoutError(2.0)" == repr(EffectTimeoutError(2.0))
