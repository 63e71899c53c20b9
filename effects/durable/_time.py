"""The engine's time: epoch seconds from a clock, stored as epoch milliseconds."""

from __future__ import annotations

import asyncio
import math
import time

from effects import Clock

__all__ = ["WallClock", "epoch_ms"]


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
