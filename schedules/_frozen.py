"""
Frozen value classes without generated code: ``@frozen`` for ``schedules`` and ``effects``.

``attrs`` and ``dataclasses`` write each class's methods as source and compile it, about half a
millisecond a class; ``schedules`` defines some thirty classes, and importing it must cost less
than importing tenacity. ``@frozen`` builds the same kind of class from shared functions
instead: fields from the class's annotations, in ``__slots__``, set once by ``__init__``;
structural ``==`` and ``hash``; an attrs-style ``repr``; assignment refused. Type checkers see
it as a frozen dataclass (``dataclass_transform``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Final, NoReturn, TypeVar, dataclass_transform, overload

__all__ = ["Immutable", "field", "frozen"]

_C = TypeVar("_C", bound=type)
_NO_DEFAULT: Final[Any] = object()


class _Field:
    """What ``field()`` returns: a marker read once, when the class is built."""

    __slots__ = ("default", "eq", "init")

    def __init__(self, default: object, init: bool, eq: bool) -> None:
        self.default = default
        self.init = init
        self.eq = eq


def field(*, default: Any = _NO_DEFAULT, init: bool = True, eq: bool = True) -> Any:
    """
    Declare a field with options: *init* False leaves it to ``__post_init__`` (which sets it
    with ``object.__setattr__``); *eq* False leaves it out of ``==``, ``hash`` and ``repr``.
    """
    return _Field(default, init, eq)


class _Spec:
    """One field of a frozen class, as the decorator found it."""

    __slots__ = ("default", "eq", "init", "name")

    def __init__(self, name: str, default: object, init: bool, eq: bool) -> None:
        self.name = name
        self.default = default
        self.init = init
        self.eq = eq


def _is_class_variable(annotation: object) -> bool:
    text = annotation if isinstance(annotation, str) else repr(annotation)
    return text.startswith(("ClassVar", "typing.ClassVar", "Final", "typing.Final"))


def _own_fields(cls: type) -> list[_Spec]:
    # inspect.get_annotations would import inspect, which costs more than this whole module.
    annotations: dict[str, object] = cls.__dict__.get("__annotations__", {})  # noqa: RUF063
    specs: list[_Spec] = []
    for name, annotation in annotations.items():
        if _is_class_variable(annotation):
            continue
        value = cls.__dict__.get(name, _NO_DEFAULT)
        if isinstance(value, _Field):
            specs.append(_Spec(name, value.default, value.init, value.eq))
        else:
            specs.append(_Spec(name, value, True, True))
    return specs


def _frozen_setattr(self: object, name: str, value: object) -> NoReturn:
    msg = f"{type(self).__name__} is frozen: cannot set {name!r}"
    raise AttributeError(msg)


def _frozen_delattr(self: object, name: str) -> NoReturn:
    msg = f"{type(self).__name__} is frozen: cannot delete {name!r}"
    raise AttributeError(msg)


class Immutable:
    """
    Base of hand-written value classes: assignment and deletion refused, as ``@frozen`` does
    (``__init__`` sets the slots with ``object.__setattr__``).
    """

    __slots__ = ()

    def __setattr__(self, name: str, value: object) -> NoReturn:
        _frozen_setattr(self, name, value)

    def __delattr__(self, name: str) -> NoReturn:
        _frozen_delattr(self, name)


def _build(cls: type, *, repr_: bool, eq: bool) -> type:
    inherited: tuple[_Spec, ...] = getattr(cls, "__frozen_fields__", ())
    own = _own_fields(cls)
    specs = (*inherited, *own)
    namespace = dict(cls.__dict__)
    for spec in own:
        namespace.pop(spec.name, None)
    namespace.pop("__dict__", None)
    namespace.pop("__weakref__", None)
    namespace["__slots__"] = tuple(spec.name for spec in own)
    namespace["__frozen_fields__"] = specs
    built: type = type(cls)(cls.__name__, cls.__bases__, namespace)
    built.__qualname__ = cls.__qualname__

    init_specs = [spec for spec in specs if spec.init]
    names = tuple(spec.name for spec in init_specs)
    count = len(names)
    put = object.__setattr__
    post_init: Callable[[Any], None] | None = getattr(built, "__post_init__", None)
    label = cls.__name__

    def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        if len(args) > count:
            msg = f"{label}() takes {count} positional arguments but {len(args)} were given"
            raise TypeError(msg)
        values = list(args)
        for spec in init_specs[len(args) :]:
            if spec.name in kwargs:
                values.append(kwargs.pop(spec.name))
            elif spec.default is not _NO_DEFAULT:
                values.append(spec.default)
            else:
                msg = f"{label}() missing required argument {spec.name!r}"
                raise TypeError(msg)
        if kwargs:
            msg = f"{label}() got an unexpected keyword argument {next(iter(kwargs))!r}"
            raise TypeError(msg)
        return tuple(values)

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        if kwargs or len(args) != count:
            args = bind(args, kwargs)
        for name, value in zip(names, args, strict=True):
            put(self, name, value)
        if post_init is not None:
            post_init(self)

    def reduce(self: object) -> tuple[object, tuple[object, ...]]:
        return (type(self), tuple(getattr(self, name) for name in names))

    methods: dict[str, object] = {
        "__init__": init,
        "__setattr__": _frozen_setattr,
        "__delattr__": _frozen_delattr,
        "__reduce__": reduce,
    }
    compared = tuple(spec.name for spec in specs if spec.eq)
    if eq:
        values = _values_getter(compared)

        def equal(self: object, other: object) -> object:
            if other.__class__ is not self.__class__:
                return NotImplemented
            return values(self) == values(other)

        def hashed(self: object) -> int:
            return hash((self.__class__, values(self)))

        methods["__eq__"] = equal
        methods["__hash__"] = hashed
    if repr_:

        def represent(self: object) -> str:
            shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in compared)
            return f"{type(self).__name__}({shown})"

        methods["__repr__"] = represent
    for name, method in methods.items():
        setattr(built, name, method)
    return built


def _values_getter(names: tuple[str, ...]) -> Callable[[object], tuple[Any, ...]]:
    if len(names) == 1:
        name = names[0]
        return lambda value: (getattr(value, name),)
    if not names:
        return lambda value: ()
    getter: Callable[[object], tuple[Any, ...]] = operator.attrgetter(*names)
    return getter


@overload
def frozen(cls: _C, /) -> _C: ...
@overload
def frozen(*, repr: bool = True, eq: bool = True) -> Callable[[_C], _C]: ...
@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def frozen(
    cls: type | None = None,
    /,
    *,
    repr: bool = True,  # noqa: A002 - the name attrs and dataclasses use
    eq: bool = True,
) -> Any:
    """
    Make *cls* a frozen value class: slotted fields from its annotations, in order (a base
    class's first), ``__init__`` taking them positionally or by name, ``==`` and ``hash`` over
    them (unless *eq* is False: identity), an attrs-style ``repr`` (unless *repr* is False),
    and assignment refused with ``AttributeError``. ``__post_init__``, if defined, runs last.
    """

    def decorate(target: type) -> type:
        return _build(target, repr_=repr, eq=eq)

    return decorate if cls is None else decorate(cls)
