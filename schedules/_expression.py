"""
Safe parsing of schedule expressions such as ``exponential('250ms').jittered().times(4)``.

The text is parsed with :mod:`ast` and walked node by node; it is never given to ``eval``. Only
this package's public constructors, an allow-list of :class:`Schedule` methods that take plain
values, the operators ``|`` and ``&`` between schedules, and literals (numbers, strings, ``True``,
``False``, ``None``) are accepted. Anything else is refused with an :class:`ExpressionError` that
names the construct and where it is.
"""

from __future__ import annotations

import ast
import io
import math
import sys
import tokenize
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Final, TypeAlias, TypeGuard

from schedules import (
    Schedule,
    cron,
    decorrelated,
    elapsed,
    exponential,
    fibonacci,
    fixed,
    forever,
    from_delays,
    from_step_options,
    linear,
    once,
    recurs,
    spaced,
    stop,
)

__all__ = [
    "CONSTRUCTORS",
    "EXTENSION_GROUP",
    "METHODS",
    "ExpressionError",
    "extensions",
    "parse_counted",
    "parse_schedule",
]

AnySchedule: TypeAlias = Schedule[Any, Any]
Value: TypeAlias = "AnySchedule | bool | int | float | str | None"

CONSTRUCTORS: Final[Mapping[str, Callable[..., AnySchedule]]] = MappingProxyType(
    {
        "cron": cron,
        "decorrelated": decorrelated,
        "elapsed": elapsed,
        "exponential": exponential,
        "fibonacci": fibonacci,
        "fixed": fixed,
        "forever": forever,
        "from_delays": from_delays,
        "from_step_options": from_step_options,
        "linear": linear,
        "once": once,
        "recurs": recurs,
        "spaced": spaced,
        "stop": stop,
    }
)
"""Functions an expression may call, by name."""

METHODS: Final[frozenset[str]] = frozenset(
    {
        "add_delay",
        "and_then",
        "intersect",
        "jittered",
        "max_delay",
        "reset_after",
        "times",
        "union",
        "within",
    }
)
"""Schedule methods an expression may call: those that take plain values or other schedules."""

_SCHEDULE_ARGUMENT: Final = frozenset({"and_then", "intersect", "union"})

MAX_LENGTH: Final = 10_000
"""Longest expression accepted, in characters (bounds the parser's work on hostile input)."""

_POINTER_WIDTH: Final = 76
_SHOWN_LITERAL: Final = 40

_OPERATORS: Final[Mapping[type[ast.AST], str]] = MappingProxyType(
    {
        ast.Add: "+",
        ast.Sub: "-",
        ast.Mult: "*",
        ast.MatMult: "@",
        ast.Div: "/",
        ast.FloorDiv: "//",
        ast.Mod: "%",
        ast.Pow: "**",
        ast.LShift: "<<",
        ast.RShift: ">>",
        ast.BitXor: "^",
        ast.Invert: "~",
        ast.Not: "not",
    }
)

_CONSTRUCTS: Final[Mapping[type[ast.AST], str]] = MappingProxyType(
    {
        ast.Lambda: "a lambda",
        ast.Subscript: "a subscript",
        ast.Slice: "a slice",
        ast.ListComp: "a list comprehension",
        ast.SetComp: "a set comprehension",
        ast.DictComp: "a dict comprehension",
        ast.GeneratorExp: "a generator expression",
        ast.JoinedStr: "an f-string",
        ast.FormattedValue: "an f-string",
        ast.Starred: "a starred argument (*args)",
        ast.List: "a list",
        ast.Tuple: "a tuple",
        ast.Set: "a set",
        ast.Dict: "a dict",
        ast.Compare: "a comparison",
        ast.BoolOp: "a boolean operator (and/or)",
        ast.IfExp: "a conditional expression",
        ast.NamedExpr: "an assignment expression (:=)",
        ast.Await: "await",
        ast.Yield: "yield",
        ast.YieldFrom: "yield from",
    }
)


class ExpressionError(ValueError):
    """
    A schedule expression was refused or could not be built.

    Attributes:
        text: The whole expression.
        line: 1-based line of the offending construct.
        column: 1-based column (in characters) of the offending construct.
    """

    def __init__(
        self, message: str, text: str, line: int = 1, column: int = 1, *, pointer: bool = True
    ) -> None:
        super().__init__(f"{message} (line {line}, column {column})")
        self.reason = message
        self.text = text
        self.line = line
        self.column = column
        #: Whether ``pointer()`` helps: not for an empty expression or a huge literal.
        self.has_pointer = pointer

    def pointer(self) -> str:
        """
        The offending source line with a caret under the construct (``""`` when it would not
        help); a long line is cut to the part around the caret.
        """
        if not self.has_pointer:
            return ""
        lines = self.text.splitlines() or [""]
        source = lines[min(self.line, len(lines)) - 1]
        caret = self.column - 1
        if len(source) > _POINTER_WIDTH:
            first = max(0, min(caret - _POINTER_WIDTH // 2, len(source) - _POINTER_WIDTH))
            shown = source[first : first + _POINTER_WIDTH]
            prefix = "..." if first else ""
            suffix = "..." if first + _POINTER_WIDTH < len(source) else ""
            source, caret = f"{prefix}{shown}{suffix}", caret - first + len(prefix)
        return f"  {source}\n  {' ' * caret}^"


EXTENSION_GROUP: Final = "schedules.show"
"""Entry-point group through which installed packages add constructors to expressions."""


def extensions() -> Mapping[str, Callable[..., AnySchedule]]:
    """
    Constructors that installed packages add, by name: entry points of the group
    ``schedules.show`` (this distribution adds ``effects.http.respect_retry_after``). Each is
    imported only when an expression calls it; the built-in names cannot be replaced.
    """
    # Imported here: only an expression naming an unknown function pays for the lookup.
    from importlib.metadata import entry_points  # noqa: PLC0415

    found = {
        point.name: point
        for point in entry_points(group=EXTENSION_GROUP)
        if point.name not in CONSTRUCTORS
    }
    return _Lazy(found)


class _Lazy(Mapping[str, Callable[..., AnySchedule]]):
    """Entry points by name, each loaded when looked up."""

    def __init__(self, points: Mapping[str, Any]) -> None:
        self._points = points

    def __getitem__(self, name: str) -> Callable[..., AnySchedule]:
        loaded: Callable[..., AnySchedule] = self._points[name].load()
        return loaded

    def __iter__(self) -> Iterator[str]:
        return iter(self._points)

    def __len__(self) -> int:
        return len(self._points)


def parse_schedule(text: str) -> AnySchedule:
    """
    Build the schedule that *text* describes, without evaluating it as Python.

    Whitespace around the expression is ignored.

    Args:
        text: An expression such as ``"exponential('250ms').jittered().times(4)"``.

    Returns:
        The schedule.

    Raises:
        ExpressionError: If the text is empty, not valid syntax, uses anything outside the
            allowed constructors, methods, operators and literals, does not build a schedule,
            or a constructor or method rejects its arguments (the message is theirs).

    Example:
        >>> parse_schedule("exponential('250ms').times(3)").delays()
        [0.25, 0.5, 1.0]
        >>> parse_schedule("open('secrets')")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        schedules._expression.ExpressionError: unknown function 'open'; ... (line 1, column 1)
    """
    return parse_counted(text)[0]


def parse_counted(text: str) -> tuple[AnySchedule, int]:
    """``parse_schedule``, also returning how many schedules the expression builds (its size)."""
    if len(text) > MAX_LENGTH:
        raise ExpressionError(
            f"expression is {len(text)} characters long; at most {MAX_LENGTH} are accepted", text
        )
    body = text.lstrip()
    if not body.strip():
        raise ExpressionError(
            "the expression is empty; give one such as \"exponential('250ms').times(4)\"",
            text,
            pointer=False,
        )
    # Positions found in `body` are moved back to where they are in `text`.
    skipped = text[: len(text) - len(body)]
    lines_skipped = skipped.count("\n")
    columns_skipped = len(skipped) - (skipped.rfind("\n") + 1)

    def placed(error: ExpressionError) -> ExpressionError:
        column = error.column + (columns_skipped if error.line == 1 else 0)
        return ExpressionError(
            error.reason, text, error.line + lines_skipped, column, pointer=error.has_pointer
        )

    try:
        return _parse(body)
    except ExpressionError as error:
        raise placed(error) from None


def _parse(text: str) -> tuple[AnySchedule, int]:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        # A command line carries bytes that are not UTF-8 as lone surrogates: name the spot.
        line = text.count("\n", 0, error.start) + 1
        column = error.start - (text.rfind("\n", 0, error.start) + 1) + 1
        message = "the expression has a byte that is not UTF-8 text"
        raise ExpressionError(message, text, line, column, pointer=False) from None
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as error:
        if error.msg.startswith("Exceeds the limit"):
            raise _too_many_digits(text) from None
        reason = (
            "invalid syntax" if error.msg == "invalid syntax" else f"invalid syntax: {error.msg}"
        )
        raise ExpressionError(reason, text, error.lineno or 1, error.offset or 1) from None
    except (RecursionError, MemoryError):
        raise ExpressionError("expression is nested too deeply", text) from None
    walker = _Walker(text)
    try:
        value = walker.value(tree.body)
    except RecursionError:
        raise ExpressionError("expression is nested too deeply", text) from None
    if not isinstance(value, Schedule):
        raise walker.error(tree.body, f"the expression builds {_kind(value)}, not a schedule")
    return value, walker.built


def _too_many_digits(text: str) -> ExpressionError:
    """The error for a decimal int literal longer than Python converts (``int_max_str_digits``)."""
    limit = sys.get_int_max_str_digits()
    for line, column, literal in _numbers(text):
        if not literal.startswith(("0x", "0X", "0o", "0O", "0b", "0B")) and (
            len(literal) - literal.count("_") > limit
        ):
            message = _too_long_message(literal, limit)
            return ExpressionError(message, text, line, column, pointer=False)
    # Not found (the tokenizer stopped early): the parser's own words, still one line.
    return ExpressionError(f"a number has more than {limit} digits", text, pointer=False)


def _numbers(text: str) -> Iterator[tuple[int, int, str]]:
    """The number literals in *text*: 1-based line, 1-based column (characters), literal."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.NUMBER:
                yield token.start[0], token.start[1] + 1, token.string
    except (tokenize.TokenError, SyntaxError):
        return


def _clipped(literal: str) -> str:
    """A literal as an error message shows it: whole when short, else its two ends."""
    if len(literal) <= _SHOWN_LITERAL:
        return literal
    return f"{literal[: _SHOWN_LITERAL - 8]}...{literal[-4:]}"


def _too_long_message(literal: str, limit: int) -> str:
    digits = len(literal) - literal.count("_")
    if literal[1:2] in ("x", "X", "o", "O", "b", "B"):
        size = f"({len(literal)} characters) has more than {limit} digits in decimal"
    else:
        size = f"has {digits} digits"
    return f"the number {_clipped(literal)} {size}; at most {limit} digits are accepted"


def _is_schedule(value: object) -> TypeGuard[AnySchedule]:
    return isinstance(value, Schedule)


def _kind(value: object) -> str:
    if isinstance(value, Schedule):
        return "a schedule"
    return f"{type(value).__name__} {value!r}"


class _Walker:
    """Evaluates the allowed subset of expression nodes, refusing everything else."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._lines = text.splitlines()
        #: How many schedules the expression built: the work of one of its steps.
        self.built = 0

    def error(
        self, node: ast.AST, message: str, column_offset: int | None = None
    ) -> ExpressionError:
        """An error pointing at *node* (or at *column_offset*, in UTF-8 bytes, on its line)."""
        line: int = getattr(node, "lineno", 1)
        offset: int = getattr(node, "col_offset", 0) if column_offset is None else column_offset
        return ExpressionError(message, self._text, line, self._column(line, offset))

    def literal_error(self, node: ast.expr, message: str) -> ExpressionError:
        """An error about a literal: one line (its text is in the message), no pointer."""
        error = self.error(node, message)
        return ExpressionError(message, self._text, error.line, error.column, pointer=False)

    def _source(self, node: ast.expr) -> str:
        return ast.get_source_segment(self._text, node) or "?"

    def _column(self, line: int, byte_offset: int) -> int:
        # ast offsets count UTF-8 bytes; people count characters.
        if not 1 <= line <= len(self._lines):
            return byte_offset + 1
        prefix = self._lines[line - 1].encode()[:byte_offset]
        return len(prefix.decode(errors="ignore")) + 1

    def value(self, node: ast.expr) -> Value:
        if isinstance(node, ast.Constant):
            return self._constant(node)
        if isinstance(node, ast.UnaryOp):
            return self._unary(node)
        if isinstance(node, ast.BinOp):
            return self._binary(node)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Name):
            hint = f"; call it: {node.id}(...)" if node.id in CONSTRUCTORS else ""
            raise self.error(node, f"the name {node.id!r} is not allowed{hint}")
        if isinstance(node, ast.Attribute):
            raise self._attribute_error(node, "attribute access")
        raise self.error(node, f"{_describe(node)} is not allowed")

    def _constant(self, node: ast.Constant) -> Value:
        value: object = node.value
        if isinstance(value, int) and not isinstance(value, bool):
            # 0x..., 0o... and 0b... literals are not bound by the digit limit that decimal ones
            # are, but printing the schedule (its repr, an error) would be: refuse them alike.
            limit = sys.get_int_max_str_digits()
            if limit and abs(value) >= 10**limit:
                raise self.literal_error(node, _too_long_message(self._source(node), limit))
        elif isinstance(value, float) and math.isinf(value):
            message = (
                f"the number {_clipped(self._source(node))} is too large: as a float it is infinite"
            )
            raise self.literal_error(node, message)
        if value is None or isinstance(value, bool | int | float | str):
            return value
        raise self.error(node, f"the literal {value!r} is not allowed (only numbers and strings)")

    def _unary(self, node: ast.UnaryOp) -> Value:
        if not isinstance(node.op, ast.USub | ast.UAdd):
            raise self.error(node, f"the operator {_OPERATORS[type(node.op)]!r} is not allowed")
        operand = self.value(node.operand)
        if isinstance(operand, bool) or not isinstance(operand, int | float):
            raise self.error(
                node, f"unary minus or plus applies to numbers only, not {_kind(operand)}"
            )
        return -operand if isinstance(node.op, ast.USub) else operand

    def _binary(self, node: ast.BinOp) -> AnySchedule:
        if not isinstance(node.op, ast.BitOr | ast.BitAnd):
            raise self.error(node, f"the operator {_OPERATORS[type(node.op)]!r} is not allowed")
        symbol = "|" if isinstance(node.op, ast.BitOr) else "&"
        left = self._operand(node.left, symbol)
        right = self._operand(node.right, symbol)
        combine = left.union if symbol == "|" else left.intersect
        return self._invoke(node, f"'{symbol}'", combine, [right], {})

    def _operand(self, node: ast.expr, symbol: str) -> AnySchedule:
        operand = self.value(node)
        if not _is_schedule(operand):
            raise self.error(node, f"{symbol!r} joins schedules only, not {_kind(operand)}")
        return operand

    def _call(self, node: ast.Call) -> AnySchedule:
        function = node.func
        if isinstance(function, ast.Name):
            constructor = CONSTRUCTORS.get(function.id)
            if constructor is None:
                constructor = self._extension(function)
            if constructor is None:
                allowed = ", ".join(sorted({*CONSTRUCTORS, *extensions()}))
                raise self.error(
                    function, f"unknown function {function.id!r}; allowed functions: {allowed}"
                )
            args, kwargs = self._arguments(node)
            return self._invoke(node, f"{function.id}()", constructor, args, kwargs)
        if isinstance(function, ast.Attribute):
            name = function.attr
            if name.startswith("_") or name not in METHODS:
                raise self._attribute_error(function, "the method call")
            receiver = self.value(function.value)
            # Point at the method's name rather than at the start of its receiver.
            offset = (function.end_col_offset or 0) - len(name.encode())
            if not _is_schedule(receiver):
                message = f"the method '.{name}()' applies to schedules only, not {_kind(receiver)}"
                raise self.error(function, message, offset)
            args, kwargs = self._arguments(node)
            if name in _SCHEDULE_ARGUMENT:
                nodes = [*node.args, *(keyword.value for keyword in node.keywords)]
                given = zip(nodes, [*args, *kwargs.values()], strict=True)
                for argument, value in given:
                    if not _is_schedule(value):
                        message = f".{name}() takes a schedule, not {_kind(value)}"
                        raise self.error(argument, message)
            method: Callable[..., object] = getattr(receiver, name)
            return self._invoke(function, f".{name}()", method, args, kwargs, column_offset=offset)
        raise self.error(function, f"calling {_describe(function)} is not allowed")

    def _extension(self, function: ast.Name) -> Callable[..., AnySchedule] | None:
        try:
            return extensions().get(function.id)
        except Exception as error:  # noqa: BLE001 - a broken plug-in is reported, not raised
            message = f"the constructor {function.id!r} could not be loaded: {error}"
            raise self.error(function, message) from None

    def _attribute_error(self, node: ast.Attribute, what: str) -> ExpressionError:
        name = node.attr
        offset = (node.end_col_offset or 0) - len(name.encode())
        if name.startswith("__") and name.endswith("__"):
            return self.error(node, f"{what} '.{name}' is not allowed (dunder attribute)", offset)
        if what == "attribute access" or name.startswith("_"):
            return self.error(node, f"{what} '.{name}' is not allowed", offset)
        allowed = ", ".join(sorted(METHODS))
        return self.error(
            node, f"{what} '.{name}()' is not allowed; allowed methods: {allowed}", offset
        )

    def _arguments(self, node: ast.Call) -> tuple[list[Value], dict[str, Value]]:
        args: list[Value] = []
        for argument in node.args:
            if isinstance(argument, ast.Starred):
                raise self.error(argument, "a starred argument (*args) is not allowed")
            args.append(self.value(argument))
        kwargs: dict[str, Value] = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                raise self.error(keyword, "a keyword unpacking (**kwargs) is not allowed")
            kwargs[keyword.arg] = self.value(keyword.value)
        return args, kwargs

    def _invoke(
        self,
        node: ast.expr,
        label: str,
        function: Callable[..., object],
        args: list[Value],
        kwargs: dict[str, Value],
        *,
        column_offset: int | None = None,
    ) -> AnySchedule:
        try:
            result = function(*args, **kwargs)
        except (ValueError, TypeError, OverflowError) as error:
            message = f"{label} rejected its arguments: {error}"
            raise self.error(node, message, column_offset) from None
        if not _is_schedule(result):
            raise self.error(node, f"{label} built {_kind(result)}, not a schedule", column_offset)
        self.built += 1
        return result


def _describe(node: ast.AST) -> str:
    for kind, description in _CONSTRUCTS.items():
        if isinstance(node, kind):
            return description
    if isinstance(node, ast.Attribute):
        return f"the attribute '.{node.attr}'"
    return f"a {type(node).__name__} expression"
