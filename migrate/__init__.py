"""
A migration SDK: sources, process pipelines, destinations, item state, runs.

A `Config` holds `Migration` definitions: each reads a `Source` in windows, runs its process for
each item with a Pipeline Execution `Scope`, and records every item's state (``migrated``,
``skipped``, ``failed`` with evidence, ``needs-update``) in a SQLite store, so failed items can be
fixed and reprocessed alone. ``python -m migrate`` / ``migrate`` is the command line.
"""

from migrate._compensate import compensate, compensate_async
from migrate._definition import Config, Migration, Process, Rollback, SourceRetryStrategy
from migrate._destinations import SqlDestination, destination
from migrate._errors import (
    CompensationError,
    ConfigError,
    ContractChanged,
    DestinationError,
    LockHeld,
    MigrateError,
    PreflightRefused,
    RefusedError,
    RollbackRefused,
    Skip,
    SourceError,
    StaleWindowError,
    StoreError,
    StoreSchemaError,
    TrackingError,
    UsageError,
)
from migrate._loading import load_config
from migrate._pipeline import Journal, Scope, current_scope
from migrate._planner import Mode, Plan, PlanStep, RunOptions, plan
from migrate._queries import failures, forget, runs, status, unlock
from migrate._refusals import refusals
from migrate._reports import (
    DefinitionStatus,
    ErrorCount,
    ProgressEvent,
    RunRef,
    RunSummary,
    StatusReport,
)
from migrate._rollback import rollback
from migrate._rollback_item import RollbackItem
from migrate._runner import run
from migrate._sources import (
    Contract,
    CsvSource,
    Cursor,
    Fault,
    Item,
    JsonlSource,
    LookupStrategy,
    MemorySource,
    Source,
    SqlSource,
    Window,
    identity_text,
)
from migrate._state import (
    Counts,
    DefinitionResult,
    ErrorEvidence,
    FailureRecord,
    ItemState,
    ItemStatus,
    LockInfo,
    RunRecord,
    RunStatus,
)
from migrate._store import RollbackCommit, StateWrite, Store, UpdateRequest, WindowCommit
from migrate._store_memory import MemoryStore
from migrate._store_open import open_store
from migrate._store_sqlite import SCHEMA_VERSION, SqliteStore
from migrate._text import format_time

__all__ = [
    "CompensationError",
    "Config",
    "ConfigError",
    "Contract",
    "ContractChanged",
    "Counts",
    "CsvSource",
    "Cursor",
    "DefinitionResult",
    "DefinitionStatus",
    "DestinationError",
    "ErrorCount",
    "ErrorEvidence",
    "FailureRecord",
    "Fault",
    "Item",
    "ItemState",
    "ItemStatus",
    "Journal",
    "JsonlSource",
    "LockHeld",
    "LockInfo",
    "LookupStrategy",
    "MemorySource",
    "MemoryStore",
    "MigrateError",
    "Migration",
    "Mode",
    "Plan",
    "PlanStep",
    "PreflightRefused",
    "Process",
    "ProgressEvent",
    "RefusedError",
    "Rollback",
    "RollbackCommit",
    "RollbackItem",
    "RollbackRefused",
    "RunOptions",
    "RunRecord",
    "RunRef",
    "RunStatus",
    "RunSummary",
    "SCHEMA_VERSION",
    "Scope",
    "Skip",
    "Source",
    "SourceError",
    "SourceRetryStrategy",
    "SqlDestination",
    "SqlSource",
    "SqliteStore",
    "StaleWindowError",
    "StateWrite",
    "StatusReport",
    "Store",
    "StoreError",
    "StoreSchemaError",
    "TrackingError",
    "UpdateRequest",
    "UsageError",
    "Window",
    "WindowCommit",
    "compensate",
    "compensate_async",
    "current_scope",
    "destination",
    "failures",
    "forget",
    "format_time",
    "identity_text",
    "load_config",
    "open_store",
    "plan",
    "refusals",
    "rollback",
    "run",
    "runs",
    "status",
    "unlock",
]


def _publish() -> None:
    # Users read `migrate.ConfigError`, not `migrate._errors.ConfigError`, in reprs, tracebacks
    # and pickles (httpx does the same); every such name is importable from here.
    namespace = globals()
    for name in __all__:
        value = namespace[name]
        if isinstance(value, type) and value.__module__.startswith("migrate._"):
            value.__module__ = __name__


_publish()
del _publish
