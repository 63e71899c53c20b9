"""effects.http end to end: a real HTTP server on 127.0.0.1 answering 503/429 with Retry-After."""

from __future__ import annotations

import email.utils
import math
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import attrs
import pytest

from effects import AsyncEffect, Effect, retry, use_clock
from effects.http import ApiRequestError, request_failure, respect_retry_after
from effects.testing import VirtualClock
from schedules import exponential

_NO_HEADERS: Mapping[str, str] = {}


@attrs.frozen
class Reply:
    """One scripted answer: status, headers, body, and real seconds to stall before answering.

    A stall ends early when the server closes, so a long one costs a test nothing.
    """

    status: int
    headers: Mapping[str, str] = attrs.field(factory=lambda: _NO_HEADERS)
    body: bytes = b""
    stall: float = 0.0


def http_date_in(seconds: int) -> str:
    """An IMF-fixdate at least *seconds* whole seconds from now (rounded up to a whole second)."""
    return email.utils.formatdate(math.ceil(time.time()) + seconds, usegmt=True)


def epoch_of(http_date: str) -> float:
    """The epoch seconds an HTTP-date names."""
    return email.utils.parsedate_to_datetime(http_date).timestamp()


class _QuietServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that ignores clients hanging up (a client timeout test does)."""

    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """Drop the traceback of a connection the client closed; report anything else."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class ScriptedServer:
    """A ThreadingHTTPServer on 127.0.0.1 that answers requests from a script, in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._script: list[Reply | None] = []
        self.paths: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                reply = server._next(self.path)
                if reply is not None and reply.stall:
                    server._closing.wait(reply.stall)  # real time is the point: a client timeout
                headers = _NO_HEADERS if reply is None else reply.headers
                status = 200 if reply is None else reply.status
                body = b"ok" if reply is None else reply.body
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                """Keep the test output quiet."""

        self._httpd = _QuietServer(("127.0.0.1", 0), Handler)
        # A short poll interval keeps shutdown() (and so each test's teardown) quick.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        host, port = self._httpd.server_address[:2]
        self.url = f"http://{host!s}:{port}"

    def script(self, replies: Sequence[Reply]) -> None:
        """Answer the next requests with *replies*, then 200 "ok" for ever."""
        with self._lock:
            self._script = list(replies)

    def _next(self, path: str) -> Reply | None:
        with self._lock:
            self.paths.append(path)
            return self._script.pop(0) if self._script else None

    @property
    def requests(self) -> int:
        """How many requests arrived."""
        with self._lock:
            return len(self.paths)

    def close(self) -> None:
        """Stop serving (ending any stall) and release the port."""
        self._closing.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    """A scripted server for one test, shut down afterwards."""
    scripted = ScriptedServer()
    yield scripted
    scripted.close()


def urllib_get(url: str) -> bytes:
    """GET *url* with urllib, turning an HTTP error status into ApiRequestError."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as error:
        with error:
            raise ApiRequestError.from_response(error) from error


@attrs.frozen
class BusyThenOk:
    """A script: 503 with Retry-After: 1, then 429 with an HTTP-date, then (unscripted) 200."""

    date: str = attrs.field(factory=lambda: http_date_in(10))
    scripted_at: float = attrs.field(factory=time.time)

    @property
    def replies(self) -> list[Reply]:
        """The two failing replies, in order."""
        return [Reply(503, {"Retry-After": "1"}), Reply(429, {"Retry-After": self.date})]

    def check(self, sleeps: list[float]) -> None:
        """The waits are what the server asked: 1 s, then until the date.

        The date was read between scripting and now, so the second wait lies between the
        date's distance from now and from the scripting, however slow the requests were.
        """
        date = epoch_of(self.date)
        assert 2 == len(sleeps)
        assert 1.0 == sleeps[0]
        assert date - time.time() <= sleeps[1] <= date - self.scripted_at


POLICY = respect_retry_after(exponential("10ms"), limit=60)


def test_urllib_decorated_function_honours_retry_after(server: ScriptedServer) -> None:
    """Through urllib and @retry: two retries waiting what the server asked, then the body."""
    busy = BusyThenOk()
    server.script(busy.replies)
    fetch = retry(POLICY, times=4, on=ApiRequestError)(urllib_get)
    with use_clock(VirtualClock()) as clock:
        assert b"ok" == fetch(server.url + "/a")
    assert 3 == server.requests
    busy.check(clock.sleeps)


def test_urllib_effect_honours_retry_after(server: ScriptedServer) -> None:
    """The same through Effect.attempt(...).retry(...).run_or_raise()."""
    busy = BusyThenOk()
    server.script(busy.replies)
    effect = Effect.attempt(lambda: urllib_get(server.url + "/b"), catch=ApiRequestError)
    with use_clock(VirtualClock()) as clock:
        assert b"ok" == effect.retry(POLICY, times=4).run_or_raise()
    assert 3 == server.requests
    busy.check(clock.sleeps)


def test_retry_after_above_the_limit_stops_at_once(server: ScriptedServer) -> None:
    """A Retry-After above the limit ends the retries: one request, no sleep, the error raised."""
    server.script([Reply(503, {"Retry-After": "120"})])
    fetch = retry(POLICY, times=4, on=ApiRequestError)(urllib_get)
    with use_clock(VirtualClock()) as clock, pytest.raises(ApiRequestError) as info:
        fetch(server.url + "/c")
    assert (503, 120.0) == (info.value.status, info.value.retry_after)
    assert 1 == server.requests
    assert [] == clock.sleeps


def test_date_above_the_limit_stops_after_earlier_retries(server: ScriptedServer) -> None:
    """A first short Retry-After is honoured; a later date 2 minutes away stops the retries."""
    server.script(
        [Reply(503, {"Retry-After": "1"}), Reply(429, {"Retry-After": http_date_in(120)})]
    )
    fetch = retry(POLICY, times=4, on=ApiRequestError)(urllib_get)
    with use_clock(VirtualClock()) as clock, pytest.raises(ApiRequestError) as info:
        fetch(server.url + "/d")
    assert 429 == info.value.status
    assert 2 == server.requests
    assert [1.0] == clock.sleeps


def test_permanent_status_is_not_retried(server: ScriptedServer) -> None:
    """A 404 is not transient, so retryable is False and it is raised after one request."""
    server.script([Reply(404)])
    fetch = retry(POLICY, times=4, on=ApiRequestError)(urllib_get)
    with use_clock(VirtualClock()) as clock, pytest.raises(ApiRequestError) as info:
        fetch(server.url + "/e")
    assert 404 == info.value.status
    assert 1 == server.requests
    assert [] == clock.sleeps


def test_httpx_sync_client_honours_retry_after(server: ScriptedServer) -> None:
    """Through httpx.Client: the same waits and request count."""
    httpx = pytest.importorskip("httpx")
    busy = BusyThenOk()
    server.script(busy.replies)

    with httpx.Client(timeout=10) as client:

        @retry(POLICY, times=4, on=ApiRequestError)
        def fetch(path: str) -> str:
            response = client.get(server.url + path)
            if response.is_error:
                raise ApiRequestError.from_response(response)
            text: str = response.text
            return text

        with use_clock(VirtualClock()) as clock:
            assert "ok" == fetch("/f")
    assert 3 == server.requests
    busy.check(clock.sleeps)


@pytest.mark.anyio
async def test_httpx_async_client_honours_retry_after(server: ScriptedServer) -> None:
    """Through httpx.AsyncClient under asyncio and trio: the same waits and request count."""
    httpx = pytest.importorskip("httpx")
    busy = BusyThenOk()
    server.script(busy.replies)

    async with httpx.AsyncClient(timeout=10) as client:

        async def get() -> str:
            response = await client.get(server.url + "/g")
            if response.is_error:
                raise ApiRequestError.from_response(response)
            text: str = response.text
            return text

        with use_clock(VirtualClock()) as clock:
            effect = AsyncEffect.attempt(get, catch=ApiRequestError).retry(POLICY, times=4)
            assert "ok" == await effect.run_or_raise()
    assert 3 == server.requests
    busy.check(clock.sleeps)


@pytest.mark.anyio
async def test_httpx_async_limit_stops(server: ScriptedServer) -> None:
    """Under asyncio and trio too, a Retry-After above the limit raises after one request."""
    httpx = pytest.importorskip("httpx")
    server.script([Reply(429, {"Retry-After": "61"})])

    async with httpx.AsyncClient(timeout=10) as client:

        @retry(POLICY, times=4, on=ApiRequestError)
        async def fetch() -> str:
            response = await client.get(server.url + "/h")
            if response.is_error:
                raise ApiRequestError.from_response(response)
            text: str = response.text
            return text

        with use_clock(VirtualClock()) as clock, pytest.raises(ApiRequestError) as info:
            await fetch()
    assert 61.0 == info.value.retry_after
    assert 1 == server.requests
    assert [] == clock.sleeps


def test_wrapped_error_is_found_through_its_cause(server: ScriptedServer) -> None:
    """An adapter error wrapping ApiRequestError as __cause__ still gets Retry-After honoured."""

    class ReadError(Exception):
        """A source-style error that keeps the provider's error as its cause."""

    def read() -> bytes:
        try:
            return urllib_get(server.url + "/i")
        except ApiRequestError as error:
            raise ReadError("read failed") from error

    server.script([Reply(503, {"Retry-After": "2"})])
    transient_only = retry(
        POLICY,
        times=4,
        while_=lambda e: (f := request_failure(e)) is not None and f.transient,
        on=ReadError,
    )
    with use_clock(VirtualClock()) as clock:
        assert b"ok" == transient_only(read)()
    assert [2.0] == clock.sleeps
    assert 2 == server.requests
