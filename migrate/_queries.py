"""Queries over the store for ``status``, ``runs``, ``failures`` and ``unlock``."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Generator, Iterable, Sequence

from migrate._definition import Config
from migrate._errors import StoreError, UsageError
from migrate._reports import DefinitionStatus, RunRef, StatusReport
from migrate._state import FailureRecord, ItemState, LockInfo, RunRecord
from migrate._store import Store
from migrate._store_open import store_exists

__all__ = ["failures", "forget", "runs", "status", "unlock"]


@contextlib.contextmanager
def _reading(config: Config, *, recover: bool = True) -> Generator[Store]:
    """
    The store for a query that only reads: nothing is created for a store that does not exist
    yet, and a read-only store is read as it is. Where it can write, it first marks the runs of
    dead processes failed (*recover*), so they do not show as running.
    """
    read_only = not recover or (
        isinstance(config.store, str) and not store_exists(config.store, config.base_dir)
    )
    if not read_only:
        try:
            store = config.open_store()
        except StoreError as error:
            if not error.read_only:
                raise
            read_only = True
        else:
            try:
                with contextlib.suppress(StoreError):
                    store.recover_dead_runs()  # best effort: it writes, the query only reads
                yield store
            finally:
                if store is not config.store:
                    store.close()
            return
    with config.using_store(read_only=True) as store:
        yield store


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
    with _reading(config) as store:
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
    with _reading(config) as store:
        return store.runs(limit)


def failures(
    config: Config, definition_id: str, *, limit: int | None = None
) -> tuple[FailureRecord, ...]:
    """
    The failed items of a definition with their evidence, in natural identity order, and its
    states of any other status whose rollback failed (``migrate rollback``): each record's
    ``status`` says which, and ``rollback_attempts`` lists the failed rollbacks.

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
    with _reading(config, recover=False) as store:
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


def forget(config: Config, definition_id: str, identities: Sequence[str]) -> tuple[ItemState, ...]:
    """
    Remove the stored states of these identities of a definition (``migrate forget``).

    For states no run can clear: a failure of an identity gone from the source, a record
    without identity (``<line 17>``) that will not be read again. A later run treats a
    forgotten identity as never seen. Holds the definition's lock while it works, so it never
    races a run.

    Args:
        config: The config whose store is changed.
        definition_id: The definition.
        identities: The identities to forget; ones without a stored state are ignored.

    Returns:
        The states removed, in identity order.

    Raises:
        UsageError: For an unknown definition id, or no identity given.
        LockHeld: If a live run holds the definition's lock.
    """
    config.get(definition_id)
    if not identities:
        raise UsageError("name the identities to forget: migrate forget DEF --id X [--id Y]")
    holder = f"forget-{secrets.token_hex(4)}"
    with config.using_store() as store:
        store.recover_dead_runs()
        store.acquire_locks(holder, [definition_id])
        try:
            return store.forget(definition_id, list(dict.fromkeys(identities)))
        finally:
            store.release_locks(holder)
