"""Time and randomness as services chosen through context variables."""

from __future__ import annotations

import math
import random
import sys
import time
from contextvars import ContextVar, Token
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast

if TYPE_CHECKING:
    from schedules import RandomLike

__all__ = [
    "Clock",
    "SystemClock",
    "checked_now",
    "bad_reading",
    "current_clock",
    "current_random",
    "use_clock",
    "use_random",
]

_S = TypeVar("_S")


class Clock(Protocol):
    """What the retry runtime needs from time: a monotonic reading and two ways to wait."""

    def now(self) -> float:
        """Monotonic seconds (only differences between readings mean anything)."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block the calling thread for *seconds* (> 0)."""
        ...

    async def sleep_async(self, seconds: float) -> None:
        """Suspend the calling task for *seconds* (> 0), under asyncio or trio."""
        ...


def running_under_trio() -> bool:
    """Whether the calling code runs inside ``trio.run`` (trio is never imported here)."""
    trio = sys.modules.get("trio")
    if trio is None:
        return False
    try:
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        return False
    return True


async def checkpoint() -> None:
    """Let the running event loop (asyncio or trio) switch tasks and deliver cancellation."""
    if running_under_trio():
        await sys.modules["trio"].lowlevel.checkpoint()
    else:
        # Imported here so that `import effects` does not load asyncio; a running loop has.
        import asyncio  # noqa: PLC0415

        await asyncio.sleep(0)


def checked_now(clock: Clock) -> float:
    """
    ``clock.now()``, refused unless it is a finite number: a NaN or infinite reading from a
    custom clock would turn into NaN delays and elapsed times downstream.

    Raises:
        ValueError: Naming the clock and the reading.
    """
    now = clock.now()
    # Checked at run time: custom clocks are user code, and the annotation is only a promise.
    reading = cast("object", now)
    if isinstance(reading, int | float) and not isinstance(reading, bool) and math.isfinite(now):
        return now
    raise bad_reading(clock, reading)


def bad_reading(clock: Clock, reading: object) -> ValueError:
    """The error for a clock reading that is not finite seconds, naming clock and reading."""
    msg = f"the clock {clock!r} returned {reading!r} from now(); it must return finite seconds"
    return ValueError(msg)


class SystemClock:
    """
    The real clock: ``time.monotonic``; ``time.sleep``; ``trio.sleep`` under trio, else
    ``asyncio.sleep``.
    """

    __slots__ = ()

    def now(self) -> float:
        """Seconds of ``time.monotonic()``."""
        return time.monotonic()

    def wall(self) -> float:
        """Seconds since the Unix epoch (``time.time()``): what calendar schedules read."""
        return time.time()

    def sleep(self, seconds: float) -> None:
        """Block the thread with ``time.sleep``."""
        time.sleep(seconds)

    async def sleep_async(self, seconds: float) -> None:
        """Wait with the running library's sleep, so its cancellation applies."""
        if running_under_trio():
            await sys.modules["trio"].sleep(seconds)
        else:
            import asyncio  # noqa: PLC0415 - see checkpoint()

            await asyncio.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


class _SystemRandom:
    """Uniform floats from the ``random`` module's shared generator."""

    __slots__ = ()

    def random(self) -> float:
        return random.random()

    def __repr__(self) -> str:
        return "SystemRandom()"


_SYSTEM_CLOCK = SystemClock()
_SYSTEM_RANDOM = _SystemRandom()
_clock: ContextVar[Clock] = ContextVar("effects.clock", default=_SYSTEM_CLOCK)
_random: ContextVar[RandomLike] = ContextVar("effects.random", default=_SYSTEM_RANDOM)

#: Fast lookups for the hot path (bound methods of the context variables).
current_clock = _clock.get
current_random = _random.get


class _Use(Generic[_S]):
    """Set a context variable for the ``with`` block, restoring it afterwards."""

    __slots__ = ("_token", "_value", "_var")

    def __init__(self, var: ContextVar[Any], value: _S) -> None:
        self._var = var
        self._value = value
        self._token: Token[Any] | None = None

    def __enter__(self) -> _S:
        if self._token is not None:
            msg = "this use_clock/use_random block is already active; make a new one"
            raise RuntimeError(msg)
        self._token = self._var.set(self._value)
        return self._value

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token, self._token = self._token, None
        if token is not None:
            self._var.reset(token)


_C = TypeVar("_C", bound=Clock)
_R = TypeVar("_R", bound="RandomLike")


def use_clock(clock: _C) -> _Use[_C]:
    """
    Use *clock* for every retry run inside the ``with`` block, in this context only.

    The clock lives in a context variable: other threads and other tasks keep theirs, and tasks
    started inside the block inherit it.

    Args:
        clock: Any object with ``now()``, ``sleep(seconds)`` and ``async sleep_async(seconds)``,
            such as ``effects.testing.VirtualClock``.

    Returns:
        A context manager whose ``__enter__`` returns *clock*. Entering the same one again
        while it is active raises ``RuntimeError``; make a new one instead.

    Example:
        >>> from effects.testing import VirtualClock
        >>> with use_clock(VirtualClock(start=5.0)) as clock:
        ...     clock.now()
        5.0
    """
    return _Use(_clock, clock)


def use_random(rng: _R) -> _Use[_R]:
    """
    Use *rng* for the jitter of every retry run inside the ``with`` block, in this context only.

    Args:
        rng: Any object with ``random() -> float`` in ``[0, 1)``, e.g. ``random.Random(seed)``.

    Returns:
        A context manager whose ``__enter__`` returns *rng* (entered once at a time, like
        ``use_clock``'s).

    Example:
        >>> import random
        >>> with use_random(random.Random(7)) as rng:
        ...     round(rng.random(), 3)
        0.324
    """
    return _Use(_random, rng)


def wall_time(clock: Clock) -> float:
    """
    *clock*'s epoch reading for a schedule that reads epoch seconds (``cron``): its ``wall()``
    where it has one (`SystemClock`: ``time.time()``; ``VirtualClock``: its virtual time), else
    its ``now()``. Checked finite, as every reading is.

    Raises:
        ValueError: If the reading is NaN, infinite or not a number.
    """
    wall = getattr(clock, "wall", None)
    reading = clock.now() if wall is None else wall()
    try:
        finite = reading - reading == 0.0
    except TypeError:
        finite = False
    if not finite:
        raise bad_reading(clock, reading)
    return float(reading)
