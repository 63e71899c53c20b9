"""
Errors raised by ``migrate``.

Operational errors (what a caller handles) sit under `MigrateError`; misuse subclasses the
builtin it means, so ``except MigrateError`` never hides a bug::

    Exception
     +-- Skip                      a process skips its item (a decision, not an error)
     +-- MigrateError
     |    +-- SourceError          a source read or lookup failed; ``cause`` is the provider's error
     |    +-- DestinationError     a destination call failed; ``cause`` is the provider's error
     |    +-- CompensationError    a `compensate` handler failed; ``entries`` were undone before
     |    +-- StoreError           the store cannot be used: not a migrate store, corrupt,
     |    |                        read-only, or a commit failed (disk full, ...) (CLI exit code 5)
     |    +-- RefusedError         the run was refused before it started (CLI exit code 3)
     |         +-- LockHeld            another run holds a definition's lock
     |         +-- PreflightRefused    a required dependency is not in a good state
     |         +-- ContractChanged     a definition's source contract differs from the stored one
     |         +-- RollbackRefused     a rollback would leave a dependent's states, or has no
     |         |                       ``rollback=`` to undo a definition's states with
     |         +-- StoreSchemaError    the store was written by a newer ``migrate``
     +-- ValueError
          +-- ConfigError          the config file or a config value is wrong (CLI exit code 2)
          +-- UsageError           bad run options or an unknown definition id (CLI exit code 2)
          +-- TrackingError        a process tracked a record that is not JSON-able, or looked up
                                   an unknown definition (fails the item, kind ``tracking``)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from migrate._state import LockInfo
from migrate._text import format_time, printable

__all__ = [
    "CompensationError",
    "ConfigError",
    "ContractChanged",
    "DestinationError",
    "LockHeld",
    "MigrateError",
    "PreflightRefused",
    "RefusedError",
    "RollbackRefused",
    "Skip",
    "SourceError",
    "StoreError",
    "StoreSchemaError",
    "TrackingError",
    "UsageError",
]


class Skip(Exception):  # noqa: N818 - the issue fixes this name: `raise migrate.Skip(reason)`
    """
    Raised by a process pipeline to skip its item; the item's state becomes ``skipped``.

    Args:
        reason: Why the item is skipped; stored with the state and shown by ``status``.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class MigrateError(Exception):
    """Base of the operational errors of ``migrate``."""


class SourceError(MigrateError):
    """
    A source read or lookup failed.

    Args:
        message: What failed, naming the source.
        cause: The provider's error (also set as ``__cause__``), so a retry strategy can classify
            it; ``None`` for failures found by the source itself (e.g. a malformed row).
    """

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.cause = cause
        #: False when the cause says so (e.g. an ``effects.FatalError``): retries then stop.
        self.retryable = getattr(cause, "retryable", True) is not False
        if cause is not None:
            self.__cause__ = cause


class DestinationError(MigrateError):
    """
    A destination call failed.

    Args:
        message: What failed, naming the destination and the key.
        cause: The provider's error (also set as ``__cause__``) for a retry strategy to classify.
    """

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.cause = cause
        #: False when the cause says so (e.g. an ``effects.FatalError``): retries then stop.
        self.retryable = getattr(cause, "retryable", True) is not False
        if cause is not None:
            self.__cause__ = cause


class CompensationError(MigrateError):
    """
    A handler of `migrate.compensate` failed: the item's walk stopped there, part undone.

    What a rollback runner records as the item's rollback attempt: ``entries`` are that
    attempt's ``entries`` (a later attempt skips them), the error itself its ``error``
    (``{"type": "CompensationError", "message": str(error)}``; the message names the entry and
    the cause), or the cause's type and text for a narrower record.

    Args:
        message: What failed: the entry, its destination and the cause.
        entries: The journal entries undone in this attempt before the failure, in the order
            they were undone (newest first), as plain dicts; kept as ``entries``.
        entry: The entry whose handler failed; kept as ``entry``.
        destination: That entry's destination; kept as ``destination``.
        cause: The handler's error (also ``__cause__``); kept as ``cause``.
    """

    def __init__(
        self,
        message: str,
        *,
        entries: tuple[dict[str, Any], ...] = (),
        entry: dict[str, Any] | None = None,
        destination: str | None = None,
        cause: BaseException | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.entries = entries
        self.entry = entry
        self.destination = destination
        self.cause = cause
        if cause is not None:
            self.__cause__ = cause


class StoreError(MigrateError):
    """
    The store cannot be used, or an operation on it failed; nothing was half-written.

    Raised when the store file is not a SQLite database, is truncated or corrupt, is a SQLite
    database of something else, is read-only for a command that writes, or when a commit fails
    (a full disk, an I/O error, a lock another connection held past the timeout). A failed window
    commit leaves the run's stored counts at the last committed window.

    Args:
        message: What failed, naming the store (its path) and the cause.
        cause: The backend's error (also ``__cause__``), if any.
        read_only: The store could not be written because it is read-only (a command that
            only reads can still open it read-only); kept as ``read_only``.
    """

    def __init__(
        self, message: str, cause: BaseException | None = None, *, read_only: bool = False
    ) -> None:
        super().__init__(message)
        self.message = message
        self.cause = cause
        self.read_only = read_only
        if cause is not None:
            self.__cause__ = cause


class StaleWindowError(StoreError):
    """
    A window's commit was refused, nothing written: the run's stored counts moved since the
    window started, so another process works the run (see `WindowCommit.based_on`).
    """


class RefusedError(MigrateError):
    """A run was refused before it processed anything (lock held, preflight, newer store)."""


class LockHeld(RefusedError):  # noqa: N818 - named in the CLI contract; reads as a verdict
    """
    Another run holds the lock of a definition this run needs.

    A lock marked with a durable run (`LockInfo.durable_run_id`) names it too, and the process
    that started it: that process may be gone while the durable run goes on elsewhere.

    Args:
        lock: The lock found; also kept as ``lock``, its definition as ``definition_id``.
    """

    def __init__(self, lock: LockInfo) -> None:
        self.lock = lock
        self.definition_id = lock.definition_id
        holder = f"pid {lock.pid} on host {lock.host}"
        if lock.durable_run_id is not None:
            # Escaped: unlike our run ids, the durable run's id may come from a caller.
            holder = f"durable run {printable(lock.durable_run_id)}, started by {holder}"
        super().__init__(
            f"definition {lock.definition_id!r} is locked by run {lock.run_id} "
            f"({holder}, since {format_time(lock.acquired_at)}); "
            f"wait for it to finish, or if it is stale run: migrate unlock {lock.definition_id}"
        )


class PreflightRefused(RefusedError):  # noqa: N818 - named in the CLI contract
    """
    A required dependency's latest run did not succeed cleanly.

    Args:
        problems: One message per refused (definition, dependency) pair, saying which and how
            to proceed; kept as ``problems``.
    """

    def __init__(self, problems: tuple[str, ...]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class ContractChanged(RefusedError):  # noqa: N818 - named like its siblings LockHeld, ...
    """
    A definition's source contract (kind, identity field, version field, lookup strategy)
    differs from the one recorded with its stored states; ``--force`` accepts the new one.

    Args:
        message: What changed, from what to what, and how to proceed, per definition.
        changes: Per changed definition id, what changed (``"identity field 'id' -> 'isbn'"``);
            kept as ``changes``.
    """

    def __init__(self, message: str, changes: Mapping[str, tuple[str, ...]]) -> None:
        self.changes = dict(changes)
        super().__init__(message)


class RollbackRefused(RefusedError):  # noqa: N818 - named like its siblings LockHeld, ...
    """
    A rollback refused before anything was recorded or undone: a definition with stored states
    has no ``rollback=`` to undo them with, or a definition that depends on one being rolled
    back still holds states (``--with-dependencies`` rolls it back first, ``--force`` goes on
    without it).

    Args:
        problems: One message per refusal, saying which definition and how to proceed; kept
            as ``problems``.
    """

    def __init__(self, problems: tuple[str, ...]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


class StoreSchemaError(RefusedError):
    """The store's schema version is newer than this version of ``migrate`` understands."""


class ConfigError(ValueError):
    """The config file or a config value is wrong; the message names the problem."""


class UsageError(ValueError):
    """Run options that cannot go together, or an unknown definition id."""


class TrackingError(ValueError):
    """
    A process misused its tracking: `Scope.track` with a record that is not a JSON-able mapping,
    or `Scope.lookup` of a definition the config does not have. The item fails with kind
    ``tracking``.
    """
