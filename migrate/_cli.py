"""
The ``migrate`` command line.

``migrate [--config FILE] [--store URL] COMMAND``; commands: ``list``, ``graph``, ``status``,
``runs``, ``failures``, ``unlock``, ``forget``, ``run``, ``work`` and ``rollback``. ``--store``
replaces the config's store.
``--json`` prints one JSON document on stdout for scripts; progress and messages go to stderr.

Exit codes: 0 done, and no failed item is stored for the definitions run; 1 the run finished
with failed items (this run's or earlier ones' waiting for ``--failed``); 2 bad usage or config
(the message names the problem); 3 refused (lock held, dependency preflight, changed source
contract, store schema newer than this ``migrate``); 4 a source could not be read; 5 the store
cannot be used (not a migrate store, corrupt, read-only for a command that writes, a commit that
failed); 130 interrupted (Ctrl-C). Errors are one line on stderr; source data in any output is
shown with control characters escaped. A reader that goes away (``migrate runs | head``) ends the
output quietly; the exit code stays the command's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal, Protocol, TextIO, cast

import attrs

from migrate import (
    Config,
    ConfigError,
    Counts,
    MigrateError,
    ProgressEvent,
    RefusedError,
    RunOptions,
    RunSummary,
    StoreError,
    UsageError,
    failures,
    forget,
    plan,
    refusals,
    run,
    runs,
    status,
    unlock,
)
from migrate._loading import load_config_and_engine
from migrate._rollback import plan_rollback, preview_rollback, run_rollback

if TYPE_CHECKING:
    from effects.durable import Engine
from migrate._text import format_time, plural, printable

__all__ = [
    "EXIT_FAILED_ITEMS",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_SOURCE",
    "EXIT_STORE",
    "EXIT_USAGE",
    "BarProgress",
    "LogProgress",
    "QuietPipe",
    "Writer",
    "exit_code",
    "main",
    "rollback_summary_text",
    "summary_text",
]

EXIT_OK: Final = 0
EXIT_FAILED_ITEMS: Final = 1
EXIT_USAGE: Final = 2
EXIT_REFUSED: Final = 3
EXIT_SOURCE: Final = 4
EXIT_STORE: Final = 5
EXIT_INTERRUPTED: Final = 130

_COUNT_COLUMNS: Final = (
    ("migrated", "migrated"),
    ("skipped", "skipped"),
    ("failed", "failed"),
    ("unchanged", "unchanged"),
    ("needs_update", "needs-update"),
    ("interrupted", "interrupted"),
)
_BAR_WIDTH: Final = 24
_REDRAW_EVERY: Final = 0.1  # seconds between bar redraws; windows can come much faster


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _identities(parser: argparse.ArgumentParser, help: str, *, required: bool = False) -> None:  # noqa: A002
    parser.add_argument(
        "--id", action="append", default=[], dest="ids", metavar="ID", required=required, help=help
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="migrate",
        description="Run migration definitions, see item states and reprocess failures.",
        epilog="Exit codes: 0 done (no failed item stored for the definitions run), 1 finished "
        "with failed items, 2 bad usage or config, 3 refused (lock held, dependency preflight, "
        "changed source contract, store schema), 4 a source could not be read, 5 the store "
        "cannot be used, 130 interrupted.",
    )
    parser.add_argument(
        "--config",
        metavar="FILE",
        default=None,
        help="config file defining `config = migrate.Config(...)` (default: ./migrate_config.py)",
    )
    parser.add_argument(
        "--store",
        metavar="URL",
        default=None,
        help="the store to use instead of the config's: sqlite:///PATH (relative to the working "
        "folder) or postgresql://USER@HOST/DB?schema=NAME",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    commands.add_parser("list", help="list the migration definitions")
    commands.add_parser("graph", help="show the dependency graph and the run order")

    p = commands.add_parser("status", help="stored item states per definition")
    p.add_argument("definitions", nargs="*", metavar="DEF")
    p.add_argument("--all", action="store_true", help="every definition (the default)")
    p.add_argument("--json", action="store_true", help="print one JSON document")

    p = commands.add_parser("runs", help="recent migration runs, newest first")
    p.add_argument("--limit", type=_positive_int, default=20, metavar="N")
    p.add_argument("--json", action="store_true", help="print one JSON document")

    p = commands.add_parser(
        "failures",
        help="failed items of a definition, with evidence, in natural identity order (7 before "
        "13), and items whose rollback failed, with their attempts",
    )
    p.add_argument("definition", metavar="DEF")
    p.add_argument("--limit", type=_positive_int, default=None, metavar="N")
    p.add_argument("--json", action="store_true", help="print one JSON document")

    p = commands.add_parser("unlock", help="break a definition's stale lock")
    p.add_argument("definition", metavar="DEF")

    p = commands.add_parser(
        "forget",
        help="remove the stored states of identities (a failure no run can clear: an identity "
        "gone from the source, a record without identity such as '<line 17>')",
    )
    p.add_argument("definition", metavar="DEF")
    _identities(p, "an identity whose state is removed (repeatable)", required=True)

    p = commands.add_parser("run", help="run definitions (all when none is named)")
    p.add_argument("definitions", nargs="*", metavar="DEF")
    p.add_argument("--all", action="store_true", help="every definition")
    p.add_argument(
        "--with-dependencies",
        action="store_true",
        help="also run required dependencies first (in normal mode)",
    )
    p.add_argument("--failed", action="store_true", help="reprocess the saved failed items")
    p.add_argument("--skipped", action="store_true", help="re-evaluate the skipped items")
    _identities(p, "process this identity whatever its state (repeatable)")
    p.add_argument(
        "--update", action="store_true", help="mark migrated items needs-update and rediscover"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="skip the dependency preflight and accept a changed source contract",
    )
    p.add_argument(
        "--rollback-orphans",
        action="store_true",
        help="after a complete scan of a definition, roll back its stored states the scan did "
        "not see (records deleted at the source) with its rollback=, dependents first",
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="print the plan and the refusals the run would meet, and exit (3 if refused)",
    )
    p.add_argument(
        "--progress",
        choices=("auto", "log", "none"),
        default="auto",
        help="auto: bars on a terminal, else a line per window (none with --json)",
    )
    p.add_argument(
        "-c",
        "--concurrency",
        type=_positive_int,
        default=None,
        metavar="N",
        help="items processed at once, overriding every definition's concurrency",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.add_argument(
        "--durable",
        action="store_true",
        help="run it as a durable workflow: worked here until it ends, and by any `migrate work` "
        "of the same config (a run whose process dies is finished by another)",
    )
    _durable_store(p)
    p.add_argument(
        "--detach",
        action="store_true",
        help="with --durable: start the run, print its durable run id and exit 0; workers run it",
    )

    p = commands.add_parser(
        "rollback",
        help="undo stored items through their definitions' rollback= (dependents first); each "
        "item undone loses its state, so the next run migrates it again",
    )
    p.add_argument("definitions", nargs="*", metavar="DEF")
    p.add_argument("--all", action="store_true", help="every definition (the default)")
    p.add_argument(
        "--with-dependencies",
        action="store_true",
        help="also roll back the definitions that depend on these, before them",
    )
    _identities(p, "roll back this identity only (repeatable; one definition)")
    p.add_argument(
        "--force",
        action="store_true",
        help="roll back although a definition depending on these still holds states",
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="print what would be rolled back and the refusals it would meet, and exit "
        "(3 if refused)",
    )
    p.add_argument(
        "-c",
        "--concurrency",
        type=_positive_int,
        default=None,
        metavar="N",
        help="items undone at once (async rollbacks as tasks, plain ones in threads)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document")

    p = commands.add_parser(
        "work", help="work the durable migration runs of this config until stopped (Ctrl-C)"
    )
    _durable_store(p)
    p.add_argument(
        "--poll",
        type=_positive_int,
        default=1000,
        metavar="MS",
        help="how often to look for work, in ms (default 1000; news of this process is at once)",
    )
    return parser


def _durable_store(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--durable-store",
        metavar="URL",
        default=None,
        help="the durable workflow store (default: the config's `engine`, else durable.db beside "
        "a SQLite store, or the same PostgreSQL database); a URL given here ignores the "
        "config's engine and its options",
    )


class Writer(Protocol):
    """Where a command writes: a text stream's ``write`` and ``flush``."""

    def write(self, text: str, /) -> int: ...
    def flush(self) -> None: ...


class QuietPipe:
    """
    A text stream whose lost reader is not an error: once a write or flush meets a closed pipe
    (``migrate runs | head``), the stream's file descriptor is pointed at ``os.devnull`` and the
    rest of the output is dropped, with no traceback at exit.

    Args:
        stream: The stream written to, usually ``sys.stdout`` or ``sys.stderr``.
    """

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        #: True once the reader went away.
        self.broken = False

    @property
    def encoding(self) -> str | None:
        """The stream's encoding (progress bars choose their characters by it)."""
        return getattr(self.stream, "encoding", None)

    def isatty(self) -> bool:
        """Whether the stream is a terminal."""
        return self.stream.isatty()

    def write(self, text: str, /) -> int:
        """Write *text*, unless the reader went away; returns ``len(text)`` either way."""
        if not self.broken:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self._lost()
        return len(text)

    def flush(self) -> None:
        """Flush the stream, unless the reader went away."""
        if not self.broken:
            try:
                self.stream.flush()
            except BrokenPipeError:
                self._lost()

    def _lost(self) -> None:
        self.broken = True
        # The interpreter flushes sys.stdout at exit: give the unsent bytes somewhere to go.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, self.stream.fileno())
            finally:
                os.close(devnull)
        except (OSError, ValueError):  # not a real file (e.g. io.StringIO): nothing to redirect
            pass


def main(argv: Sequence[str] | None = None) -> int:
    """
    Run the ``migrate`` command line with *argv* (default ``sys.argv[1:]``).

    Returns:
        The exit code: 0 done, 1 finished with failed items, 2 bad usage or config, 3 refused,
        4 a source could not be read, 5 the store cannot be used, 130 interrupted.
    """
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse exits 2 on bad usage, 0 for --help
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    out = QuietPipe(sys.stdout)
    try:
        if args.command == "run" and args.failed and args.skipped:
            raise UsageError("--failed and --skipped cannot be used together; run them one by one")
        config, args.config_engine = load_config_and_engine(args.config)
        if args.store is not None:
            config = _with_store(config, args.store)
            # The config's engine serves the config's own store.
            args.config_engine = None
        command: Callable[[Config, argparse.Namespace, Writer], int] = _COMMANDS[args.command]
        return command(config, args, out)
    except (ConfigError, UsageError) as error:
        _error(f"error: {error}")
        return EXIT_USAGE
    except RefusedError as error:
        _error(f"refused: {error}")
        return EXIT_REFUSED
    except StoreError as error:
        _error(f"store error: {error}")
        return EXIT_STORE
    except KeyboardInterrupt:
        _error("interrupted")
        return EXIT_INTERRUPTED
    except SystemExit as exit_:
        # Code a command ran (a source, a destination) called sys.exit(): the command did not
        # finish, whatever code it passed, so it never reads as success.
        code = exit_.code if isinstance(exit_.code, int) and exit_.code else EXIT_FAILED_ITEMS
        _error(f"error: sys.exit({exit_.code!r}) was called while the command ran; it stopped")
        return code
    finally:
        out.flush()


def _with_store(config: Config, url: str) -> Config:
    """*config* with the store *url* given on the command line (a relative SQLite path starts at
    the working folder, as any path on a command line does, not at the config's)."""
    if url.startswith("sqlite:///"):
        rest, mark, query = url.removeprefix("sqlite:///").partition("?")
        url = f"sqlite:///{Path(rest).absolute()}{mark}{query}" if rest else url
    return attrs.evolve(config, store=url)


def _error(message: str) -> None:
    text = "\n".join(printable(line) for line in message.split("\n"))
    print(f"migrate: {text}", file=QuietPipe(sys.stderr), flush=True)


def _dump(document: object, out: Writer) -> None:
    json.dump(document, out, indent=2, sort_keys=False)
    out.write("\n")
    out.flush()


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: set[int]) -> str:
    """Align *rows* under *header*; columns whose index is in *numeric* are right-aligned."""
    widths = [len(h) for h in header]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.rjust(widths[i]) if i in numeric else cell.ljust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    return "\n".join([line(header), *(line(r) for r in rows)])


def _n(value: int) -> str:
    return f"{value:,}"


# --- list, graph -------------------------------------------------------------------------------


def _cmd_list(config: Config, args: argparse.Namespace, out: Writer) -> int:
    rows = [
        [
            m.id,
            m.source.describe(),
            m.source.lookup_strategy,
            ", ".join(m.requires) or "-",
            ", ".join(m.optional) or "-",
            str(m.concurrency),
        ]
        for m in config.migrations
    ]
    header = ["definition", "source", "lookup", "requires", "optional", "concurrency"]
    print(_table(header, rows, numeric={5}), file=out)
    return EXIT_OK


def _cmd_graph(config: Config, args: argparse.Namespace, out: Writer) -> int:
    order = config.order()
    for definition_id in order:
        migration = config.get(definition_id)
        print(definition_id, file=out)
        edges = [(d, "requires") for d in migration.requires]
        edges += [(d, "optional") for d in migration.optional]
        for i, (dep, kind) in enumerate(edges):
            branch = "`--" if i == len(edges) - 1 else "|--"
            print(f"  {branch} {kind} {dep}", file=out)
    print(f"\nrun order: {' -> '.join(order) or '(no definitions)'}", file=out)
    return EXIT_OK


# --- status, runs, failures, unlock --------------------------------------------------------------


def _cmd_status(config: Config, args: argparse.Namespace, out: Writer) -> int:
    if args.all and args.definitions:
        raise UsageError("name definitions or pass --all, not both")
    for definition_id in args.definitions:
        config.get(definition_id)  # UsageError naming an unknown id
    report = status(config, definitions=tuple(args.definitions))
    if args.json:
        _dump(report.to_json(), out)
        return EXIT_OK
    rows: list[list[str]] = []
    interrupted = any(state.interrupted for state in report.definitions.values())
    for definition_id, state in report.definitions.items():
        latest = state.latest_run
        rows.append(
            [
                definition_id,
                _n(state.migrated),
                _n(state.skipped),
                _n(state.failed),
                _n(state.needs_update),
                *([_n(state.interrupted)] if interrupted else []),
                "-" if latest is None else f"{latest.run_id} ({latest.status})",
                "-" if latest is None or latest.ended_at is None else format_time(latest.ended_at),
            ]
        )
    header = [
        "definition",
        "migrated",
        "skipped",
        "failed",
        "needs-update",
        *(["interrupted"] if interrupted else []),
        "latest run",
        "ended",
    ]
    numeric = {1, 2, 3, 4, 5} if interrupted else {1, 2, 3, 4}
    print(_table(header, rows, numeric=numeric), file=out)
    return EXIT_OK


def _duration(started: float, ended: float | None) -> str:
    if ended is None:
        return "-"
    seconds = max(0.0, ended - started)
    return f"{seconds:.1f}s" if seconds < 120 else f"{seconds / 60:.1f}min"


def _durable_cell(durable_run_id: str | None) -> str:
    # Escaped: unlike our run ids, a durable run's id may come from a caller.
    return "-" if durable_run_id is None else printable(durable_run_id)


def _cmd_runs(config: Config, args: argparse.Namespace, out: Writer) -> int:
    records = runs(config, limit=args.limit)
    if args.json:
        _dump({"runs": [r.to_json() for r in records]}, out)
        return EXIT_OK
    if not records:
        print("no runs yet", file=out)
        return EXIT_OK
    # The durable run of each run, where one owns it: a column only when one does, so the
    # table of plain runs stays as it was; the kind alike, only when a rollback is listed.
    durable = any(record.durable_run_id is not None for record in records)
    kinds = any(record.kind != "run" for record in records)
    rows: list[list[str]] = []
    for record in records:
        parts: list[str] = []
        for definition_id, result in record.definitions.items():
            brief = _counts_brief(result.counts, result.retries)
            if result.blocked:
                brief = "blocked"
            elif result.error:
                brief = f"{brief}, stopped" if brief else "stopped"
            parts.append(f"{definition_id}: {brief or 'nothing'}")
        detail = "; ".join(parts)
        if record.error:
            error = printable(record.error)
            detail = f"{detail}; error: {error}" if detail else f"error: {error}"
        rows.append(
            [
                record.run_id,
                *([record.kind] if kinds else []),
                record.status,
                record.mode,
                format_time(record.started_at),
                _duration(record.started_at, record.ended_at),
                *([_durable_cell(record.durable_run_id)] if durable else []),
                detail,
            ]
        )
    header = [
        "run",
        *(["kind"] if kinds else []),
        "status",
        "mode",
        "started",
        "took",
        *(["durable"] if durable else []),
    ]
    print(_table([*header, "definitions"], rows, numeric={5 if kinds else 4}), file=out)
    return EXIT_OK


def _cmd_failures(config: Config, args: argparse.Namespace, out: Writer) -> int:
    config.get(args.definition)
    every = failures(config, args.definition)
    records = every if args.limit is None else every[: args.limit]
    if args.json:
        _dump([r.to_json() for r in records], out)
        return EXIT_OK
    if not records:
        print(f"{args.definition}: no failed items", file=out)
        return EXIT_OK
    total = sum(1 for r in every if r.status == "failed")
    # States of other statuses are listed because their rollback failed.
    rollbacks = len(every) - total
    shown = f" (showing {_n(len(records))})" if len(every) > len(records) else ""
    counted = [plural(total, "failed item")] if total or not rollbacks else []
    if rollbacks:
        counted.append(f"{plural(rollbacks, 'item')} whose rollback failed")
    print(f"{args.definition}: {', '.join(counted)}{shown}", file=out)
    for record in records:
        error = record.error
        tries = "attempt" if error.attempts == 1 else "attempts"
        # Everything below comes from source data and error messages: escaped, so no control
        # or escape sequence in a record reaches the terminal.
        where = f", {printable(record.position)}" if record.position else ""
        if record.status != "failed":
            print(
                f"\n{printable(record.identity)}  ({printable(record.status)}, run "
                f"{record.run_id}{where})",
                file=out,
            )
        else:
            print(f"\n{printable(record.identity)}  (run {record.run_id}{where})", file=out)
            print(
                f"  {error.kind} error {printable(error.type)}: {printable(error.message)}",
                file=out,
            )
            print(f"  after {error.attempts} {tries}", file=out)
            for key, value in error.details.items():
                text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
                print(f"  {printable(key)}: {printable(text)}", file=out)
        for entry in record.journal:
            print(f"  journal: {printable(json.dumps(entry, sort_keys=True))}", file=out)
        _print_rollback_attempts(record.rollback_attempts, out)
    return EXIT_OK


def _print_rollback_attempts(attempts: Sequence[Mapping[str, object]], out: Writer) -> None:
    """The failed rollbacks of a state, oldest first, with the entries each had undone."""
    for number, attempt in enumerate(attempts, 1):
        found = attempt.get("error")
        error: Mapping[str, object] = (
            cast("Mapping[str, object]", found) if isinstance(found, Mapping) else {}
        )
        failed_at = attempt.get("failed_at")
        when = (
            f", {format_time(failed_at)}"
            if isinstance(failed_at, int | float) and not isinstance(failed_at, bool)
            else ""
        )
        entries = attempt.get("entries")
        undone = cast("list[object]", entries) if isinstance(entries, list) else []
        text = f"{error.get('type', '')}: {error.get('message', '')}"
        print(
            f"  rollback attempt {number} (run {printable(str(attempt.get('run_id')))}{when}): "
            f"{printable(text)}; {plural(len(undone), 'entry', 'entries')} undone before it failed",
            file=out,
        )
        for entry in undone:
            print(f"    undone: {printable(json.dumps(entry, sort_keys=True))}", file=out)


def _cmd_forget(config: Config, args: argparse.Namespace, out: Writer) -> int:
    config.get(args.definition)
    removed = forget(config, args.definition, tuple(args.ids))
    gone = {state.identity for state in removed}
    for state in removed:
        print(
            f"forgot {args.definition} {printable(state.identity)} (was {state.status})", file=out
        )
    for identity in dict.fromkeys(args.ids):
        if identity not in gone:
            print(f"{args.definition} {printable(identity)}: no stored state", file=out)
    return EXIT_OK


def _cmd_unlock(config: Config, args: argparse.Namespace, out: Writer) -> int:
    config.get(args.definition)
    broken = unlock(config, args.definition)
    if broken is None:
        print(f"{args.definition} was not locked", file=out)
    else:
        durable = ""
        if broken.durable_run_id is not None:
            durable = f"durable run {_durable_cell(broken.durable_run_id)}, started by "
        print(
            f"unlocked {args.definition} (was held by run {broken.run_id}, {durable}pid "
            f"{broken.pid} on host {broken.host}, since {format_time(broken.acquired_at)})",
            file=out,
        )
    return EXIT_OK


# --- run: progress -----------------------------------------------------------------------------


def _counts_brief(counts: Counts, retries: int = 0) -> str:
    parts = [
        f"{label} {_n(getattr(counts, key))}"
        for key, label in (("rolled_back", "rolled-back"), *_COUNT_COLUMNS)
        if getattr(counts, key)
    ]
    if retries:
        parts.append(f"retries {_n(retries)}")
    return ", ".join(parts)


class LogProgress:
    """
    Progress as plain lines: one when a definition starts, one per window, one at its end.

    Args:
        stream: Where the lines go (the CLI uses stderr).
        clock: Seconds, monotonic; for the items-per-second rate.
    """

    def __init__(self, stream: Writer, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.clock = clock
        self._started: dict[str, float] = {}
        self._processed: dict[str, int] = {}

    def __call__(self, event: ProgressEvent) -> None:
        """Print the line for *event* (``item`` events print nothing)."""
        if event.kind == "item":
            return
        now = self.clock()
        definition_id = event.definition_id
        if event.kind == "window" and event.processed == self._processed.get(definition_id):
            return  # the source's last, empty window: nothing new to say
        self._processed[definition_id] = event.processed
        if event.kind == "start":
            self._started[definition_id] = now
            total = "" if event.total is None else f", {plural(event.total, 'item')}"
            line = f"[{definition_id}] start (mode {event.mode}{total})"
        else:
            elapsed = now - self._started.get(definition_id, now)
            speed = f"{event.processed / elapsed:,.0f}" if elapsed > 0 else ""
            unit = "item/s" if speed == "1" else "items/s"
            rate = f", {speed} {unit}" if speed else ""
            brief = _counts_brief(event.counts, event.retries) or "nothing"
            if event.kind == "window":
                # "3/10 items": the noun agrees with the number next to it.
                done = (
                    plural(event.processed, "item")
                    if event.total is None
                    else f"{_n(event.processed)}/{plural(event.total, 'item')}"
                )
                line = f"[{definition_id}] window {event.window}: {done} ({brief}){rate}"
            else:
                line = (
                    f"[{definition_id}] done: {plural(event.processed, 'item')} in "
                    f"{elapsed:.1f}s ({brief})"
                )
        print(line, file=self.stream, flush=True)


class BarProgress:
    """
    Progress bars redrawn in place on a terminal, one line per definition.

    Redraws at most every 0.1 s (``item`` and ``window`` events), and always at a definition's
    start and end.

    Args:
        stream: The terminal stream (the CLI uses stderr).
        clock: Seconds, monotonic; for the rate and the redraw interval.
    """

    def __init__(self, stream: Writer, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream
        self.clock = clock
        self._started = 0.0
        self._drawn = 0.0
        self._width = 0

    def __call__(self, event: ProgressEvent) -> None:
        """Redraw the bar for *event* (unless the last redraw was under 0.1 s ago)."""
        now = self.clock()
        if event.kind == "start":
            self._started = self._drawn = now
            self._width = 0
        elif event.kind in ("item", "window") and now - self._drawn < _REDRAW_EVERY:
            return
        self._drawn = now
        line = self._render(event, now - self._started)
        pad = " " * max(0, self._width - len(line))
        self._width = len(line)
        end = "\n" if event.kind == "end" else ""
        self.stream.write(f"\r{line}{pad}{end}")
        self.stream.flush()

    def _render(self, event: ProgressEvent, elapsed: float) -> str:
        unicode = (getattr(self.stream, "encoding", None) or "").lower().replace("-", "") in (
            "utf8",
            "utf16",
        )
        full, empty = ("\u2588", "\u2591") if unicode else ("#", ".")
        done = event.processed
        rate = f"{done / elapsed:,.0f}/s" if elapsed > 0 else ""
        failed = f"failed {_n(event.counts.failed)}" if event.counts.failed else ""
        retries = f"retries {_n(event.retries)}" if event.retries else ""
        if event.total:
            fraction = min(1.0, done / event.total)
            filled = round(fraction * _BAR_WIDTH)
            bar = full * filled + empty * (_BAR_WIDTH - filled)
            head = f"{bar} {_n(done)}/{_n(event.total)} {fraction:4.0%}"
        else:
            spin = "-\\|/"[event.window % 4] if event.kind != "end" else " "
            head = f"{spin} {plural(done, 'item')}"
        parts = [f"{event.definition_id:<14}", head, rate, failed, retries]
        if event.kind == "end":
            parts.append(f"{elapsed:.1f}s")
        return "  ".join(p for p in parts if p)


def _progress(
    mode: Literal["auto", "log", "none"], as_json: bool
) -> Callable[[ProgressEvent], None] | None:
    stream = QuietPipe(sys.stderr)
    if mode == "none":
        return None
    if mode == "log":
        return LogProgress(stream)
    if stream.isatty() and os.environ.get("TERM") != "dumb":
        return BarProgress(stream)
    return None if as_json else LogProgress(stream)


# --- run: summary ------------------------------------------------------------------------------


def summary_text(summary: RunSummary) -> str:
    """
    The run's summary for people: a table of counts and retries per definition, notes, the
    most common errors and the failures that wait for ``--failed``. Source data in it (error
    messages, notes) is shown with control characters escaped.
    """
    took = max(0.0, summary.ended_at - summary.started_at)
    lines = [f"run {summary.run_id} {summary.status} in {took:.1f}s", ""]
    columns = [
        (key, label)
        for key, label in _COUNT_COLUMNS
        if key != "interrupted" or any(r.counts.interrupted for r in summary.definitions.values())
    ]
    rows: list[list[str]] = []
    totals = dict.fromkeys((key for key, _ in columns), 0)
    total_retries = 0
    notes: list[str] = []
    for definition_id, result in summary.definitions.items():
        counts = result.counts
        rows.append(
            [
                definition_id,
                result.mode,
                *(_n(getattr(counts, key)) for key, _ in columns),
                _n(result.retries),
            ]
        )
        for key in totals:
            totals[key] += getattr(counts, key)
        total_retries += result.retries
        if result.blocked:
            notes.append(f"{definition_id}: not run: {result.blocked}")
        if result.error:
            notes.append(f"{definition_id}: stopped: {result.error}")
        earlier = result.failed_stored - result.counts.failed - result.counts.interrupted
        if earlier > 0:
            notes.append(
                f"{definition_id}: {plural(earlier, 'failed item')} from earlier runs "
                f"{'waits' if earlier == 1 else 'wait'} for: migrate run {definition_id} --failed"
            )
        if result.gave_up:
            notes.append(
                f"{definition_id}: {plural(result.gave_up, 'retried call')} failed all the same "
                "(retries ran out, the retry budget refused, or a later error was not retryable)"
            )
    if len(rows) > 1:
        rows.append(["total", "", *(_n(totals[key]) for key, _ in columns), _n(total_retries)])
    header = ["definition", "mode", *(label for _, label in columns), "retries"]
    lines.append(_table(header, rows, numeric=set(range(2, len(header)))))
    notes += summary.notes
    if notes:
        lines += ["", *(printable(note) for note in notes)]
    if summary.top_errors:
        lines += ["", "most common errors:"]
        error_rows = [
            [
                _n(e.count),
                e.definition_id,
                e.kind,
                printable(f"{e.type}: {_one_line(e.message)}"),
            ]
            for e in summary.top_errors
        ]
        lines.append(_table(["count", "definition", "kind", "error"], error_rows, numeric={0}))
    failed = [d for d, r in summary.definitions.items() if r.failed_stored or r.counts.failed]
    if failed:
        lines += [
            "",
            f"see the evidence: migrate failures {failed[0]}",
            f"after fixing the cause: migrate run {' '.join(failed)} --failed",
        ]
    return "\n".join(lines)


def _one_line(text: str, limit: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def exit_code(summary: RunSummary) -> int:
    """
    The exit code of a finished run: 4 when a definition stopped because its source could not
    be read, else 1 when any definition failed (an item failed in this run, or a failed item of
    an earlier run is still stored, or it was blocked), else 0.
    """
    if any(result.error for result in summary.definitions.values()):
        return EXIT_SOURCE
    return EXIT_FAILED_ITEMS if summary.status == "failed" else EXIT_OK


def _cmd_run(config: Config, args: argparse.Namespace, out: Writer) -> int:
    if args.all and args.definitions:
        raise UsageError("name definitions or pass --all, not both")
    options = RunOptions(
        definitions=tuple(args.definitions),
        all=args.all,
        with_dependencies=args.with_dependencies,
        failed=args.failed,
        skipped=args.skipped,
        ids=tuple(args.ids),
        update=args.update,
        force=args.force,
        concurrency=args.concurrency,
        rollback_orphans=args.rollback_orphans,
    )
    the_plan = plan(config, options)
    if args.plan:
        refused = refusals(config, the_plan)
        if args.json:
            _dump({**the_plan.to_json(), "refusals": [str(r) for r in refused]}, out)
        else:
            print(the_plan, file=out)
            for refusal in refused:
                lines = str(refusal).split("\n")
                print(f"  would be refused: {printable(lines[0])}", file=out)
                for line in lines[1:]:
                    print(f"                    {printable(line)}", file=out)
        return EXIT_REFUSED if refused else EXIT_OK
    if args.detach and not args.durable:
        raise UsageError("--detach starts a durable run: pass --durable too")
    if args.durable_store is not None and not args.durable:
        raise UsageError("--durable-store is the store of durable runs: pass --durable too")
    shown = _progress(args.progress, args.json)
    if args.durable:
        outcome = _run_durable(config, args, options, shown)
        if isinstance(outcome, str):
            print(outcome, file=out, flush=True)
            return EXIT_OK
        summary = outcome
    else:
        summary = run(config, options, progress=shown)
    code = exit_code(summary)
    if args.json:
        _dump(summary.to_json(), out)
    else:
        print(summary_text(summary), file=out, flush=True)
    if code == EXIT_SOURCE:
        stopped = [d for d, r in summary.definitions.items() if r.error]
        _error(f"source unreadable: {stopped[0]}: {summary.definitions[stopped[0]].error}")
    return code


_ROLLBACK_COLUMNS: Final = (
    ("rolled_back", "rolled-back"),
    ("failed", "failed"),
    ("skipped", "skipped"),
)


def rollback_summary_text(summary: RunSummary) -> str:
    """
    A rollback's summary for people, in the style of `summary_text`: per definition, items
    rolled back, failed (their states kept, with the attempt) and skipped (``--id`` without a
    stored state), then notes, the most common errors and what to do about failures.
    """
    took = max(0.0, summary.ended_at - summary.started_at)
    lines = [f"rollback {summary.run_id} {summary.status} in {took:.1f}s", ""]
    rows: list[list[str]] = []
    totals = dict.fromkeys((key for key, _ in _ROLLBACK_COLUMNS), 0)
    total_retries = 0
    for definition_id, result in summary.definitions.items():
        counts = result.counts
        rows.append(
            [
                definition_id,
                *(_n(getattr(counts, key)) for key, _ in _ROLLBACK_COLUMNS),
                _n(result.retries),
            ]
        )
        for key in totals:
            totals[key] += getattr(counts, key)
        total_retries += result.retries
    if len(rows) > 1:
        rows.append(
            ["total", *(_n(totals[key]) for key, _ in _ROLLBACK_COLUMNS), _n(total_retries)]
        )
    header = ["definition", *(label for _, label in _ROLLBACK_COLUMNS), "retries"]
    lines.append(_table(header, rows, numeric=set(range(1, len(header)))))
    if summary.notes:
        lines += ["", *(printable(note) for note in summary.notes)]
    if summary.top_errors:
        lines += ["", "most common errors:"]
        error_rows = [
            [_n(e.count), e.definition_id, printable(f"{e.type}: {_one_line(e.message)}")]
            for e in summary.top_errors
        ]
        lines.append(_table(["count", "definition", "error"], error_rows, numeric={0}))
    failed = [d for d, r in summary.definitions.items() if r.counts.failed]
    if failed:
        lines += [
            "",
            f"their states are kept; see the attempts: migrate failures {failed[0]}",
            f"after fixing the cause: migrate rollback {' '.join(failed)}",
        ]
    return "\n".join(lines)


def _cmd_rollback(config: Config, args: argparse.Namespace, out: Writer) -> int:
    if args.all and args.definitions:
        raise UsageError("name definitions or pass --all, not both")
    the_plan = plan_rollback(
        config,
        tuple(args.definitions),
        ids=tuple(args.ids),
        with_dependencies=args.with_dependencies,
        force=args.force,
        concurrency=args.concurrency,
    )
    if args.plan:
        states, refused = preview_rollback(config, the_plan)
        if args.json:
            _dump({**the_plan.to_json(states), "refusals": [str(r) for r in refused]}, out)
        else:
            print(the_plan.describe(states), file=out)
            for refusal in refused:
                lines = str(refusal).split("\n")
                print(f"  would be refused: {printable(lines[0])}", file=out)
                for line in lines[1:]:
                    print(f"                    {printable(line)}", file=out)
        return EXIT_REFUSED if refused else EXIT_OK
    summary = run_rollback(config, the_plan)
    if args.json:
        _dump(summary.to_json(), out)
    else:
        print(rollback_summary_text(summary), file=out, flush=True)
    return EXIT_FAILED_ITEMS if summary.status == "failed" else EXIT_OK


def _engine(config: Config, args: argparse.Namespace) -> Engine:
    """The durable engine: ``--durable-store``'s, else the config module's, else the default."""
    # Only durable commands pay for importing the engine.
    from effects.durable import Engine  # noqa: PLC0415
    from migrate import durable  # noqa: PLC0415

    given: object = args.config_engine
    if args.durable_store is None and given is not None:
        if not isinstance(given, Engine):
            msg = "the config's 'engine' must be an effects.durable.Engine"
            raise ConfigError(f"{msg}, got {type(given).__name__}")
        return given
    return durable.engine(config, args.durable_store)


def _durable_errors(error: Exception) -> Exception:
    """An error of the durable store as the command's own (exit 5 or 2)."""
    from effects.durable import DurableError  # noqa: PLC0415

    if isinstance(error, DurableError):
        return StoreError(f"durable store: {error}")
    return ConfigError(f"durable store: {error}")


def _run_durable(
    config: Config,
    args: argparse.Namespace,
    options: RunOptions,
    progress: Callable[[ProgressEvent], None] | None,
) -> RunSummary | str:
    """Start the run as a durable run; with ``--detach`` its id, else its summary once done."""
    from effects.durable import DurableError  # noqa: PLC0415
    from migrate import durable  # noqa: PLC0415

    on = _engine(config, args)
    started: list[str] = []

    async def go() -> RunSummary | str:
        async with on:
            durable_run_id = await durable.start(config, on, options)
            started.append(durable_run_id)
            if args.detach:
                return durable_run_id
            return await durable.wait(config, on, durable_run_id, progress=progress)

    try:
        return asyncio.run(go())
    except KeyboardInterrupt:
        if started:
            # The run is durable: stopping this process leaves it to the workers.
            _error(f"durable run {started[0]} goes on with `migrate work` (here or elsewhere)")
        raise
    except MigrateError:
        raise
    # DurableError too: the engine's own StoreError (an unusable durable store) is neither an
    # OSError nor a ValueError, and escaped as a traceback (exit 1) instead of exit 5.
    except (OSError, ValueError, DurableError) as error:
        raise _durable_errors(error) from error


def _cmd_work(config: Config, args: argparse.Namespace, out: Writer) -> int:
    from effects.durable import DurableError  # noqa: PLC0415

    on = _engine(config, args)
    _error(
        f"work: durable migration runs of the store {printable(on.store.location)}; Ctrl-C stops"
    )

    async def go() -> None:
        async with on:
            await on.work(poll_ms=args.poll)

    try:
        asyncio.run(go())
    except (MigrateError, KeyboardInterrupt):
        raise
    except (OSError, ValueError, DurableError) as error:  # DurableError: see _run_durable
        raise _durable_errors(error) from error
    return EXIT_OK


_COMMANDS: Final[Mapping[str, Callable[[Config, argparse.Namespace, Writer], int]]] = {
    "list": _cmd_list,
    "graph": _cmd_graph,
    "status": _cmd_status,
    "runs": _cmd_runs,
    "failures": _cmd_failures,
    "unlock": _cmd_unlock,
    "forget": _cmd_forget,
    "run": _cmd_run,
    "work": _cmd_work,
    "rollback": _cmd_rollback,
}
