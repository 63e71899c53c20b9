"""
What a callable is (plain, async, a generator) and what to call it, for all of ``effects`` and
``migrate``: one place decides "is this async", so no caller can disagree with another.

Read from code flags rather than ``inspect``: importing ``inspect`` would cost more than the
rest of ``import effects``.
"""

from __future__ import annotations

import functools
from types import CodeType, FunctionType, MethodType
from typing import Final, Literal, cast

__all__ = ["Kind", "callable_kind", "describe_callable", "is_async_callable"]

Kind = Literal["sync", "async", "generator", "async_generator"]

# The code flags of CPython's compiler (the values behind inspect.CO_*), stable since 3.5.
_GENERATOR: Final = 0x20
_COROUTINE: Final = 0x80
_ITERABLE_COROUTINE: Final = 0x100
_ASYNC_GENERATOR: Final = 0x200
_UNWRAP_LIMIT: Final = 100
_BINDERS: Final = (MethodType, staticmethod, classmethod)


def _inner(fn: object) -> object:
    """What a binding wrapper wraps, or *fn* itself. (Classes, not narrowing: see below.)"""
    # `isinstance(fn, functools.partial)` would narrow *fn* to `partial[Unknown]`, which strict
    # type checkers refuse; asking about its class reads the same without narrowing.
    cls = type(fn)
    if issubclass(cls, functools.partial):
        return cast("object", getattr(fn, "func", fn))
    if issubclass(cls, _BINDERS):
        return cast("object", getattr(fn, "__func__", fn))
    return fn


def _unwrapped(fn: object) -> object:
    """*fn* without the wrappers that only bind arguments: partials, methods, static/class."""
    for _ in range(_UNWRAP_LIMIT):
        inner = _inner(fn)
        if inner is fn:
            break
        fn = inner
    return fn


def _flags(fn: object) -> int | None:
    """The code flags behind *fn*, or None when it has no code of its own."""
    if isinstance(fn, FunctionType):
        if "_is_coroutine_marker" in fn.__dict__:  # inspect.markcoroutinefunction (3.12+)
            return _COROUTINE
        return fn.__code__.co_flags
    # unittest.mock.AsyncMock (and some compiled functions) keep a code object of their own.
    try:
        own: object = getattr(fn, "__dict__", None)
    except Exception:  # noqa: BLE001 - a __getattr__ that fails: no code of its own
        return None
    code = cast("dict[str, object]", own).get("__code__") if isinstance(own, dict) else None
    return code.co_flags if isinstance(code, CodeType) else None


def callable_kind(fn: object) -> Kind:
    """
    How calling *fn* behaves: ``"async"`` (returns an awaitable: an ``async def`` function,
    or a partial, method, ``staticmethod`` or ``classmethod`` of one, or an object whose
    ``__call__`` is one), ``"generator"`` or ``"async_generator"`` (the body runs only when the
    result is iterated), else ``"sync"``.

    Only what can be known before a call is known here: a plain function that returns a
    coroutine (a lambda around an ``async def``) is ``"sync"``; the retry runtime detects its
    coroutine when it comes back.

    Example:
        >>> import functools
        >>> async def fetch(url: str) -> str:
        ...     return url
        >>> class Client:
        ...     async def __call__(self) -> None: ...
        >>> [callable_kind(f) for f in (fetch, functools.partial(fetch, "x"), Client(), len)]
        ['async', 'async', 'async', 'sync']
    """
    target = _unwrapped(fn)
    flags = _flags(target)
    if flags is None and not isinstance(target, FunctionType | type):
        call = getattr(type(target), "__call__", None)  # noqa: B004 - the class's, not the object's
        flags = None if call is None else _flags(_unwrapped(call))
    if flags is None:
        return "sync"
    if flags & _ASYNC_GENERATOR:
        return "async_generator"
    if flags & (_COROUTINE | _ITERABLE_COROUTINE):
        return "async"
    if flags & _GENERATOR:
        return "generator"
    return "sync"


def is_async_callable(fn: object) -> bool:
    """
    Whether calling *fn* returns an awaitable to run: ``callable_kind(fn) == "async"``.

    Example:
        >>> async def fetch() -> None: ...
        >>> is_async_callable(fetch), is_async_callable(print)
        (True, False)
    """
    if type(fn) is FunctionType and "_is_coroutine_marker" not in fn.__dict__:
        # The common case, a plain function, at the cost of one attribute read: hot paths
        # (a durable local step) ask this of every call.
        flags = fn.__code__.co_flags
        return bool(flags & (_COROUTINE | _ITERABLE_COROUTINE)) and not flags & _ASYNC_GENERATOR
    return callable_kind(fn) == "async"


def describe_callable(fn: object) -> str:
    """
    The name events and log lines give *fn*: its qualified name; for a partial, its function's
    (``partial(fetch)``); for another callable object, its class's.

    Example:
        >>> import functools
        >>> def fetch(url: str) -> None: ...
        >>> describe_callable(fetch), describe_callable(functools.partial(fetch, "x"))
        ('fetch', 'partial(fetch)')
    """
    if issubclass(type(fn), functools.partial):
        return f"partial({describe_callable(_inner(fn))})"
    try:
        name = getattr(fn, "__qualname__", None)
    except Exception:  # noqa: BLE001 - a failing __getattr__: name the class instead
        name = None
    if isinstance(name, str):
        return name
    return type(fn).__qualname__
