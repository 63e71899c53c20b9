"""`destination`: turn any callable into a destination call returning an effect."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, ParamSpec, Protocol, TypeVar, overload

from effects import AsyncEffect, Effect
from effects._callables import is_async_callable
from migrate._errors import DestinationError
from migrate._pipeline import current_scope

__all__ = ["destination"]

P = ParamSpec("P")
R = TypeVar("R")

ErrorTypes = type[Exception] | tuple[type[Exception], ...]
# A parameter name, or a function of the call's arguments. The decorator form cannot tie a
# lambda's parameters to the function decorated later, so strict pyright sees them as unknown
# there; a parameter name (`key="path"`) is the typed spelling.
KeyFunction = Callable[..., Any]


class DestinationDecorator(Protocol):
    """What ``destination(name=...)`` returns: a decorator keeping the function's parameters."""

    @overload
    def __call__(  # type: ignore[overload-overlap]  # a coroutine function is also a callable
        self, fn: Callable[P, Coroutine[Any, Any, R]], /
    ) -> Callable[P, AsyncEffect[R, DestinationError]]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Callable[P, Effect[R, DestinationError]]: ...


@overload
def destination(  # type: ignore[overload-overlap]  # a coroutine function is also a callable
    fn: Callable[P, Coroutine[Any, Any, R]],
    /,
    *,
    name: str | None = None,
    catch: ErrorTypes = Exception,
    key: str | Callable[P, object] | None = None,
) -> Callable[P, AsyncEffect[R, DestinationError]]: ...
@overload
def destination(
    fn: Callable[P, R],
    /,
    *,
    name: str | None = None,
    catch: ErrorTypes = Exception,
    key: str | Callable[P, object] | None = None,
) -> Callable[P, Effect[R, DestinationError]]: ...
@overload
def destination(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    catch: ErrorTypes = Exception,
    key: str | KeyFunction | None = None,
) -> DestinationDecorator: ...
def destination(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    catch: ErrorTypes = Exception,
    key: str | KeyFunction | None = None,
) -> Any:
    """
    Make a destination call of any function: calling it returns an effect instead of running.

    A plain function gives an `Effect`, an ``async def`` function an `AsyncEffect`. When the
    effect runs, errors of the *catch* types become a `DestinationError` naming the destination,
    with the original error as ``cause`` (so a ``Retry`` can classify it; a cause whose
    ``retryable`` is ``False``, such as ``effects.FatalError``, is not retried). A
    `DestinationError` raised by the function passes through as it is. On success a change entry
    is added to the journal of the item being processed. Wrap the smallest repeatable call::

        @migrate.destination(name="crm", key="author_id")
        def put_author(author_id: int, author: dict[str, object]) -> int: ...

        def process(item, scope):
            crm_id = put_author(item.data).pipe(retry_transient).run_or_raise()

    Args:
        fn: The function; omit it to use ``destination(name=...)`` as a decorator.
        name: The destination name in errors and journal entries; default: the function's name.
        catch: The exception types that are destination failures; others propagate as defects.
        key: The journal entry's ``key``: the name of one of *fn*'s parameters (its argument in
            each call; type-checks everywhere), or a function of the call's arguments (in the
            decorator form strict pyright cannot type a lambda's parameters: use a name there).

    Raises:
        ValueError: If *key* is a name that is not one of *fn*'s parameters.

    Example:
        >>> import migrate
        >>> @migrate.destination(name="catalogue", key="path")
        ... def put(path: str, record: dict[str, str]) -> str:
        ...     return path
        >>> put("/books/1", {"title": "Dune"}).run()
        <Success: /books/1>
    """
    if fn is None:
        return functools.partial(_wrap, name=name, catch=catch, key=key)
    return _wrap(fn, name=name, catch=catch, key=key)


def _wrap(
    fn: Callable[..., Any],
    *,
    name: str | None,
    catch: ErrorTypes,
    key: str | KeyFunction | None,
) -> Callable[..., Any]:
    if not callable(fn):
        raise TypeError(f"destination() needs a callable, got {fn!r}")
    label = name or getattr(fn, "__name__", None) or repr(fn)
    operation = getattr(fn, "__name__", "call")
    key_of = _argument(fn, key) if isinstance(key, str) else key

    def translate(error: Exception) -> DestinationError:
        if isinstance(error, DestinationError):
            return error
        failure = DestinationError(f"{label}: {type(error).__name__}: {error}", error)
        failure.__traceback__ = error.__traceback__
        return failure

    def journal(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        scope = current_scope()
        if scope is not None:
            scope.journal.change(
                label, operation, key=None if key_of is None else key_of(*args, **kwargs)
            )

    if is_async_callable(fn):
        async_fn: Callable[..., Awaitable[Any]] = fn

        @functools.wraps(fn)
        def make_async(*args: Any, **kwargs: Any) -> AsyncEffect[Any, DestinationError]:
            async def call() -> Any:
                try:
                    result = await async_fn(*args, **kwargs)
                except catch as error:
                    raise translate(error) from error
                journal(args, kwargs)
                return result

            return AsyncEffect.attempt(call, catch=DestinationError)

        return make_async

    @functools.wraps(fn)
    def make(*args: Any, **kwargs: Any) -> Effect[Any, DestinationError]:
        def call() -> Any:
            try:
                result = fn(*args, **kwargs)
            except catch as error:
                raise translate(error) from error
            journal(args, kwargs)
            return result

        return Effect.attempt(call, catch=DestinationError)

    return make


def _argument(fn: Callable[..., Any], name: str) -> KeyFunction:
    """Return a function of a call's arguments giving the argument bound to parameter *name*."""
    signature = inspect.signature(fn)
    if name not in signature.parameters:
        known = ", ".join(signature.parameters) or "none"
        msg = f"key must name a parameter of {fn.__qualname__}(); got {name!r}, parameters: {known}"
        raise ValueError(msg)

    def argument(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return bound.arguments[name]

    return argument
