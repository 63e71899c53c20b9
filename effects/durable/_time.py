"""The engine's time: epoch seconds from a clock, stored as epoch milliseconds."""

from __future__ import annotations

import asyncio
import inspect
import math
import time
from typing import Any, Final

from effects import Clock

__all__ = ["WallClock", "epoch_ms", "is_async_callable"]

_CO_COROUTINE: Final = inspect.CO_COROUTINE


class WallClock:
    """The default engine clock: ``time.time()`` (epoch seconds) and ``asyncio.sleep``."""

    __slots__ = ()

    def now(self) -> float:
        """Epoch seconds."""
        return time.time()

    def sleep(self, seconds: float) -> None:
        """Block the thread for *seconds*."""
        time.sleep(seconds)

    async def sleep_async(self, seconds: float) -> None:
        """Suspend the task for *seconds*."""
        await asyncio.sleep(seconds)

    def __repr__(self) -> str:
        return "WallClock()"


def epoch_ms(clock: Clock) -> int:
    """
    The clock's reading as whole epoch milliseconds: ``round(seconds * 1000)``.

    Raises:
        ValueError: If the clock reads NaN or an infinity (a broken custom clock), since such a
            time would corrupt every deadline computed from it.
    """
    if type(clock) is WallClock:
        return round(time.time() * 1000)
    seconds = clock.now()
    if not math.isfinite(seconds):
        msg = f"the engine's clock {clock!r} read {seconds!r}; it must give finite epoch seconds"
        raise ValueError(msg)
    return round(seconds * 1000)


def is_async_callable(fn: Any) -> bool:
    """Whether calling *fn* gives a coroutine for sure (a plain ``async def`` function, fast)."""
    code = getattr(fn, "__code__", None)
    if code is not None and type(fn).__name__ == "function":
        return bool(code.co_flags & _CO_COROUTINE)
    return inspect.iscoroutinefunction(fn)
