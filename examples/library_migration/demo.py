"""
The migrate demo: authors and books into a flaky catalogue API, then fix and reprocess failures.

1. Generate a library: 2,000 authors (CSV) and about 6,000 books (SQLite), a few invalid.
2. Start the catalogue API on 127.0.0.1; it fails transiently (503, 429 with Retry-After).
3. ``migrate run --all --with-dependencies``: retries absorb the transient failures (the
   summary's ``retries`` column counts them, and they match the transient answers the catalogue
   reports giving); the invalid records end as failed items with evidence.
   Books wait: their required dependency has failed items.
4. ``migrate failures authors``: what went wrong, per item. Fix the source, then
   ``migrate run authors --failed``: only the failed items are processed again.
5. ``migrate run books``: the same story for the books with an empty title.

Everything goes through the ``migrate`` command, as a user would type it. Run it with
``python3 dev.py demo`` or ``python examples/library_migration/demo.py [--keep DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from destination_server import RunningServer, start  # noqa: E402 - after the path set-up
from generate_data import Generated, fix_authors, fix_books, generate  # noqa: E402

CONFIG = HERE / "migrate_config.py"


def section(title: str) -> None:
    """Print a section header."""
    print(f"\n{'=' * 78}\n== {title}\n{'=' * 78}", flush=True)


def migrate_command() -> list[str]:
    """The installed ``migrate`` command next to this Python, else ``python -m migrate``."""
    beside = Path(sys.executable).parent / ("migrate.exe" if os.name == "nt" else "migrate")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("migrate")
    return [found] if found else [sys.executable, "-m", "migrate"]


def migrate_cli(args: Sequence[str], env: dict[str, str], expect: Sequence[int] = (0,)) -> int:
    """Run ``migrate --config migrate_config.py ARGS``, echoing the command line and its output."""
    shown = " ".join(["migrate", *args])
    print(f"\n$ {shown}", flush=True)
    code = subprocess.call([*migrate_command(), "--config", str(CONFIG), *args], env=env)
    if code not in expect:
        raise SystemExit(f"demo: `{shown}` exited {code}, expected {' or '.join(map(str, expect))}")
    print(f"(exit code {code})", flush=True)
    return code


def transient_answers(server: RunningServer) -> int:
    """How many 429 and 503 answers the catalogue has given so far."""
    statuses = server.catalogue.stats()["statuses"]
    assert isinstance(statuses, dict)
    return sum(v for k, v in statuses.items() if k in ("429", "503"))


def latest_run_retries(env: dict[str, str]) -> tuple[int, int]:
    """
    The latest run's retries and retried calls that failed all the same, summed over its
    definitions, from ``migrate runs --limit 1 --json`` (run quietly).
    """
    done = subprocess.run(
        [*migrate_command(), "--config", str(CONFIG), "runs", "--limit", "1", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    (record,) = json.loads(done.stdout)["runs"]
    results = record["definitions"].values()
    return sum(r["retries"] for r in results), sum(r["gave_up"] for r in results)


def corroborate_retries(server: RunningServer, env: dict[str, str], transient_before: int) -> None:
    """Set the summary's retries beside the transient answers the catalogue gave in the run."""
    retries, gave_up = latest_run_retries(env)
    transient = transient_answers(server) - transient_before
    if retries == transient:
        print(
            f"\nthe summary's {retries:,} retries match the {transient:,} transient answers "
            "(429/503) the catalogue gave during the run"
        )
    else:  # a lost connection is retried too, but the catalogue never answered it
        print(
            f"\nthe summary counts {retries:,} retries; the catalogue gave {transient:,} "
            "transient answers (429/503) during the run (the rest: lost connections)"
        )
    if gave_up:
        print(f"{gave_up:,} retried calls failed all the same (see migrate failures)")
    else:
        print("every retried call succeeded in the end: no call ran out of retries")


def show_stats(server: RunningServer) -> dict[str, Any]:
    """Print what the catalogue saw: requests by status and keys that needed a retry."""
    stats = server.catalogue.stats()
    statuses = stats["statuses"]
    assert isinstance(statuses, dict)
    print(f"catalogue: {stats['authors']:,} authors, {stats['books']:,} books stored")
    print(f"requests: {stats['requests']:,}  by status: {statuses}")
    transient = sum(v for k, v in statuses.items() if k in ("429", "503"))
    print(
        f"transient failures answered (429/503): {transient:,}; keys asked more than once: "
        f"{stats['keys_retried']:,} -- each retried by the destination retry strategy"
    )
    return stats


def migrate_json(args: Sequence[str], env: dict[str, str]) -> Any:
    """The JSON document ``migrate --config migrate_config.py ARGS --json`` prints."""
    done = subprocess.run(
        [*migrate_command(), "--config", str(CONFIG), *args, "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def until(what: str, check: Any, seconds: float = 120) -> None:
    """Wait until *check()* is true (or exit, saying what did not happen)."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"demo: {what} did not happen within {seconds:.0f} s")
        time.sleep(0.05)


def durable_run(env: dict[str, str], books: int) -> None:
    """
    ``migrate run books --update --durable --detach``, a worker that is killed (kill -9) in the
    middle of a window, and a second worker that finishes the run from the saved cursor.
    """
    work = Path(env["LIBRARY_DEMO_DIR"])
    print("\n$ migrate run books --update --durable --detach", flush=True)
    start = ["run", "books", "--update", "--durable", "--detach"]
    started = subprocess.run(
        [*migrate_command(), "--config", str(CONFIG), *start],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    durable_run_id = started.stdout.strip()
    print(durable_run_id)
    print("(the starting process has exited; the run waits for a worker)")
    pause_at = str(books // 2)
    worker = [*migrate_command(), "--config", str(CONFIG), "work", "--poll", "100"]
    print(f"\n$ migrate work &    # worker A; it will stop for good at book {pause_at}")
    first = subprocess.Popen(
        worker, env={**env, "LIBRARY_DEMO_PAUSE_AT": pause_at}, stderr=subprocess.DEVNULL
    )
    until(f"worker A reaching book {pause_at}", (work / "paused").exists)
    record = migrate_json(["runs", "--limit", "1"], env)["runs"][0]
    done = record["definitions"]["books"]
    committed = done["migrated"] + done["unchanged"] + done["failed"] + done["skipped"]
    print(f"worker A (pid {first.pid}) is mid-window at book {pause_at}: {committed:,} books")
    print("committed so far; kill -9 it")
    first.kill()
    first.wait()
    print("\n$ migrate work &    # worker B: takes the run over once A's lease (2 s) lapses")
    second = subprocess.Popen(worker, env=env, stderr=subprocess.DEVNULL)
    try:

        def ended() -> bool:
            runs = migrate_json(["runs", "--limit", "1"], env)["runs"]
            return bool(runs) and runs[0]["status"] in ("succeeded", "failed")

        until("the durable run's end", ended)
    finally:
        second.terminate()
        second.wait()
    migrate_cli(["runs", "--limit", "1"], env)
    record = migrate_json(["runs", "--limit", "1"], env)["runs"][0]
    done = record["definitions"]["books"]
    total = sum(done[k] for k in ("migrated", "unchanged", "failed", "skipped", "needs_update"))
    if (record["status"], total) != ("succeeded", books):
        raise SystemExit(f"demo: the durable run ended {record['status']} with {total} books")
    print(
        f"\nthe run ended {record['status']}: {total:,} books, each counted once, though worker A"
        " died mid-window; worker B re-read the source from the last committed cursor"
    )
    durable_cli = [sys.executable, "-m", "effects.durable", "--app", "migrate_config:engine"]
    print(f"\n$ python -m effects.durable --app migrate_config:engine show {durable_run_id}")
    shown = subprocess.run(
        [*durable_cli, "show", durable_run_id, "--json"],
        env=env,
        cwd=HERE,
        capture_output=True,
        text=True,
        check=True,
    )
    document = json.loads(shown.stdout)
    names = [c["name"] for c in document["checkpoints"]]
    windows = names.count("migrate.window")
    print(
        f"durable run {document['run']['status']}: migrate.begin, {windows} x migrate.window "
        f"(each 1 attempt), {names[-1]}; recovered {document['run']['recovery_attempts']} time(s)"
    )


def run_demo(work: Path, authors: int = 2_000) -> float:
    """Run every step of the demo with *work* as the data and state folder; return seconds."""
    started = time.monotonic()
    section("1. Generate the source: authors.csv and books.db")
    data: Generated = generate(work, authors=authors)
    print(f"{data.authors:,} authors -> {data.authors_csv}")
    print(f"{data.books:,} books   -> {data.books_db}")
    print(f"invalid on purpose: authors {', '.join(data.bad_author_ids)} (malformed email),")
    print(f"                    books {', '.join(map(str, data.bad_book_ids))} (empty title)")

    section("2. Start the catalogue API (fails transiently: 503, 429 + Retry-After)")
    server = start()
    print(f"catalogue listening on {server.url}")
    env = {**os.environ, "LIBRARY_DEMO_DIR": str(work), "LIBRARY_API": server.url}
    try:
        section("3. The definitions: books require authors")
        migrate_cli(["list"], env)
        migrate_cli(["graph"], env)

        section("4. Migrate everything: authors, then books")
        migrate_cli(["run", "--all", "--with-dependencies", "--plan"], env)
        transient_before = transient_answers(server)
        migrate_cli(["run", "--all", "--with-dependencies"], env, expect=(1,))
        print("\nbooks did not run: their required dependency, authors, has failed items.")
        corroborate_retries(server, env, transient_before)
        show_stats(server)

        section("5. Why the authors failed: the evidence")
        migrate_cli(["failures", "authors"], env)

        section("6. Fix the authors at the source, reprocess only the failed ones")
        fix_authors(data)
        print(f"authors {', '.join(data.bad_author_ids)}: email corrected, updated_at bumped")
        before = server.catalogue.stats()["requests"]
        migrate_cli(["run", "authors", "--failed"], env)
        print(f"requests made by this run: {server.catalogue.stats()['requests'] - before:,}")

        section("7. Now the books (each looks up its author's catalogue id)")
        transient_before = transient_answers(server)
        migrate_cli(["run", "books"], env, expect=(1,))
        corroborate_retries(server, env, transient_before)
        show_stats(server)
        migrate_cli(["failures", "books", "--limit", "2"], env)

        section("8. Fix the books at the source, reprocess only the failed ones")
        fix_books(data)
        print(f"books {', '.join(map(str, data.bad_book_ids))}: title set, revision bumped")
        migrate_cli(["run", "books", "--failed", "--plan"], env)
        before = server.catalogue.stats()["requests"]
        migrate_cli(["run", "books", "--failed"], env)
        print(f"requests made by this run: {server.catalogue.stats()['requests'] - before:,}")

        section("9. A durable run: a worker killed mid-migration, another finishes it")
        durable_run(env, data.books)

        section("10. Roll the books back, from their journals, then migrate them again")
        migrate_cli(["rollback", "books", "--plan"], env)
        before = server.catalogue.stats()["books"]
        migrate_cli(["rollback", "books"], env)
        after = server.catalogue.stats()["books"]
        print(f"catalogue books: {before:,} before the rollback, {after:,} after")
        if server.catalogue.stats()["books"] != 0:
            raise SystemExit("demo: the rollback left books in the catalogue")
        migrate_cli(["runs", "--limit", "1"], env)
        migrate_cli(["run", "books"], env)

        section("11. All done")
        migrate_cli(["status"], env)
        migrate_cli(["runs"], env)
        stats = show_stats(server)
        if stats["authors"] != data.authors or stats["books"] != data.books:
            raise SystemExit(
                f"demo: expected {data.authors} authors and {data.books} books in the catalogue, "
                f"found {stats['authors']} and {stats['books']}"
            )
        took = time.monotonic() - started
        print(f"\nevery author and book is in the catalogue; the demo took {took:.1f}s")
        return took
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description="Run the migrate demo.")
    parser.add_argument(
        "--keep", type=Path, default=None, metavar="DIR", help="work in DIR and keep it"
    )
    parser.add_argument(
        "--authors", type=int, default=2_000, metavar="N", help="authors to generate (2,000)"
    )
    args = parser.parse_args()
    if args.keep is not None:
        if args.keep.exists():
            shutil.rmtree(args.keep)
        run_demo(args.keep, args.authors)
        return
    with tempfile.TemporaryDirectory(prefix="library-demo-") as work:
        run_demo(Path(work), args.authors)


if __name__ == "__main__":
    main()
