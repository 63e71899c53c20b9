"""
Migration Runs as durable workflows of ``effects.durable``: started by one process, worked by any.

``engine(config)`` is an `effects.durable.Engine` that serves the workflow ``migrate.run`` for
*config*. `start` takes the run's locks and starts it; any process with the same config that
works the engine (``migrate work``, or `wait` in the starting process) runs its steps, each a
``ctx.local_step``:

- ``migrate.begin`` (3 attempts, backoff 200 ms doubling): re-plans from the worker's config,
  checks the locks, contracts and preflight, marks the run running. A refusal is a
  `effects.FatalError` (code ``locked``, ``contract_changed`` or ``preflight``): the run is stored
  ``start-failed`` and its locks released.
- ``migrate.window``, one per window (1 attempt: never retried automatically): reads from the
  stored cursor and commits the window's states, the run's counts and the cursor in one
  transaction. The window and the step's checkpoint cannot be committed together, so a retry
  could take the next window for this one; a recovery (the worker died) runs the step again,
  and it reads on from what was committed. Item failures are item states, not step failures; a
  source that cannot be read (past ``source_cursor_retry``) or a store error fails the run.
- ``migrate.orphans`` (``--rollback-orphans``; 1 attempt, for the same reason), one per page of
  up to 1,000 orphans, after every definition's windows, dependents first: rolls back the states
  the definition's complete scan did not see and commits them in batches; its output is
  ``{definition, n, done}``. A recovery goes on from what was committed (deleted states are
  gone, those whose undo failed are marked as seen by the run).
- ``migrate.complete`` / ``migrate.fail`` (5 attempts, backoff 500 ms doubling to 30 s,
  jittered): store the run's end and release its locks; idempotent.

A run of ``migrate.run`` is never requeued (``retry``): a new Migration Run resumes from the
saved cursor without running the committed windows again.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, cast

from effects.durable import Engine, Run, StepOptions, WorkflowContext, WorkflowDef, workflow
from migrate._definition import Config
from migrate._durable_steps import PROGRESS, LiveRun, summary_of
from migrate._errors import LockHeld, RefusedError, StoreError
from migrate._loading import resolved
from migrate._planner import RunOptions, plan
from migrate._postgres_url import is_postgres_url
from migrate._reports import ProgressEvent, RunSummary
from migrate._runner import new_run_id
from migrate._state import DefinitionResult
from migrate._store_sqlite import store_path

__all__ = [
    "BEGIN_POLICY",
    "FINISH_POLICY",
    "WINDOW_POLICY",
    "WORKFLOW",
    "default_store_url",
    "engine",
    "run",
    "start",
    "wait",
]

#: The workflow's name.
WORKFLOW: Final = "migrate.run"
#: The retry policy of each step (see the module docstring for why).
BEGIN_POLICY: Final[StepOptions] = {"retries": 3, "backoff": "exp", "backoff_ms": 200}
WINDOW_POLICY: Final[StepOptions] = {"retries": 1}
FINISH_POLICY: Final[StepOptions] = {
    "retries": 5,
    "backoff": "exp",
    "backoff_ms": 500,
    "backoff_max_ms": 30_000,
    "jitter": True,
}
_REQUEUE: Final = (
    "a Migration Run is not retried: run `migrate run` again (with --durable), it resumes from "
    "the saved cursor"
)
#: The durable store's schema in a PostgreSQL database the migrate store shares.
_SCHEMA: Final = "effects_durable"
_DONE: Final = frozenset({"completed", "failed", "cancelled", "dead"})


def default_store_url(config: Config) -> str:
    """
    The durable store of *config*'s migrate workflows: ``durable.db`` beside a SQLite migrate
    store; the same PostgreSQL database (schema ``effects_durable``) for a PostgreSQL one;
    ``durable.db`` in the config's ``base_dir`` (else the working folder) for a `Store` object.
    """
    store = config.store
    if isinstance(store, str) and is_postgres_url(store):
        parts = urllib.parse.urlsplit(store)
        query = [(k, v) for k, v in urllib.parse.parse_qsl(parts.query) if k != "schema"]
        query.append(("schema", _SCHEMA))
        return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))
    if isinstance(store, str):
        folder = store_path(store, config.base_dir).parent
    else:
        folder = Path.cwd() if config.base_dir is None else Path(config.base_dir)
    return f"sqlite:///{folder.absolute() / 'durable.db'}"


class _Workflows:
    """The ``migrate.run`` workflow of one config, and the runs this process works."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._live: dict[str, LiveRun] = {}

    def definition(self) -> WorkflowDef[dict[str, Any], dict[str, Any]]:
        @workflow(WORKFLOW, version="1", requeue=_REQUEUE)
        async def migrate_run(ctx: WorkflowContext, given: dict[str, Any]) -> dict[str, Any]:
            """A Migration Run: begin, its windows, then complete (or fail)."""
            return await self._run(ctx, given)

        return migrate_run

    def _of(self, ctx: WorkflowContext, given: dict[str, Any]) -> LiveRun:
        live = self._live.get(ctx.run_id)
        if live is None:
            live = self._live[ctx.run_id] = LiveRun(self.config, given, ctx.run_id)
        return live

    async def _run(self, ctx: WorkflowContext, given: dict[str, Any]) -> dict[str, Any]:
        live = self._of(ctx, given)
        try:
            return await self._steps(ctx, live)
        finally:
            if not ctx.is_suspended:
                self._live.pop(ctx.run_id, None)
                await live.close()

    @staticmethod
    async def _steps(ctx: WorkflowContext, live: LiveRun) -> dict[str, Any]:
        begun = await ctx.local_step("migrate.begin", lambda: live.call(live.begin), **BEGIN_POLICY)
        notes: list[str] = list(begun["notes"])
        try:
            for definition_id in begun["definitions"]:
                n = 0
                while True:

                    def window(d: str = definition_id, k: int = n) -> Any:
                        return live.call(lambda: live.window(d, k, begun["contracts"]))

                    done = await ctx.local_step("migrate.window", window, **WINDOW_POLICY)
                    notes.extend(done.get("notes", ()))
                    if done["done"]:
                        break
                    n += 1
            if begun.get("rollback_orphans"):
                # After every scan, dependents first: one step per page of orphans.
                for definition_id in reversed(begun["definitions"]):
                    n = 0
                    while True:

                        def page(d: str = definition_id, k: int = n) -> Any:
                            return live.call(lambda: live.orphans(d, k))

                        done = await ctx.local_step("migrate.orphans", page, **WINDOW_POLICY)
                        notes.extend(done.get("notes", ()))
                        if done["done"]:
                            break
                        n += 1
        except Exception as error:
            reason = f"stopped: {error}"
            await ctx.local_step(
                "migrate.fail", lambda: live.call(lambda: live.fail(reason)), **FINISH_POLICY
            )
            raise
        return await ctx.local_step(
            "migrate.complete", lambda: live.call(lambda: live.complete(notes)), **FINISH_POLICY
        )


def engine(config: Config, store: str | None = None, **engine_options: Any) -> Engine:
    """
    An engine serving *config*'s migrate workflow (``migrate.run``, version ``"1"``).

    Args:
        config: The definitions and the migrate store.
        store: The durable store's URL; default `default_store_url` (``durable.db`` beside a
            SQLite migrate store, the same PostgreSQL database for a PostgreSQL one).
        **engine_options: Passed to `effects.durable.Engine` (``lease_ms``, ``clock``, ...).

    Raises:
        TypeError: If *engine_options* holds ``workflows`` (the engine's are the migrate ones).
    """
    if "workflows" in engine_options:
        msg = "migrate.durable.engine serves the migrate workflow: pass no workflows="
        raise TypeError(msg)
    # Called by a config file as it loads: its relative paths mean what the loaded config's do.
    config = resolved(config)
    url = default_store_url(config) if store is None else store
    if store is None and url.startswith("sqlite:///"):
        # The SQLite store refuses a missing folder, and the migrate store beside it creates
        # its own only when first opened (after the engine): `migrate run --durable` of a new
        # project (store "sqlite:///state/migrate.db") failed. An error is the engine's to say.
        with contextlib.suppress(OSError):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return Engine(url, workflows=[_Workflows(config).definition()], **engine_options)


async def start(config: Config, on: Engine, options: RunOptions | None = None) -> str:
    """
    Start a Migration Run as a durable run of *on* (opened): plan, record the run, take its
    locks (marked with the durable run), then start the workflow. Returns the durable run id.

    Raises:
        UsageError: For options that cannot go together or an unknown definition.
        LockHeld: If another live run holds a definition's lock (the run is ``start-failed``).
        StoreError: If the migrate store cannot be used.
    """
    options = RunOptions() if options is None else options
    the_plan = plan(config, options)
    run_id = new_run_id()
    durable_run_id = f"migrate-{run_id}"
    results = {step.definition_id: DefinitionResult(step.mode, "queued") for step in the_plan.steps}
    given = {
        "run_id": run_id,
        "options": _options_json(options),
        "plan": the_plan.to_json(),
        "locks": {"durable_run_id": durable_run_id, "definitions": list(the_plan.definition_ids)},
    }

    def record() -> None:
        with config.using_store() as store:
            store.recover_dead_runs()
            store.create_run(run_id, the_plan.mode, results, durable_run_id=durable_run_id)
            try:
                store.acquire_locks(run_id, the_plan.definition_ids, durable_run_id=durable_run_id)
            except LockHeld as error:
                store.update_run(run_id, status="start-failed", error=str(error), ended=True)
                raise

    await asyncio.to_thread(record)
    try:
        await on.start(WORKFLOW, given, run_id=durable_run_id)
    except BaseException as error:
        why = f"not started: {type(error).__name__}: {error}"

        def undo() -> None:
            with config.using_store() as store:
                store.update_run(run_id, status="start-failed", error=why, ended=True)
                store.release_locks(run_id, durable_run_id=durable_run_id)

        with contextlib.suppress(StoreError):
            await asyncio.to_thread(undo)
        raise
    return durable_run_id


def _options_json(options: RunOptions) -> dict[str, Any]:
    return {
        "definitions": list(options.definitions),
        "all": options.all,
        "with_dependencies": options.with_dependencies,
        "failed": options.failed,
        "skipped": options.skipped,
        "ids": list(options.ids),
        "update": options.update,
        "force": options.force,
        "concurrency": options.concurrency,
        **({"rollback_orphans": True} if options.rollback_orphans else {}),
    }


async def wait(
    config: Config,
    on: Engine,
    durable_run_id: str,
    *,
    progress: Callable[[ProgressEvent], object] | None = None,
    poll_s: float = 0.05,
) -> RunSummary:
    """
    Work *on* (opened) until the durable Migration Run *durable_run_id* has finished (other
    processes may share the work); return its summary.

    Raises:
        RefusedError: If ``migrate.begin`` refused it (lock, contract, preflight).
        StoreError: If a window's commit or the store failed.
        UnknownRunError: If *on* has no such run.
    """
    token = PROGRESS.set(None if progress is None else (durable_run_id, progress))
    try:
        worker = asyncio.ensure_future(on.work(poll_ms=max(1, round(poll_s * 1000))))
        try:
            while True:
                run = await on.get_run(durable_run_id)
                if run.status in _DONE:
                    break
                if worker.done():
                    worker.result()  # the worker loop's own error
                await asyncio.sleep(poll_s)
        finally:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker
    finally:
        PROGRESS.reset(token)
    return await asyncio.to_thread(_outcome, config, run)


def _outcome(config: Config, run: Run) -> RunSummary:
    """The summary of a finished durable Migration Run, or the error that ended it."""
    given = cast("dict[str, Any]", run.input)
    run_id = str(given["run_id"])
    error = run.error
    code = None if error is None else error.code
    message = "" if error is None else error.message
    if code in ("locked", "contract_changed", "preflight"):
        raise RefusedError(message)
    if code == "store":
        raise StoreError(message.removeprefix("store error: "))
    if run.status != "completed" and code != "source":
        msg = f"durable run {run.run_id} of migration run {run_id} is {run.status}"
        raise StoreError(f"{msg}: {message}" if message else msg)
    output: object = run.output
    found = cast("dict[str, Any]", output).get("notes", ()) if isinstance(output, dict) else ()
    notes = [str(note) for note in found]
    with config.using_store(read_only=True) as store:
        record = store.run(run_id)
        if record is None:
            msg = f"migration run {run_id} of durable run {run.run_id} is not in the store"
            raise StoreError(msg)
        return summary_of(store, record, notes)


def run(
    config: Config,
    options: RunOptions | None = None,
    *,
    store: str | None = None,
    progress: Callable[[ProgressEvent], object] | None = None,
    **engine_options: Any,
) -> RunSummary:
    """
    Start a durable Migration Run and work it in this process until it has finished (other
    ``migrate work`` processes may share it); the synchronous twin of `start` and `wait`.

    Raises:
        UsageError: As `start` raises it (options that cannot go together, an unknown
            definition).
        LockHeld: As `start` raises it (another live run holds a definition's lock).
        RefusedError: As `wait` raises it (``migrate.begin`` refused the run).
        StoreError: If the migrate store cannot be used, or a window's commit failed.
    """
    on = engine(config, store, **engine_options)

    async def go() -> RunSummary:
        async with on:
            durable_run_id = await start(config, on, options)
            return await wait(config, on, durable_run_id, progress=progress)

    return asyncio.run(go())
