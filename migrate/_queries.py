"""Queries over the store for ``status``, ``runs``, ``failures`` and ``unlock``."""

from __future__ import annotations

from collections.abc import Iterable

from migrate._definition import Config
from migrate._reports import DefinitionStatus, RunRef, StatusReport
from migrate._state import FailureRecord, LockInfo, RunRecord

__all__ = ["failures", "runs", "status", "unlock"]


def status(config: Config, definitions: Iterable[str] = ()) -> StatusReport:
    """
    Stored item states per definition, counted, with each definition's latest run.

    Runs of dead processes on this host are marked failed first (see the crash rule).

    Args:
        config: The definitions and store.
        definitions: Ids to report; empty means all, in config order.

    Raises:
        UsageError: For an unknown definition id.
    """
    chosen = tuple(definitions) or config.ids
    for definition_id in chosen:
        config.get(definition_id)
    with config.using_store() as store:
        store.recover_dead_runs()
        report: dict[str, DefinitionStatus] = {}
        for definition_id in chosen:
            counts = store.counts(definition_id)
            latest = store.latest_run_for(definition_id)
            report[definition_id] = DefinitionStatus(
                migrated=counts.migrated,
                skipped=counts.skipped,
                failed=counts.failed,
                needs_update=counts.needs_update,
                latest_run=RunRef.of(latest),
                interrupted=counts.interrupted,
            )
    return StatusReport(report)


def runs(config: Config, *, limit: int | None = 20) -> tuple[RunRecord, ...]:
    """
    The runs, newest first.

    Args:
        config: The config whose store is read.
        limit: At most this many (``None``: all); must be >= 0.

    Raises:
        ValueError: If *limit* is negative.
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit!r}")
    with config.using_store() as store:
        store.recover_dead_runs()
        return store.runs(limit)


def failures(
    config: Config, definition_id: str, *, limit: int | None = None
) -> tuple[FailureRecord, ...]:
    """
    The failed items of a definition with their evidence, in natural identity order.

    Natural order compares runs of digits as numbers, so ``"7"`` comes before ``"13"`` and
    ``"b2"`` before ``"b10"``; the rest compares as text. (Not the order the items failed: the
    items of one window share a time, and a ``--failed`` run retimes them all.) *limit* takes
    the first ones in that order.

    Args:
        config: The config whose store is read.
        definition_id: The definition.
        limit: At most this many (``None``: all); must be >= 0.

    Raises:
        UsageError: For an unknown definition id.
        ValueError: If *limit* is negative.
    """
    config.get(definition_id)
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit!r}")
    with config.using_store(read_only=True) as store:
        return store.failures(definition_id, limit)


def unlock(config: Config, definition_id: str) -> LockInfo | None:
    """
    Break a definition's lock (for a run that died where its pid cannot be checked).

    Args:
        config: The config whose store is changed.
        definition_id: The definition to unlock.

    Returns:
        The lock that was broken, or ``None`` if the definition was not locked.

    Raises:
        UsageError: For an unknown definition id.
    """
    config.get(definition_id)
    with config.using_store() as store:
        return store.unlock(definition_id)
