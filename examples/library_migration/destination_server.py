"""
A local HTTP destination for the demo: a small library catalogue API on 127.0.0.1.

``PUT /authors/<key>`` and ``PUT /books/<key>`` create or replace a record and answer
``{"id": <destination id>}``: 201 on create, 200 on replace. They are idempotent by key: the same
key always keeps the same destination id. Invalid records are rejected for good with 422 (a
malformed email, an empty title, a book whose author the catalogue does not know) and a body that
is not a JSON object with 400.

Like a real service under load it also fails transiently: a seeded fraction of requests gets
``503 Service Unavailable`` or ``429 Too Many Requests`` with ``Retry-After``. Whether a request
fails depends only on the seed, its path and how many times that path was asked before, so a run
sees the same failures whatever the thread timing. ``GET /stats`` reports what happened.

Run it alone with ``python destination_server.py [--port N]``.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import threading
from collections import Counter
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$")


@attrs.frozen
class FailurePlan:
    """
    How often the catalogue fails transiently.

    Attributes:
        seed: Seed mixed into every decision.
        unavailable: Fraction of first and second attempts answered with 503 (no Retry-After).
        throttled: Fraction answered with 429 and ``Retry-After: 0``.
        throttled_long: Fraction answered with 429 and ``Retry-After: 1`` (one second).
    """

    seed: int = 11
    unavailable: float = 0.02
    throttled: float = 0.01
    throttled_long: float = 0.0008

    def decide(self, path: str, previous: int) -> tuple[int, str | None] | None:
        """Return ``(status, retry_after)`` for a transient failure, or ``None`` to serve."""
        if previous >= 2:  # a key that failed twice is served: the demo must converge
            return None
        u = random.Random(f"{self.seed}:{path}:{previous}").random()
        if u < self.throttled_long:
            return 429, "1"
        if u < self.throttled_long + self.throttled:
            return 429, "0"
        if u < self.throttled_long + self.throttled + self.unavailable:
            return 503, None
        return None


@attrs.define
class Catalogue:
    """The in-memory state behind the API, guarded by one lock."""

    failures: FailurePlan = attrs.field(factory=FailurePlan)
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    authors: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    books: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    ids: dict[str, str] = attrs.field(factory=dict)  # "authors/<key>" -> destination id
    author_ids: set[str] = attrs.field(factory=set)  # destination ids of stored authors
    seen: Counter[str] = attrs.field(factory=Counter)
    statuses: Counter[int] = attrs.field(factory=Counter)

    def stats(self) -> dict[str, Any]:
        """Counts of requests by status, records stored and keys asked more than once."""
        with self.lock:
            return {
                "requests": sum(self.statuses.values()),
                "statuses": {str(k): v for k, v in sorted(self.statuses.items())},
                "authors": len(self.authors),
                "books": len(self.books),
                "keys_retried": sum(1 for n in self.seen.values() if n > 1),
            }

    def put(self, kind: str, key: str, body: Any) -> tuple[int, dict[str, Any], str | None]:
        """Handle one PUT; return ``(status, json body, retry_after header)``."""
        path = f"{kind}/{key}"
        with self.lock:
            failure = self.failures.decide(path, self.seen[path])
            self.seen[path] += 1
            if failure is not None:
                status, retry_after = failure
                self.statuses[status] += 1
                return status, {"error": HTTPStatus(status).phrase}, retry_after
            status, answer = self._store(kind, path, key, body)
            self.statuses[status] += 1
            return status, answer, None

    def delete(self, kind: str, key: str) -> tuple[int, dict[str, Any]]:
        """Handle one DELETE (no failures planned): 200, or 404 for a record that is not there."""
        with self.lock:
            table = self.authors if kind == "authors" else self.books
            found = table.pop(key, None)
            self.ids.pop(f"{kind}/{key}", None)
            status = 404 if found is None else 200
            self.statuses[status] += 1
            return status, {"deleted": f"{kind}/{key}"} if found is not None else {
                "error": "not found"
            }

    def _store(self, kind: str, path: str, key: str, body: Any) -> tuple[int, dict[str, Any]]:
        if not isinstance(body, dict):
            return 400, {"error": "body must be a JSON object"}
        record: dict[str, Any] = body
        problem = self._validate(kind, record)
        if problem is not None:
            field, message = problem
            return 422, {"error": f"{field}: {message}", "key": key, "value": record.get(field)}
        table = self.authors if kind == "authors" else self.books
        created = path not in self.ids
        if created:
            self.ids[path] = f"{kind[0]}_{len(self.ids) + 1:06d}"
        table[key] = {**record, "id": self.ids[path]}
        if kind == "authors":
            self.author_ids.add(self.ids[path])
        return (201 if created else 200), {"id": self.ids[path]}

    def _validate(self, kind: str, record: dict[str, Any]) -> tuple[str, str] | None:
        if kind == "authors":
            if not str(record.get("name", "")).strip():
                return "name", "must not be empty"
            if not _EMAIL.match(str(record.get("email", ""))):
                return "email", "not a valid email address"
            return None
        if not str(record.get("title", "")).strip():
            return "title", "must not be empty"
        author = record.get("author")
        if author not in self.author_ids:
            return "author", "unknown author id"
        return None


def _handler(catalogue: Catalogue) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive: one connection per client thread
        disable_nagle_algorithm = True  # headers and body go out apart: no 40 ms delayed ACK

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
            """Stay quiet; ``/stats`` tells what happened."""

        def _send(self, status: int, body: dict[str, Any], retry_after: str | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if retry_after is not None:
                self.send_header("Retry-After", retry_after)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            parts = self.path.strip("/").split("/")
            if parts == ["stats"]:
                self._send(200, catalogue.stats())
                return
            if len(parts) == 2 and parts[0] in ("authors", "books"):
                table = catalogue.authors if parts[0] == "authors" else catalogue.books
                with catalogue.lock:
                    record = table.get(parts[1])
                if record is not None:
                    self._send(200, record)
                    return
            self._send(404, {"error": "not found"})

        def do_PUT(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            parts = self.path.strip("/").split("/")
            if len(parts) != 2 or parts[0] not in ("authors", "books"):
                self._send(404, {"error": "not found"})
                return
            try:
                body = json.loads(raw)
            except ValueError:
                self._send(400, {"error": "body is not JSON"})
                return
            status, answer, retry_after = catalogue.put(parts[0], parts[1], body)
            self._send(status, answer, retry_after)

        def do_DELETE(self) -> None:
            parts = self.path.strip("/").split("/")
            if len(parts) != 2 or parts[0] not in ("authors", "books"):
                self._send(404, {"error": "not found"})
                return
            status, answer = catalogue.delete(parts[0], parts[1])
            self._send(status, answer)

    return Handler


class _Server(ThreadingHTTPServer):
    """The HTTP server, quiet about clients that vanish mid-request (a worker killed with -9)."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            return
        super().handle_error(request, client_address)


@attrs.define
class RunningServer:
    """A catalogue served on 127.0.0.1 from a daemon thread; ``url`` is its base address."""

    catalogue: Catalogue
    server: ThreadingHTTPServer
    thread: threading.Thread

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def start(failures: FailurePlan | None = None, port: int = 0) -> RunningServer:
    """Start the catalogue on ``127.0.0.1:port`` (0 = any free port) in a daemon thread."""
    catalogue = Catalogue(failures=failures or FailurePlan())
    server = _Server(("127.0.0.1", port), _handler(catalogue))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="catalogue", daemon=True)
    thread.start()
    return RunningServer(catalogue, server, thread)


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the demo's library catalogue API.")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    running = start(port=args.port)
    print(f"catalogue listening on {running.url} (Ctrl-C stops)")
    try:
        running.thread.join()
    except KeyboardInterrupt:
        running.stop()


if __name__ == "__main__":
    main()
