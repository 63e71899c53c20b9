"""
The workflows and steps of the crash tests, and the outputs they must end with.

Every handler execution is logged to a file of its own process (``CRASH_LOG_DIR``, one
``exec-<pid>.jsonl`` each): a ``start`` line before the work and an ``end`` line after it, so a
test can tell which attempts ran where, and which ran twice. Randomness (how long a step works,
which attempts of the flaky step fail) is derived from the seed in the run's input, so a failing
seed replays the same pattern.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from effects import FatalError
from effects.durable import RemoteStepError, WorkflowContext, current_step, step, workflow

#: Attempts of every dispatched step: far more than the worker kills and flaky failures one step
#: can meet in a test, so a run never runs out of them.
RETRIES = 60

#: Every attempt of the flaky step from this one on succeeds.
FLAKY_MAX_FAILURES = 4


def unit(*parts: object) -> float:
    """A uniform number in [0, 1) that depends only on *parts* (the same in every process)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def log_exec(record: dict[str, Any]) -> None:
    """Append one line to this process's execution log (one write, so a kill tears no line)."""
    folder = os.environ.get("CRASH_LOG_DIR")
    if not folder:
        return
    # `mono` (system-wide on Linux) orders the lines of every process as they were written.
    line = (json.dumps({"pid": os.getpid(), "mono": time.monotonic(), **record}) + "\n").encode()
    fd = os.open(Path(folder) / f"exec-{os.getpid()}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


async def _work(name: str, seed: int, work_ms: float) -> tuple[str, int, float]:
    """Log the start, spend a seeded while working, and return what the end line needs."""
    ctx = current_step()
    started = time.time()
    log_exec({"ev": "start", "name": name, "step_id": ctx.step_id, "attempt": ctx.attempt})
    await asyncio.sleep(work_ms * unit(seed, ctx.step_id, ctx.attempt, "work") / 1000)
    return ctx.step_id, ctx.attempt, started


def _end(name: str, step_id: str, attempt: int, started: float, *, ok: bool) -> None:
    log_exec(
        {
            "ev": "end",
            "name": name,
            "step_id": step_id,
            "attempt": attempt,
            "start": started,
            "end": time.time(),
            "ok": ok,
        }
    )


def flaky_fails(seed: int, step_id: str, attempt: int, rate: float) -> bool:
    """Whether this attempt of the flaky step fails: seeded, and never past a few failures."""
    return attempt <= FLAKY_MAX_FAILURES and unit(seed, step_id, attempt, "flaky") < rate


_POLICY: dict[str, Any] = {
    "retries": RETRIES,
    "backoff": "exp",
    "backoff_ms": 20,
    "backoff_max_ms": 120,
    "jitter": True,
}


@step("crash:add", **_POLICY)
async def add(data: dict[str, Any]) -> int:
    """``v + k``, after working for a seeded while."""
    step_id, attempt, started = await _work("crash:add", data["seed"], data["work_ms"])
    _end("crash:add", step_id, attempt, started, ok=True)
    return int(data["v"]) + int(data["k"])


@step("crash:flaky", **_POLICY)
async def flaky(data: dict[str, Any]) -> int:
    """``3 * v``; seeded attempts fail with a retryable ``ConnectionError`` first."""
    step_id, attempt, started = await _work("crash:flaky", data["seed"], data["work_ms"])
    if flaky_fails(data["seed"], step_id, attempt, data["rate"]):
        _end("crash:flaky", step_id, attempt, started, ok=False)
        msg = f"flaky step {step_id} failed attempt {attempt} (seeded)"
        raise ConnectionError(msg)
    _end("crash:flaky", step_id, attempt, started, ok=True)
    return 3 * int(data["v"])


@workflow("crash:pipeline")
async def pipeline(ctx: WorkflowContext, data: dict[str, Any]) -> dict[str, Any]:
    """Local, dispatched, flaky dispatched, local (retried in memory), dispatched."""
    n, seed = int(data["n"]), int(data["seed"])
    common = {"seed": seed, "work_ms": data["work_ms"]}

    async def prepare() -> int:
        # Work a seeded while, so a kill of the orchestrator often lands inside a turn.
        await asyncio.sleep(data["work_ms"] * unit(seed, ctx.run_id, "prepare") / 1000)
        return 2 * n

    prepared = await ctx.local_step("prepare", prepare)
    added = await ctx.step(add, {**common, "v": prepared, "k": 1})
    tripled = await ctx.step(flaky, {**common, "v": added, "rate": data["rate"]})
    calls: list[int] = []

    def combine() -> int:
        # The first in-memory attempt of some runs fails, so local backoffs happen too.
        calls.append(1)
        if len(calls) == 1 and unit(seed, ctx.run_id, "combine") < 0.5:
            msg = f"combine of {ctx.run_id} failed its first attempt (seeded)"
            raise ConnectionError(msg)
        return tripled + n

    combined = await ctx.local_step(
        "combine", combine, retries=3, backoff="fixed", backoff_ms=40, jitter=True
    )
    final = await ctx.step(add, {**common, "v": combined, "k": 5})
    return {"n": n, "prepared": prepared, "tripled": tripled, "final": final}


def pipeline_output(n: int) -> dict[str, Any]:
    """What a run of ``pipeline`` with ``n`` must end with."""
    tripled = 3 * (2 * n + 1)
    return {"n": n, "prepared": 2 * n, "tripled": tripled, "final": tripled + n + 5}


# -- the fault-injection workflow: each persistence point is met once, in a fixed order --------


@step("crash:fails-once", retries=5, backoff="fixed", backoff_ms=150)
async def fails_once(data: dict[str, Any]) -> int:
    """``v + 1``; attempt 1 fails (retryable), so the durable backoff path is always taken."""
    step_id, attempt, started = await _work("crash:fails-once", 0, 10)
    if attempt == 1:
        _end("crash:fails-once", step_id, attempt, started, ok=False)
        msg = f"{step_id} fails its first attempt"
        raise ConnectionError(msg)
    _end("crash:fails-once", step_id, attempt, started, ok=True)
    return int(data["v"]) + 1


@workflow("crash:faults")
async def faults(ctx: WorkflowContext, n: int) -> dict[str, int]:
    """
    A local step that backs off once, a dispatched step that fails once, one that does not, and
    a local step that succeeds at once.
    """
    calls: list[int] = []

    def prepare() -> int:
        calls.append(1)
        if len(calls) == 1:
            msg = "prepare fails its first in-memory attempt"
            raise ConnectionError(msg)
        return 10 * n

    prepared = await ctx.local_step("prepare", prepare, retries=2, backoff_ms=300)
    once = await ctx.step(fails_once, {"v": prepared})
    final = await ctx.step(add, {"v": once, "k": 2, "seed": 0, "work_ms": 10})
    total = await ctx.local_step("total", lambda: prepared + final)
    return {"prepared": prepared, "once": once, "final": final, "total": total}


def faults_output(n: int) -> dict[str, int]:
    """What a run of ``faults`` with ``n`` must end with."""
    return {"prepared": 10 * n, "once": 10 * n + 1, "final": 10 * n + 3, "total": 20 * n + 3}


# -- claims and races --------------------------------------------------------------------------


@step("crash:record")
async def record(data: dict[str, Any]) -> int:
    """Log (pid, task, start, end) and return ``i * i``."""
    step_id, attempt, started = await _work("crash:record", data["seed"], data["work_ms"])
    _end("crash:record", step_id, attempt, started, ok=True)
    return int(data["i"]) ** 2


@workflow("crash:one")
async def one(ctx: WorkflowContext, data: dict[str, Any]) -> int:
    """One dispatched step."""
    return await ctx.step(record, data)


@workflow("crash:hold")
async def hold(ctx: WorkflowContext, data: dict[str, Any]) -> int:
    """
    A local step that, in a process with ``CRASH_HOLD`` set, signals and then waits for the file
    ``release`` there (at most 60 s).
    """

    async def held() -> int:
        folder = os.environ.get("CRASH_HOLD")
        if folder:
            (Path(folder) / f"held-{ctx.run_id}").write_text("held")
            deadline = time.monotonic() + 60
            while not (Path(folder) / "release").exists() and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        return int(data["i"]) + 100

    return await ctx.local_step("held", held)


# -- a stalled worker whose result lands late ------------------------------------------------


@step("crash:stall")
async def stall(data: dict[str, Any]) -> str:
    """
    Succeed, after blocking this process's event loop until the file ``release`` appears in
    ``CRASH_STALL`` (a stalled worker: its claim is not renewed meanwhile, so it expires).
    """
    step_id, attempt, started = await _work("crash:stall", 0, 0)
    release = Path(os.environ["CRASH_STALL"]) / "release"
    deadline = time.monotonic() + 60
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # blocking on purpose
    _end("crash:stall", step_id, attempt, started, ok=True)
    return f"charged {data['order']}"


@workflow("crash:compensate")
async def compensate(ctx: WorkflowContext, data: dict[str, Any]) -> str:
    """
    The stalling step (one attempt, unless the input's ``policy`` overrides it); when it fails
    for good, a compensation path of two more steps.
    """
    try:
        return await ctx.step(stall, data, **data.get("policy", {}))
    except RemoteStepError as error:
        code = error.step_error.code
        refund = await ctx.local_step("refund", lambda: f"refunded {data['order']} after {code}")
        await ctx.step(add, {"v": 0, "k": 1, "seed": 0, "work_ms": 0})
        return refund


# -- a worker stopped mid-step ----------------------------------------------------------------


async def _held(data: dict[str, Any]) -> None:
    """
    Wait (without blocking the event loop, at most 60 s): in a process with ``CRASH_WAIT`` set,
    until the file ``release`` appears there, unless the input says ``"hold": false``; and, if
    the input names a file ``until``, until that file appears.
    """
    folder = os.environ.get("CRASH_WAIT")
    releases = [Path(data["until"])] if "until" in data else []
    if folder and data.get("hold", True):
        releases.append(Path(folder) / "release")
    deadline = time.monotonic() + 60
    while not all(p.exists() for p in releases) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


@step("crash:wait")
async def wait(data: dict[str, Any]) -> str:
    """Succeed; in a process with ``CRASH_WAIT`` set, first wait for its release (``_held``)."""
    step_id, attempt, started = await _work("crash:wait", 0, 0)
    await _held(data)
    _end("crash:wait", step_id, attempt, started, ok=True)
    return f"done {data['order']} by {os.getpid()}"


@workflow("crash:waiting")
async def waiting(ctx: WorkflowContext, data: dict[str, Any]) -> str:
    """One dispatched step that may wait."""
    return await ctx.step(wait, data)


# -- issue 10: liveness, lost dispatch, fans, flow-control queues ------------------------------


@step("crash:beats")
async def beats(data: dict[str, Any]) -> dict[str, Any]:
    """
    Heartbeat every ``every_ms`` with progress ``{"beat": n, "ms": ms since the start}`` for
    ``for_ms`` (default 60 s), then return how many beats; an attempt that finds an earlier
    attempt's progress returns it at once instead.
    """
    ctx = current_step()
    step_id, attempt, started = await _work("crash:beats", 0, 0)
    if ctx.last_progress is not None:
        _end("crash:beats", step_id, attempt, started, ok=True)
        return {"resumed": ctx.last_progress, "by": os.getpid()}
    begun = time.monotonic()
    count = 0
    while (elapsed := time.monotonic() - begun) * 1000 < data.get("for_ms", 60_000):
        await asyncio.sleep(data["every_ms"] / 1000)
        count += 1
        ctx.heartbeat({"beat": count, "ms": round(elapsed * 1000)})
    _end("crash:beats", step_id, attempt, started, ok=True)
    return {"beats": count, "by": os.getpid()}


@workflow("crash:guarded")
async def guarded(ctx: WorkflowContext, data: dict[str, Any]) -> Any:
    """
    One dispatched step, ``STEPS[data["step"]]``, with the input's ``policy`` overrides; when it
    fails for good, the workflow's own except branch: a compensating step, and a report.
    """
    try:
        return await ctx.step(STEPS[data["step"]], data, **data.get("policy", {}))
    except RemoteStepError as error:
        compensated = await ctx.step(add, {"v": 0, "k": 1, "seed": 0, "work_ms": 0})
        return {
            "code": error.step_error.code,
            "attempts": len(error.errors),
            "compensated": compensated,
        }


@step("crash:member", retries=4, backoff="fixed", backoff_ms=20)
async def member(data: dict[str, Any]) -> int:
    """
    ``i * i`` after a seeded while (and, with ``CRASH_WAIT``, its release); an input with
    ``"fail": true`` fails every attempt.
    """
    step_id, attempt, started = await _work("crash:member", data["seed"], data["work_ms"])
    await _held(data)
    if data.get("fail"):
        _end("crash:member", step_id, attempt, started, ok=False)
        msg = f"member {data['i']} fails attempt {attempt}"
        raise ConnectionError(msg)
    _end("crash:member", step_id, attempt, started, ok=True)
    return int(data["i"]) ** 2


@workflow("crash:fan")
async def fan(ctx: WorkflowContext, data: dict[str, Any]) -> dict[str, Any]:
    """
    A fan of ``STEPS[data["step"]]`` over ``data["inputs"]``; a member that fails for good is
    caught, and a step after the fan shows where the workflow went on.
    """
    try:
        outputs = await ctx.all(STEPS[data["step"]], data["inputs"], **data.get("policy", {}))
    except RemoteStepError as error:
        after = await ctx.step(add, {"v": 0, "k": 1, "seed": 0, "work_ms": 0})
        return {"failed": error.step_id, "attempts": len(error.errors), "after": after}
    return {"outputs": outputs}


#: The flow-control queue every node engine has (``--queue-concurrency`` slots).
QUEUE = "crash:api"


async def _lane(data: dict[str, Any]) -> str:
    """
    Wait as ``_held`` says, then work ``work_ms``, logging ``time.monotonic()`` (one clock for
    every process) at the start and the end; an input with ``"fail_first": true`` fails
    attempt 1 (retryable).
    """
    ctx = current_step()
    begun = time.monotonic()
    log_exec({"ev": "start", "name": ctx.name, "step_id": ctx.step_id, "attempt": ctx.attempt})
    await _held(data)
    await asyncio.sleep(data["work_ms"] / 1000)
    ok = not (data.get("fail_first") and ctx.attempt == 1)
    log_exec(
        {
            "ev": "end",
            "name": ctx.name,
            "step_id": ctx.step_id,
            "attempt": ctx.attempt,
            "mono_start": begun,
            "mono_end": time.monotonic(),
            "ok": ok,
        }
    )
    if not ok:
        msg = f"{ctx.step_id} fails its first attempt"
        raise ConnectionError(msg)
    return f"{ctx.name} {data['order']} by {os.getpid()}"


# Two steps of one queue in two groups, so a test can pin each to its own process.
lane_a = step("crash:lane-a", group="lane-a")(_lane)
lane_b = step("crash:lane-b", group="lane-b")(_lane)


# -- issue 21: sagas -----------------------------------------------------------------------------


def _gated(data: dict[str, Any], name: str) -> Path | None:
    """The file whose appearance lets the gate *name* of the input pass, if the input holds it."""
    return Path(data["gate"]) / f"release-{name}" if name in data.get("hold", ()) else None


def _wait_gate(data: dict[str, Any], name: str) -> None:
    """Block (a thread's wait, at most 60 s) at the gate *name*, if the input holds it."""
    release = _gated(data, name)
    deadline = time.monotonic() + 60
    while release is not None and not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)


async def _await_gate(data: dict[str, Any], name: str) -> None:
    """Wait (at most 60 s) at the gate *name*, if the input holds it."""
    release = _gated(data, name)
    deadline = time.monotonic() + 60
    while release is not None and not release.exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


def effect(what: str, **fields: Any) -> None:
    """
    One side effect of the saga, appended to this process's execution log (one write), with
    ``time.monotonic()`` (one clock for every process of the machine) to order it among all.
    """
    log_exec({"ev": "effect", "what": what, "mono": time.monotonic(), **fields})


@step("crash:book", retries=RETRIES, backoff_ms=20)
async def book(data: dict[str, Any]) -> str:
    """Book item ``i`` (a side effect), after its gate."""
    ctx = current_step()
    effect("book", i=data["i"], step_id=ctx.step_id, attempt=ctx.attempt)
    await _await_gate(data, f"book-{data['i']}")
    return f"booking-{data['i']}"


@step("crash:unbook")
async def unbook(undo: dict[str, Any]) -> str:
    """Undo a booking: a start, its gate, then the side effect."""
    data, ctx = undo["input"], current_step()
    effect("unbook-start", i=data["i"], step_id=ctx.step_id, attempt=ctx.attempt)
    await _await_gate(data, f"unbook-{data['i']}")
    effect("unbook", i=data["i"], output=undo["output"], step_id=ctx.step_id)
    return f"unbooked-{data['i']}"


@workflow("crash:saga")
async def saga(ctx: WorkflowContext, data: dict[str, Any]) -> None:
    """
    Hold (a local step whose undo runs in the orchestrator), book ``steps`` items (dispatched,
    each undone by ``crash:unbook``), then fail: every completed step is undone, last first.
    """

    def unhold(undo: dict[str, Any]) -> str:
        effect("unhold-start", output=undo["output"])
        _wait_gate(data, "unhold")
        effect("unhold", output=undo["output"])
        return "unheld"

    await ctx.local_step("hold", lambda: f"held-{data['n']}", compensate=unhold)
    for i in range(data["steps"]):
        item = {"i": i, "gate": data["gate"], "hold": data["hold"]}
        await ctx.step(book, item, compensate=unbook)
    raise FatalError("the last step failed", "last_step_failed")


# -- issue 23: durable timers -----------------------------------------------------------------


@workflow("crash:sleeper")
async def sleeper(ctx: WorkflowContext, data: dict[str, Any]) -> dict[str, Any]:
    """
    Read the wall clock (a local step), sleep ``data["ms"]`` durably, read it again: both
    readings are recorded, so the output says when the sleep began and when the run went on.
    """
    before = await ctx.local_step("before", lambda: round(time.time() * 1000))
    await ctx.sleep(data["ms"] / 1000)
    after = await ctx.local_step("after", lambda: round(time.time() * 1000))
    log_exec({"ev": "woke", "run_id": ctx.run_id, "after": after})
    return {"before": before, "after": after}


WORKFLOWS = {
    w.name: w
    for w in (pipeline, faults, one, hold, compensate, waiting, guarded, fan, saga, sleeper)
}
STEPS = {
    s.name: s
    for s in (
        add,
        flaky,
        fails_once,
        record,
        stall,
        wait,
        beats,
        member,
        lane_a,
        lane_b,
        book,
        unbook,
    )
}
