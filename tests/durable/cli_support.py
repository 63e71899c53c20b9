"""Helpers for the CLI tests: an app module on disk, its store, and the real command."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import re
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import attrs

from effects.durable import Engine, WorkflowDef
from effects.durable._views import checkpoint_json, event_json, run_json
from effects.testing import VirtualClock

T = TypeVar("T")


def work_process(folder: Path, app: str, *, poll: str = "20ms") -> subprocess.Popen[str]:
    """
    ``python -m effects.durable --app APP work`` in *folder* (stderr piped, as text); the
    caller ends it.
    """
    return subprocess.Popen(
        [*durable_command(), "--app", app, "work", "--poll", poll],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


APP_TEXT = '''
"""A test app: workflows and steps, an engine on ./durable.db, and things that are not engines."""

import asyncio
from pathlib import Path

from effects import FatalError
from effects.durable import Engine, current_step, step, workflow

HERE = Path(__file__).resolve().parent


def note(name, text):
    with (HERE / name).open("a") as f:
        f.write(f"{text}\\n")


@step("double")
async def double(n):
    return 2 * n


@step("slow")
async def slow(n):
    """Tell the test it started, then wait until the test creates `release`."""
    note("slow.calls", n)
    (HERE / "started").write_text(str(n))
    for _ in range(12_000):
        if (HERE / "release").exists():
            break
        await asyncio.sleep(0.005)
    return 2 * n


@step("beat")
async def beat(n):
    current_step().heartbeat({"done": n, "of": n})
    return n


@workflow("beating")
async def beating(ctx, n):
    return await ctx.step(beat, n)


@workflow("greet")
async def greet(ctx, name):
    return await ctx.local_step("hello", lambda: f"hello {name}")


@workflow("pay")
async def pay(ctx, n):
    return await ctx.step(double, n)


@workflow("hold")
async def hold(ctx, n):
    return await ctx.step(slow, n)


@workflow("declined")
async def declined(ctx, order):
    """Fails with a FatalError (message from the input) until the file `fixed` exists."""
    await ctx.local_step("count", lambda: note("count.calls", "x"))

    def charge():
        if not (HERE / "fixed").exists():
            raise FatalError(order["message"], "declined")
        return "charged"

    return await ctx.local_step("charge", charge)


@workflow("declined-once", requeue="start a new run: this one starts over")
async def declined_once(ctx, order):
    """As `declined`, but a run of it is never requeued."""
    return await declined.fn(ctx, order)


@workflow("saga")
async def saga(ctx, n):
    """Reserve (undone by noting `undo.calls`), then the slow step."""
    await ctx.local_step("reserve", lambda: n, compensate=lambda u: note("undo.calls", u["output"]))
    return await ctx.step(slow, n)


@workflow("inbox")
async def inbox(ctx, n):
    """Receive n messages on topic `orders`."""
    return [await ctx.recv("orders") for _ in range(n)]


WORKFLOWS = [greet, pay, hold, declined, declined_once, beating, saga, inbox]
STEPS = [double, slow, beat]
engine = Engine("sqlite:///durable.db", workflows=WORKFLOWS, steps=STEPS)


def make_engine():
    return engine


async def make_engine_async():
    return engine


def needs_args(url):
    return Engine(url)


def broken_factory():
    raise RuntimeError("no config found")


def wrong_factory():
    return "an engine, honest"


not_an_engine = 42
'''


def durable_command() -> list[str]:
    """``python -m effects.durable`` with this test run's interpreter."""
    return [sys.executable, "-m", "effects.durable"]


def digest(path: Path) -> str:
    """The SHA-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_async(make: Callable[[], Awaitable[T]]) -> T:
    """Run one coroutine to its end in a fresh event loop."""

    async def main() -> T:
        return await make()

    return asyncio.run(main())


@attrs.frozen
class App:
    """A folder holding ``app.py`` (``APP_TEXT``); its store is ``durable.db`` beside it."""

    root: Path
    processes: list[subprocess.Popen[str]] = attrs.field(factory=list, eq=False, repr=False)
    #: The app engine's store when it is not ``durable.db`` (a PostgreSQL schema).
    store_url: str | None = None

    @property
    def db(self) -> Path:
        return self.root / "durable.db"

    @property
    def url(self) -> str:
        return self.store_url or f"sqlite:///{self.db}"

    def module(self) -> ModuleType:
        """``app.py`` imported in this process (under a name of its own)."""
        name = f"_cli_test_app_{abs(hash(str(self.root)))}"
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

    def workflow(self, name: str) -> WorkflowDef[Any, Any]:
        """The app's workflow named *name*."""
        found: list[WorkflowDef[Any, Any]] = [w for w in self.module().WORKFLOWS if w.name == name]
        return found[0]

    def engine(self, *, clock: VirtualClock | None = None, steps: bool = True) -> Engine:
        """An engine in this process on the app's store (without the app's steps if not *steps*)."""
        module = self.module()
        return Engine(
            self.url,
            workflows=module.WORKFLOWS,
            steps=module.STEPS if steps else (),
            clock=clock,
        )

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """Run ``python -m effects.durable ARGS`` in the app's folder and wait for it."""
        return subprocess.run(
            [*durable_command(), *args],
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def cli_many(
        self, commands: Sequence[tuple[str, ...]], workers: int = 4
    ) -> dict[tuple[str, ...], subprocess.CompletedProcess[str]]:
        """Run many commands that change nothing, a few at a time; their results by arguments."""
        with ThreadPoolExecutor(workers) as pool:
            done = {args: pool.submit(self.cli, *args) for args in commands}
            return {args: future.result() for args, future in done.items()}

    def json(self, *args: str) -> Any:
        """Run a ``--json`` command of the app's engine that must succeed; decode its output."""
        done = self.cli("--app", "app:engine", *args, "--json")
        assert 0 == done.returncode, done.stderr
        return json.loads(done.stdout)

    def shown(self, run_id: str) -> Any:
        """What ``show RUN --json`` prints, read in this process (quicker than the command)."""

        async def read() -> Any:
            async with Engine(self.url) as engine:
                run = await engine.store.get_run(run_id)
                assert run is not None, run_id
                return {
                    "run": run_json(run),
                    "checkpoints": [checkpoint_json(c) for c in await engine.checkpoints(run_id)],
                    "events": [event_json(e) for e in await engine.events(run_id)],
                }

        return json.loads(json.dumps(run_async(read)))

    def popen(self, *args: str) -> subprocess.Popen[str]:
        """Start ``python -m effects.durable ARGS`` in the app's folder (``reap`` ends it)."""
        process = subprocess.Popen(
            [*durable_command(), *args],
            cwd=self.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.processes.append(process)
        return process

    def worker(self, *args: str) -> subprocess.Popen[str]:
        """Start ``work`` of the app's engine and wait until it is serving (signals drain it)."""
        process = self.popen("--app", "app:engine", "work", "--poll", "50ms", *args)
        assert process.stderr is not None
        read_until(process.stderr, "drains it")
        return process

    def reap(self) -> None:
        """Kill every process ``popen`` started that still runs (a failed test's leftovers)."""
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.communicate()

    def wait_for(self, name: str, process: subprocess.Popen[str], timeout: float = 60) -> None:
        """Wait until the file *name* exists in the folder, while *process* still runs."""
        deadline = time.monotonic() + timeout
        while not (self.root / name).exists():
            if process.poll() is not None:
                out, err = process.communicate()
                raise AssertionError(f"process ended first ({process.returncode}): {out}{err}")
            assert time.monotonic() < deadline, f"timed out waiting for {name}"
            time.sleep(0.01)

    def lines(self, name: str) -> list[str]:
        """The lines of the file *name* in the folder (none if it does not exist)."""
        path = self.root / name
        return path.read_text().splitlines() if path.exists() else []


def make_app(root: Path, url: str | None = None) -> App:
    """
    Write ``app.py`` into *root* and return the ``App``; its engine's store is *url*, or
    ``durable.db`` in *root* (``sqlite:///durable.db``, relative to the folder commands run in).
    """
    root.mkdir(parents=True, exist_ok=True)
    text = APP_TEXT if url is None else APP_TEXT.replace('"sqlite:///durable.db"', repr(url), 1)
    (root / "app.py").write_text(text)
    return App(root, store_url=url)


def assert_one_line_error(
    done: subprocess.CompletedProcess[str], *fragments: str, code: int = 2
) -> None:
    """*done* exited *code* with one line on stderr holding every fragment, no traceback."""
    lines = done.stderr.splitlines()
    assert (code, 1) == (done.returncode, len(lines)), done.stderr
    assert "Traceback" not in done.stderr
    missing = [f for f in fragments if f not in lines[0]]
    assert [] == missing, lines[0]


def read_until(stream: Any, fragment: str) -> list[str]:
    """Read lines of *stream* until one holds *fragment*; return them all (fail at EOF)."""
    seen: list[str] = []
    while True:
        line = stream.readline()
        assert line, f"stream ended before {fragment!r}; got {seen!r}"
        seen.append(line)
        if fragment in line:
            return seen


def no_raw_controls(text: str) -> bool:
    """Whether *text* has no non-printable character but newlines."""
    return all(char.isprintable() or char == "\n" for char in text)


def rows(text: str) -> list[list[str]]:
    """A printed table's lines split on runs of two or more spaces (header first)."""
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines() if line.strip()]


def statuses(app: App, run_ids: Sequence[str]) -> list[str]:
    """The statuses of *run_ids*, read in this process."""

    async def read() -> list[str]:
        async with app.engine() as engine:
            return [(await engine.get_run(r)).status for r in run_ids]

    return run_async(read)
