"""
The durable checkout demo: a flaky payment retried durably, and a worker killed mid-step.

1. Start a ``checkout`` run (``shop.py``) and a worker: ``python -m effects.durable --app
   shop:engine work``.
2. Follow the run's event trail: the ``quote`` local step retries in memory; the
   ``payments:charge-card`` step fails twice (503) and each retry's ``wake_at`` is stored on the
   checkpoint while the run is suspended.
3. On the third attempt the gateway takes the charge but answers slowly: the worker is killed
   with SIGKILL, its result never reported.
4. A second worker starts. The dead worker's claim expires and is recorded as a retryable
   ``worker lost`` failure; the fourth attempt finds the charge under the same idempotency key
   (the ``step_id``), so the card is charged once. ``email:confirm`` fails once and is retried
   thanks to the call site's ``retries=5``. The run completes.
5. ``show`` prints the run, its checkpoints and its event trail; SIGTERM drains the second worker.

Then, on a store of their own (``more/`` in the folder), with worker C, the saga side of checkout:

6. Order 1002's card is declined: the gateway's ``FatalError(..., "declined")`` is routed to the
   workflow's ``on_error`` handler, which mails the customer and completes the run with the
   outcome ``"declined: ..."`` (``run.error_routed``); nothing is undone.
7. Order 1003 is charged, and its confirmation is held. ``cancel order-1003 --compensate``: the
   held attempt is withdrawn (its next heartbeat raises ``RunCancelled``, nothing is mailed, its
   result is discarded), the charge's compensation refunds the card, and the run is cancelled.

Run it with ``python examples/checkout/demo.py [--keep DIR]``; it takes a few seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import IO, Any

from effects.durable import Engine

HERE = Path(__file__).resolve().parent
RUN_ID = "order-1001"
#: The steps of ``checkout`` by sequence number (a local step's name is only stored with its
#: outcome, so the trail of its attempts has only the number).
STEP_NAMES = {1: "quote", 2: "payments:charge-card", 3: "email:confirm"}
DEADLINE_S = 90.0


def section(title: str) -> None:
    """Print a section header."""
    print(f"\n== {title}", flush=True)


def iso(ms: int) -> str:
    """Epoch ms as ISO-8601 UTC."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Worker:
    """A ``python -m effects.durable --app shop:engine work`` process; its stderr is echoed."""

    def __init__(self, label: str, env: dict[str, str]) -> None:
        self.label = label
        command = [sys.executable, "-m", "effects.durable", "--app", "shop:engine"]
        self.process = subprocess.Popen(
            [*command, "work", "--poll", "100ms"],
            cwd=HERE,  # --app imports shop from the working folder
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.pid = self.process.pid
        self._echo = threading.Thread(target=self._copy, args=(self.process.stderr,), daemon=True)
        self._echo.start()
        print(
            f"$ python -m effects.durable --app shop:engine work   (worker {label}, pid {self.pid})"
        )

    def _copy(self, stream: IO[str] | None) -> None:
        if stream is None:
            return
        for line in stream:
            print(f"    [worker {self.label}] {line.rstrip()}", flush=True)

    def wait(self) -> int:
        code = self.process.wait(timeout=60)
        self._echo.join(timeout=10)
        return code


class Trail:
    """Prints a run's new events as they land, as a story."""

    def __init__(
        self,
        engine: Any,
        started: float,
        run_id: str = RUN_ID,
        *,
        prefix: str = "",
        names: dict[int, str] | None = None,
        hidden: frozenset[int] = frozenset(),
    ) -> None:
        self.engine = engine
        self.started = started
        self.run_id = run_id
        self.prefix = prefix
        self.names = dict(STEP_NAMES if names is None else names)
        #: The steps whose events are not told (by sequence number).
        self.hidden = hidden
        self.printed = 0
        self.workers: dict[str, str] = {}

    def label(self, pid: int, label: str) -> None:
        self.workers[str(pid)] = label

    async def follow(self, until: Callable[[], Awaitable[bool]]) -> None:
        """Print new events every 50 ms until ``await until()`` holds (or the deadline passes)."""
        deadline = time.monotonic() + DEADLINE_S
        while True:
            done = await until()
            await self.print_new()
            if done:
                return
            if time.monotonic() > deadline:
                raise SystemExit("demo: timed out waiting for the run")
            await asyncio.sleep(0.05)

    async def print_new(self) -> None:
        events = await self.engine.events(self.run_id)
        if any(e.seq is not None and e.seq not in self.names for e in events[self.printed :]):
            # The steps past the story's three: a route's, or compensations (compensate:...).
            for cp in await self.engine.checkpoints(self.run_id):
                self.names.setdefault(cp.seq, cp.name)
        for event in events[self.printed :]:
            line = None if event.seq in self.hidden else self.describe(event)
            if line:
                offset = time.monotonic() - self.started
                print(f"  +{offset:5.2f}s  {self.prefix}{line}", flush=True)
        self.printed = len(events)

    def describe(self, event: Any) -> str | None:
        data: dict[str, Any] = event.data
        name = self.names.get(event.seq, f"step {event.seq}") if event.seq else "run"
        attempt = data.get("attempt")
        kind = data.get("kind")
        where = f"{name:<21} attempt {attempt}"
        error = data.get("error") or {}
        match event.name:
            case "run.started":
                return f"{'run':<21} started (workflow checkout)"
            case "step.dispatched":
                return f"{where} dispatched: pending checkpoint and task written, run suspended"
            case "step.started" if kind == "local":
                return f"{where} started (local: it runs inside the turn)"
            case "step.started":
                parts = str(data.get("worker", "")).split(":")  # host:pid:random
                pid = parts[-2] if len(parts) >= 3 else "?"
                return f"{where} claimed by worker {self.workers.get(pid, pid)}"
            case "step.failed":
                code = f" [{error['code']}]" if error.get("code") else ""
                return f"{where} failed{code}: {error.get('message')}"
            case "step.retry_scheduled" if kind == "local":
                return (
                    f"{where} retry in {data['delay_ms']} ms, an in-memory timer "
                    "(a local step stores only its outcome)"
                )
            case "step.retry_scheduled":
                return (
                    f"{where} retry at wake_at {iso(data['wake_at'])} (in {data['delay_ms']} ms), "
                    "stored on the checkpoint; the run is suspended"
                )
            case "step.completed":
                return f"{where} completed"
            case "step.gave_up":
                return f"{name:<21} gave up after {data.get('attempts')} attempts"
            case "run.recovered":
                return f"{'run':<21} recovered: its lease expired"
            case "run.completed" | "run.failed":
                return f"{'run':<21} {event.name.split('.')[1]}"
            case "run.error_routed":
                return f"{'run':<21} error {data['code']!r} routed to the workflow's handler"
            case "run.cancel_requested":
                return f"{'run':<21} cancel with compensation asked for: the run is pending"
            case "run.cancelled":
                return f"{'run':<21} cancelled (compensated: {data['compensate']})"
            case "step.withdrawn":
                held = "claimed by a worker" if data.get("claimed") else "queued"
                return f"{where} withdrawn ({held}): its result will not count"
            case "step.result_discarded":
                return f"{where} result discarded ({data.get('outcome')})"
            case _:
                return f"{name:<21} {event.name} {data}"


def cli(args: Sequence[str], env: dict[str, str]) -> int:
    """Run ``python -m effects.durable --app shop:engine ARGS`` and show its output."""
    print(f"\n$ python -m effects.durable --app shop:engine {' '.join(args)}", flush=True)
    return subprocess.call(
        [sys.executable, "-m", "effects.durable", "--app", "shop:engine", *args], cwd=HERE, env=env
    )


def rows(path: Path, query: str) -> list[tuple[Any, ...]]:
    """Rows of a fake service's SQLite file."""
    db = sqlite3.connect(path)
    try:
        return db.execute(query).fetchall()
    finally:
        db.close()


async def demo(folder: Path) -> list[str]:
    """Run the story in *folder*; return the checks that failed (none when all went well)."""
    env = {**os.environ, "CHECKOUT_STORE": f"sqlite:///{folder / 'checkout.db'}"}
    env["CHECKOUT_DATA"] = str(folder)
    os.environ.update(CHECKOUT_STORE=env["CHECKOUT_STORE"], CHECKOUT_DATA=str(folder))
    sys.path.insert(0, str(HERE))
    import shop  # after the environment names the folder

    started = time.monotonic()
    async with shop.engine as engine:
        section("a checkout run and a worker")
        order: shop.Order = {
            "id": 1001,
            "email": "ada@example.com",
            "items": [
                {"sku": "kettle", "quantity": 1, "price_cents": 3_499},
                {"sku": "mug", "quantity": 2, "price_cents": 1_250},
            ],
        }
        await engine.start(shop.checkout, order, run_id=RUN_ID)
        items = ", ".join(f"{i['quantity']} x {i['sku']}" for i in order["items"])
        print(f"started run {RUN_ID} of workflow checkout: order {order['id']}, {items}")
        trail = Trail(engine, started)
        worker_a = Worker("A", env)
        trail.label(worker_a.pid, "A")
        slow = folder / "gateway-answering-slowly"

        async def gateway_is_slow() -> bool:
            return slow.exists()

        await trail.follow(gateway_is_slow)

        section("the gateway took the charge, the answer is slow: kill worker A")
        worker_a.process.send_signal(signal.SIGKILL)
        code_a = worker_a.wait()
        print(f"killed worker A (pid {worker_a.pid}) with SIGKILL; exit code {code_a}")
        charge = (await engine.checkpoints(RUN_ID))[1]
        print(
            f"checkpoint {charge.seq} {charge.name}: {charge.status}, attempt {charge.attempts}; "
            f"the gateway holds {len(rows(folder / 'gateway.db', 'SELECT * FROM charges'))} "
            "charge; nobody will report the result"
        )

        section("worker B recovers the lost attempt and finishes the run")
        worker_b = Worker("B", env)
        trail.label(worker_b.pid, "B")

        async def run_is_over() -> bool:
            return (await engine.get_run(RUN_ID)).status in ("completed", "failed", "dead")

        await trail.follow(run_is_over)
        run = await engine.get_run(RUN_ID)
        checkpoints = await engine.checkpoints(RUN_ID)
        events = await engine.events(RUN_ID)

    section("the outcome")
    print(f"run {RUN_ID}: {run.status}, output {run.output!r}")
    for c in checkpoints:
        print(f"  {c.seq} {c.name:<21} {c.kind:<6} {c.status:<9} after {c.attempts} attempt(s)")
    charges = rows(folder / "gateway.db", "SELECT key, charge_id, amount_cents FROM charges")
    calls = rows(folder / "gateway.db", "SELECT n FROM calls")
    mails = rows(folder / "mail.db", "SELECT message_id, to_address, subject FROM outbox")
    print(f"gateway: {len(calls)} calls, {len(charges)} charge(s): {charges}")
    print(f"mail: {len(mails)} message(s) sent: {mails}")
    cli(["runs"], env)
    cli(["show", RUN_ID], env)

    section("SIGTERM drains worker B")
    worker_b.process.send_signal(signal.SIGTERM)
    code_b = worker_b.wait()
    print(f"worker B exit code {code_b}")

    saga_checks = await sagas(folder, shop)

    lost = [
        e
        for e in events
        if e.name == "step.failed" and (e.data.get("error") or {}).get("code") == "worker_lost"
    ]
    checks = {
        "the run completed": run.status == "completed",
        "its output is the charge id": charges != [] and run.output == charges[0][1],
        "the card was charged once": len(charges) == 1,
        "the charge used the step id as idempotency key": charges[0][0] == f"{RUN_ID}:2",
        "the gateway was called 4 times (503, 503, lost answer, idempotent replay)": len(calls)
        == 4,
        "the charge took 4 attempts": checkpoints[1].attempts == 4,
        "the lost attempt was recorded as worker lost": len(lost) == 1,
        "one confirmation email went out": len(mails) == 1,
        "worker A was killed by SIGKILL": code_a == -signal.SIGKILL,
        "worker B drained and exited 0": code_b == 0,
        **saga_checks,
    }
    section("checks")
    for what, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    return [what for what, ok in checks.items() if not ok]


async def sagas(folder: Path, shop: Any) -> dict[str, bool]:
    """
    The second story, on a store of its own in ``more/``: a declined card routed to an outcome
    (order 1002), and an order cancelled with compensation while its confirmation is held
    (order 1003); return its checks.
    """
    more = folder / "more"
    more.mkdir(exist_ok=True)
    store = f"sqlite:///{more / 'checkout.db'}"
    env = {**os.environ, "CHECKOUT_STORE": store, "CHECKOUT_DATA": str(more)}
    section("a declined card and a cancelled order: a second store, worker C")
    items: list[Any] = [{"sku": "teapot", "quantity": 1, "price_cents": 2_999}]
    declined_order = {"id": 1002, "email": "bob@example.com", "items": items,
                      "card": "tok_declined"}  # fmt: skip
    held_order = {"id": 1003, "email": "grace@hold.example", "items": items, "card": "tok_ok"}
    started = time.monotonic()
    async with Engine(store, workflows=[shop.checkout]) as engine:
        await engine.start(shop.checkout, declined_order, run_id="order-1002")
        await engine.start(shop.checkout, held_order, run_id="order-1003")
        print("started order-1002 (a card the gateway declines) and order-1003 (a good card)")
        worker_c = Worker("C", env)
        # The quote is hidden (its in-memory retries are the first story's); the other steps'
        # names are read from the checkpoints: a route's step, or a compensation.
        trails = [
            Trail(engine, started, run_id, prefix=f"{run_id}  ", names={}, hidden=frozenset({1}))
            for run_id in ("order-1002", "order-1003")
        ]
        for trail in trails:
            trail.label(worker_c.pid, "C")

        async def finished(run_id: str) -> bool:
            return (await engine.get_run(run_id)).status in ("completed", "failed", "cancelled")

        async def declined_done_and_mail_held() -> bool:
            await trails[1].print_new()
            return await finished("order-1002") and (more / "mail-holding").exists()

        await trails[0].follow(declined_done_and_mail_held)

        section("order-1003 is charged, its confirmation held: cancel it, with compensation")
        cancel_code = cli(["cancel", "order-1003", "--compensate"], env)

        async def cancelled() -> bool:
            # And the held attempt has heard of it (its next beat raised) and reported.
            trail = [e.name for e in await engine.events("order-1003")]
            return await finished("order-1003") and "step.result_discarded" in trail

        await trails[1].follow(cancelled)
        runs = {r: await engine.get_run(r) for r in ("order-1002", "order-1003")}
        undone = [
            c for c in await engine.checkpoints("order-1003") if c.name.startswith("compensate:")
        ]
        events = await engine.events("order-1003")
    cli(["show", "order-1003"], env)
    worker_c.process.send_signal(signal.SIGTERM)
    code_c = worker_c.wait()
    print(f"worker C exit code {code_c}")

    charges = rows(more / "gateway.db", "SELECT order_id, charge_id FROM charges")
    refunds = rows(more / "gateway.db", "SELECT charge_id, refund_id FROM refunds")
    mails = rows(more / "mail.db", "SELECT to_address, subject FROM outbox")
    section("the outcome of the second story")
    for run_id, run in runs.items():
        print(f"run {run_id}: {run.status}, output {run.output!r}")
    print(f"gateway: charges {charges}, refunds {refunds}")
    print(f"mail: {mails}")
    names = [e.name for e in events]
    return {
        "order 1002 completed with the declined outcome": (
            runs["order-1002"].status,
            runs["order-1002"].output,
        )
        == ("completed", "declined: insufficient funds"),
        "the declined card was never charged, and its customer was told": (
            1002 not in [order for order, _ in charges]
            and ("bob@example.com", "order 1002: card declined") in mails
        ),
        "cancel --compensate exited 0": cancel_code == 0,
        "order 1003 is cancelled, with no error": (
            runs["order-1003"].status,
            runs["order-1003"].error,
        )
        == ("cancelled", None),
        "order 1003 was charged once and refunded once": (
            [o for o, _ in charges] == [1003] and [c for c, _ in refunds] == [charges[0][1]]
        ),
        "the refund ran as compensate:payments:charge-card": [c.name for c in undone]
        == ["compensate:payments:charge-card"],
        "the held confirmation was withdrawn and its result discarded": (
            "step.withdrawn" in names and "step.result_discarded" in names
        ),
        "order 1003's confirmation was never mailed": all(
            to != "grace@hold.example" for to, _ in mails
        ),
        "worker C drained and exited 0": code_c == 0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("--keep", metavar="DIR", help="keep the store and the services' files here")
    args = parser.parse_args()
    if args.keep:
        folder = Path(args.keep).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("checkout.db", "gateway.db", "mail.db", "gateway-answering-slowly"):
            for suffix in ("", "-wal", "-shm"):
                (folder / f"{name}{suffix}").unlink(missing_ok=True)
        shutil.rmtree(folder / "more", ignore_errors=True)
    else:
        folder = Path(tempfile.mkdtemp(prefix="checkout-demo-"))
    try:
        failed = asyncio.run(demo(folder))
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    if failed:
        print(f"\ndemo: {len(failed)} check(s) failed", flush=True)
        return 1
    print(
        "\ndemo: every check passed: the run survived a killed worker, the card was charged once;"
        " a declined card was an outcome, a cancelled order was refunded"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
