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
from typing import TypedDict

from effects.durable import Engine, WorkflowContext, current_step, step, workflow
from effects.http import ApiRequestError

STORE = os.environ.get("CHECKOUT_STORE", "sqlite:///checkout.db")
DATA = Path(os.environ.get("CHECKOUT_DATA", "."))
#: The gateway's answer that never comes in time (the worker is killed long before).
SLOW_ANSWER_S = 60.0


class Item(TypedDict):
    sku: str
    quantity: int
    price_cents: int


class Order(TypedDict):
    id: int
    email: str
    items: list[Item]


class Quote(TypedDict):
    total: int


class ChargeRequest(TypedDict):
    order_id: int
    amount_cents: int


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


def gateway_charge(key: str, order_id: int, amount_cents: int) -> str:
    """
    A card gateway in ``gateway.db``. Per order: calls 1 and 2 answer 503; call 3 takes the
    charge, then answers too slowly; a charge made under an idempotency key is never made twice
    (a later call with the key returns it).
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
        if n <= 2:
            raise ApiRequestError(503, message="Service Unavailable")
        made = db.execute("SELECT charge_id FROM charges WHERE key = ?", (key,)).fetchone()
        if made is not None:
            charge_id: str = made[0]
            return charge_id
        charge_id = f"ch_{order_id}_{n}"
        db.execute(
            "INSERT INTO charges VALUES (?, ?, ?, ?)", (key, charge_id, order_id, amount_cents)
        )
    if n == 3:
        (DATA / "gateway-answering-slowly").write_text(key)
        time.sleep(SLOW_ANSWER_S)
    return charge_id


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
    return {"charge_id": gateway_charge(key, request["order_id"], request["amount_cents"])}


@step("email:confirm", backoff_ms=200)  # a single try, unless a call site asks for more
def confirm_email(confirmation: Confirmation) -> None:
    """Send the confirmation; the step id keeps a retried send from mailing twice."""
    order = confirmation["order"]
    subject = f"order {order['id']} confirmed ({confirmation['charge']['charge_id']})"
    mail_send(current_step().step_id, order["email"], subject)


@workflow("checkout", version="1")
async def checkout(ctx: WorkflowContext, order: Order) -> str:
    """Quote, charge, confirm; the output is the charge id."""
    quote: Quote = await ctx.local_step(
        "quote",
        lambda: pricing.fetch(order),
        retries=5,
        backoff="exp",
        backoff_ms=200,
        backoff_max_ms=10_000,
        jitter=True,
    )
    request: ChargeRequest = {"order_id": order["id"], "amount_cents": quote["total"]}
    charge = await ctx.step(charge_card, request)
    confirmation: Confirmation = {"order": order, "charge": charge}
    await ctx.step(confirm_email, confirmation, retries=5)  # a per-call override: 5 attempts
    return charge["charge_id"]


# A short lease so that a killed worker's claim expires within the demo's seconds (the default,
# 30 s, suits real workers: a lease is renewed every third of it while a step runs).
engine = Engine(STORE, workflows=[checkout], steps=[charge_card, confirm_email], lease_ms=1_500)
