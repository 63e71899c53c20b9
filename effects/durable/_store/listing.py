"""``list_runs``'s filters, once for every dialect: the clauses that apply, and their values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import LiteralString, TypeVar

__all__ = ["filters", "given", "where"]

_Filter = TypeVar("_Filter")


def filters(
    mark: LiteralString,
    *,
    not_final: LiteralString,
    starts_with: LiteralString,
    unserved: LiteralString,
    text_order: LiteralString = "",
) -> tuple[LiteralString, ...]:
    """
    The clauses of ``list_runs``'s filters (``RunQuery.filter_values``'s order), each binding
    its values at the marks *mark*: of a status; of a workflow; stale (suspended, with a
    pending dispatch made before the given epoch ms); after a run (keyset: ``created_at``
    twice, then ``run_id``; newest first, ties by id in *text_order*); an id prefix (the
    dialect's *starts_with* test); retrying at the given epoch ms (``rules.retrying``, the
    dialect writing "not final" as *not_final*); retryable (no value); unserved (waiting, of a
    workflow the JSON list of ``[name, version]`` pairs bound names at another version: the
    dialect's *unserved* test of such a list, ``rules.unserved``).
    """
    stale = (
        "status = 'suspended' AND run_id IN (SELECT run_id FROM checkpoints WHERE kind = 'remote'"
        f" AND status IN ('pending', 'running') AND dispatched_at < {mark})"
    )
    # `created_at <= c` first: a range the index starts at, not a filter it walks to.
    after = f"created_at <= {mark} AND (created_at < {mark} OR run_id{text_order} > {mark})"
    retrying = (
        "run_id IN (SELECT run_id FROM checkpoints WHERE status = 'failed'"
        f" AND {not_final} AND wake_at > {mark})"
    )
    return (
        f"status = {mark}",
        f"workflow = {mark}",
        stale,
        after,
        starts_with,
        retrying,
        "status IN ('failed', 'dead', 'cancelled')",
        f"status IN ('pending', 'suspended') AND {unserved}",
    )


def where(
    clauses: Sequence[str], values: Sequence[tuple[object, ...] | None]
) -> tuple[str, list[object]]:
    """
    The ``WHERE`` of the *clauses* whose values are given (not ``None``), joined by AND (``""``
    when none is), and those values in order.
    """
    applied = given(clauses, values)
    if not applied:
        return "", []
    bound = [value for _, params in applied for value in params]
    return " WHERE " + " AND ".join(c for c, _ in applied), bound


def given(
    filters: Sequence[_Filter], values: Sequence[tuple[object, ...] | None]
) -> list[tuple[_Filter, tuple[object, ...]]]:
    """The *filters* whose values are given (not ``None``), each with those values, in order."""
    return [(f, value) for f, value in zip(filters, values, strict=True) if value is not None]
