"""Wrappers written with the function's own parameters behave exactly as the general one."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from effects import RetryBudget, retry
from effects._exact_wrappers import exact_wrapper
from effects.testing import VirtualClock


class TransientError(Exception):
    """Retried."""


def echo(*args: object, **kwargs: object) -> tuple[object, ...]:
    """What a call received."""
    return (args, kwargs)


SOURCES = [
    "def f(a, b): return E(a, b)",
    "def f(a, b=2): return E(a, b)",
    "def f(a, /, b, *, c, d=4): return E(a, b, c=c, d=d)",
    "def f(*args, **kwargs): return E(*args, **kwargs)",
    "def f(a, *rest, key=None, **extra): return E(a, *rest, key=key, **extra)",
    "def f(): return E()",
    "def f(type, fn, on, policy, args, kwargs): return E(type, fn, on, policy, args, kwargs)",
    "def f(self, x=()): return E(self, x)",
    "def f(a, b, /): return E(a, b)",
    "def f(*, only): return E(only=only)",
]
CALLS: list[tuple[tuple[object, ...], dict[str, object]]] = [
    ((1, 2), {}),
    ((1,), {}),
    ((1,), {"b": 2, "c": 3}),
    ((1, 2, 3), {"x": 4}),
    ((1, 2, 3), {"key": "k", "z": 0}),
    ((), {}),
    ((1, 2, 3, 4, 5, 6), {}),
    (("me",), {}),
    ((1, 2), {}),
    ((), {"only": 1}),
]


def compile_source(source: str, failures: int) -> Callable[..., Any]:
    """The function *source* defines, failing *failures* times before it answers."""
    namespace: dict[str, Any] = {}
    calls: list[int] = []

    def answer(*args: object, **kwargs: object) -> tuple[object, ...]:
        calls.append(1)
        if len(calls) <= failures:
            raise TransientError(len(calls))
        return echo(*args, **kwargs)

    namespace["E"] = answer
    exec(source, namespace)
    function: Callable[..., Any] = namespace["f"]
    return function


@pytest.mark.parametrize(("source", "call"), list(zip(SOURCES, CALLS, strict=True)))
@pytest.mark.parametrize("failures", [0, 2])
def test_the_exact_wrapper_passes_every_argument_through(
    source: str,
    call: tuple[tuple[object, ...], dict[str, object]],
    failures: int,
    virtual_clock: VirtualClock,
) -> None:
    """Positional, default, keyword-only, *args, **kwargs: retried calls see what was passed."""
    args, kwargs = call
    plain = compile_source(source, 0)
    wrapped = retry(times=3, on=TransientError)(compile_source(source, failures))
    assert plain(*args, **kwargs) == wrapped(*args, **kwargs)
    assert inspect.signature(plain) == inspect.signature(wrapped)


def test_the_exact_wrapper_is_used_for_plain_functions() -> None:
    """A plain function gets the exact wrapper: no *args/**kwargs of its own."""
    policy = retry(times=1, on=TransientError)._policy  # pyright: ignore[reportPrivateUsage]

    def fetch(url: str, *, timeout: float = 10.0) -> str:
        return url

    wrapper = exact_wrapper(policy, fetch, is_async=False)
    assert wrapper is not None
    assert ("url", "timeout") == wrapper.__code__.co_varnames[:2]
    assert exact_wrapper(policy, len, is_async=False) is None


def test_mutable_defaults_are_the_functions_own(virtual_clock: VirtualClock) -> None:
    """A default the function mutates is the same object through the wrapper, call after call."""

    @retry(times=1, on=TransientError)
    def append(item: int, into: list[int] = []) -> list[int]:  # noqa: B006 - on purpose
        into.append(item)
        return into

    assert [1, 2] == (append(1), append(2))[1]


def test_argument_errors_name_the_function() -> None:
    """Calling with wrong arguments raises the TypeError the function would, naming it."""

    @retry(times=1, on=TransientError)
    def fetch(url: str, *, timeout: float = 10.0) -> str:
        return url

    with pytest.raises(TypeError, match=r"fetch\(\) missing 1 required positional argument"):
        fetch()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"fetch\(\) got an unexpected keyword argument 'x'"):
        fetch("u", x=1)  # type: ignore[call-arg]


def test_a_parameter_named_like_the_generated_code_falls_back() -> None:
    """A parameter spelt like the generated code's own names keeps the general wrapper."""
    policy = retry(times=1, on=TransientError)._policy  # pyright: ignore[reportPrivateUsage]
    namespace: dict[str, Any] = {}
    exec("def f(_effects_retry_fn): return _effects_retry_fn", namespace)
    assert exact_wrapper(policy, namespace["f"], is_async=False) is None
    assert 3 == retry(times=1, on=TransientError)(namespace["f"])(3)


@pytest.mark.anyio
async def test_async_exact_wrappers_retry_with_await(
    anyio_backend: str, virtual_clock: VirtualClock
) -> None:
    """An async def gets an exact async wrapper that awaits and retries each attempt."""
    calls: list[tuple[int, str]] = []

    @retry(times=3, on=TransientError, budget=RetryBudget())
    async def fetch(n: int, /, *, label: str = "x") -> str:
        calls.append((n, label))
        if len(calls) < 3:
            raise TransientError
        return f"{label}{n}"

    assert inspect.iscoroutinefunction(fetch)
    assert "y7" == await fetch(7, label="y")
    assert [(7, "y")] * 3 == calls


@settings(max_examples=80)
@given(
    st.lists(st.sampled_from(["a", "b", "c", "d", "e"]), unique=True, max_size=4),
    st.integers(0, 4),
    st.integers(0, 4),
    st.tuples(st.booleans(), st.booleans()),
    st.integers(0, 2),
)
def test_any_signature_shape_behaves_as_unwrapped(
    names: list[str], split: int, defaults: int, stars: tuple[bool, bool], failures: int
) -> None:
    """Drawn signatures (positional-only, defaults, keyword-only, *args, **kwargs) agree."""
    star, double_star = stars
    split = min(split, len(names))
    positional, keyword_only = names[:split], names[split:]
    defaults = min(defaults, len(positional))
    parameters = [
        name + (f"={index}" if index >= len(positional) - defaults else "")
        for index, name in enumerate(positional)
    ]
    if positional and failures == 1:
        parameters.insert(1, "/")
    parameters += ["*rest"] if star else (["*"] if keyword_only else [])
    parameters += [f"{name}={name!r}" for name in keyword_only]
    parameters += ["**extra"] if double_star else []
    passed = [*positional, *(["*rest"] if star else [])]
    passed += [f"{name}={name}" for name in keyword_only] + (["**extra"] if double_star else [])
    source = f"def f({', '.join(parameters)}): return E({', '.join(passed)})"
    plain = compile_source(source, 0)
    wrapped = retry(times=3, on=TransientError)(compile_source(source, failures))
    args = tuple(range(len(positional) - defaults)) + ((9, 8) if star else ())
    kwargs = {"zz": 1} if double_star else {}
    assert plain(*args, **kwargs) == wrapped(*args, **kwargs)
