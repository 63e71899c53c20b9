"""``list_runs``'s filters, once for every dialect: the clauses that apply, and their values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import LiteralString

__all__ = ["filters", "where"]


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
    given = [
        (clause, value) for clause, value in zip(clauses, values, strict=True) if value is not None
    ]
    if not given:
        return "", []
    return " WHERE " + " AND ".join(clause for clause, _ in given), [value for _, value in given]
