"""
Why a run would be refused before it starts: held locks, dependency preflight, changed contracts.

A run and ``migrate run --plan`` ask the same questions here, so the plan predicts exactly the
refusals the run would make (as of now: another run may take a lock in between).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from migrate._definition import Config
from migrate._errors import ContractChanged, LockHeld, PreflightRefused, RefusedError
from migrate._liveness import ProcessId, is_alive
from migrate._planner import Plan, RunOptions, plan
from migrate._sources import Contract
from migrate._state import LockInfo
from migrate._store import Store
from migrate._text import plural

__all__ = ["ContractCheck", "check_contracts", "held_lock", "held_lock_of", "preflight", "refusals"]


def preflight(store: Store, definition_id: str, dependency: str) -> str | None:
    """
    Why *definition_id* may not run yet because of its required *dependency*, or ``None``.

    The dependency's latest run must have finished with ``succeeded`` for it, and no failed
    (or interrupted) item of it may be stored.
    """
    refused = f"refusing to run {definition_id!r}: required dependency {dependency!r}"
    advice = (
        f"run {dependency!r} first (migrate run {dependency}; migrate run {dependency} --failed "
        f"reprocesses its failures), or pass --force"
    )
    latest = store.latest_run_for(dependency)
    if latest is None:
        return f"{refused} has never run; {advice}"
    if latest.kind == "rollback":
        # Its states (some or all) were undone and deleted: it must migrate them again.
        return f"{refused} was rolled back by run {latest.run_id}; {advice}"
    result = latest.definitions.get(dependency)
    if latest.status in ("queued", "running"):
        return f"{refused} is still running in run {latest.run_id}; wait for it, or pass --force"
    if result is None or result.status != "succeeded":
        what = "did not succeed"
        if result is not None and result.error:
            what = f"stopped with an error ({result.error})"
        elif result is not None and result.counts.failed:
            what = f"ended with {plural(result.counts.failed, 'failed item')}"
        return f"{refused}: its latest run {latest.run_id} {what}; {advice}"
    failed = store.count_status(dependency, "failed") + store.count_status(
        dependency, "interrupted"
    )
    if failed:
        return f"{refused} has {plural(failed, 'failed item')}; {advice}"
    return None


def preflight_refusal(config: Config, the_plan: Plan, store: Store) -> PreflightRefused | None:
    """The preflight refusal of *the_plan* (``None`` when forced or when nothing is wrong)."""
    if the_plan.force:
        return None
    problems = tuple(
        problem
        for definition_id, dependency in the_plan.checked
        if (problem := preflight(store, definition_id, dependency))
    )
    return PreflightRefused(problems) if problems else None


@attrs.frozen
class ContractCheck:
    """
    What the stored contracts say about a plan.

    Attributes:
        record: Per definition, the contract to record when it starts, and whether its saved
            cursor is forgotten with it (the contract changed).
        notes: Changes accepted by ``force``, for the run summary.
        refusal: The refusal, when a contract changed under stored states and nothing forces.
    """

    record: Mapping[str, tuple[Contract, bool]]
    notes: tuple[str, ...] = ()
    refusal: ContractChanged | None = None


def check_contracts(config: Config, the_plan: Plan, store: Store) -> ContractCheck:
    """Compare each planned definition's source contract with the one its states were stored
    under."""
    record: dict[str, tuple[Contract, bool]] = {}
    notes: list[str] = []
    changed: dict[str, tuple[str, ...]] = {}
    lines: list[str] = []
    for step in the_plan.steps:
        definition_id = step.definition_id
        current = config.get(definition_id).source.contract()
        stored = store.contract(definition_id)
        if stored is None:
            record[definition_id] = (current, False)
            continue
        if stored.fingerprint == current.fingerprint:
            continue
        # The saved cursor was made under the old contract (a keyset on the old identity,
        # another kind's position): an accepted change restarts discovery from the top.
        record[definition_id] = (current, True)
        if not store.has_state(definition_id):
            continue  # nothing was stored under the old contract
        changes = stored.changes(current)
        if the_plan.force:
            advice = (
                ""
                if step.mode == "update"
                else "; to process every migrated item again under it: "
                f"migrate run {definition_id} --update"
            )
            notes.append(
                f"{definition_id}: accepted the changed source contract "
                f"({'; '.join(changes)}); discovery starts again from the first item{advice}"
            )
            continue
        changed[definition_id] = changes
        stored_states = plural(store.counts(definition_id).total, "stored item state")
        lines.append(
            f"definition {definition_id!r} changed its source contract since its states "
            f"were stored: {'; '.join(changes)}. Its {stored_states} "
            "and saved cursor were recorded under the old contract. If the change is "
            f"intended, run: migrate run {definition_id} --force --update (records the new "
            "contract, then processes every migrated item again); otherwise undo the change "
            "in the config"
        )
    refusal = ContractChanged("\n".join(lines), changed) if changed else None
    return ContractCheck(record, tuple(notes), refusal)


def held_lock(the_plan: Plan, store: Store) -> LockInfo | None:
    """
    The first lock of a planned definition that a live run, or any durable run, holds (what
    acquiring meets: a lock marked with a durable run is held whatever became of its process).
    """
    return held_lock_of(the_plan.definition_ids, store)


def held_lock_of(definition_ids: Iterable[str], store: Store) -> LockInfo | None:
    """The first lock of *definition_ids* that a live run, or any durable run, holds (see
    `held_lock`)."""
    held = {lock.definition_id: lock for lock in store.locks()}
    for definition_id in definition_ids:
        lock = held.get(definition_id)
        if lock is not None and (
            lock.durable_run_id is not None
            or is_alive(ProcessId(lock.pid, lock.host, lock.token)) is not False
        ):
            return lock
    return None


def refusals(config: Config, options: RunOptions | Plan | None = None) -> tuple[RefusedError, ...]:
    """
    The refusals a run would meet now, in the order the run checks them, without running or
    writing anything (what ``migrate run --plan`` prints): a lock a live run holds, a changed
    source contract, a dependency preflight.

    Args:
        config: The definitions and store.
        options: The run's options, or a `Plan` made from them; default: a normal run of all.

    Raises:
        UsageError: For options that cannot go together or an unknown definition.
        StoreError: If the store cannot be read.
    """
    the_plan = options if isinstance(options, Plan) else plan(config, options)
    found: list[RefusedError] = []
    with config.using_store(read_only=True) as store:
        lock = held_lock(the_plan, store)
        if lock is not None:
            found.append(LockHeld(lock))
        contracts = check_contracts(config, the_plan, store)
        if contracts.refusal is not None:
            found.append(contracts.refusal)
        preflight_refused = preflight_refusal(config, the_plan, store)
        if preflight_refused is not None:
            found.append(preflight_refused)
    return tuple(found)
