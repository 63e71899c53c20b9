"""
The command line: ``python -m effects.durable --app module:engine COMMAND``.

Commands:

- ``work [--concurrency N] [--poll DURATION] [--log-level L]``: the worker loop of the engine,
  logging the engine's warnings (``--log-level info``: every event) on stderr. SIGTERM or SIGINT
  (Ctrl-C) drains it: nothing new is claimed, attempts in flight finish and record their
  results, turns stop and release their leases; then it exits 0. A second signal stops at once
  (attempts in flight are abandoned and their claims released) and exits 128 + the signal's
  number.
- ``runs [--status S] [--workflow W] [--limit N] [--stale DURATION] [--after RUN] [--unserved]
  [--json]``: runs, newest first. ``--stale 10m``: only suspended runs whose oldest pending
  dispatch is older than that. ``--after RUN``: the page after RUN (keyset on creation time,
  then id). ``--unserved``: only runs that wait for a version of one of the app engine's
  workflows that it does not serve.
- ``show RUN [--json]``: a run with its checkpoints and its event trail; a run waiting for a
  version the app engine does not serve says ``needs version V of W (this engine serves U)``.
- ``prune --older-than DURATION [--status S ...] [--dry-run]``: ``engine.prune``: delete every
  row of the finished runs (of the statuses given; default all four) that ended longer ago
  than that; prints ``pruned N runs`` (``--dry-run``: ``would prune N runs``, nothing deleted).
- ``retry RUN``: ``engine.requeue``: a failed, dead or cancelled run's failed steps get a fresh
  first attempt; completed steps are not run again.
- ``redispatch RUN``: ``engine.redispatch_pending``: the run's pending dispatched steps are
  enqueued again (same ``step_id``, ``attempt + 1``); prints how many. For a dispatch that was
  lost (``runs --stale`` lists candidates); safe on a healthy run.
- ``dashboard [--host 127.0.0.1] [--port 8765] [--read-only] [--token-env VAR]``: the web
  dashboard (``effects.durable.dashboard``; the ``dashboard`` extra). Its first stdout line is
  ``dashboard: http://HOST:PORT/`` (``--port 0`` picks a free port); SIGTERM or Ctrl-C stops it.
  A host that is not loopback needs a token; ``--token-env VAR`` with VAR unset or empty exits 2.
- ``cancel RUN [--compensate]``: ``engine.cancel``: the run is cancelled at once, its pending
  attempts withdrawn; with ``--compensate`` its completed steps' compensations run first (a
  worker of its workflow runs them), then it is cancelled. A plainly cancelled run can be
  resumed with ``retry``. Its child workflows still unfinished are cancelled with it.
- ``recurring [--json]``: the engine's recurring workflows: name, workflow, schedule, next due
  time (ISO-8601 UTC; epoch ms in JSON, ``null`` when none is known), status and catch_up.
  Status: ``scheduled`` (a run is due at the next due time), ``waiting`` (the schedule waits
  longer than ``MAX_DELAY`` and is stepped again then), ``done`` (no more runs), ``unseen``
  (no worker has stepped it yet), ``changed`` (its stored schedule is another: the next worker
  to start restarts it from then).
- ``send RUN TOPIC JSON [--message-id ID]``: ``engine.send``: the message (one JSON document)
  for the run's ``ctx.recv(TOPIC)``; with ``--message-id`` a second send of that id stores
  nothing. A finished run refuses it (exit 3); a message that is not JSON (or that JSON
  cannot store: NaN, nested too deep) is a usage error (exit 2), and nothing is written.

``--app module:attribute`` names an ``Engine`` (or a function of no arguments returning one); the
module is imported from the working directory or ``sys.path``. It may come before or after the
command. ``--json`` prints one JSON document (times in epoch ms, as stored); the tables print
times as ISO-8601 UTC, and escape every control character of stored text.

Exit codes (each error is one line on stderr, no traceback): 0 done; 2 a usage error, an
unknown run id, an unusable ``--app``, or an inspection command on a store that does not exist;
3 the run's status refuses the command (``retry`` of a run that has not failed, ``redispatch``,
``cancel`` or ``send`` of a finished run); 5 the store cannot be used (not an engine store,
unreachable, a newer schema, a damaged file); 128 + N when a second signal N stopped ``work``
without draining; 130 when Ctrl-C interrupted another command.

A store that does not exist is never created by ``runs``, ``show``, ``retry``, ``redispatch``,
``cancel``, ``prune``, ``recurring`` or ``send``:
on SQLite, no file at the path; on PostgreSQL, no table in the URL's schema (the schema absent,
as in a fresh database, or empty). They refuse it with exit 2 (a typo, or a command run from
another folder than the workers, is the usual cause), as the dashboard does; ``work`` creates
the store, as every engine does when it opens one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import logging
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncGenerator, Callable, Coroutine, Generator, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, NoReturn, TypeAlias, get_args

from effects.durable._app import AppError, load_engine
from effects.durable._codec import JSON, MAX_DEPTH, dump
from effects.durable._definitions import check_name
from effects.durable._engine import PRUNABLE_STATUSES, Engine
from effects.durable._records import RunStatus
from effects.durable._recurring import Recurring, schedule_key
from effects.durable._store import RecurringRow
from effects.durable._time import epoch_ms
from effects.durable._views import (
    checkpoints_table,
    dumps,
    events_table,
    iso,
    recurring_table,
    redacted,
    run_json,
    run_text,
    runs_table,
    safe,
    show_json,
)
from effects.durable.errors import StoreError, UnknownRunError
from schedules import to_seconds

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_STILL_RUNNING",
    "EXIT_STORE",
    "EXIT_USAGE",
    "CliError",
    "duration_ms",
    "main",
    "recurring_entry",
]

EXIT_OK: Final = 0
#: ``start --wait``: the run it waited for ended failed, cancelled or dead.
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2
EXIT_REFUSED: Final = 3
#: ``start --wait --timeout``: the run was still running when the wait ended.
EXIT_STILL_RUNNING: Final = 4
EXIT_STORE: Final = 5
EXIT_INTERRUPTED: Final = 130

PROG: Final = "python -m effects.durable"
_LOG_LEVELS: Final = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}
_BIGGEST: Final = 2**62  # beyond any count or ms a store can bind


class CliError(Exception):
    """A problem the command reports in one line on stderr, exiting 2."""


class _RefusedError(Exception):
    """The run's status refuses the command: one line on stderr, exit 3."""


#: Statuses of a run that is over: nothing of it is dispatched again.
_FINISHED: Final = frozenset({"completed", "failed", "cancelled", "dead"})


class _Parser(argparse.ArgumentParser):
    """argparse, with its usage errors as one line (``CliError``) rather than a usage block."""

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see {self.prog} --help)")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return min(value, _BIGGEST)


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 to 65535, got {text!r}")
    return value


def _text(text: str) -> str:
    """An argument the store can hold: UTF-8 text (argv bytes that are not come as surrogates)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(text)
        raise argparse.ArgumentTypeError(
            f"{shown!r} is not valid UTF-8, so no run or workflow can have it"
        ) from None
    return text


def duration_ms(text: str) -> int:
    """
    A duration as ``schedules.to_seconds`` reads it (``"10m"``, ``"1h"``), or bare seconds, in
    whole ms (``runs --stale``, the dashboard's ``?stale=``).

    Raises:
        ValueError: If *text* is no duration, naming it.
    """
    try:
        number = float(text)
    except ValueError:
        number = None
    try:
        seconds = to_seconds(text if number is None else number)
    except (TypeError, ValueError):
        msg = f"expected a duration such as 90 (seconds), 500ms, 10m or 1h, got {text!r}"
        raise ValueError(msg) from None
    ms = seconds * 1000
    return round(ms) if ms < _BIGGEST else _BIGGEST  # 1e306 s: longer than any store has been


def _json_value(text: str) -> Any:
    """``--input``: one JSON document."""
    _text(text)
    try:
        return json.loads(text)
    except ValueError as error:
        msg = f'expected JSON, such as 3, "text" or {{"order": 7}}, got {text!r}: {error}'
        raise argparse.ArgumentTypeError(msg) from None
    except RecursionError:
        msg = f"expected JSON nested at most {MAX_DEPTH} deep, got {len(text)} characters of deeper"
        raise argparse.ArgumentTypeError(msg) from None


def _duration_ms(text: str) -> int:
    try:
        return duration_ms(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _interval_ms(text: str) -> int:
    """A duration of at least a millisecond."""
    ms = _duration_ms(text)
    if ms < 1:
        msg = f"expected a duration of at least 1ms, such as 200ms or 2s, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return ms


def _parser() -> _Parser:
    app_help = "the engine: module:attribute (an Engine, or a function returning one)"
    parser = _Parser(
        prog=PROG,
        description=(
            "Run a durable workflow engine's worker; start, list, inspect, retry and cancel its"
            " runs, and send them messages."
        ),
        epilog="Exit codes: 0 done; 1 the run start --wait waited for failed; 2 usage error, "
        "unknown run or workflow, unusable --app, no store there; 3 refused by the run's status; "
        "4 start --wait timed out (the run still runs); 5 the store cannot be used; 128+N work "
        "stopped by a second signal N; 130 interrupted.",
    )
    parser.add_argument("--app", metavar="MODULE:ENGINE", help=app_help)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def command(name: str, help_: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_, description=help_)
        # Also accepted after the command: `python -m effects.durable work --app app:engine`.
        sub.add_argument("--app", metavar="MODULE:ENGINE", default=argparse.SUPPRESS, help=app_help)
        return sub

    p = command("work", "run the worker loop until SIGTERM or Ctrl-C (which drain it)")
    p.add_argument(
        "--concurrency",
        type=_count,
        default=32,
        metavar="N",
        help="turns and step attempts in flight at once (default 32)",
    )
    p.add_argument(
        "--poll",
        type=_interval_ms,
        default=1000,
        metavar="DURATION",
        help="longest idle wait between polls of the store, e.g. 500ms (default 1s)",
    )

    p.add_argument(
        "--log-level",
        choices=tuple(_LOG_LEVELS),
        default="warning",
        help="the engine's log on stderr: warning (default: recoveries, lost workers, failed "
        "attempts), info (also every event of a turn), debug, error",
    )

    p = command("runs", "runs, newest first")
    p.add_argument("--status", choices=get_args(RunStatus), help="only runs with this status")
    p.add_argument("--workflow", type=_text, metavar="W", help="only runs of this workflow")
    p.add_argument("--limit", type=_count, default=20, metavar="N", help="at most N (default 20)")
    p.add_argument(
        "--stale",
        type=_duration_ms,
        metavar="DURATION",
        help="only suspended runs whose oldest pending dispatch is older than this, e.g. 10m",
    )
    p.add_argument(
        "--after",
        type=_text,
        metavar="RUN",
        help="only runs after RUN in this order (the next page: pass the last run shown)",
    )
    p.add_argument(
        "--unserved",
        action="store_true",
        help="only runs waiting for a version of the engine's workflows that it does not serve",
    )
    p.add_argument("--json", action="store_true", help="print a JSON array")

    p = command("show", "a run, its checkpoints and its event trail")
    p.add_argument("run_id", type=_text, metavar="RUN")
    p.add_argument("--json", action="store_true", help='print {"run", "checkpoints", "events"}')

    p = command("retry", "requeue a failed, dead or cancelled run: its failed steps run again")
    p.add_argument("run_id", type=_text, metavar="RUN")

    p = command("redispatch", "enqueue a run's pending dispatched steps again (attempt + 1)")
    p.add_argument("run_id", type=_text, metavar="RUN")

    p = command("dashboard", "serve the web dashboard (the dashboard extra)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1; another than loopback needs --token-env)",
    )
    p.add_argument(
        "--port", type=_port, default=8765, help="port to listen on (default 8765; 0: a free one)"
    )
    p.add_argument(
        "--read-only", action="store_true", help="show no action buttons, refuse every POST"
    )
    p.add_argument(
        "--token-env",
        metavar="VAR",
        help="every request needs the token in environment variable VAR (Bearer or ?token=)",
    )

    p = command("start", "start a run of a workflow the engine has; print its id")
    p.add_argument("workflow", type=_text, metavar="WORKFLOW")
    p.add_argument(
        "--input", type=_json_value, default=None, metavar="JSON", help="its input (default null)"
    )
    p.add_argument(
        "--run-id",
        type=_text,
        metavar="ID",
        help="its id (default a new time-ordered id; an existing id: no-op)",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="wait until workers finish it, then print show --json (exit 1 if it failed)",
    )
    p.add_argument(
        "--timeout",
        type=_duration_ms,
        metavar="DURATION",
        help="with --wait: wait at most this long, then print the run as it stands (exit 4)",
    )

    p = command("prune", "delete finished runs that ended longer ago than --older-than")
    p.add_argument(
        "--older-than",
        type=_duration_ms,
        required=True,
        metavar="DURATION",
        help="how long ago a run must have ended, e.g. 30d or 12h",
    )
    p.add_argument(
        "--status",
        action="append",
        choices=PRUNABLE_STATUSES,
        help="prune only runs of this finished status (repeat for more; default all four)",
    )
    p.add_argument("--dry-run", action="store_true", help="count what would go; delete nothing")
    p = command("recurring", "the engine's recurring workflows and their next due times")
    p.add_argument(
        "--json",
        action="store_true",
        help='print a JSON array of {"name", "workflow", "schedule", "next_due", "status",'
        ' "catch_up"}',
    )

    p = command("cancel", "cancel a run that is not finished; its pending attempts are withdrawn")
    p.add_argument("run_id", type=_text, metavar="RUN")
    p.add_argument(
        "--compensate",
        action="store_true",
        help="undo its completed steps first (their compensations run), then cancel it",
    )

    p = command("send", "send a message to a run: its ctx.recv(TOPIC) receives it")
    p.add_argument("run_id", type=_text, metavar="RUN")
    p.add_argument("topic", type=_text, metavar="TOPIC")
    p.add_argument("message", type=_json_value, metavar="JSON", help="the message: one JSON value")
    p.add_argument(
        "--message-id",
        type=_text,
        metavar="ID",
        help="makes the send idempotent: a second send of ID to the run stores nothing",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """
    Run the command line with *argv* (default ``sys.argv[1:]``); return the exit code.

    Returns:
        0 done; 2 a usage error, an unknown run, an unusable ``--app``, or no store there (for
        an inspection command); 3 the run's status refuses the command; 5 the store cannot be
        used; 128 + N when a second signal N stopped ``work``; 130 when Ctrl-C interrupted
        another command.
    """
    _tolerant(sys.stdout)
    _tolerant(sys.stderr)
    try:
        args = _parser().parse_args(argv)
        spec: str | None = args.app
        if spec is None:
            raise CliError(f"--app MODULE:ENGINE is required (see {PROG} --help)")
        run = _COMMANDS[args.command]
        return asyncio.run(run(spec, args))
    except SystemExit as exit_:  # --help
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    except (CliError, AppError, UnknownRunError) as error:
        _say(f"error: {error}")
        return EXIT_USAGE
    except _RefusedError as error:
        _say(f"refused: {error}")
        return EXIT_REFUSED
    except StoreError as error:
        _say(f"store error: {error}")
        return EXIT_STORE
    except KeyboardInterrupt:
        _say("interrupted")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`... runs | head`): end quietly, and keep Python from
        # complaining again when it flushes stdout at exit.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _tolerant(stream: object) -> None:
    # Text the terminal's encoding cannot show is escaped, never an error.
    if isinstance(stream, io.TextIOWrapper):
        stream.reconfigure(errors="backslashreplace")


def _say(message: str) -> None:
    """One line on stderr, escaped."""
    with contextlib.suppress(OSError, ValueError):
        print(f"{PROG}: {safe(message)}", file=sys.stderr, flush=True)


def _out(text: str) -> None:
    sys.stdout.write(f"{text}\n")
    sys.stdout.flush()


async def _refuse_a_missing_store(engine: Engine) -> None:
    """
    An inspection command must not create an empty store where a typo or a wrong folder
    points: refuse (exit 2) a SQLite path with no file, a PostgreSQL schema with no table.
    """
    store = engine.store
    if not await store.exists():
        msg = (
            f"no store {store.location}: nothing has run there yet, or the command runs from"
            " another folder, or names another database or schema, than the workers"
        )
        raise CliError(msg)


@contextlib.asynccontextmanager
async def _opened(spec: str) -> AsyncGenerator[Engine]:
    engine = load_engine(spec)
    await _refuse_a_missing_store(engine)
    with _store_errors(engine):
        async with engine:
            yield engine


@contextlib.contextmanager
def _store_errors(engine: Engine) -> Generator[None]:
    """A damaged SQLite page found by a read is the store's error too, not a traceback."""
    try:
        yield
    except sqlite3.DatabaseError as error:
        msg = f"store {redacted(engine.store.url)} is not usable: {error}"
        raise StoreError(msg) from error


# -- runs, show, retry -------------------------------------------------------------------------


async def _cmd_runs(spec: str, args: argparse.Namespace) -> int:
    async with _opened(spec) as engine:
        runs = await engine.list_runs(
            status=args.status,
            workflow=args.workflow,
            limit=args.limit,
            stale_ms=args.stale,
            after=args.after,
            unserved=args.unserved,
        )
    _out(dumps([run_json(r) for r in runs]) if args.json else runs_table(runs))
    return EXIT_OK


async def _cmd_prune(spec: str, args: argparse.Namespace) -> int:
    async with _opened(spec) as engine:
        count = await engine.prune(
            older_than=args.older_than / 1000,
            statuses=tuple(args.status or PRUNABLE_STATUSES),
            dry_run=args.dry_run,
        )
    _out(f"{'would prune' if args.dry_run else 'pruned'} {count} runs")
    return EXIT_OK


async def _cmd_show(spec: str, args: argparse.Namespace) -> int:
    run_id: str = args.run_id
    async with _opened(spec) as engine:
        # The stored JSON as it is (a workflow's codec may decode it to values JSON lacks).
        run = await engine.store.get_run(run_id)
        if run is None:
            raise UnknownRunError(run_id)
        checkpoints = await engine.checkpoints(run_id)
        events = await engine.events(run_id)
        now = epoch_ms(engine.clock)
        serves = engine.serves(run.workflow)
    if args.json:
        _out(dumps(show_json(run, checkpoints, events)))
        return EXIT_OK
    about = run_text(run, now_ms=now)
    if serves is not None and serves != run.version and run.status not in _FINISHED:
        about += "\n" + safe(
            f"needs version {run.version} of {run.workflow} (this engine serves {serves})"
        )
    _out(
        "\n\n".join(
            [
                about,
                f"checkpoints\n{checkpoints_table(checkpoints)}",
                f"events\n{events_table(events)}",
            ]
        )
    )
    return EXIT_OK


async def _cmd_retry(spec: str, args: argparse.Namespace) -> int:
    run_id: str = args.run_id
    async with _opened(spec) as engine:
        failed = [c for c in await engine.checkpoints(run_id) if c.status == "failed"]
        before = await engine.get_run(run_id)
        try:
            run = await engine.requeue(run_id)
        except UnknownRunError:
            raise
        except ValueError as error:  # not failed, dead or cancelled
            raise _RefusedError(str(error)) from None
    steps = ", ".join(f"{c.seq} {c.name}" for c in failed) or "none"
    _out(
        safe(
            f"run {run.run_id} was {before.status}, is {run.status} again; failed steps reset to a "
            f"first attempt: {steps}; a worker of workflow {run.workflow!r} will run it"
        )
    )
    return EXIT_OK


# -- work --------------------------------------------------------------------------------------


class _Stopper:
    """The signal handling of ``work``: the first signal drains, a second one stops at once."""

    def __init__(self) -> None:
        self.engine: Engine | None = None
        self.signals: list[int] = []
        self.task: asyncio.Task[None] | None = None

    def _act(self, signum: int, count: int) -> None:
        name = signal.Signals(signum).name
        if count == 1:
            _say(
                f"{name}: draining: attempts in flight finish, leases are released "
                f"(send {name} again to stop at once)"
            )
            if self.engine is not None:
                self.engine.stop()
        elif self.task is not None and not self.task.done():
            _say(f"{name} again: stopping at once; attempts in flight are abandoned")
            self.task.cancel()

    @contextlib.contextmanager
    def installed(self) -> Generator[None]:
        """Handle SIGTERM and SIGINT (Python-level handlers: seen at once, even mid-import)."""
        loop = asyncio.get_running_loop()

        def handler(signum: int, frame: object) -> None:
            self.signals.append(signum)
            loop.call_soon_threadsafe(self._act, signum, len(self.signals))

        previous: dict[int, Any] = {}
        try:
            for signum in (signal.SIGTERM, signal.SIGINT):
                previous[signum] = signal.signal(signum, handler)
            yield
        finally:
            for number, before in previous.items():
                signal.signal(number, before)


_ExcInfo: TypeAlias = (
    tuple[type[BaseException], BaseException, TracebackType | None] | tuple[None, None, None]
)


class _EscapingFormatter(logging.Formatter):
    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return iso(round(record.created * 1000))

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        return safe(super().formatMessage(record))

    def formatException(self, ei: _ExcInfo) -> str:  # noqa: N802 - logging's name
        # Line by line: a traceback keeps its lines, the text inside them is escaped.
        return "\n".join(safe(line) for line in super().formatException(ei).split("\n"))


@contextlib.contextmanager
def _engine_log(level: int) -> Generator[None]:
    """The engine's log at *level* and above on stderr while ``work`` runs."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_EscapingFormatter("%(asctime)s %(levelname)s %(message)s"))
    logger = logging.getLogger("effects.durable")
    before = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)


async def _cmd_work(spec: str, args: argparse.Namespace) -> int:
    stopper = _Stopper()
    # Signals are handled from before the app is imported: a stop asked for during a slow import
    # or while the store opens ends the worker cleanly before it claims anything.
    with stopper.installed():
        engine = stopper.engine = load_engine(spec)
        with _engine_log(_LOG_LEVELS[args.log_level]), _store_errors(engine):
            async with engine:
                if stopper.signals:
                    _say("stopped before starting work")
                    return EXIT_OK
                _say(
                    f"worker {engine.id} (pid {os.getpid()}) on {redacted(engine.store.url)}; "
                    "SIGTERM or Ctrl-C drains it"
                )
                stopper.task = asyncio.ensure_future(
                    engine.work(poll_ms=args.poll, concurrency=args.concurrency)
                )
                # work() clears any stop asked before it began: a signal that came since the
                # line above (its handler already ran stop()) is asked for again once it runs.
                await asyncio.sleep(0)
                if stopper.signals:
                    engine.stop()
                try:
                    await stopper.task
                except asyncio.CancelledError:
                    if len(stopper.signals) < 2:
                        raise
                    stopped_at_once = 128 + stopper.signals[-1]
                else:
                    stopped_at_once = 0
    if stopped_at_once:
        _say("stopped without draining")
        # A def handler stuck in its thread would hold the interpreter's exit (it joins the
        # executor's threads) forever: the claims are released and the store is closed by now,
        # so the process ends here, at once.
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(stopped_at_once)
    _say("drained; stopped" if stopper.signals else "stopped")
    return EXIT_OK


async def _cmd_redispatch(spec: str, args: argparse.Namespace) -> int:
    run_id: str = args.run_id
    async with _opened(spec) as engine:
        run = await engine.store.get_run(run_id)
        if run is None:
            raise UnknownRunError(run_id)
        if run.status in _FINISHED:
            # A task enqueued now would run a step of a run that is over.
            msg = (
                f"run {run_id} is {run.status}; only a pending, running or suspended run has "
                "dispatched steps to send again"
            )
            raise _RefusedError(msg)
        count = await engine.redispatch_pending(run_id)
        pending = [
            f"{c.seq} {c.name} (attempt {c.attempts})"
            for c in await engine.checkpoints(run_id)
            if c.kind == "remote" and c.status in ("pending", "running")
        ]
    if count:
        _out(safe(f"run {run_id}: {count} pending step(s) enqueued again: {', '.join(pending)}"))
    else:
        _out(safe(f"run {run_id}: no pending dispatched step; nothing enqueued"))
    return EXIT_OK


async def _cmd_cancel(spec: str, args: argparse.Namespace) -> int:
    run_id: str = args.run_id
    async with _opened(spec) as engine:
        before = await engine.store.get_run(run_id)
        if before is None:
            raise UnknownRunError(run_id)
        try:
            run = await engine.cancel(run_id, compensate=args.compensate)
        except UnknownRunError:
            raise
        except ValueError as error:  # finished
            raise _RefusedError(str(error)) from None
        withdrawn = [
            e
            for e in await engine.events(run_id)
            if e.name == "step.withdrawn" and e.at == run.updated_at
        ]
    if run.status == "cancelled":
        _out(
            safe(
                f"run {run_id} was {before.status}, is cancelled; {len(withdrawn)} pending"
                " attempt(s) withdrawn"
            )
        )
    elif before.cancel == "compensate":
        _out(safe(f"run {run_id} is already being cancelled with compensation ({run.status})"))
    else:
        _out(
            safe(
                f"run {run_id} was {before.status}, is pending: a worker of workflow"
                f" {run.workflow!r} will undo its completed steps, then cancel it;"
                f" {len(withdrawn)} pending attempt(s) withdrawn"
            )
        )
    return EXIT_OK


async def _cmd_send(spec: str, args: argparse.Namespace) -> int:
    run_id: str = args.run_id
    topic: str = args.topic
    message_id: str | None = args.message_id
    try:
        check_name(topic, "TOPIC")
        if message_id is not None:
            check_name(message_id, "--message-id")
        dump(JSON, args.message, "message")
    except (TypeError, ValueError) as error:
        raise CliError(str(error)) from None
    async with _opened(spec) as engine:
        try:
            await engine.send(run_id, topic, args.message, message_id=message_id)
        except UnknownRunError:
            raise
        except ValueError as error:  # finished
            raise _RefusedError(str(error)) from None
    how = "" if message_id is None else f" (message id {message_id})"
    _out(safe(f"run {run_id}: message sent on topic {topic}{how}"))
    return EXIT_OK


async def _cmd_start(spec: str, args: argparse.Namespace) -> int:
    if args.timeout is not None and not args.wait:
        raise CliError("--timeout needs --wait")
    engine = load_engine(spec)
    # Like work, start writes: it creates the store where there is none yet.
    with _store_errors(engine):
        async with engine:
            try:
                run_id = await engine.start(args.workflow, args.input, run_id=args.run_id)
            except TypeError as error:  # an input its codec cannot store
                raise CliError(str(error)) from None
            except UnknownRunError:
                raise
            except ValueError as error:  # no such workflow, or the id is another workflow's
                raise CliError(str(error)) from None
            if not args.wait:
                _out(safe(run_id))
                return EXIT_OK
            timeout = None if args.timeout is None else args.timeout / 1000
            code = EXIT_OK
            try:
                # Runs nothing itself: the run is finished by some engine's work().
                finished = await engine.wait(run_id, timeout=timeout)
            except TimeoutError:
                code = EXIT_STILL_RUNNING
            else:
                if finished.status != "completed":
                    code = EXIT_FAILED
            run = await engine.store.get_run(run_id)
            if run is None:  # pragma: no cover - pruned in the meantime
                raise UnknownRunError(run_id)
            document = show_json(run, await engine.checkpoints(run_id), await engine.events(run_id))
    _out(dumps(document))
    return code


async def _cmd_recurring(spec: str, args: argparse.Namespace) -> int:
    async with _opened(spec) as engine:
        recurring = engine.recurring
        rows = {row.name: row for row in await engine.store.recurring(sorted(recurring))}
    entries = [recurring_entry(recurring[name], rows.get(name)) for name in sorted(recurring)]
    _out(dumps(entries) if args.json else recurring_table(entries))
    return EXIT_OK


def recurring_entry(recurring: Recurring, row: RecurringRow | None) -> dict[str, Any]:
    """What ``recurring --json`` shows of *recurring* and its stored *row*."""
    key = schedule_key(recurring.schedule)
    if row is None:
        status = "unseen"
    elif row.schedule != key:
        status = "changed"
    elif row.next_at is None:
        status = "done"
    else:
        status = "scheduled" if row.recurs else "waiting"
    return {
        "name": recurring.name,
        "workflow": recurring.workflow_name,
        "schedule": key,
        "next_due": row.next_at if row is not None and status == "scheduled" else None,
        "status": status,
        "catch_up": recurring.catch_up,
    }


async def _cmd_dashboard(spec: str, args: argparse.Namespace) -> int:
    token: str | None = None
    if args.token_env is not None:
        token = os.environ.get(args.token_env) or None
        if token is None:
            msg = (
                f"--token-env {args.token_env}: the variable is unset or empty (no token, no start)"
            )
            raise CliError(msg)
    try:
        from effects.durable._dashboard import serve  # noqa: PLC0415 - the optional extra
    except ImportError as error:
        raise CliError(str(error)) from None
    host: str = args.host
    if token is None and not serve.is_loopback(host):
        msg = (
            f"--host {host} is not a loopback address: anyone who reaches it could act on your"
            " runs; give a token with --token-env VAR (or serve on 127.0.0.1)"
        )
        raise CliError(msg)
    async with _opened(spec) as engine:
        try:
            sock, url = serve.bind(host, args.port)
        except OSError as error:
            raise CliError(f"cannot listen on {host} port {args.port}: {error}") from None
        _out(f"dashboard: {url}")
        mode = ", read-only" if args.read_only else ""
        _say(f"dashboard of {redacted(engine.store.url)}{mode}; SIGTERM or Ctrl-C stops it")
        await serve.serve(engine, sock, read_only=args.read_only, token=token)
    _say("stopped")
    return EXIT_OK


_COMMANDS: Final[Mapping[str, Callable[[str, argparse.Namespace], Coroutine[Any, Any, int]]]] = {
    "work": _cmd_work,
    "runs": _cmd_runs,
    "show": _cmd_show,
    "retry": _cmd_retry,
    "redispatch": _cmd_redispatch,
    "cancel": _cmd_cancel,
    "dashboard": _cmd_dashboard,
    "start": _cmd_start,
    "prune": _cmd_prune,
    "recurring": _cmd_recurring,
    "send": _cmd_send,
}
