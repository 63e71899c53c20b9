"""
Retry wrappers with the wrapped function's own parameters.

A wrapper written ``def retried(*args, **kwargs)`` builds a tuple and a dict on every call
before it can pass them on: most of what a call that succeeds at once costs. For a plain Python
function this module writes the wrapper with the function's exact parameters instead
(``def retried(url, *, timeout=<its default>)``), so a call goes straight through; the tuple and
dict that the retry loop needs are built only after a failure. The source is generated from the
code object's parameter names (identifiers by construction) and compiled once per shape of
signature; each decorated function gets a fresh closure over that code.
"""

from __future__ import annotations

import functools
import keyword
from collections.abc import Callable
from types import CodeType, CoroutineType, FunctionType
from typing import Any, Final

from effects._driver import Policy, call_async, call_sync, resume_async

__all__ = ["exact_wrapper"]

# Code flags (inspect.CO_VARARGS, CO_VARKEYWORDS), stable since Python 3.0.
_VARARGS: Final = 0x04
_VARKEYWORDS: Final = 0x08
# Names the generated code uses for itself; a function with a parameter spelt so keeps the
# general wrapper.
_PREFIX: Final = "_effects_retry_"
# Signatures seen in one program are few; the bound keeps a generator of functions from growing
# the cache without end.
_SHAPES: Final = 512


def _shape(fn: FunctionType) -> tuple[Any, ...] | None:
    """What the wrapper's source depends on, or None if *fn* needs the general wrapper."""
    code: CodeType = fn.__code__
    positional = code.co_argcount
    keyword_only = code.co_kwonlyargcount
    count = positional + keyword_only
    flags = code.co_flags
    names = list(code.co_varnames[:count])
    star = code.co_varnames[count] if flags & _VARARGS else None
    if star is not None:
        count += 1
    double_star = code.co_varnames[count] if flags & _VARKEYWORDS else None
    every = [*names, *(n for n in (star, double_star) if n is not None)]
    if any(n.startswith(_PREFIX) or keyword.iskeyword(n) or not n.isidentifier() for n in every):
        return None
    defaults = len(fn.__defaults__ or ())
    keyword_defaults = tuple(sorted(fn.__kwdefaults__ or ()))
    return (
        tuple(names),
        code.co_posonlyargcount,
        positional,
        star,
        double_star,
        defaults,
        keyword_defaults,
    )


_FACTORY: Final = """
def make(P_fn, P_on, P_policy, P_defaults, P_kwdefaults):
{wrapper}
    return retried
"""
_SYNC: Final = _FACTORY.format(
    wrapper="""
    def retried({parameters}):
        {record}
        try:
            P_result = P_fn({passed})
        except P_on as P_error:
            P_first = P_error
        else:
            if P_type(P_result) is P_coroutine:
                return P_resume(P_policy, P_fn, P_result, {args}, {kwargs})
            return P_result
        try:
            return P_call_sync(P_policy, P_fn, P_first, {args}, {kwargs})
        finally:
            del P_first
"""
).replace("P_", _PREFIX)
_ASYNC: Final = _FACTORY.format(
    wrapper="""
    async def retried({parameters}):
        {record}
        try:
            return await P_fn({passed})
        except P_on as P_error:
            P_first = P_error
        try:
            return await P_call_async(P_policy, P_fn, P_first, {args}, {kwargs})
        finally:
            del P_first
"""
).replace("P_", _PREFIX)


@functools.lru_cache(maxsize=_SHAPES)
def _maker(shape: tuple[Any, ...], is_async: bool, budget: bool) -> Callable[..., Any]:
    """Compile the factory of wrappers of one signature shape."""
    names, posonly, positional, star, double_star, defaults, keyword_defaults = shape
    first_default = positional - defaults
    parameters: list[str] = []
    for index, name in enumerate(names[:positional]):
        default = f"={_PREFIX}defaults[{index - first_default}]" if index >= first_default else ""
        parameters.append(name + default)
        if posonly and index == posonly - 1:
            parameters.append("/")
    keyword_names = names[positional:]
    if star is not None:
        parameters.append(f"*{star}")
    elif keyword_names:
        parameters.append("*")
    for name in keyword_names:
        default = f"={_PREFIX}kwdefaults[{name!r}]" if name in keyword_defaults else ""
        parameters.append(name + default)
    if double_star is not None:
        parameters.append(f"**{double_star}")
    passed = [*names[:positional], *([f"*{star}"] if star else [])]
    passed += [f"{name}={name}" for name in keyword_names]
    passed += [f"**{double_star}"] if double_star else []
    # What the retry loop needs after a failure: the call's arguments as a tuple and a dict.
    packed = [*names[:positional], *([f"*{star}"] if star else [])]
    args = f"({', '.join(packed)},)" if packed else "()"
    entries = [f"{name!r}: {name}" for name in keyword_names]
    entries += [f"**{double_star}"] if double_star else []
    kwargs = "{" + ", ".join(entries) + "}"
    source = (_ASYNC if is_async else _SYNC).format(
        parameters=", ".join(parameters),
        passed=", ".join(passed),
        args=args,
        kwargs=kwargs,
        record=f"{_PREFIX}policy.record_first_attempt()" if budget else "pass",
    )
    # What every wrapper calls lives in its globals, not in cells: a decorated function keeps
    # three cells (fn, on, policy) and global loads cost no more.
    namespace: dict[str, Any] = {
        f"{_PREFIX}type": type,
        f"{_PREFIX}coroutine": CoroutineType,
        f"{_PREFIX}call_sync": call_sync,
        f"{_PREFIX}call_async": call_async,
        f"{_PREFIX}resume": resume_async,
    }
    exec(compile(source, "<effects.retry wrapper>", "exec"), namespace)  # noqa: S102 - see above
    maker: Callable[..., Any] = namespace["make"]
    return maker


def exact_wrapper(
    policy: Policy, fn: Callable[..., Any], *, is_async: bool
) -> Callable[..., Any] | None:
    """
    The retrying wrapper of *fn* with *fn*'s own parameters, or None when *fn* is not a plain
    Python function (or spells a parameter like the generated code's own names).
    """
    if type(fn) is not FunctionType:
        return None
    shape = _shape(fn)
    if shape is None:
        return None
    make = _maker(shape, is_async, policy.budget is not None)
    wrapper: Callable[..., Any] = make(
        fn, policy.on, policy, fn.__defaults__ or (), fn.__kwdefaults__ or {}
    )
    # Errors about the call's arguments ("fetch() missing 1 required positional argument")
    # come from the wrapper now: let them name the function, as they did before wrapping.
    wrapper.__code__ = _named(wrapper.__code__, fn.__name__, fn.__qualname__)
    return functools.wraps(fn)(wrapper)


@functools.lru_cache(maxsize=_SHAPES)
def _named(code: CodeType, name: str, qualname: str) -> CodeType:
    """*code* renamed; shared by every wrapper of a function of that name (a factory's many)."""
    return code.replace(co_name=name, co_qualname=qualname)
