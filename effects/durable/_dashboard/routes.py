"""
The dashboard's routes on an engine its host has opened: pages, JSON, the live stream, actions.

The JSON routes answer with the command line's own documents (``_views``): ``GET /api/runs`` is
what ``runs --json`` prints, ``GET /api/runs/<id>`` what ``show <id> --json`` prints. Run ids
are one percent-encoded path segment, read from the request's raw path (a ``/`` in an id is
``%2F`` and stays inside its segment).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from importlib import resources
from typing import Any, Final
from urllib.parse import unquote

import attrs
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from effects.durable._cli import duration_ms
from effects.durable._dashboard import pages
from effects.durable._dashboard.guard import CSRF_COOKIE, Guard, mount_point
from effects.durable._engine import Engine
from effects.durable._records import FINISHED, Checkpoint, Run
from effects.durable._store import RunQuery
from effects.durable._store.rules import REQUEUEABLE
from effects.durable._time import epoch_ms
from effects.durable._views import dumps, redacted, run_json, show_json
from effects.durable.errors import StoreError, UnknownRunError

__all__ = ["BULK_LIMIT", "EVENTS_LIMIT", "build", "version_of"]

#: The most runs one bulk retry requeues (the newest matches first).
BULK_LIMIT: Final = 500
#: Events per page of a run's trail by default, and at most.
EVENTS_LIMIT: Final = (100, 200)
#: How often the live stream reads the store, in seconds (at most once a second).
POLL_S: Final = 1.0
#: A comment line this often keeps proxies from closing a quiet stream, in seconds.
KEEPALIVE_S: Final = 15.0
_TRUE: Final = frozenset({"1", "on", "true", "yes"})
_STATIC: Final = {
    "dashboard.css": "text/css; charset=utf-8",
    "dashboard.js": "text/javascript; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}


class _RefusedError(Exception):
    """A request the dashboard answers with *status* and one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def version_of(run: Run, checkpoints: Sequence[Checkpoint]) -> str:
    """A short digest of the run's and its checkpoints' state: it changes with every write."""
    state = [run.status, run.updated_at, run.cancel, run.wake_at] + [
        [c.seq, c.rev, c.status, c.attempts, c.updated_at] for c in checkpoints
    ]
    return hashlib.sha256(json.dumps(state).encode()).hexdigest()[:16]


def _segments(request: Request) -> list[str]:
    """The route's path segments after the mount point, each percent-decoded once."""
    scope = request.scope
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if isinstance(raw, bytes) else scope["path"]
    root = mount_point(scope)
    parts = path.split("/")[len(root.split("/")) if root else 1 :]
    try:
        return [unquote(part, errors="strict") for part in parts]
    except UnicodeDecodeError:
        raise _RefusedError(404, "no such page: the address is not valid UTF-8") from None


@attrs.define
class _Board:
    """The routes' shared state: the engine and whether the dashboard is read-only."""

    engine: Engine
    read_only: bool
    static: dict[str, bytes]

    # -- the frame of a page -----------------------------------------------------------------

    def frame(self, request: Request) -> tuple[pages.Frame, str | None]:
        """The page frame, and a CSRF value to set as a cookie when the request had none."""
        csrf = request.cookies.get(CSRF_COOKIE)
        minted = None
        if not csrf:
            csrf = minted = secrets.token_urlsafe(24)
        location = redacted(self.engine.store.url)
        return pages.Frame(mount_point(request.scope), csrf, self.read_only, location), minted

    def html(
        self, request: Request, render: Callable[[pages.Frame], str], status: int = 200
    ) -> Response:
        frame, minted = self.frame(request)
        response = HTMLResponse(render(frame), status, headers={"Cache-Control": "no-store"})
        if minted is not None:
            response.set_cookie(
                CSRF_COOKIE,
                minted,
                path=frame.root or "/",
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        return response

    def refused(self, request: Request, refusal: _RefusedError) -> Response:
        if refusal.status == 403:  # as the guard's refusals: one line
            return Response(f"{refusal.message}\n", 403, media_type="text/plain")
        if _wants_json(request):
            return JSONResponse({"error": refusal.message}, refusal.status)
        return self.html(
            request, lambda f: pages.error_page(f, refusal.status, refusal.message), refusal.status
        )

    async def form(self, request: Request) -> dict[str, str]:
        """A POST's fields, once its ``csrf`` field repeats the cookie (else 403)."""
        async with request.form() as form:
            fields = {k: v for k, v in form.items() if isinstance(v, str)}
        cookie = request.cookies.get(CSRF_COOKIE, "")
        given = fields.get("csrf", "")
        if not cookie or not hmac.compare_digest(given.encode(), cookie.encode()):
            raise _RefusedError(403, "missing or wrong CSRF field")
        return fields

    def now(self) -> int:
        return epoch_ms(self.engine.clock)

    # -- runs --------------------------------------------------------------------------------

    async def _query(self, params: Any, *, limit: int) -> tuple[pages.RunFilter, RunQuery]:
        """The runs view's filter and its store query, from *params* (a query or a form)."""
        status = params.get("status") or None
        if status is not None and status not in pages.STATUSES:
            msg = f"status must be one of {', '.join(pages.STATUSES)}, not {status!r}"
            raise _RefusedError(400, msg)
        stale_text = (params.get("stale") or "").strip() or None
        now = self.now()
        stale_before = None
        if stale_text is not None:
            try:
                stale_before = now - duration_ms(stale_text)
            except ValueError as error:
                raise _RefusedError(400, f"stale: {error}") from None
        where = pages.RunFilter(
            status=status,
            workflow=params.get("workflow") or None,
            id_prefix=params.get("id") or None,
            retrying=(params.get("retrying") or "").lower() in _TRUE,
            stale=stale_text,
        )
        query = RunQuery(
            status,
            where.workflow,
            limit,
            stale_before,
            id_prefix=where.id_prefix,
            retrying_at=now if where.retrying else None,
        )
        return where, query

    async def runs(self, request: Request) -> Response:
        store = self.engine.store
        where, query = await self._query(request.query_params, limit=pages.PAGE_SIZE + 1)
        after = request.query_params.get("after") or None
        if after is not None:
            found = await store.get_run(after)
            if found is None:
                raise _RefusedError(400, f"after: no run {after!r}")
            query = attrs.evolve(query, after=(found.created_at, found.run_id))
        runs = await store.list_runs(query)
        shown = runs[: pages.PAGE_SIZE]
        retrying = await store.retrying([r.run_id for r in shown], now=self.now())
        overall = attrs.evolve(query, status=None, retrying_at=None)
        counts = await store.count_runs(overall)
        retrying_count = sum(
            (await store.count_runs(attrs.evolve(overall, retrying_at=self.now()))).values()
        )
        retryable = 0
        if where.empty:
            pass
        elif where.retrying:
            retryable = sum((await store.count_runs(attrs.evolve(query, retryable=True))).values())
        else:  # the counts have it: the runs of the filter that requeue takes
            retryable = sum(counts.get(s, 0) for s in REQUEUEABLE if where.status in (None, s))
        next_after = shown[-1].run_id if len(runs) > pages.PAGE_SIZE else None
        return self.html(
            request,
            lambda f: pages.runs_page(
                f,
                runs=shown,
                retrying=retrying,
                counts=counts,
                retrying_count=retrying_count,
                where=where,
                after=after,
                next_after=next_after,
                retryable=retryable,
            ),
        )

    # -- a run -------------------------------------------------------------------------------

    async def run_route(self, request: Request) -> Response:
        segments = _segments(request)  # ["runs", id] or ["runs", id, action]
        if len(segments) == 2 and request.method == "GET":
            return await self.run_page(request, segments[1])
        if len(segments) == 3 and request.method == "POST":
            return await self.act(request, segments[1], segments[2])
        if len(segments) in (2, 3):
            raise _RefusedError(405, f"{request.method} is not allowed here")
        raise _RefusedError(404, "no such page")

    async def _read(self, run_id: str) -> tuple[Run, list[Checkpoint]]:
        run = await self.engine.store.get_run(run_id)
        if run is None:
            raise _RefusedError(404, f"no run {run_id!r}")
        return run, await self.engine.store.checkpoints(run_id)

    async def run_page(self, request: Request, run_id: str) -> Response:
        run, checkpoints = await self._read(run_id)
        events = await self.engine.events(run_id)
        failed_only = (request.query_params.get("failed") or "").lower() in _TRUE
        if failed_only:
            events = [e for e in events if e.level in ("warning", "error")]
        offset = _whole(request.query_params.get("from"), "from", default=0)
        default, most = EVENTS_LIMIT
        limit = min(most, max(1, _whole(request.query_params.get("limit"), "limit", default)))
        now = self.now()
        trail = pages.EventPage(
            events[offset : offset + limit], offset, limit, len(events), failed_only
        )
        retrying = bool(await self.engine.store.retrying([run_id], now=now))
        redispatchable = any(
            c.kind == "remote" and c.status in ("pending", "running") for c in checkpoints
        )
        return self.html(
            request,
            lambda f: pages.run_page(
                f,
                run=run,
                retrying=retrying,
                checkpoints=checkpoints,
                trail=trail,
                now_ms=now,
                version=version_of(run, checkpoints),
                redispatchable=redispatchable,
            ),
        )

    async def act(self, request: Request, run_id: str, action: str) -> Response:
        if action not in ("retry", "redispatch", "cancel"):
            raise _RefusedError(404, f"no action {action!r}: retry, redispatch or cancel")
        fields = await self.form(request)
        engine = self.engine
        run, _ = await self._read(run_id)
        try:
            if action == "retry":
                await engine.requeue(run_id)
            elif action == "redispatch":
                if run.status in FINISHED:
                    msg = f"run {run_id} is {run.status}: a finished run has nothing to send again"
                    raise _RefusedError(409, msg)
                await engine.redispatch_pending(run_id)
            else:
                await engine.cancel(run_id, compensate=fields.get("compensate") == "1")
        except UnknownRunError:
            raise _RefusedError(404, f"no run {run_id!r}") from None
        except ValueError as error:  # the run's status refuses it
            raise _RefusedError(409, str(error)) from None
        frame, _ = self.frame(request)
        return RedirectResponse(pages.run_href(frame, run_id), 303)

    # -- bulk --------------------------------------------------------------------------------

    async def bulk(self, request: Request) -> Response:
        store = self.engine.store
        if request.method == "GET":
            where, query = await self._query(request.query_params, limit=BULK_LIMIT)
            counted = attrs.evolve(query, retryable=True)
            matched = sum((await store.count_runs(counted)).values())
            return self.html(
                request,
                lambda f: pages.bulk_preview(f, where=where, matched=matched, limit=BULK_LIMIT),
            )
        fields = await self.form(request)
        where, query = await self._query(fields, limit=BULK_LIMIT)
        query = attrs.evolve(query, retryable=True)
        matched = sum((await store.count_runs(query)).values())
        applied = 0
        for run in await store.list_runs(query):
            try:
                await self.engine.requeue(run.run_id)
            except (ValueError, UnknownRunError):  # it changed meanwhile
                continue
            applied += 1
        if _wants_json(request):
            return JSONResponse({"matched": matched, "applied": applied})
        return self.html(
            request, lambda f: pages.bulk_done(f, where=where, matched=matched, applied=applied)
        )

    # -- queues ------------------------------------------------------------------------------

    async def queues(self, request: Request) -> Response:
        stats = await self.engine.store.queue_stats()
        limits = {name: q.concurrency for name, q in self.engine.queues.items()}
        return self.html(request, lambda f: pages.queues_page(f, stats=stats, limits=limits))

    # -- JSON --------------------------------------------------------------------------------

    async def api_runs(self, request: Request) -> Response:
        params = request.query_params
        status = params.get("status") or None
        if status is not None and status not in pages.STATUSES:
            msg = f"status must be one of {', '.join(pages.STATUSES)}, not {status!r}"
            raise _RefusedError(400, msg)
        limit = _whole(params.get("limit"), "limit", 20, least=1)
        stale = params.get("stale") or None
        try:
            stale_ms = None if stale is None else duration_ms(stale)
        except ValueError as error:
            raise _RefusedError(400, f"stale: {error}") from None
        try:
            runs = await self.engine.list_runs(
                status=status,
                workflow=params.get("workflow") or None,
                limit=limit,
                stale_ms=stale_ms,
                after=params.get("after") or None,
            )
        except UnknownRunError as error:
            raise _RefusedError(400, f"after: {error}") from None
        return _json_text(dumps([run_json(r) for r in runs]))

    async def api_run(self, request: Request) -> Response:
        segments = _segments(request)  # ["api", "runs", id] or [..., id, "stream"]
        if len(segments) == 3:
            run, checkpoints = await self._read(segments[2])
            events = await self.engine.events(run.run_id)
            return _json_text(dumps(show_json(run, checkpoints, events)))
        if len(segments) == 4 and segments[3] == "stream":
            run, _ = await self._read(segments[2])
            return StreamingResponse(
                self.stream(run.run_id),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
            )
        raise _RefusedError(404, "no such page")

    async def stream(self, run_id: str) -> AsyncIterator[str]:
        """
        Server-Sent Events of a run: ``change`` whenever its state (``version_of``) changes,
        read at most once a second; for a finished run a last ``end`` event, then the stream
        closes.
        """
        last: str | None = None
        quiet = 0.0
        while True:
            run = await self.engine.store.get_run(run_id)
            if run is None:
                yield _sse("end", {"version": None, "status": None})
                return
            checkpoints = await self.engine.store.checkpoints(run_id)
            version = version_of(run, checkpoints)
            data = {"version": version, "status": run.status, "updated_at": run.updated_at}
            if run.status in FINISHED:
                yield _sse("end", data)
                return
            if version != last:
                last, quiet = version, 0.0
                yield _sse("change", data)
            elif quiet >= KEEPALIVE_S:
                quiet = 0.0
                yield ": keep-alive\n\n"
            await asyncio.sleep(POLL_S)
            quiet += POLL_S

    async def asset(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC:
            raise _RefusedError(404, "no such file")
        return Response(
            self.static[name], media_type=_STATIC[name], headers={"Cache-Control": "no-cache"}
        )


def _sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def _json_text(text: str) -> Response:
    """The command line's JSON document, byte for byte (its trailing newline included)."""
    return Response(
        f"{text}\n", media_type="application/json", headers={"Cache-Control": "no-store"}
    )


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith(f"{mount_point(request.scope)}/api/") or (
        "application/json" in request.headers.get("accept", "")
    )


def _whole(value: str | None, name: str, default: int, *, least: int = 0) -> int:
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        number = least - 1
    if number < least:
        raise _RefusedError(400, f"{name} must be a whole number >= {least}, not {value!r}")
    return min(number, 2**62)


def build(engine: Engine, *, read_only: bool, token: str | None) -> Starlette:
    """The Starlette app of ``effects.durable.dashboard.app``."""
    folder = resources.files("effects.durable._dashboard") / "static"
    board = _Board(engine, read_only, {name: (folder / name).read_bytes() for name in _STATIC})

    def guarded(
        handler: Callable[[Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def route(request: Request) -> Response:
            try:
                return await handler(request)
            except _RefusedError as refusal:
                return board.refused(request, refusal)
            except StoreError as error:  # a locked, full or unreachable store: nothing changed
                return board.refused(request, _RefusedError(503, f"store error: {error}"))

        return route

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        message = "no such page" if status == 404 else str(getattr(exc, "detail", "error"))
        return board.refused(request, _RefusedError(status, message))

    routes = [
        Route("/", guarded(board.runs), methods=["GET"]),
        Route("/queues", guarded(board.queues), methods=["GET"]),
        Route("/bulk/retry", guarded(board.bulk), methods=["GET", "POST"]),
        Route("/api/runs", guarded(board.api_runs), methods=["GET"]),
        Route("/api/runs/{rest:path}", guarded(board.api_run), methods=["GET"]),
        Route("/runs/{rest:path}", guarded(board.run_route), methods=["GET", "POST"]),
        Route("/static/{name}", guarded(board.asset), methods=["GET"]),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(Guard, token=token, read_only=read_only)],
        exception_handlers={404: not_found, 405: not_found},
    )
