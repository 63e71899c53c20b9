"""
DBOS Transact's side of the durable-steps benchmarks, on any system database (a SQLite file in
``durable_steps.py``, a PostgreSQL database in ``durable_steps_pg.py``): its app, its cases and
its worker process.

A case that starts worker processes takes the ``Children`` of its case process; the workers are
the benchmark's script run again with ``dbos_worker(...)``'s arguments, which its ``--worker``
hands to ``serve_dbos``.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Sequence
from types import FrameType
from typing import Any, NamedTuple

from _durable_harness import (
    DRAIN_POLL,
    GATED,
    STEPS_PER_RUN,
    WAIT_POLL,
    Children,
    Dispatch,
    Figures,
    Meter,
    rate,
    timed,
    timed_async,
)

#: The queue DBOS's workers listen to.
QUEUE = "bench-steps"


class DbosApp(NamedTuple):
    """The DBOS functions, registered by ``dbos_app`` (DBOS needs them before ``launch``)."""

    ten_async: Callable[[int], Coroutine[Any, Any, int]]
    ten_sync: Callable[[int], int]
    child: Callable[[int], Coroutine[Any, Any, int]]
    parent: Callable[[int], Coroutine[Any, Any, int]]


def dbos_version() -> str | None:
    """DBOS's version if it can be imported, else ``None``."""
    try:
        import dbos  # noqa: F401
    except ImportError:
        return None
    try:
        return importlib.metadata.version("dbos")
    except importlib.metadata.PackageNotFoundError:
        return "unknown version"


def dbos_app(url: str, executor: str, poll: float, *, listen: Sequence[str]) -> DbosApp:
    """Configure DBOS on its system database *url* and register the benchmark's functions."""
    from dbos import DBOS

    DBOS(
        config={
            "name": "durable-bench",
            "system_database_url": url,
            "log_level": "WARNING",
            # Set, not derived from the code, so every process agrees; one executor id each,
            # so that no process recovers another's workflows at launch.
            "application_version": "bench",
            "executor_id": executor,
        }
    )
    DBOS.listen_queues(list(listen))

    @DBOS.step(name="bench.add-one")
    async def add_one(n: int) -> int:
        return n + 1

    @DBOS.step(name="bench.add-one-sync")
    def add_one_sync(n: int) -> int:
        return n + 1

    @DBOS.workflow(name="bench.ten-async")
    async def dbos_ten_async(n: int) -> int:
        for _ in range(STEPS_PER_RUN):
            n = await add_one(n)
        return n

    @DBOS.workflow(name="bench.ten-sync")
    def dbos_ten_sync(n: int) -> int:
        for _ in range(STEPS_PER_RUN):
            n = add_one_sync(n)
        return n

    @DBOS.workflow(name="bench.child")
    async def child(n: int) -> int:
        return await add_one(n)

    @DBOS.workflow(name="bench.parent")
    async def parent(n: int) -> int:
        handle = await DBOS.enqueue_workflow_async(QUEUE, child, n)
        return await handle.get_result(polling_interval_sec=poll)

    return DbosApp(dbos_ten_async, dbos_ten_sync, child, parent)


@contextlib.contextmanager
def dbos_launched() -> Iterator[None]:
    """``DBOS.launch()`` for the block, ``DBOS.destroy()`` after it."""
    from dbos import DBOS

    DBOS.launch()
    try:
        yield
    finally:
        DBOS.destroy(destroy_registry=True)


def case_dbos_local(url: str, sync_steps: bool, seconds: float) -> Figures:
    """Runs of DBOS's 10-step workflow, called directly, one after another."""
    app = dbos_app(url, "bench-local", 1.0, listen=())
    with dbos_launched():
        if sync_steps:

            def one_run() -> int:
                if app.ten_sync(0) != STEPS_PER_RUN:
                    raise RuntimeError("the DBOS workflow returned a wrong result")
                return STEPS_PER_RUN

            one_run()
            return timed(seconds, one_run)

        async def one_run_async() -> int:
            if await app.ten_async(0) != STEPS_PER_RUN:
                raise RuntimeError("the DBOS workflow returned a wrong result")
            return STEPS_PER_RUN

        async def timed_runs() -> Figures:
            await one_run_async()
            return await timed_async(seconds, one_run_async)

        return asyncio.run(timed_runs())


def case_dbos_concurrent(url: str, sync_steps: bool, runs: int, seconds: float) -> Figures:
    """
    Batches of *runs* DBOS 10-step workflows at once: ``async def`` ones gathered on one event
    loop, or ``def`` ones started with ``DBOS.start_workflow`` (each in a thread of its pool).
    """
    from dbos import DBOS

    app = dbos_app(url, "bench-concurrent", 1.0, listen=())
    with dbos_launched():
        if sync_steps:

            def batch() -> int:
                handles = [DBOS.start_workflow(app.ten_sync, 0) for _ in range(runs)]
                if any(handle.get_result() != STEPS_PER_RUN for handle in handles):
                    raise RuntimeError("a DBOS workflow returned a wrong result")
                return runs * STEPS_PER_RUN

            batch()
            return timed(seconds, batch)

        async def batch_async() -> int:
            results = await asyncio.gather(*(app.ten_async(0) for _ in range(runs)))
            if any(result != STEPS_PER_RUN for result in results):
                raise RuntimeError("a DBOS workflow returned a wrong result")
            return runs * STEPS_PER_RUN

        async def timed_batches() -> Figures:
            await batch_async()
            return await timed_async(seconds, batch_async)

        return asyncio.run(timed_batches())


def case_dbos_dispatch(
    children: Children,
    url: str,
    dispatch: Dispatch,
    *,
    via_parent: bool = False,
    meter: Meter | None = None,
) -> Figures:
    """
    Batches of DBOS workflows queued to worker processes (or, *via_parent*, enqueued by parent
    workflows in this process); with *meter*, the CPU per workflow too.
    """
    from dbos import DBOS

    workers, seconds, batch, poll_ms = dispatch
    poll = poll_ms / 1000
    app = dbos_app(url, "bench-orchestrator", poll, listen=())
    with dbos_launched():
        # Registered before the workers launch, so their queue threads find it at once.
        DBOS.register_queue(QUEUE, polling_interval_sec=poll)
        for i in range(workers):
            children.start(*dbos_worker(url, poll_ms, f"bench-worker-{i}"))

        async def one_batch() -> int:
            if via_parent:
                handles = [await DBOS.start_workflow_async(app.parent, n) for n in range(batch)]
            else:
                handles = [
                    await DBOS.enqueue_workflow_async(QUEUE, app.child, n) for n in range(batch)
                ]
            for n, handle in enumerate(handles):
                got = handle.get_result(polling_interval_sec=WAIT_POLL)
                if await children.watch(got) != n + 1:
                    raise RuntimeError("a DBOS workflow returned a wrong result")
            return batch

        async def timed_batches() -> Figures:
            await one_batch()
            window = None if meter is None else meter(children.pids)
            figures = await timed_async(seconds, one_batch)
            return figures if window is None else {**figures, **window.per_item(figures["count"])}

        return asyncio.run(timed_batches())


def case_dbos_drain(
    children: Children, url: str, *, workers: int, items: int, poll_ms: int, meter: Meter
) -> Figures:
    """*items* DBOS workflows enqueued with no worker, then drained by *workers* processes."""
    from dbos import DBOS

    app = dbos_app(url, "bench-orchestrator", poll_ms / 1000, listen=())
    with dbos_launched():
        DBOS.register_queue(QUEUE, polling_interval_sec=poll_ms / 1000)

        async def drain() -> Figures:
            handles = [await DBOS.enqueue_workflow_async(QUEUE, app.child, n) for n in range(items)]
            for i in range(workers):
                children.start(*dbos_worker(url, poll_ms, f"bench-worker-{i}", gated=True))
            window = meter(children.pids)
            start = time.perf_counter()
            children.go()
            for n, handle in enumerate(handles):
                if await handle.get_result(polling_interval_sec=DRAIN_POLL) != n + 1:
                    raise RuntimeError("DBOS returned a wrong result")
            elapsed = time.perf_counter() - start
            return {**rate(items, elapsed), **window.per_item(items)}

        return asyncio.run(drain())


def dbos_worker(url: str, poll_ms: int, executor: str, *, gated: bool = False) -> list[str]:
    """The arguments that make the benchmark's script a DBOS worker (see ``serve_dbos``)."""
    return ["--worker", "dbos", url, str(poll_ms), executor, *((GATED,) if gated else ())]


def serve_dbos(args: Sequence[str]) -> None:
    """Be the worker that *args* (``dbos_worker``'s, after ``--worker dbos``) describe."""
    url, poll_ms, executor, *flags = args
    worker_dbos(url, int(poll_ms), executor, gated=GATED in flags)


def worker_dbos(url: str, poll_ms: int, executor: str, *, gated: bool = False) -> None:
    """
    A DBOS process listening to the queue until SIGTERM, SIGINT or stdin closes (*gated*: it
    launches at the parent's SIGUSR1, since its queue thread dequeues from launch on).
    """
    stop, go = threading.Event(), threading.Event()

    def leave(signum: int, frame: FrameType | None) -> None:
        stop.set()
        go.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, leave)
    if gated:
        signal.signal(signal.SIGUSR1, lambda signum, frame: go.set())
    else:
        go.set()
    dbos_app(url, executor, poll_ms / 1000, listen=(QUEUE,))
    if gated:
        print("ready", flush=True)
        while not go.wait(0.1):
            pass
    if stop.is_set():
        return
    with dbos_launched():
        if not gated:
            print("ready", flush=True)
        while not stop.wait(0.1):
            pass
