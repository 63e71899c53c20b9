"""Run options and the plan: which definitions run, in which order and mode."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, TypeAlias

import attrs

from migrate._definition import Config
from migrate._errors import RollbackRefused, UsageError
from migrate._text import plural

__all__ = ["Mode", "Plan", "PlanStep", "RunOptions", "plan"]

Mode: TypeAlias = Literal["normal", "failed", "skipped", "ids", "update"]
"""How a definition runs: ``normal`` (from the saved cursor), ``failed`` / ``skipped`` (the
saved states with that status, read again by identity), ``ids`` (the given identities, whatever
their state), ``update`` (mark migrated items ``needs-update`` and read from the beginning)."""


def _strings(value: Iterable[str] | str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


@attrs.frozen
class RunOptions:
    """
    What to run and how: the options of ``migrate run``.

    Args:
        definitions: Definition ids to run; empty means all of them.
        all: Run all definitions (``--all``); then *definitions* must be empty.
        with_dependencies: Pull required dependencies into the plan; they run in mode normal.
        failed: Reprocess the saved failed items (``--failed``).
        skipped: Re-evaluate the saved skipped items (``--skipped``).
        ids: Reprocess these identities whatever their state (``--id``, repeatable).
        update: Mark migrated items ``needs-update`` and read from the beginning (``--update``).
        force: Run even if a required dependency's latest run was not clean (``--force``).
        concurrency: Items processed at once, overriding every definition's (``-c N``).
        rollback_orphans: After a complete scan of a definition (this run read its source
            from the start to the end), roll back its stored states the scan did not see
            (``--rollback-orphans``; normal and update runs only; every definition run needs a
            ``rollback=``).
    """

    definitions: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    all: bool = False
    with_dependencies: bool = False
    failed: bool = False
    skipped: bool = False
    ids: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    update: bool = False
    force: bool = False
    concurrency: int | None = None
    rollback_orphans: bool = False

    @property
    def mode(self) -> Mode:
        """The mode of the named definitions."""
        if self.failed:
            return "failed"
        if self.skipped:
            return "skipped"
        if self.ids:
            return "ids"
        if self.update:
            return "update"
        return "normal"


@attrs.frozen
class PlanStep:
    """
    One definition in a plan.

    Attributes:
        definition_id: The definition.
        mode: How it runs.
        reason: Why the definition is in the plan: ``"named"`` (named in the options),
            ``"all"`` (no definition named, or ``all``), or ``"dependency of X"`` (pulled in by
            ``with_dependencies`` for definition X; such a step runs in mode ``normal``).
    """

    definition_id: str
    mode: Mode
    reason: str


@attrs.frozen
class Plan:
    """
    The definitions a run covers, in execution order (dependencies first).

    ``str(plan)`` is what ``migrate run --plan`` prints.

    Attributes:
        steps: The definitions and their modes, in order.
        mode: The mode of the named definitions.
        checked: Required dependencies outside the plan, checked before the run (unless forced),
            as ``(definition, dependency)`` pairs.
        force: Whether that check is skipped.
        concurrency: The ``-c`` override, if any.
        ids: The identities of an ``ids`` run.
        rollback_orphans: Whether each definition's orphans are rolled back after its
            complete scan (``--rollback-orphans``).
    """

    steps: tuple[PlanStep, ...]
    mode: Mode
    checked: tuple[tuple[str, str], ...] = ()
    force: bool = False
    concurrency: int | None = None
    ids: tuple[str, ...] = ()
    rollback_orphans: bool = False

    @property
    def definition_ids(self) -> tuple[str, ...]:
        """The definition ids in execution order."""
        return tuple(step.definition_id for step in self.steps)

    def __str__(self) -> str:
        width = max((len(s.definition_id) for s in self.steps), default=0)
        lines = [f"Plan: {plural(len(self.steps), 'definition')}, mode {self.mode}"]
        for number, step in enumerate(self.steps, 1):
            lines.append(
                f"  {number}. {step.definition_id:<{width}}  {step.mode:<7}  {step.reason}"
            )
        if self.ids:
            lines.append(f"  identities: {', '.join(self.ids)}")
        for definition_id, dependency in self.checked:
            check = "not checked (--force)" if self.force else "must have run cleanly"
            lines.append(f"  requires {dependency} (for {definition_id}): {check}")
        if self.concurrency is not None:
            lines.append(f"  concurrency: {self.concurrency}")
        if self.rollback_orphans:
            lines.append(
                "  orphans: rolled back after each complete scan, dependents first "
                "(--rollback-orphans)"
            )
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """``{"mode", "steps": [{"definition", "mode", "reason"}], "checked", "force", ...}``."""
        return {
            "mode": self.mode,
            "steps": [
                {"definition": s.definition_id, "mode": s.mode, "reason": s.reason}
                for s in self.steps
            ],
            "checked": [{"definition": d, "requires": r} for d, r in self.checked],
            "force": self.force,
            "concurrency": self.concurrency,
            "ids": list(self.ids),
            **({"rollback_orphans": True} if self.rollback_orphans else {}),
        }


def plan(config: Config, options: RunOptions | None = None) -> Plan:
    """
    Decide which definitions a run covers, in which order and mode.

    Args:
        config: The definitions.
        options: What was asked for; default: a normal run of every definition.

    Raises:
        UsageError: For ``failed`` with ``skipped``, more than one of failed / skipped / ids /
            update, ``all`` with named definitions, ``ids`` without a definition named (unless
            the config has only one), an unknown definition id, or a concurrency below 1;
            for ``rollback_orphans`` with ``failed``, ``skipped`` or ``ids``.
        RollbackRefused: For ``rollback_orphans`` when a definition of the plan has no
            ``rollback=`` (nothing is recorded).

    Example:
        >>> from migrate import Config, MemorySource, Migration
        >>> def process(item, scope): ...
        >>> config = Config([
        ...     Migration("authors", MemorySource([]), process),
        ...     Migration("books", MemorySource([]), process, requires=["authors"]),
        ... ])
        >>> print(plan(config, RunOptions(["books"], failed=True, with_dependencies=True)))
        Plan: 2 definitions, mode failed
          1. authors  normal   dependency of books
          2. books    failed   named
        >>> print(plan(config, RunOptions(["books"])))
        Plan: 1 definition, mode normal
          1. books  normal   named
          requires authors (for books): must have run cleanly
        >>> print(plan(config))
        Plan: 2 definitions, mode normal
          1. authors  normal   all
          2. books    normal   all
    """
    options = RunOptions() if options is None else options
    if options.failed and options.skipped:
        raise UsageError(
            "--failed and --skipped cannot be used together; run them one after the other"
        )
    chosen = [
        flag
        for flag, on in (
            ("--failed", options.failed),
            ("--skipped", options.skipped),
            ("--id", bool(options.ids)),
            ("--update", options.update),
        )
        if on
    ]
    if len(chosen) > 1:
        raise UsageError(f"{' and '.join(chosen)} cannot be used together")
    if options.all and options.definitions:
        raise UsageError("name definitions or pass --all, not both")
    if options.rollback_orphans and chosen and chosen != ["--update"]:
        raise UsageError(
            f"--rollback-orphans and {chosen[0]} cannot be used together: orphans are found by "
            "a scan of the whole source, which only normal and --update runs make"
        )
    if options.ids and (options.all or not options.definitions) and len(config.ids) != 1:
        raise UsageError(
            "--id needs the definition the identities belong to: migrate run DEF --id X "
            f"(known: {', '.join(config.ids) or 'none'})"
        )
    if options.concurrency is not None and (
        isinstance(options.concurrency, bool) or options.concurrency < 1
    ):
        raise UsageError(f"concurrency must be >= 1, got {options.concurrency!r}")
    named: list[str] = []
    for definition_id in options.definitions or config.ids:
        config.get(definition_id)
        if definition_id not in named:
            named.append(definition_id)
    reasons = dict.fromkeys(named, "named" if options.definitions else "all")
    if options.with_dependencies:
        pending = list(named)
        while pending:
            current = pending.pop(0)
            for dependency in config.get(current).requires:
                if dependency not in reasons:
                    reasons[dependency] = f"dependency of {current}"
                    pending.append(dependency)
    order = config.order(list(reasons))
    mode = options.mode
    if options.rollback_orphans:
        missing = [d for d in order if config.get(d).rollback is None]
        if missing:
            raise RollbackRefused(
                tuple(
                    f"refusing --rollback-orphans for {d!r}: it has no rollback= to undo the "
                    f"states of records gone from its source with; give Migration({d!r}, ..., "
                    "rollback=fn) a function undoing one item, or leave it out of the run"
                    for d in missing
                )
            )
    steps = tuple(PlanStep(d, mode if d in named else "normal", reasons[d]) for d in order)
    checked = tuple(
        (d, dependency)
        for d in order
        for dependency in config.get(d).requires
        if dependency not in reasons
    )
    return Plan(
        steps=steps,
        mode=mode,
        checked=checked,
        force=options.force,
        concurrency=options.concurrency,
        ids=options.ids,
        rollback_orphans=options.rollback_orphans,
    )
