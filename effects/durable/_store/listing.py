"""``list_runs``'s filters, once for every dialect: the clauses that apply, and their values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import LiteralString, TypeVar

__all__ = ["filters", "given", "where"]

_Filter = TypeVar("_Filter")


def filters(mark: LiteralString) -> tuple[LiteralString, LiteralString, LiteralString]:
    """
    The clauses of ``list_runs``'s filters, each of one parameter written *mark*: of a status, of
    a workflow, and stale (suspended, with a pending dispatch made before the given epoch ms).
    """
    stale = (
        "status = 'suspended' AND run_id IN (SELECT run_id FROM checkpoints WHERE kind = 'remote'"
        f" AND status IN ('pending', 'running') AND dispatched_at < {mark})"
    )
    return f"status = {mark}", f"workflow = {mark}", stale


def where(clauses: Sequence[str], values: Sequence[object]) -> tuple[str, list[object]]:
    """
    The ``WHERE`` of the *clauses* whose value is given (not ``None``), joined by AND (``""``
    when none is), and those values in order.
    """
    applied = given(clauses, values)
    if not applied:
        return "", []
    return " WHERE " + " AND ".join(c for c, _ in applied), [value for _, value in applied]


def given(filters: Sequence[_Filter], values: Sequence[object]) -> list[tuple[_Filter, object]]:
    """The *filters* whose value is given (not ``None``), each with that value, in order."""
    return [(f, value) for f, value in zip(filters, values, strict=True) if value is not None]
