"""What a rollback knows of one item: its stored state, never the source."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

__all__ = ["RollbackItem"]


@attrs.frozen
class RollbackItem:
    """
    One stored item state to undo, as ``Migration(rollback=fn)`` receives it.

    A rollback never reads the source: everything it may undo is in the journal the migrating
    runs recorded.

    Attributes:
        identity: The item's identity.
        status: Its stored status (``migrated``, ``skipped``, ``failed``, ``needs-update``,
            ``interrupted``).
        source_version: The source version its state was written from, if the source has one.
        journal: The destination change entries of the run that wrote the state, in order (one
            destination or several); diagnostic entries are left out.
        rollback_attempts: Earlier failed rollbacks of this state, oldest first: each
            ``{"run_id", "entries", "error": {"type", "message"}, "failed_at"}``, where
            ``entries`` are the journal entries that attempt had undone before it failed.
        tracking: The item's tracking record, if it has one.
    """

    identity: str
    status: str
    source_version: str | None
    journal: tuple[Mapping[str, Any], ...] = ()
    rollback_attempts: tuple[Mapping[str, Any], ...] = ()
    tracking: Mapping[str, Any] | None = None
