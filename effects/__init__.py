"""
Typed effects and the runtime that retries them.

``Effect`` / ``AsyncEffect`` describe work with a typed error; ``retry(...)`` builds a ``Retry``
policy from a ``schedules`` schedule and applies it to effects, functions and blocks of code;
``repeat(...)`` builds a ``Repeat`` that runs work again after each success (polling).
Time and randomness come from ``use_clock`` / ``use_random`` (context variables);
``effects.testing.VirtualClock`` makes every wait instant in tests.
"""

from effects._budget import RetryBudget
from effects._callables import is_async_callable
from effects._driver import Attempt, Attempts
from effects._effect import AsyncEffect, Effect
from effects._events import RepeatEvent, RetryEvent, add_hook, hooks, log_retries, notify_hooks
from effects._options import RepeatOptions, RetryOptions
from effects._repeat import Repeat, repeat
from effects._retry import Retry, retry
from effects._services import Clock, SystemClock, use_clock, use_random
from effects.errors import EffectsError, EffectTimeoutError, FatalError, RetryUsageError

__all__ = [
    "AsyncEffect",
    "Attempt",
    "Attempts",
    "Clock",
    "Effect",
    "EffectTimeoutError",
    "EffectsError",
    "FatalError",
    "Repeat",
    "RepeatEvent",
    "RepeatOptions",
    "Retry",
    "RetryBudget",
    "RetryEvent",
    "RetryOptions",
    "RetryUsageError",
    "SystemClock",
    "add_hook",
    "hooks",
    "is_async_callable",
    "log_retries",
    "notify_hooks",
    "repeat",
    "retry",
    "use_clock",
    "use_random",
]
