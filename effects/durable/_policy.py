"""
Step policies: the seed's StepOptions in snake_case, declared once, validated once, merged per call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final, Literal, TypedDict

import attrs

from effects.durable._bounds import checked_count, checked_ms
from schedules import Schedule, from_step_options, recurs

__all__ = ["StepOptions", "StepPolicy", "attempts_bound", "policy_from_options", "policy_repr"]


class StepOptions(TypedDict, total=False):
    """
    The retry and liveness options of a step, on ``@step(...)``, ``ctx.step(...)`` and
    ``ctx.local_step(...)``. Every field is optional; a field given to a call wins over the
    definition's.

    Keys:
        retries: Total attempts, the first included (default 1: a single try); >= 1.
        backoff: ``"fixed"`` (default) keeps the delay constant, ``"exp"`` doubles it.
        backoff_ms: Base delay in ms (default 0: no delay).
        backoff_max_ms: Upper bound of the delay in ms, or ``None`` (default) for none.
        jitter: ``True`` scales each delay to a random point in 50-100 % of itself.
        retry: Any ``schedules.Schedule`` instead of the four fields above; ``retries``, when
            also given, caps the attempts.
        timeout_ms: Liveness window of a dispatched step, in ms (ignored on a local step).
        pickup_timeout_ms: Window before a worker claims the task, in ms (default
            *timeout_ms*; ignored without *timeout_ms* and on a local step).
        queue: The flow-control queue every attempt of a dispatched step is admitted through.
    """

    retries: int
    backoff: Literal["fixed", "exp"]
    backoff_ms: float
    backoff_max_ms: float | None
    jitter: bool
    retry: Schedule[Any, Any] | None
    timeout_ms: float | None
    pickup_timeout_ms: float | None
    queue: str | None


_OPTION_NAMES: Final = frozenset(StepOptions.__annotations__)
_BACKOFF_FIELDS: Final = ("backoff", "backoff_ms", "backoff_max_ms", "jitter")
_UNSET: Final[Any] = attrs.NOTHING


def _is_schedule(value: object) -> bool:
    """Whether *value* follows the schedule step contract (``initial()`` and ``step(...)``)."""
    return isinstance(value, Schedule) or (
        callable(getattr(value, "initial", None)) and callable(getattr(value, "step", None))
    )


@attrs.frozen
class StepPolicy:
    """
    A step's options with only the fields that were given (the rest are ``attrs.NOTHING``).

    ``merge`` lays a call's fields over a definition's; ``schedule`` builds the retry schedule of
    the effective policy (``schedules.from_step_options``, the one arithmetic of the library).
    """

    fields: Mapping[str, Any] = attrs.field(factory=dict[str, Any])
    # The stored form, built when first asked for (a definition's policy is asked for often).
    _stored: tuple[dict[str, Any], str] | None = attrs.field(
        default=None, init=False, eq=False, repr=False
    )

    def stored(self) -> tuple[dict[str, Any], str]:
        """
        The effective retry policy as a checkpoint stores it, as data and as JSON text: the five
        retry fields of ``StepOptions`` with their defaults filled in (``retries``, ``backoff``,
        ``backoff_ms``, ``backoff_max_ms``, ``jitter``), or, for a ``retry=`` schedule,
        ``{"retry": repr(schedule), "retries": cap or None}``.
        """
        if self._stored is None:
            custom = self.fields.get("retry")
            data: dict[str, Any]
            if custom is not None:
                data = {"retry": repr(custom), "retries": self.retries}
            else:
                data = {
                    "retries": self.fields.get("retries", 1),
                    "backoff": self.fields.get("backoff", "fixed"),
                    "backoff_ms": self.fields.get("backoff_ms", 0),
                    "backoff_max_ms": self.fields.get("backoff_max_ms"),
                    "jitter": bool(self.fields.get("jitter", False)),
                }
            text = json.dumps(data, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
            object.__setattr__(self, "_stored", (data, text))
        assert self._stored is not None
        return self._stored

    def get(self, name: str, default: Any = None) -> Any:
        """The field's value, or *default* when it was not given."""
        return self.fields.get(name, default)

    def merge(self, overrides: StepPolicy) -> StepPolicy:
        """This policy with every field of *overrides* winning."""
        if not overrides.fields:
            return self
        if not self.fields:
            return overrides
        merged = {**self.fields, **overrides.fields}
        if "retry" in overrides.fields and overrides.fields["retry"] is not None:
            # A schedule given to the call replaces the definition's backoff fields.
            for name in _BACKOFF_FIELDS:
                if name not in overrides.fields:
                    merged.pop(name, None)
        elif any(name in overrides.fields for name in _BACKOFF_FIELDS):
            merged.pop("retry", None)
        return StepPolicy(merged)

    @property
    def retries(self) -> int | None:
        """Total attempts when given, else ``None``."""
        value = self.fields.get("retries")
        return None if value is None else int(value)

    @property
    def timeout_ms(self) -> int | None:
        """The liveness window in whole ms, or ``None``."""
        value = self.fields.get("timeout_ms")
        return None if value is None else round(value)

    @property
    def pickup_timeout_ms(self) -> int | None:
        """The pickup window in whole ms (default: ``timeout_ms``), or ``None``."""
        value = self.fields.get("pickup_timeout_ms")
        return self.timeout_ms if value is None else round(value)

    @property
    def queue(self) -> str | None:
        """The flow-control queue's name, or ``None``."""
        value: str | None = self.fields.get("queue")
        return value

    def schedule(self) -> Schedule[Any, Any]:
        """The retry schedule: its input is the failure, its delay the wait before a retry."""
        custom = self.fields.get("retry")
        if custom is not None:
            retries = self.retries
            schedule: Schedule[Any, Any] = custom
            return schedule if retries is None else schedule & recurs(retries - 1)
        return from_step_options(
            retries=self.fields.get("retries", 1),
            backoff=self.fields.get("backoff", "fixed"),
            backoff_ms=self.fields.get("backoff_ms", 0),
            backoff_max_ms=self.fields.get("backoff_max_ms"),
            jitter=self.fields.get("jitter", False),
        )


def policy_from_options(options: Mapping[str, Any], *, where: str) -> StepPolicy:
    """
    Validate *options* (``StepOptions`` keys) and return them as a ``StepPolicy``.

    Args:
        options: The keyword options as given.
        where: What they belong to, for error messages (``"step 'payments:charge'"``).

    Raises:
        TypeError: For an unknown option or a value of the wrong type, naming both.
        ValueError: For a value out of range (``retries < 1``, negative ms, unknown
            ``backoff``), naming the option and the value.
    """
    if not options:
        return _EMPTY
    unknown = sorted(set(options) - _OPTION_NAMES)
    if unknown:
        msg = (
            f"{where} got unknown option{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(map(repr, unknown))}; the options are {', '.join(sorted(_OPTION_NAMES))}"
        )
        raise TypeError(msg)
    fields = dict(options)
    try:
        _validate(fields)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{where}: {error}") from None
    return StepPolicy(fields)


def _validate(fields: dict[str, Any]) -> None:
    if "retries" in fields:
        checked_count(fields["retries"], "retries", least=1)
    retry = fields.get("retry")
    if retry is not None:
        if not _is_schedule(retry):
            msg = f"retry must be a schedules.Schedule, got {retry!r}"
            raise TypeError(msg)
        given = [name for name in _BACKOFF_FIELDS if name in fields]
        if given:
            msg = f"retry= replaces {', '.join(given)}; give one or the other"
            raise ValueError(msg)
    else:
        fields.pop("retry", None)
        # The same checks (and messages) as the schedule they build.
        from_step_options(
            retries=1,
            backoff=fields.get("backoff", "fixed"),
            backoff_ms=fields.get("backoff_ms", 0),
            backoff_max_ms=fields.get("backoff_max_ms"),
            jitter=fields.get("jitter", False),
        )
    for name in ("timeout_ms", "pickup_timeout_ms"):
        if fields.get(name) is not None:
            checked_ms(fields[name], name)
    queue = fields.get("queue")
    if queue is not None and (not isinstance(queue, str) or not queue):
        msg = f"queue must be a non-empty queue name, got {queue!r}"
        raise TypeError(msg)


_EMPTY: Final = StepPolicy({})


def attempts_bound(stored: object) -> int | None:
    """
    The most attempts (the first included) a checkpoint's stored policy allows: its ``retries``,
    or ``None`` for none known (a ``retry=`` schedule without ``retries``, whose own stopping
    rule its repr shows; or a checkpoint written before policies were stored).
    """
    if not isinstance(stored, dict):
        return None
    retries = stored.get("retries")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    if isinstance(retries, bool) or not isinstance(retries, int):
        return None
    return retries


def policy_repr(stored: object) -> str | None:
    """
    A checkpoint's stored policy as the expression of its schedule
    (``from_step_options(retries=3, backoff='exp', backoff_ms=0.1)``, or the ``retry=``
    schedule's repr with ``& recurs(n)`` for a ``retries`` cap); ``None`` when none is stored.

    Example:
        >>> policy_repr({"retry": "spaced(1)", "retries": 3})
        'spaced(1) & recurs(2)'
    """
    if not isinstance(stored, dict):
        return None
    data: dict[str, Any] = stored  # pyright: ignore[reportUnknownVariableType]
    if "retry" in data:
        retries = attempts_bound(data)
        shown = str(data["retry"])
        return shown if retries is None else f"{shown} & recurs({retries - 1})"
    try:
        return repr(
            from_step_options(
                retries=data.get("retries", 1),
                backoff=data.get("backoff", "fixed"),
                backoff_ms=data.get("backoff_ms", 0),
                backoff_max_ms=data.get("backoff_max_ms"),
                jitter=bool(data.get("jitter", False)),
            )
        )
    except (TypeError, ValueError):  # a store written by hand: show what it holds
        return json.dumps(data, ensure_ascii=False)
