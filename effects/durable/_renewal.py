"""Renewal of a hold in the store (a run's lease, a task's claim) while its holder works."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Final

from effects.durable.errors import StoreError

__all__ = ["Renewal"]

_log: Final = logging.getLogger("effects.durable")


class Renewal:
    """
    Renews a lease or a claim every *interval* seconds until cancelled or refused. A timer, not a
    task, until the first renewal is due: most turns and attempts end before that.
    """

    __slots__ = ("_handle", "_interval", "_renew", "_task", "_what")

    def __init__(
        self, interval: float, renew: Callable[[], Coroutine[Any, Any, bool]], what: str
    ) -> None:
        self._interval, self._renew, self._what = interval, renew, what
        self._task: asyncio.Task[None] | None = None
        self._handle: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(
            interval, self._due
        )

    def _due(self) -> None:
        self._handle = None
        self._task = asyncio.get_running_loop().create_task(self._renew_once())

    async def _renew_once(self) -> None:
        try:
            held = await self._renew()
        except StoreError as error:
            # Two more tries remain before it lapses; the next one may succeed.
            _log.warning("could not renew %s: %s", self._what, error)
            held = True
        self._task = None
        if held:
            self._handle = asyncio.get_running_loop().call_later(self._interval, self._due)

    def cancel(self) -> None:
        """Stop renewing."""
        if self._handle is not None:
            self._handle.cancel()
        if self._task is not None:
            self._task.cancel()
