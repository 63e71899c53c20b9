"""
Errors raised by ``effects``, in one tree.

::

    Exception
    ├── EffectsError                      operational: what a caller handles
    │   ├── FatalError(message, code)     never retried (retryable = False)
    │   ├── EffectTimeoutError            an attempt ran longer than .timeout(d) allowed;
    │   │                                 also a builtins.TimeoutError
    │   └── effects.http.ApiRequestError  an HTTP call failed (status, transient, retry_after)
    ├── TypeError
    │   └── RetryUsageError               misuse: a retry or repeat applied to the wrong
    │                                     thing (a generator function, a non-callable), a
    │                                     function wrapped without ``on=``, an unknown option
    └── ValueError                        misuse: a bad option value (negative ``times``,
                                          a bad duration); raised as plain ``ValueError``

Misuse errors subclass the builtin they mean, so ``except EffectsError`` never hides a bug.
When retries run out, the last error itself is raised (or returned as the ``Failure``), never
wrapped in one of these.
"""

from __future__ import annotations

import builtins
from typing import ClassVar

__all__ = ["EffectTimeoutError", "EffectsError", "FatalError", "RetryUsageError"]


class EffectsError(Exception):
    """Base of the operational errors of ``effects``."""


class FatalError(EffectsError):
    """
    A verdict that will not change on another try: never retried, whatever the schedule.

    Raise it (or return it as a typed failure) for deterministic outcomes such as a declined
    card or invalid input. Any other error whose ``retryable`` attribute is ``False`` is treated
    the same way.

    Args:
        message: What went wrong, for people.
        code: An optional machine-readable code, kept as ``.code``.

    Example:
        >>> error = FatalError("card declined", "declined")
        >>> (str(error), error.code, error.retryable)
        ('card declined', 'declined', False)
    """

    retryable: ClassVar[bool] = False

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code

    def __repr__(self) -> str:
        return f"FatalError({self.message!r}, code={self.code!r})"


class EffectTimeoutError(EffectsError, builtins.TimeoutError):
    """
    An attempt did not finish within the limit set by ``.timeout(seconds)``.

    It is also a ``builtins.TimeoutError``, so ``except TimeoutError`` sees it.

    Args:
        seconds: The limit that was exceeded, in seconds.

    Example:
        >>> error = EffectTimeoutError(0.5)
        >>> (str(error), error.seconds, isinstance(error, TimeoutError))
        ('timed out after 0.5 s', 0.5, True)
    """

    def __init__(self, seconds: float) -> None:
        super().__init__(f"timed out after {seconds} s")
        self.seconds = seconds

    def __repr__(self) -> str:
        return f"EffectTimeoutError({self.seconds!r})"


class RetryUsageError(TypeError):
    """
    A retry or repeat was used the wrong way: a function wrapped without ``on=``; applied to a
    generator function (its body runs after the call returns, so there is nothing to retry) or
    to a value that is neither an effect nor a callable; an option it does not have.
    """
