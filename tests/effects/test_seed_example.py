"""The seed's retry policy written with our API, against a real HTTP server on 127.0.0.1."""

from __future__ import annotations

import json
import random
import urllib.error
import urllib.request
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

import pytest

import migrate
from effects import Effect, Retry, retry, use_clock, use_random
from effects.http import ApiRequestError, request_failure, respect_retry_after
from effects.testing import VirtualClock
from schedules import exponential
from tests.effects.test_http_server import Reply, ScriptedServer

AUTHOR = b'{"id": "7", "name": "Ada"}'


def fetch_author(base_url: str, identity: str, timeout: float = 10.0) -> dict[str, Any]:
    """The request helper: GET one author with a 10 s timeout, failing with ApiRequestError."""
    try:
        with urllib.request.urlopen(f"{base_url}/authors/{identity}", timeout=timeout) as reply:
            author: dict[str, Any] = json.load(reply)
            return author
    except urllib.error.HTTPError as error:
        with error:
            raise ApiRequestError.from_response(error) from error
    except (TimeoutError, urllib.error.URLError) as error:
        # No response at all: a timeout or a refused connection may pass; worth another try.
        raise ApiRequestError(None, transient=True, message=str(error)) from error


def get_author(
    base_url: str, identity: str, timeout: float = 10.0
) -> Effect[dict[str, Any], ApiRequestError]:
    """The request as an Effect that fails with ApiRequestError."""
    return Effect.attempt(lambda: fetch_author(base_url, identity, timeout), catch=ApiRequestError)


def is_transient(error: object) -> bool:
    """Retry only errors marked transient, wherever the ApiRequestError sits in the chain."""
    failure = request_failure(error)
    return failure is not None and failure.transient


# Exponential waits from 250 ms, factor 2, jittered, capped at 4 s; then Retry-After is honoured
# up to 60 s (never shortened to the 4 s cap) and a longer request stops; at most five attempts.
backoff = respect_retry_after(exponential("250ms").jittered().max_delay("4s"), limit=60)
retry_transient = retry(backoff, times=4, while_=is_transient)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    """A scripted server for one test, shut down afterwards."""
    scripted = ScriptedServer()
    yield scripted
    scripted.close()


def run(effect: Effect[dict[str, Any], ApiRequestError]) -> tuple[Any, VirtualClock]:
    """Run *effect* under a fresh virtual clock and seeded jitter; return (result, clock)."""
    with use_clock(VirtualClock()) as clock, use_random(random.Random(3)):
        return effect.run(), clock


def test_policy_reads_like_the_seed() -> None:
    """The policy's repr is the expression that built it."""
    assert (
        "respect_retry_after(exponential(0.25).jittered(min=0.8, max=1.2).max_delay(4), limit=60)"
        == repr(backoff)
    )


def test_success_after_transient_failures(server: ScriptedServer) -> None:
    """503 and 502 without Retry-After are retried with the jittered exponential waits."""
    server.script([Reply(503), Reply(502), Reply(200, body=AUTHOR)])
    result, clock = run(get_author(server.url, "7").pipe(retry_transient))
    assert {"id": "7", "name": "Ada"} == result.unwrap()
    assert 3 == server.requests
    assert 2 == len(clock.sleeps)
    assert 0.2 <= clock.sleeps[0] < 0.3
    assert 0.4 <= clock.sleeps[1] < 0.6


def test_seed_policy_against_a_dead_dependency(server: ScriptedServer) -> None:
    """The seed policy makes exactly five attempts, waiting 250 ms, 500 ms, 1 s, 2 s (+-20 %)."""
    server.script([Reply(503)] * 10)
    result, clock = run(get_author(server.url, "7").pipe(retry_transient))
    assert 503 == result.failure().status
    assert 5 == server.requests
    bounds = [(0.25 * 2**k * 0.8, 0.25 * 2**k * 1.2) for k in range(4)]
    assert 4 == len(clock.sleeps)
    assert all(low <= s < high for s, (low, high) in zip(clock.sleeps, bounds, strict=True))


def test_at_most_five_attempts_with_capped_waits(server: ScriptedServer) -> None:
    """A dependency that keeps failing gets five attempts, waits capped at 4 s, last error kept."""
    server.script([Reply(503)] * 10)
    slow_growth = respect_retry_after(exponential(3).jittered().max_delay("4s"), limit=60)
    policy = retry(slow_growth, times=4, while_=is_transient)
    result, clock = run(get_author(server.url, "7").pipe(policy))
    assert 503 == result.failure().status
    assert 5 == server.requests
    assert 4 == len(clock.sleeps)
    assert all(2.4 <= s <= 4.0 for s in clock.sleeps)
    assert 4.0 == max(clock.sleeps)


def test_permanent_error_is_not_retried(server: ScriptedServer) -> None:
    """A 400 is not transient: one attempt, no wait, the 400 returned."""
    server.script([Reply(400)])
    result, clock = run(get_author(server.url, "7").pipe(retry_transient))
    assert 400 == result.failure().status
    assert 1 == server.requests
    assert [] == clock.sleeps


@pytest.mark.parametrize("seconds", [10, 60])
def test_retry_after_is_honoured_up_to_the_limit(server: ScriptedServer, seconds: int) -> None:
    """Retry-After of 10 s or exactly 60 s is waited in full, above the 4 s cap."""
    server.script([Reply(429, {"Retry-After": str(seconds)}), Reply(200, body=AUTHOR)])
    result, clock = run(get_author(server.url, "7").pipe(retry_transient))
    assert "Ada" == result.unwrap()["name"]
    assert [float(seconds)] == clock.sleeps
    assert 2 == server.requests


def test_retry_after_above_the_limit_stops(server: ScriptedServer) -> None:
    """Retry-After of 61 s stops the retries: one attempt, and the 429 is the failure."""
    server.script([Reply(429, {"Retry-After": "61"})])
    result, clock = run(get_author(server.url, "7").pipe(retry_transient))
    assert (429, 61.0) == (result.failure().status, result.failure().retry_after)
    assert 1 == server.requests
    assert [] == clock.sleeps


def test_client_timeout_is_transient_and_retried(server: ScriptedServer) -> None:
    """A request that times out (real time) is retried, and the retry succeeds."""
    # The first reply stalls until the server closes; the first attempt gives up after 0.5 s,
    # long enough that its request is surely the one that meets the stall. The retry has 10 s.
    server.script([Reply(200, body=AUTHOR, stall=60), Reply(200, body=AUTHOR)])
    timeouts = iter([0.5])
    effect = Effect.attempt(
        lambda: fetch_author(server.url, "7", next(timeouts, 10.0)), catch=ApiRequestError
    )
    result, clock = run(effect.pipe(retry_transient))
    assert "Ada" == result.unwrap()["name"]
    assert 1 == len(clock.sleeps)
    assert 2 == server.requests


def test_the_same_value_works_as_a_plain_function_of_effects(server: ScriptedServer) -> None:
    """retry_transient is a Retry: calling it on an effect equals piping the effect through it."""
    assert isinstance(retry_transient, Retry)
    server.script([Reply(503), Reply(200, body=AUTHOR)])
    result, clock = run(retry_transient(get_author(server.url, "7")))
    assert "Ada" == result.unwrap()["name"]
    assert 1 == len(clock.sleeps)


class HttpAuthors(migrate.Source):
    """A direct-lookup source over the local HTTP API; keeps ApiRequestError as the cause."""

    lookup_strategy = "direct"

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url

    def describe(self) -> str:
        return f"http:{self.base_url}/authors"

    def _get(self, path: str) -> Any:
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=10) as reply:
                return json.load(reply)
        except urllib.error.HTTPError as error:
            with error:
                failure = ApiRequestError.from_response(error)
            raise migrate.SourceError(f"GET {path} failed: {failure}", cause=failure) from failure

    def read_window(self, cursor: migrate.Cursor) -> migrate.Window:
        page = 0 if cursor is None else int(cursor["page"])
        body = self._get(f"/authors?page={page}")
        items = tuple(migrate.Item(str(r["id"]), r) for r in body["items"])
        return migrate.Window(items, {"page": page + 1}, done=body["next"] is None)

    def find(self, identities: Collection[str]) -> dict[str, migrate.Item]:
        found: dict[str, migrate.Item] = {}
        for identity in identities:
            record = self._get(f"/authors/{identity}")
            found[identity] = migrate.Item(str(record["id"]), record)
        return found


def test_same_value_as_source_cursor_and_lookup_strategy(
    server: ScriptedServer, tmp_path: Path
) -> None:
    """retry_transient serves as both source strategies: window reads and failed-item lookups."""
    broken = {"8"}

    def process(item: migrate.Item, scope: migrate.Scope) -> None:
        if item.identity in broken:
            raise RuntimeError(f"cannot migrate {item.identity}")
        scope.track({"name": item.data["name"]})

    definition = migrate.Migration(
        "authors",
        HttpAuthors(server.url),
        process,
        source_cursor_retry=retry_transient,
        source_lookup_retry=retry_transient,
    )
    config = migrate.Config([definition], store=f"sqlite:///{tmp_path / 'state.db'}")
    page = json.dumps({"items": [{"id": 7, "name": "Ada"}, {"id": 8, "name": "Bob"}], "next": None})
    server.script([Reply(503, {"Retry-After": "1"}), Reply(200, body=page.encode())])
    with use_clock(VirtualClock()) as clock:
        first = migrate.run(config, migrate.RunOptions(definitions=("authors",)))
    assert ("failed", 1, 1) == (
        first.status,
        first.definitions["authors"].counts.migrated,
        first.definitions["authors"].counts.failed,
    )
    assert [1.0] == clock.sleeps
    assert ["/authors?page=0"] * 2 == server.paths

    broken.clear()
    server.script([Reply(429, {"Retry-After": "2"}), Reply(200, body=b'{"id": 8, "name": "Bob"}')])
    with use_clock(VirtualClock()) as clock:
        again = migrate.run(config, migrate.RunOptions(definitions=("authors",), failed=True))
    assert ("succeeded", 1) == (again.status, again.definitions["authors"].counts.migrated)
    assert [2.0] == clock.sleeps
    assert ["/authors/8"] * 2 == server.paths[2:]


def test_source_strategy_stops_on_long_retry_after_and_permanent_errors(
    server: ScriptedServer,
) -> None:
    """Through SourceError.cause: a 61 s Retry-After and a 400 each fail after one read."""
    source = HttpAuthors(server.url)
    for reply in (Reply(503, {"Retry-After": "61"}), Reply(400)):
        server.script([reply])
        before = server.requests
        with use_clock(VirtualClock()) as clock:
            result = source.read(None).pipe(retry_transient).run()
        failure = request_failure(result.failure())
        assert failure is not None
        assert reply.status == failure.status
        assert 1 == server.requests - before
        assert [] == clock.sleeps
