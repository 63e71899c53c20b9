"""The Pipeline Execution Scope handed to a process, its journal, and error evidence."""

from __future__ import annotations

import json
import math
import os
import sys
import sysconfig
import threading
import traceback
from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from types import CodeType, FrameType, MappingProxyType, TracebackType
from typing import Any, cast

import effects
import schedules
from effects import RetryEvent
from migrate._errors import DestinationError, SourceError, TrackingError
from migrate._json import plain, safe_text
from migrate._state import ErrorEvidence, ErrorKind

__all__ = ["Journal", "Scope", "current_scope", "evidence_for"]


class Journal:
    """
    The item's journal: change entries (what was written where) and diagnostic entries.

    It is stored with the item's state, also when the item fails, so the evidence shows which
    destination writes happened before the failure. Entries must be JSON-able.

    Args:
        entries: Entries to start from; ``None``: none.

    Example:
        >>> journal = Journal()
        >>> journal.change("sql:authors", "upsert", key=42)
        >>> journal.diagnostic("name trimmed", field="name")
        >>> for entry in journal.entries:
        ...     print(entry)
        {'kind': 'change', 'destination': 'sql:authors', 'operation': 'upsert', 'key': 42}
        {'kind': 'diagnostic', 'message': 'name trimmed', 'field': 'name'}
    """

    __slots__ = ("entries",)

    def __init__(self, entries: list[dict[str, Any]] | None = None) -> None:
        #: The entries in the order they were recorded.
        self.entries: list[dict[str, Any]] = [] if entries is None else entries

    def change(self, destination: str, operation: str, key: Any = None, **details: Any) -> None:
        """
        Record a destination change, e.g. ``change("sql:authors", "upsert", key=42)``.

        Args:
            destination: Which destination was changed.
            operation: What was done (``"upsert"``, ``"delete"``, ``"POST /authors"``, ...).
            key: The destination key concerned, if any.
            **details: Further JSON-able facts.
        """
        entry: dict[str, Any] = {"kind": "change", "destination": destination}
        entry["operation"] = operation
        if key is not None:
            entry["key"] = key
        entry.update(details)
        self.entries.append(entry)

    def diagnostic(self, message: str, **details: Any) -> None:
        """
        Record a diagnostic note (anything worth knowing later).

        Args:
            message: The note.
            **details: JSON-able facts.
        """
        entry: dict[str, Any] = {"kind": "diagnostic", "message": message}
        entry.update(details)
        self.entries.append(entry)

    def __len__(self) -> int:
        return len(self.entries)

    def __repr__(self) -> str:
        return f"Journal({self.entries!r})"


TrackingLookup = Callable[[str, str], "dict[str, Any] | None"]


class Scope:
    """
    The Pipeline Execution Scope: what a process knows about the item it is processing.

    Attributes:
        run_id: The current Migration Run.
        definition_id: The definition the item belongs to.
        identity: The item's identity.
        journal: The item's `Journal`.
        tracking: The item's tracking record so far: the one saved by an earlier run (e.g. the
            destination id it got), or the one set with `track` in this run; ``None`` if neither.

    Args:
        run_id: The current Migration Run.
        definition_id: The item's definition.
        identity: The item's identity.
        tracking: Its tracking record so far, if any.
        lookup: Reads another item's tracking record (`lookup`); ``None``: there is none.
        prior_journal: The journal stored with the item's state before this run processed it,
            as the store keeps it (JSON text, decoded on first use of `prior_journal`) or as
            entries; ``None``: none.
    """

    __slots__ = (
        "_attempts",
        "_journal",
        "_lookup",
        "_prior_journal",
        "_tracked",
        "definition_id",
        "identity",
        "run_id",
        "tracking",
    )

    def __init__(
        self,
        run_id: str,
        definition_id: str,
        identity: str,
        tracking: dict[str, Any] | None = None,
        lookup: TrackingLookup | None = None,
        *,
        prior_journal: str | Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        self.run_id = run_id
        self.definition_id = definition_id
        self.identity = identity
        # Made on first use: most items of a run never write one.
        self._journal: Journal | None = None
        self.tracking = tracking
        self._lookup = lookup
        self._prior_journal: str | tuple[Mapping[str, Any], ...] | None = (
            prior_journal
            if prior_journal is None or isinstance(prior_journal, str)
            else _entries(prior_journal)
        )
        self._tracked = False
        self._attempts: dict[int, tuple[BaseException, int]] | None = None

    def __repr__(self) -> str:
        return (
            f"Scope(run_id={self.run_id!r}, definition_id={self.definition_id!r}, "
            f"identity={self.identity!r})"
        )

    @property
    def journal(self) -> Journal:
        """The item's `Journal` (see the class docstring)."""
        journal = self._journal
        if journal is None:
            journal = self._journal = Journal()
        return journal

    def track(self, record: Mapping[str, Any]) -> None:
        """
        Set the item's tracking record, saved with its state.

        Other definitions read it with `lookup`. It replaces any earlier record.

        Args:
            record: JSON-able facts about the item's destination, e.g. ``{"destination_id": 17}``.

        Raises:
            TrackingError: If *record* is not a JSON-able mapping.
        """
        candidate = cast(object, record)
        if not isinstance(candidate, Mapping):
            raise TrackingError(f"a tracking record must be a mapping, got {record!r}")
        try:
            json.dumps(record, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise TrackingError(f"tracking record is not JSON-able: {error}") from error
        self.tracking = dict(record)
        self._tracked = True

    @property
    def prior_journal(self) -> tuple[Mapping[str, Any], ...]:
        """
        The journal stored with the item's state before this run processed it: the entries the
        run that last wrote its state recorded (change and diagnostic entries, in order); ``()``
        if the item had no state or its state no journal. Read-only evidence of what earlier
        runs did, e.g. whether a destination created a row the item's first migration wrote
        (`SqlDestination` reads it so): this run's entries are in `journal`.

        Decoded from the store's text on first use; entries that are not JSON objects are
        left out, and a journal that cannot be decoded reads as ``()``. The entries are
        read-only mappings.

        Example:
            >>> scope = Scope("r1", "authors", "7", prior_journal='[{"kind": "change"}, 3]')
            >>> [dict(entry) for entry in scope.prior_journal]
            [{'kind': 'change'}]
            >>> Scope("r1", "authors", "7").prior_journal
            ()
        """
        prior = self._prior_journal
        if prior is None:
            return ()
        if isinstance(prior, str):
            try:
                decoded: object = json.loads(prior)
            except ValueError:
                decoded = None
            listed = cast("list[object]", decoded) if isinstance(decoded, list) else []
            # Freshly decoded: no one else holds these dicts, so a view of each is enough.
            prior = tuple(
                MappingProxyType(cast("dict[str, Any]", entry))
                for entry in listed
                if isinstance(entry, dict)
            )
            self._prior_journal = prior
        return prior

    @property
    def tracked(self) -> bool:
        """Whether `track` was called for this item in this run."""
        return self._tracked

    def note_attempts(self, error: BaseException, attempts: int) -> None:
        """Remember that the retried call that failed with *error* made *attempts* attempts."""
        if self._attempts is None:
            self._attempts = {}
        self._attempts[id(error)] = (error, attempts)

    def attempts_of(self, error: BaseException) -> int:
        """Attempts noted for *error* (or an error it was raised from); 1 if none."""
        recorded = self._attempts
        if not recorded:
            return 1
        seen: set[int] = set()
        current: BaseException | None = error
        while current is not None and id(current) not in seen:
            seen.add(id(current))
            hit = recorded.get(id(current))
            if hit is not None and hit[0] is current:
                return hit[1]
            current = current.__cause__ or current.__context__
        return 1

    def lookup(self, definition_id: str, identity: Any) -> dict[str, Any] | None:
        """
        Another item's tracking record: of *identity* in definition *definition_id*.

        Returns whatever tracking record is stored for that item (``None`` if it has none or has
        no state yet), whatever its status; a process usually fails or skips when it is ``None``.

        Args:
            definition_id: The other definition, e.g. ``"authors"``.
            identity: The other item's identity (converted with ``str``).

        Raises:
            TrackingError: If *definition_id* is not a definition of the config.
        """
        if self._lookup is None:
            return None
        return self._lookup(definition_id, str(identity))


def _entries(entries: Sequence[object]) -> tuple[Mapping[str, Any], ...]:
    """The entries of *entries* that are mappings, as read-only copies."""
    return tuple(
        MappingProxyType(dict(cast("Mapping[str, Any]", entry)))
        for entry in entries
        if isinstance(entry, Mapping)
    )


def journal_entries(scope: Scope) -> list[dict[str, Any]]:
    """The entries of *scope*'s journal so far: ``[]`` (without making a journal) if none."""
    journal = scope._journal  # pyright: ignore[reportPrivateUsage]
    return [] if journal is None else journal.entries


_CURRENT: ContextVar[Scope | None] = ContextVar("migrate_scope", default=None)


def current_scope() -> Scope | None:
    """The scope of the item being processed in this thread or task, if any."""
    return _CURRENT.get()


class RetryTally:
    """
    The retries made during one definition's work in one run; thread-safe.

    The runner sets it as the current tally (`counting_retries`) around the definition's work;
    tasks and worker threads started from there inherit it with their context.

    Attributes:
        definition_id: The definition whose work is counted.
        retries: ``"retry"`` events heard: retries made.
        gave_up: ``"give_up"`` and ``"budget_exhausted"`` events after at least one retry:
            retried calls that failed all the same.
    """

    __slots__ = ("_lock", "definition_id", "gave_up", "retries")

    def __init__(self, definition_id: str) -> None:
        self.definition_id = definition_id
        self.retries = 0
        self.gave_up = 0
        # Worker threads (asyncio.to_thread) report at once; "+=" alone could lose a count.
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"RetryTally({self.definition_id!r}, retries={self.retries}, gave_up={self.gave_up})"

    def add_retry(self) -> None:
        """Count one retry."""
        with self._lock:
            self.retries += 1

    def add_gave_up(self) -> None:
        """Count one retried call that failed in the end."""
        with self._lock:
            self.gave_up += 1


_TALLY: ContextVar[RetryTally | None] = ContextVar("migrate_retry_tally", default=None)


@contextmanager
def counting_retries(tally: RetryTally) -> Generator[RetryTally]:
    """Count the retries heard by `record_attempts` in this context into *tally*."""
    token = _TALLY.set(tally)
    try:
        yield tally
    finally:
        _TALLY.reset(token)


def record_attempts(event: RetryEvent) -> None:
    """
    A retry hook counting a definition's retries and the attempts of a call that gave up.

    A run registers it (``effects.add_hook``) for its duration. A ``"retry"`` event counts one
    retry in the current `RetryTally`; a ``"give_up"`` or ``"budget_exhausted"`` event counts a
    retried call that failed (after at least one retry) there, and keeps the call's attempt
    count in the current item's scope, so the item's error evidence can say how many attempts
    the failing call made. Without a current tally or scope it does nothing; a call that
    succeeds at once emits no event at all.
    """
    kind = event.kind
    if kind == "retry":
        tally = _TALLY.get()
        if tally is not None:
            tally.add_retry()
    elif kind != "attempt":
        scope = _CURRENT.get()
        if scope is not None:
            scope.note_attempts(event.error, event.attempt)
        if event.attempt > 1:
            tally = _TALLY.get()
            if tally is not None:
                tally.add_gave_up()


def attempts_of(scope: Scope, error: BaseException) -> int:
    """Attempts recorded for *error* (or an error it was raised from) in *scope*; 1 if none."""
    return scope.attempts_of(error)


# The packages of this distribution: frames in them are never the line a user has to fix.
_OURS = tuple(
    str(Path(file).resolve().parent) + os.sep
    for file in (__file__, effects.__file__, schedules.__file__)
    if file
)
# Nor, when there is a better one, are frames of the standard library or installed packages (a
# driver raising deep inside, the thread pool re-raising a worker's error).
_LIBRARIES = tuple(
    {
        str(Path(path).resolve()) + os.sep
        for key in ("stdlib", "platstdlib", "purelib", "platlib")
        if (path := sysconfig.get_paths().get(key))
    }
)


def _where(error: BaseException) -> str | None:
    """
    Where *error* was raised in the user's code: the deepest frame of its traceback outside
    ``migrate``, ``effects`` and ``schedules`` and, when there is one, outside the standard
    library and installed packages (a destination call fails deep inside them, but the line to
    fix is the process's); the deepest frame when every one is ours.
    """
    try:
        frames = traceback.extract_tb(error.__traceback__)
    except Exception:  # noqa: BLE001 - evidence must not fail on a broken traceback
        return None
    if not frames:
        return None
    theirs = [frame for frame in frames if not frame.filename.startswith(_OURS)]
    users = [frame for frame in theirs if not frame.filename.startswith(_LIBRARIES)]
    chosen = (users or theirs or frames)[-1]
    return f"{chosen.filename}:{chosen.lineno} in {chosen.name}"


#: Per code object: 0 for ours, 1 for a library's, 2 for the user's (see `call_site`).
_OWNERS: dict[CodeType, int] = {}


def _owner(code: CodeType) -> int:
    owner = _OWNERS.get(code)
    if owner is None:
        name = code.co_filename
        owner = 0 if name.startswith(_OURS) else 1 if name.startswith(_LIBRARIES) else 2
        _OWNERS[code] = owner
    return owner


#: Where a call was made: the frame, its last instruction and its line then.
CallSite = tuple[FrameType, int, int]


def call_site() -> CallSite | None:
    """
    The line of the caller's caller that `_where` would name for an error raised here: the
    innermost frame outside this distribution that called into it (a user's before a
    library's); ``None`` if every frame is ours.

    For an error found later than the call that caused it (a destination write the window
    sends at its end): `site_traceback` of it, given as the error's ``__traceback__``, makes
    its evidence name the process's line, as it would have had the call raised at once.
    Costs a walk over the frames between here and the user's code (about a microsecond).
    """
    frame: FrameType | None = sys._getframe(1)  # pyright: ignore[reportPrivateUsage]
    chosen: FrameType | None = None
    owners = _OWNERS
    while frame is not None:
        code = frame.f_code
        owner = owners.get(code)
        if owner is None:
            owner = _owner(code)
        if owner == 2:
            chosen = frame
            break
        if owner == 1:
            chosen = chosen or frame
        elif chosen is not None:
            break  # ours again, after a library's: the caller's own frames end here
        frame = frame.f_back
    if chosen is None:
        return None
    return chosen, chosen.f_lasti, chosen.f_lineno


def site_traceback(site: CallSite | None) -> TracebackType | None:
    """A one-frame traceback of *site* (see `call_site`)."""
    return None if site is None else TracebackType(None, *site)


def _attribute(value: object, name: str) -> object:
    """``getattr(value, name, None)``, also when the attribute itself raises."""
    try:
        return getattr(value, name, None)
    except Exception:  # noqa: BLE001 - a property that raises is an attribute we cannot read
        return None


def _cause_details(cause: object, details: dict[str, Any]) -> None:
    if not isinstance(cause, BaseException):
        return
    details["cause"] = f"{type(cause).__name__}: {safe_text(cause)}"
    for name in ("status", "retry_after", "transient", "code"):
        value = _attribute(cause, name)
        if isinstance(value, bool | int | str) or (
            isinstance(value, float) and math.isfinite(value)
        ):
            details[name] = value


def evidence_for(
    error: BaseException, scope: Scope | None, kind: ErrorKind | None = None
) -> ErrorEvidence:
    """
    Build the evidence for an item that failed with *error*; never raises.

    The kind is *kind* if given, else ``destination`` for a `DestinationError`, ``source`` for a
    `SourceError`, ``tracking`` for a `TrackingError`, and ``process`` for anything else. An
    error whose text, ``details`` or cause cannot be read (they raise, or are not JSON) is
    described by what can be read of it.
    """
    details: dict[str, Any] = {}
    if kind is None:
        if isinstance(error, DestinationError):
            kind = "destination"
        elif isinstance(error, SourceError):
            kind = "source"
        elif isinstance(error, TrackingError):
            kind = "tracking"
        else:
            kind = "process"
    if isinstance(error, DestinationError | SourceError):
        _cause_details(_attribute(error, "cause"), details)
    else:
        _cause_details(error.__cause__, details)
    extra = _attribute(error, "details")
    if isinstance(extra, Mapping):
        try:
            pairs = list(cast("Mapping[object, object]", extra).items())
        except Exception:  # noqa: BLE001 - details that cannot be iterated are left out
            pairs = []
        for key, value in pairs:
            value_plain = plain(value)
            details[safe_text(key, 200)] = (
                value_plain
                if isinstance(value_plain, str | int | float | bool)
                else safe_text(value)
            )
    where = _where(error)
    if where is not None:
        details["where"] = where
    attempts = 1 if scope is None else attempts_of(scope, error)
    message = _attribute(error, "message")
    if not isinstance(message, str):
        message = safe_text(error)
    return ErrorEvidence(
        kind=kind,
        type=_type_name(error),
        message=message,
        details=details,
        attempts=attempts,
    )


def _type_name(error: BaseException) -> str:
    name = _attribute(type(error), "__name__")
    return name if isinstance(name, str) else "Exception"
