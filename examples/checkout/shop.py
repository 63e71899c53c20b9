"""
The checkout workflow of the durable-engine seed, with the services it calls faked on disk.

- ``quote``: a local step; the pricing service times out twice, so the step retries in memory
  (``retries=5``, exponential backoff from 200 ms, jitter).
- ``payments:charge-card``: a dispatched step; the card gateway answers 503 twice, and the third
  time it takes the charge but answers so slowly that the worker is killed first. The step
  retries durably (``retries=4``, exponential backoff from 500 ms, jitter): each wait is stored
  on the checkpoint as ``wake_at``. It hands the gateway its ``step_id`` as the idempotency key,
  so the retry after the lost worker finds the charge made and the card is charged once.
- ``email:confirm``: a dispatched step declared with a single try; the mail server refuses the
  first message, and the call site's override ``retries=5`` lets the second one go out.

It is a saga, too: a completed charge registers its undo, ``payments:refund`` (dispatched with the
charge's request and output). Should the run fail, or be cancelled with compensation
(``python -m effects.durable --app shop:engine cancel RUN --compensate``), the card is refunded
(``compensate:payments:charge-card``). A declined card is not a failure but an outcome: the
gateway's ``FatalError(..., "declined")`` is routed to ``declined`` (``on_error``), which tells the
customer and completes the run with ``"declined: ..."``.

The gateway knows three cards: ``tok_flaky`` (the first story: 503, 503, then a charge answered
too slowly), ``tok_ok`` (charged at once) and ``tok_declined`` (always declined).

Workers run it with ``python -m effects.durable --app shop:engine work`` from this folder. The
store is ``$CHECKOUT_STORE`` (default ``sqlite:///checkout.db``); the fake services keep their
state in ``$CHECKOUT_DATA`` (default: the working folder).
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import NotRequired, TypedDict

from effects import FatalError
from effects.durable import Engine, StepError, WorkflowContext, current_step, step, workflow
from effects.http import ApiRequestError

STORE = os.environ.get("CHECKOUT_STORE", "sqlite:///checkout.db")
DATA = Path(os.environ.get("CHECKOUT_DATA", "."))
#: The gateway's answer that never comes in time (the worker is killed long before).
SLOW_ANSWER_S = 60.0
#: How long a held confirmation waits at most (the demo cancels its order long before).
HOLD_S = 60.0


class Item(TypedDict):
    sku: str
    quantity: int
    price_cents: int


class Order(TypedDict):
    id: int
    email: str
    items: list[Item]
    card: NotRequired[str]


class Quote(TypedDict):
    total: int


class ChargeRequest(TypedDict):
    order_id: int
    amount_cents: int
    card: NotRequired[str]


class Charge(TypedDict):
    charge_id: str


class Confirmation(TypedDict):
    order: Order
    charge: Charge


@contextmanager
def _service(name: str, *tables: str) -> Generator[sqlite3.Connection]:
    """
    One transaction on a fake service's SQLite file (*tables* created if missing), committed even
    when the call fails: the service saw the call all the same.
    """
    db = sqlite3.connect(DATA / name, timeout=30, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        for table in tables:
            db.execute(f"CREATE TABLE IF NOT EXISTS {table}")
        yield db
    finally:
        if db.in_transaction:
            db.execute("COMMIT")
        db.close()


class Pricing:
    """A pricing service that times out on the first two calls made by a process."""

    def __init__(self) -> None:
        self.calls = 0

    def fetch(self, order: Order) -> Quote:
        self.calls += 1
        if self.calls <= 2:
            raise TimeoutError(f"pricing service timed out (call {self.calls})")
        return {"total": sum(i["quantity"] * i["price_cents"] for i in order["items"])}


def gateway_charge(key: str, order_id: int, amount_cents: int, card: str = "tok_flaky") -> str:
    """
    A card gateway in ``gateway.db``. A ``tok_declined`` card is declined (a ``FatalError`` of
    code ``declined``: no retry helps). A ``tok_flaky`` card, per order: calls 1 and 2 answer
    503; call 3 takes the charge, then answers too slowly. A ``tok_ok`` card is charged at once.
    A charge made under an idempotency key is never made twice (a later call with the key
    returns it).
    """
    with _service(
        "gateway.db",
        "calls (order_id INTEGER, key TEXT, n INTEGER)",
        "charges (key TEXT PRIMARY KEY, charge_id TEXT, order_id INTEGER, amount_cents INTEGER)",
    ) as db:
        (n,) = db.execute(
            "SELECT COUNT(*) + 1 FROM calls WHERE order_id = ?", (order_id,)
        ).fetchone()
        db.execute("INSERT INTO calls VALUES (?, ?, ?)", (order_id, key, n))
        if card == "tok_declined":
            raise FatalError("card declined: insufficient funds", "declined")
        if card == "tok_flaky" and n <= 2:
            raise ApiRequestError(503, message="Service Unavailable")
        made = db.execute("SELECT charge_id FROM charges WHERE key = ?", (key,)).fetchone()
        if made is not None:
            charge_id: str = made[0]
            return charge_id
        charge_id = f"ch_{order_id}_{n}"
        db.execute(
            "INSERT INTO charges VALUES (?, ?, ?, ?)", (key, charge_id, order_id, amount_cents)
        )
    if card == "tok_flaky" and n == 3:
        (DATA / "gateway-answering-slowly").write_text(key)
        time.sleep(SLOW_ANSWER_S)
    return charge_id


def gateway_refund(key: str, charge_id: str) -> str:
    """Refund a charge in ``gateway.db``; a refund under an idempotency key is made once."""
    with _service(
        "gateway.db", "refunds (key TEXT PRIMARY KEY, charge_id TEXT, refund_id TEXT)"
    ) as db:
        made = db.execute("SELECT refund_id FROM refunds WHERE key = ?", (key,)).fetchone()
        if made is not None:
            refund_id: str = made[0]
            return refund_id
        refund_id = f"re_{charge_id}"
        db.execute("INSERT INTO refunds VALUES (?, ?, ?)", (key, charge_id, refund_id))
    return refund_id


def mail_send(message_id: str, to_address: str, subject: str) -> None:
    """A mail server in ``mail.db``: it refuses the first message, then sends each message once."""
    with _service(
        "mail.db",
        "tries (message_id TEXT)",
        "outbox (message_id TEXT PRIMARY KEY, to_address TEXT, subject TEXT)",
    ) as db:
        db.execute("INSERT INTO tries VALUES (?)", (message_id,))
        if db.execute("SELECT COUNT(*) FROM tries").fetchone() == (1,):
            raise ConnectionError("421 mail server busy, try again later")
        db.execute(
            "INSERT OR IGNORE INTO outbox VALUES (?, ?, ?)", (message_id, to_address, subject)
        )


pricing = Pricing()


@step(
    "payments:charge-card",
    retries=4,
    backoff="exp",
    backoff_ms=500,
    backoff_max_ms=30_000,
    jitter=True,
)
def charge_card(request: ChargeRequest) -> Charge:
    """Charge the card; the step id is the idempotency key, the same on every attempt."""
    key = current_step().step_id
    charge_id = gateway_charge(
        key, request["order_id"], request["amount_cents"], request.get("card", "tok_flaky")
    )
    return {"charge_id": charge_id}


class ChargeUndo(TypedDict):
    input: ChargeRequest
    output: Charge


@step("payments:refund", backoff="exp", backoff_ms=200)
def refund_card(undo: ChargeUndo) -> str:
    """The charge's undo: refund it (the compensation's step id is the idempotency key)."""
    return gateway_refund(current_step().step_id, undo["output"]["charge_id"])


@step("email:confirm", backoff_ms=200)  # a single try, unless a call site asks for more
def confirm_email(confirmation: Confirmation) -> None:
    """
    Send the confirmation; the step id keeps a retried send from mailing twice. An address at
    ``hold.example`` is held first (the file ``mail-holding`` says so) until ``mail-release``
    appears, beating all along: a beat raises ``RunCancelled`` once the order is cancelled,
    and nothing is mailed.
    """
    order = confirmation["order"]
    if order["email"].endswith("@hold.example"):
        (DATA / "mail-holding").write_text(str(order["id"]))
        deadline = time.monotonic() + HOLD_S
        while not (DATA / "mail-release").exists() and time.monotonic() < deadline:
            current_step().heartbeat({"held": True})
            time.sleep(0.05)
    subject = f"order {order['id']} confirmed ({confirmation['charge']['charge_id']})"
    mail_send(current_step().step_id, order["email"], subject)


@step("email:declined", backoff_ms=200)
def declined_email(order: Order) -> None:
    """Tell the customer their card was declined."""
    mail_send(current_step().step_id, order["email"], f"order {order['id']}: card declined")


async def declined(ctx: WorkflowContext, order: Order, error: StepError) -> str:
    """The route of a declined card: an outcome, not a failure (the card was never charged)."""
    await ctx.step(declined_email, order, retries=5)
    return f"declined: {error.message.rpartition(': ')[2]}"


@workflow("checkout", version="1", on_error={"declined": declined})
async def checkout(ctx: WorkflowContext, order: Order) -> str:
    """Quote, charge (undone by a refund), confirm; the output is the charge id."""
    quote: Quote = await ctx.local_step(
        "quote",
        lambda: pricing.fetch(order),
        retries=5,
        backoff="exp",
        backoff_ms=200,
        backoff_max_ms=10_000,
        jitter=True,
    )
    request: ChargeRequest = {
        "order_id": order["id"],
        "amount_cents": quote["total"],
        "card": order.get("card", "tok_flaky"),
    }
    charge = await ctx.step(charge_card, request, compensate=refund_card)
    confirmation: Confirmation = {"order": order, "charge": charge}
    await ctx.step(confirm_email, confirmation, retries=5)  # a per-call override: 5 attempts
    return charge["charge_id"]


# A short lease so that a killed worker's claim expires within the demo's seconds (the default,
# 30 s, suits real workers: a lease is renewed every third of it while a step runs).
engine = Engine(
    STORE,
    workflows=[checkout],
    steps=[charge_card, confirm_email, refund_card, declined_email],
    lease_ms=1_500,
    compensation_retries=3,
)
