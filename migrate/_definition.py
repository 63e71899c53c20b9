"""Migration definitions and the config that holds them."""

from __future__ import annotations

import contextlib
import inspect
import re
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, TypeVar, cast

import attrs

from effects import Effect
from migrate._errors import ConfigError, SourceError, UsageError
from migrate._sources import Item, Source
from migrate._store import Store
from migrate._store_open import open_store
from schedules import to_seconds

if TYPE_CHECKING:
    from collections.abc import Generator

    from migrate._pipeline import Scope
    from migrate._rollback_item import RollbackItem

__all__ = ["DEFAULT_STORE", "Config", "Migration", "Process", "Rollback", "SourceRetryStrategy"]

_A = TypeVar("_A")
_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")

DEFAULT_STORE = "sqlite:///.migrate/state.db"


class SourceRetryStrategy(Protocol):
    """
    A wrapper from a source effect to one with the same success and error contract.

    Called with the effect of one window read (``source_cursor_retry``) or one lookup
    (``source_lookup_retry``). An ``effects.Retry`` value is one as it stands; so is any function
    such as ``lambda read: read.retry(times=3)``.
    """

    def __call__(self, effect: Effect[_A, SourceError], /) -> Effect[_A, SourceError]: ...


Process: TypeAlias = "Callable[[Item, Scope], Any]"
"""``process(item, scope)``: a plain or ``async`` function; its return value is ignored."""

Rollback: TypeAlias = "Callable[[RollbackItem, Scope], Any]"
"""``rollback(item, scope)``: a plain or ``async`` function undoing one item from its stored
journal (`RollbackItem`); it never reads the source. Raising fails that item's rollback."""


def _ids(value: Iterable[str] | str, name: str) -> tuple[str, ...]:
    if isinstance(value, str):
        raise ConfigError(f"{name} must be a sequence of ids, not the string {value!r}")
    return tuple(value)


def _requires(value: Iterable[str]) -> tuple[str, ...]:
    return _ids(value, "requires")


def _optional(value: Iterable[str]) -> tuple[str, ...]:
    return _ids(value, "optional")


def _check_id(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise ConfigError(
            f"migration id must be letters, digits, '_', '.', '-' (not starting with '.' or "
            f"'-'), got {value!r}"
        )


def _timeout(value: object) -> float | None:
    if value is None:
        return None
    try:
        seconds = to_seconds(value, name="timeout")  # type: ignore[arg-type]
    except (TypeError, ValueError) as error:
        raise ConfigError(f"timeout: {error}") from None
    if seconds <= 0:
        raise ConfigError(f"timeout must be more than 0 seconds, got {value!r}")
    return seconds


def _generator_kind(process: Callable[..., Any]) -> str | None:
    for candidate in (process, getattr(type(process), "__call__", None)):  # noqa: B004
        if candidate is None:
            continue
        target = inspect.unwrap(candidate) if callable(candidate) else candidate
        if inspect.isasyncgenfunction(target):
            return "an async generator function"
        if inspect.isgeneratorfunction(target):
            return "a generator function"
    return None


def _name_of(process: Callable[..., Any]) -> str:
    name = getattr(process, "__qualname__", None) or type(process).__qualname__
    return f"{name}()"


@attrs.frozen
class Migration:
    """
    A Migration Definition: a source, a process pipeline and its options.

    Args:
        id: The definition's id: letters, digits, ``_``, ``.``, ``-``.
        source: Where items are read (`CsvSource`, `JsonlSource`, `SqlSource`, `MemorySource` or
            your own `Source`).
        process: ``process(item, scope)``, plain or ``async``; raise `Skip` to skip the item.
            Any other exception fails the item, with evidence.
        requires: Ids of definitions that must have run cleanly first (checked before a run,
            unless forced), and that ``--with-dependencies`` pulls into the plan.
        optional: Ids of definitions that run first when they are in the same plan; not checked.
        source_cursor_retry: Wraps each window read (e.g. an ``effects.Retry``); ``None``: none.
        source_lookup_retry: Wraps each lookup by identity (failed/skipped/id runs).
        concurrency: Items of a window processed at once (>= 1): ``async`` processes as tasks
            of one event loop, plain ones in that many threads.
        timeout: Longest time one item's process may take, in seconds (or a ``timedelta``, or
            a string like ``"30s"``); ``None``: no limit. An item over it fails with a
            ``TimeoutError`` in its evidence. An ``async`` process is cancelled; a plain one
            cannot be stopped, so it is left to finish in its thread and its outcome ignored
            (with a timeout, a plain process always runs in a worker thread).
        rollback: ``rollback(item, scope)`` (plain or ``async``): undoes one item from its
            stored journal (a `RollbackItem`), for ``migrate rollback`` and
            ``--rollback-orphans``; ``None``: the definition cannot be rolled back.

    Raises:
        ConfigError: For a bad id, a non-positive *concurrency*, a bad *timeout*, a *source*
            that is not a `Source`, a *process* that is not callable or is a generator function
            (calling it would run none of its body), or a string given as *requires*.
    """

    id: str = attrs.field(validator=_check_id)
    source: Source
    process: Process
    requires: tuple[str, ...] = attrs.field(default=(), kw_only=True, converter=_requires)
    optional: tuple[str, ...] = attrs.field(default=(), kw_only=True, converter=_optional)
    source_cursor_retry: SourceRetryStrategy | None = attrs.field(default=None, kw_only=True)
    source_lookup_retry: SourceRetryStrategy | None = attrs.field(default=None, kw_only=True)
    concurrency: int = attrs.field(default=1, kw_only=True)
    timeout: float | None = attrs.field(default=None, kw_only=True, converter=_timeout)
    rollback: Rollback | None = attrs.field(default=None, kw_only=True)

    def __attrs_post_init__(self) -> None:
        source = cast(object, self.source)
        concurrency = cast(object, self.concurrency)
        if not isinstance(source, Source):
            raise ConfigError(
                f"migration {self.id!r}: source must be a migrate Source, got {self.source!r}"
            )
        if not callable(self.process):
            raise ConfigError(f"migration {self.id!r}: process must be callable")
        generator = _generator_kind(self.process)
        if generator is not None:
            raise ConfigError(
                f"migration {self.id!r}: process {_name_of(self.process)} is {generator} (it "
                "uses yield), so calling it would run none of its body; a process does its "
                "work and returns: remove the yield"
            )
        if isinstance(concurrency, bool) or not isinstance(concurrency, int):
            raise ConfigError(
                f"migration {self.id!r}: concurrency must be an int, got {self.concurrency!r}"
            )
        if self.concurrency < 1:
            raise ConfigError(
                f"migration {self.id!r}: concurrency must be >= 1, got {self.concurrency!r}"
            )
        for name in ("source_cursor_retry", "source_lookup_retry", "rollback"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise ConfigError(f"migration {self.id!r}: {name} must be callable or None")


def _find_cycle(edges: dict[str, tuple[str, ...]]) -> list[str] | None:
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in edges[node]:
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found is not None:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in edges:
        if node not in state:
            found = visit(node)
            if found is not None:
                return found
    return None


def _migrations(value: Iterable[Migration]) -> tuple[Migration, ...]:
    return tuple(value)


@attrs.frozen
class Config:
    """
    The migration definitions and where their state is stored.

    Args:
        migrations: The definitions, in the order ``list`` shows them.
        store: ``"sqlite:///path"`` (a relative path is relative to *base_dir*: the config
            file's folder when loaded with `load_config`; ``?timeout=SECONDS`` sets how long a
            write waits for another connection's lock), ``"postgresql://user@host/db"`` (a
            schema of a PostgreSQL database, ``?schema=NAME``; see `open_store`), or a `Store`
            object such as a `MemoryStore`, used as it is by every run and query of this config.
        base_dir: The folder relative store paths, and relative paths of file sources, start
            from; ``None``: the working folder.

    Raises:
        ConfigError: Naming duplicate ids, unknown ids in ``requires``/``optional``, or a
            dependency cycle (``a -> b -> a``).

    Example:
        >>> from migrate import MemorySource
        >>> def process(item, scope): ...
        >>> Config([
        ...     Migration("books", MemorySource([]), process, requires=["authors"]),
        ...     Migration("authors", MemorySource([]), process, requires=["books"]),
        ... ])
        Traceback (most recent call last):
        ...
        migrate.ConfigError: dependency cycle: books -> authors -> books
    """

    migrations: tuple[Migration, ...] = attrs.field(converter=_migrations)
    store: str | Store = DEFAULT_STORE
    base_dir: Path | None = None

    def __attrs_post_init__(self) -> None:
        seen: set[str] = set()
        duplicates: list[str] = []
        for migration in self.migrations:
            candidate = cast(object, migration)
            if not isinstance(candidate, Migration):
                raise ConfigError(f"migrations must be Migration values, got {migration!r}")
            if migration.id in seen and migration.id not in duplicates:
                duplicates.append(migration.id)
            seen.add(migration.id)
        if duplicates:
            raise ConfigError(f"duplicate migration ids: {', '.join(duplicates)}")
        unknown = [
            f"{m.id} -> {dep}"
            for m in self.migrations
            for dep in (*m.requires, *m.optional)
            if dep not in seen
        ]
        if unknown:
            raise ConfigError(f"unknown migration ids in requires/optional: {', '.join(unknown)}")
        edges = {m.id: (*m.requires, *m.optional) for m in self.migrations}
        cycle = _find_cycle(edges)
        if cycle is not None:
            raise ConfigError(f"dependency cycle: {' -> '.join(cycle)}")
        if self.base_dir is not None:
            # Relative source paths mean the same folder as a relative store path: the
            # config's, not wherever the command happens to run.
            for migration in self.migrations:
                migration.source.resolve(Path(self.base_dir))
        store = cast(object, self.store)
        if not isinstance(store, str | Store):
            raise ConfigError(
                f"store must be a 'sqlite:///path' or 'postgresql://...' URL, or a migrate Store, "
                f"got {self.store!r}"
            )

    @property
    def ids(self) -> tuple[str, ...]:
        """The definition ids in config order."""
        return tuple(m.id for m in self.migrations)

    def get(self, definition_id: str) -> Migration:
        """
        The definition whose id is *definition_id*.

        Raises:
            UsageError: If there is none; the message lists the known ids.
        """
        for migration in self.migrations:
            if migration.id == definition_id:
                return migration
        raise UsageError(
            f"unknown migration {definition_id!r}; known: {', '.join(self.ids) or '(none)'}"
        )

    def order(self, ids: Sequence[str] | None = None) -> tuple[str, ...]:
        """
        Definition ids in dependency order (``requires`` and ``optional`` first), config order
        breaking ties.

        Args:
            ids: Only these ids; ``None``: all.
        """
        chosen = set(self.ids if ids is None else ids)
        done: list[str] = []
        placed: set[str] = set()
        remaining = [m for m in self.migrations if m.id in chosen]
        while remaining:
            for migration in remaining:
                deps = [d for d in (*migration.requires, *migration.optional) if d in chosen]
                if all(d in placed for d in deps):
                    done.append(migration.id)
                    placed.add(migration.id)
                    remaining.remove(migration)
                    break
            else:  # pragma: no cover - cycles are refused at construction
                raise ConfigError("dependency cycle")
        return tuple(done)

    def dependents(self, definition_id: str) -> tuple[str, ...]:
        """Ids of the definitions that require or optionally follow *definition_id*."""
        return tuple(m.id for m in self.migrations if definition_id in (*m.requires, *m.optional))

    def open_store(self, *, read_only: bool = False) -> Store:
        """
        Open this config's store (see `open_store`); the caller closes it.

        A `Store` object given as ``store`` is returned as it is.

        Args:
            read_only: Open for reading only (nothing created or written).
        """
        if not isinstance(self.store, str):
            return self.store
        return open_store(self.store, base_dir=self.base_dir, read_only=read_only)

    @contextlib.contextmanager
    def using_store(self, *, read_only: bool = False) -> Generator[Store]:
        """The store for one run or query: opened and closed around it, unless it is an object."""
        store = self.open_store(read_only=read_only)
        if store is self.store:
            yield store
            return
        with store:
            yield store
