"""
Helpers of the dashboard tests: an app module on disk (``app.py``, its store ``durable.db``
beside it), runs in every state a page shows, and the real ``dashboard`` command.
"""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import attrs

from effects.durable import Engine

APP_TEXT = '''
"""The dashboard tests' app: runs that fail, retry, wait on a worker, undo, and chatter."""

from pathlib import Path

from effects import FatalError
from effects.durable import Engine, Queue, current_step, step, workflow

HERE = Path(__file__).resolve().parent


@step("charge", retries=3, backoff="exp", backoff_ms=3_600_000, queue="payments")
def charge(order):
    """Fails every time, its message from the order: the run waits an hour to retry."""
    raise ValueError(order["message"])


@step("double")
async def double(n):
    return 2 * n


@step("crunch", retries=3, backoff="exp", backoff_ms=3_600_000)
def crunch(n):
    """Beats its progress, then fails: the run waits an hour to retry."""
    current_step().heartbeat({"done": 3, "of": 10})
    raise ValueError("half way")


@workflow("checkout")
async def checkout(ctx, order):
    await ctx.local_step("quote", lambda: {"total": 12})
    return await ctx.step(charge, order)


@workflow("pay")
async def pay(ctx, n):
    return await ctx.step(double, n)


@workflow("declined")
async def declined(ctx, order):
    """Fails with a FatalError (message from the input) until the file `fixed` exists."""

    def attempt():
        if not (HERE / "fixed").exists():
            raise FatalError(order["message"], "declined")
        return "charged"

    return await ctx.local_step("charge", attempt)


@workflow("saga")
async def saga(ctx, n):
    await ctx.local_step("reserve", lambda: n, compensate=lambda undo: None)
    return await ctx.step(double, n)


@workflow("crunching")
async def crunching(ctx, n):
    return await ctx.step(crunch, n)


@workflow("chatty")
async def chatty(ctx, n):
    """n local steps: 2 n events in its trail."""
    for i in range(n):
        await ctx.local_step(f"s{i}", lambda i=i: i)
    return n


WORKFLOWS = [checkout, pay, declined, saga, crunching, chatty]
STEPS = [charge, double, crunch]
QUEUES = [Queue("payments", 1)]
engine = Engine("sqlite:///durable.db", workflows=WORKFLOWS, steps=STEPS, queues=QUEUES)
'''


@attrs.frozen
class DashApp:
    """A folder holding ``app.py`` (``APP_TEXT``) and its store ``durable.db``."""

    root: Path

    @property
    def url(self) -> str:
        return f"sqlite:///{self.root / 'durable.db'}"

    def module(self) -> ModuleType:
        """``app.py`` imported in this process (under a name of its own)."""
        name = f"_dash_test_app_{abs(hash(str(self.root)))}"
        found = sys.modules.get(name)
        if found is not None:
            return found
        spec = importlib.util.spec_from_file_location(name, self.root / "app.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    def engine(self, *, steps: bool = True) -> Engine:
        """An engine on the app's store (without the steps' workers unless *steps*)."""
        module = self.module()
        return Engine(
            self.url,
            workflows=module.WORKFLOWS,
            steps=module.STEPS if steps else (),
            queues=module.QUEUES,
        )


def make_dash_app(folder: Path) -> DashApp:
    """Write the app into *folder*."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "app.py").write_text(APP_TEXT)
    return DashApp(folder)


#: A message a hostile input puts in an error: markup, an escape sequence, a bidi override.
HOSTILE = "card <script>alert('xss')</script> declined \x1b[31mred\u202e"


async def seed(app: DashApp) -> dict[str, str]:
    """
    Runs in every state, by role: a run retrying (its step waits an hour), a failed one, one
    suspended on a step no worker serves (twice: for redispatch and cancel), a saga to cancel
    with compensation, and a completed one; their ids.
    """
    ids = {
        "retrying": "order-<1>",
        "failed": "declined/1 <script>x</script>",
        "waiting": "pay-1",
        "waiting2": "pay-2",
        "saga": "saga-1",
    }
    async with app.engine() as engine:
        await engine.start("checkout", {"message": HOSTILE}, run_id=ids["retrying"])
        await engine.start("declined", {"message": HOSTILE}, run_id=ids["failed"])
        await engine.run_until_idle()
    async with app.engine(steps=False) as engine:
        for role in ("waiting", "waiting2"):
            await engine.start("pay", 21, run_id=ids[role])
        await engine.start("saga", 5, run_id=ids["saga"])
        await engine.run_until_idle()
    return ids


@attrs.define
class Served:
    """A ``dashboard`` command serving: its process and the URL of its first stdout line."""

    process: subprocess.Popen[str]
    url: str

    def stop(self) -> tuple[int, str, str]:
        """SIGTERM it and wait: its exit code, the rest of stdout, and stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        out, err = self.process.communicate(timeout=60)
        return self.process.returncode, out, err


def dashboard_command(folder: Path, *args: str, env: dict[str, str] | None = None) -> Served:
    """Start ``python -m effects.durable --app app:engine dashboard --port 0 ARGS`` in *folder*."""
    process = subprocess.Popen(
        [sys.executable, "-m", "effects.durable", "--app", "app:engine", "dashboard",
         "--port", "0", *args],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        out, err = process.communicate(timeout=60)
        raise AssertionError(f"dashboard did not start ({process.returncode}): {out}{err}")
    found = re.fullmatch(r"dashboard: (http://127\.0\.0\.1:\d+/)\n", line)
    assert found is not None, line
    return Served(process, found.group(1))


def served(folder: Path, *args: str) -> Iterator[Served]:
    """A fixture body: the dashboard of the app in *folder*, stopped (SIGTERM) at the end."""
    server = dashboard_command(folder, *args)
    try:
        yield server
    finally:
        if server.process.poll() is None:
            server.process.kill()
        server.process.communicate(timeout=60)


def wait_until(check: Any, timeout: float = 30.0, what: str = "a condition") -> None:
    """Poll *check* until it is true (a bound on a hang, not a timing claim)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def csrf_of(page: str) -> str:
    """The ``csrf`` field's value of the first form on *page*."""
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None, "no csrf field on the page"
    return found.group(1)
