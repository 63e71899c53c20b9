"""Flow-control queues: ``Queue``, at most so many attempts of its steps at once."""

from __future__ import annotations

import attrs

from effects.durable._bounds import checked_count
from effects.durable._definitions import check_name

__all__ = ["Queue"]


@attrs.frozen
class Queue:
    """
    A flow-control queue: at most *concurrency* attempts of its steps run at once, engine-wide.

    Args:
        name: The queue's name, as steps name it with ``queue=``.
        concurrency: Slots; an attempt holds one from admission until its result lands.

    Raises:
        ValueError: If *name* is empty or *concurrency* < 1.
    """

    name: str
    concurrency: int = 1

    def __attrs_post_init__(self) -> None:
        check_name(self.name, "queue name")
        checked_count(self.concurrency, f"concurrency of queue {self.name!r}", least=1)
