"""`compensate`: undo an item's journal, newest change first, one handler per destination."""

from __future__ import annotations

import contextlib
import inspect
import json
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeAlias, cast

from effects import AsyncEffect, Effect
from effects._callables import is_async_callable
from migrate._errors import CompensationError
from migrate._json import safe_text
from migrate._pipeline import Scope
from migrate._rollback_item import RollbackItem

__all__ = ["Handler", "compensate", "compensate_async", "pending_changes"]

Handler: TypeAlias = Callable[[dict[str, Any], Scope], object]
"""``handler(entry, scope)``: undoes one change entry of its destination; raising fails it."""

AsyncHandler: TypeAlias = Callable[[dict[str, Any], Scope], Awaitable[object] | object]
"""A `Handler` of `compensate_async`: a plain or ``async`` function."""


def compensate(
    item: RollbackItem, scope: Scope, handlers: Mapping[str, Handler]
) -> tuple[dict[str, Any], ...]:
    """
    Undo *item*'s destination changes from its journal, newest first, each with the handler of
    its destination: a rollback of a process that writes to several destinations.

    The walk takes the change entries of ``item.journal`` (``kind`` ``"change"``; diagnostic
    entries and values that are not mappings record no change and are passed over) in reverse
    order and calls ``handlers[entry["destination"]](entry, scope)`` for each, with a copy of
    the entry. Entries an earlier failed attempt already undid (the ``entries`` of
    ``item.rollback_attempts``) are skipped, each listed entry once: a journal that holds the
    same entry twice has it undone as often as it is there.

    Before anything is undone, every entry still to undo must name a destination (a string)
    that *handlers* has, with a plain (not ``async``) callable: otherwise nothing is undone and
    a `ValueError` or `TypeError` says which destination. A handler that raises stops the walk:
    the entries undone before it stay undone, and the `CompensationError` raised carries them
    (``entries``), so the attempt records them and the next attempt starts after them. A
    handler should be idempotent all the same (a missing row, a resource already gone: success),
    as an attempt that is killed records nothing and its successor undoes those entries again.
    A handler does its work and returns: one returning an ``Effect`` (which never ran), a
    coroutine or a generator fails with a `TypeError` as its cause.

    Args:
        item: The item to undo (`RollbackItem`), as ``Migration(rollback=fn)`` receives it.
        scope: The rollback's scope, passed on to each handler.
        handlers: Destination name (the entries' ``destination``: ``"sql:people"`` for
            `SqlDestination`, the name given to `destination` or ``Journal.change``) to
            ``handler(entry, scope)``; ``SqlDestination.undo`` is one.

    Returns:
        The entries undone by this call, in the order undone (newest first), as dicts.

    Raises:
        ValueError: Before undoing anything, if an entry to undo names no destination or one
            without a handler (the message names them and the handlers given).
        TypeError: Before undoing anything, if *handlers* is not a mapping, or a handler
            needed is not callable or is ``async`` (use `compensate_async`).
        CompensationError: If a handler raised: ``entries`` (undone before it, newest first),
            ``entry`` and ``destination`` (what failed), ``cause`` (its error).

    Example:
        >>> import migrate
        >>> undone = []
        >>> item = migrate.RollbackItem("7", "migrated", None, journal=(
        ...     {"kind": "change", "destination": "sql:people", "operation": "upsert", "key": 7},
        ...     {"kind": "change", "destination": "crm", "operation": "PUT /people/7"},
        ... ))
        >>> handlers = {
        ...     "sql:people": lambda entry, scope: undone.append(entry["key"]),
        ...     "crm": lambda entry, scope: undone.append(entry["operation"]),
        ... }
        >>> _ = migrate.compensate(item, migrate.Scope("r2", "people", "7"), handlers)
        >>> undone
        ['PUT /people/7', 7]
    """
    pending = _checked(item, handlers, asynchronous=False)
    undone: list[dict[str, Any]] = []
    for entry, destination, handler in pending:
        try:
            result = handler(dict(entry), scope)
            problem = _returned(result, handler, asynchronous=False)
            if problem is not None:
                raise problem
        except Exception as error:
            raise _failure(item, entry, destination, error, undone) from error
        undone.append(entry)
    return tuple(undone)


async def compensate_async(
    item: RollbackItem, scope: Scope, handlers: Mapping[str, AsyncHandler]
) -> tuple[dict[str, Any], ...]:
    """
    `compensate` for an ``async`` rollback: a handler may be plain or ``async``.

    The same walk, checks and errors as `compensate`, one handler at a time, with ``async``
    handlers (and plain ones returning an awaitable) awaited. A plain handler runs in the
    event loop's thread, as a plain call in an ``async`` function does: one that blocks for
    long holds up the other items of a concurrent rollback, so make it ``async``.

    Returns:
        The entries undone by this call, in the order undone (newest first), as dicts.

    Raises:
        ValueError: As `compensate`.
        TypeError: Before undoing anything, if *handlers* is not a mapping or a handler
            needed is not callable.
        CompensationError: As `compensate`.

    Example:
        >>> import asyncio, migrate
        >>> async def undo_crm(entry, scope):
        ...     print("undo", entry["operation"])
        >>> item = migrate.RollbackItem("7", "migrated", None, journal=(
        ...     {"kind": "change", "destination": "crm", "operation": "PUT /people/7"},
        ... ))
        >>> scope = migrate.Scope("r2", "people", "7")
        >>> _ = asyncio.run(migrate.compensate_async(item, scope, {"crm": undo_crm}))
        undo PUT /people/7
    """
    pending = _checked(item, handlers, asynchronous=True)
    undone: list[dict[str, Any]] = []
    for entry, destination, handler in pending:
        try:
            result = handler(dict(entry), scope)
            problem = _returned(result, handler, asynchronous=True)
            if problem is not None:
                raise problem
            if inspect.isawaitable(result):
                await result
        except Exception as error:
            raise _failure(item, entry, destination, error, undone) from error
        undone.append(entry)
    return tuple(undone)


def pending_changes(item: RollbackItem) -> list[dict[str, Any]]:
    """
    The change entries of *item*'s journal still to undo, newest first, as dicts: its journal's
    entries of kind ``"change"`` in reverse, less those its rollback attempts list as undone
    (each listed entry cancels one journal entry equal to it, newest first).
    """
    done = Counter(_key(entry) for entry in _attempted(item.rollback_attempts))
    pending: list[dict[str, Any]] = []
    for entry in reversed(_as_sequence(item.journal)):
        if not isinstance(entry, Mapping):
            continue
        change = dict(cast("Mapping[str, Any]", entry))
        if change.get("kind") != "change":
            continue
        key = _key(change)
        if done[key] > 0:
            done[key] -= 1
            continue
        pending.append(change)
    return pending


def describe_entry(entry: Mapping[str, Any]) -> str:
    """``'crm' PUT /people/7 of key 7``: an entry as a message names it; never raises."""
    text = f"{safe_text(repr(entry.get('destination')), 200)} {safe_text(entry.get('operation'))}"
    if "key" in entry:
        text += f" of key {safe_text(repr(entry['key']), 200)}"
    return text


def _checked(
    item: RollbackItem, handlers: Mapping[str, Any], *, asynchronous: bool
) -> list[tuple[dict[str, Any], str, Callable[..., Any]]]:
    """The pending entries with their destinations and handlers, all checked first."""
    if not isinstance(cast(object, handlers), Mapping):
        raise TypeError(
            "handlers must map destination names to handler(entry, scope), got "
            f"{safe_text(repr(handlers))}"
        )
    pending = pending_changes(item)
    planned: list[tuple[dict[str, Any], str, Callable[..., Any]]] = []
    missing: list[str] = []
    for entry in pending:
        destination: object = entry.get("destination")
        if not isinstance(destination, str):
            raise ValueError(
                f"journal entry {safe_text(entry)} of item {item.identity!r} names no "
                "destination (a string): it cannot be undone by any handler; nothing was undone"
            )
        handler: object = handlers.get(destination)
        if handler is None:
            if destination not in missing:
                missing.append(destination)
            continue
        if not callable(handler):
            raise TypeError(
                f"the handler of destination {destination!r} is not callable: "
                f"{safe_text(repr(handler))}; nothing was undone"
            )
        if not asynchronous and is_async_callable(handler):
            name = getattr(handler, "__qualname__", type(handler).__qualname__)
            raise TypeError(
                f"the handler of destination {destination!r}, {name}, is async: compensate() "
                "calls plain handlers; from an async rollback use "
                "`await migrate.compensate_async(item, scope, handlers)`; nothing was undone"
            )
        planned.append((entry, destination, cast("Callable[..., Any]", handler)))
    if missing:
        given = ", ".join(repr(name) for name in handlers) or "none"
        raise ValueError(
            f"no handler for destination{'' if len(missing) == 1 else 's'} "
            f"{', '.join(repr(name) for name in missing)} of item {item.identity!r}'s journal "
            f"(handlers given: {given}); nothing was undone"
        )
    return planned


def _returned(result: object, handler: object, *, asynchronous: bool) -> TypeError | None:
    """Why a handler's return value means it did not do its work, if it does."""
    name = getattr(handler, "__qualname__", type(handler).__qualname__)
    if isinstance(result, Effect | AsyncEffect):
        return TypeError(
            f"the handler {name} returned an effect, which never ran: run it in the handler "
            "(`.run_or_raise()`, or `await ....run_or_raise()` for an async one)"
        )
    if inspect.isgenerator(result) or inspect.isasyncgen(result):
        _close(result)
        return TypeError(f"the handler {name} returned a generator: remove the yield")
    if not asynchronous and inspect.isawaitable(result):
        _close(result)
        return TypeError(
            f"the handler {name} returned an awaitable, which compensate() cannot await: "
            "use compensate_async"
        )
    return None


def _close(result: object) -> None:
    close = getattr(result, "close", None)
    if callable(close):
        with contextlib.suppress(Exception):
            close()  # never run: closing it keeps Python from warning about it


def _failure(
    item: RollbackItem,
    entry: dict[str, Any],
    destination: str,
    error: Exception,
    undone: Sequence[dict[str, Any]],
) -> CompensationError:
    count = len(undone)
    message = (
        f"compensating item {item.identity!r} stopped at {describe_entry(entry)}: "
        f"{type(error).__name__}: {safe_text(error)}; {count} "
        f"entr{'y' if count == 1 else 'ies'} undone before it in this attempt"
        + (" (the next attempt skips them)" if count else "")
    )
    return CompensationError(
        message, entries=tuple(undone), entry=entry, destination=destination, cause=error
    )


def _attempted(attempts: object) -> list[Mapping[str, Any]]:
    """The entries the rollback attempts list as undone; what is not shaped so is passed over."""
    found: list[Mapping[str, Any]] = []
    for attempt in _as_sequence(attempts):
        if not isinstance(attempt, Mapping):
            continue
        entries = cast("Mapping[str, Any]", attempt).get("entries")
        found.extend(
            cast("Mapping[str, Any]", entry)
            for entry in _as_sequence(entries)
            if isinstance(entry, Mapping)
        )
    return found


def _as_sequence(value: object) -> Sequence[object]:
    if isinstance(value, list | tuple):
        return cast("Sequence[object]", value)
    return ()


def _key(entry: Mapping[str, Any]) -> str:
    """One text for entries that are equal as JSON (a journal entry, or its stored copy)."""
    try:
        return json.dumps(entry, sort_keys=True, default=repr)
    except (TypeError, ValueError):
        return safe_text(sorted(map(repr, entry.items())), 10_000)
