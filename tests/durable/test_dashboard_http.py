"""
The dashboard over HTTP on a SQLite store: its views, its JSON (the command line's own), its
actions, and its security (token, same origin, CSRF field, read-only, escaping, CSP).
"""

from __future__ import annotations

import contextlib
import html
import json
import re
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount

from effects.durable import Engine, dashboard
from tests.durable.dashboard_support import HOSTILE, DashApp, csrf_of, make_dash_app, seed

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

ORIGIN = "http://testserver"


@pytest.fixture
async def dash(tmp_path: Path) -> tuple[DashApp, dict[str, str]]:
    """The app with the runs of ``seed``, and their ids by role."""
    app = make_dash_app(tmp_path / "app")
    return app, await seed(app)


@contextlib.asynccontextmanager
async def client(
    app: DashApp, *, mount: str = "", headers: dict[str, str] | None = None, **options: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the dashboard of *app* (mounted at *mount*), sending a same-site Origin."""
    async with app.engine(steps=False) as engine:
        asgi: Any = dashboard.app(engine, **options)
        if mount:
            asgi = Starlette(routes=[Mount(mount, app=asgi)])
        transport = httpx.ASGITransport(app=asgi)
        sent = {"Origin": ORIGIN, **(headers or {})}
        async with httpx.AsyncClient(transport=transport, base_url=ORIGIN, headers=sent) as http:
            yield http


def run_url(run_id: str, action: str = "") -> str:
    """A run's page (or action) as the dashboard links it."""
    return f"/runs/{quote(run_id, safe='')}" + (f"/{action}" if action else "")


def run_ids(page: str) -> list[str]:
    """The run ids a runs page lists, in order, unescaped."""
    return [
        html.unescape(m) for m in re.findall(r'<td class="id"><a href="[^"]+">([^<]*)</a>', page)
    ]


async def status_of(app: DashApp, run_id: str) -> str:
    async with app.engine(steps=False) as engine:
        return (await engine.get_run(run_id)).status


# -- views -----------------------------------------------------------------------------------


async def test_the_runs_page_counts_statuses_and_filters(
    dash: tuple[DashApp, dict[str, str]],
) -> None:
    """Counts by status and retrying; filters by status, workflow, id prefix, retrying, stale."""
    app, ids = dash
    async with client(app) as http:
        page = (await http.get("/")).text
        assert 5 == len(run_ids(page))
        assert re.search(r"suspended <b>4</b>", page)
        assert re.search(r"failed <b>1</b>", page)
        assert re.search(r"retrying <b>1</b>", page)
        assert [ids["failed"]] == run_ids((await http.get("/?status=failed")).text)
        assert {ids["waiting"], ids["waiting2"]} == set(
            run_ids((await http.get("/?workflow=pay")).text)
        )
        assert [ids["retrying"]] == run_ids((await http.get("/?retrying=1")).text)
        assert [ids["failed"]] == run_ids((await http.get("/", params={"id": "declined/"})).text)
        assert [] == run_ids((await http.get("/?stale=1h")).text)
        assert 3 == len(run_ids((await http.get("/?stale=0")).text))  # pay-1, pay-2, saga-1
        bad = await http.get("/?status=sleeping")
        assert 400 == bad.status_code
        assert "status must be one of" in bad.text
        assert 400 == (await http.get("/?stale=soon")).status_code


async def test_the_runs_page_pages_by_keyset_fifty_at_a_time(tmp_path: Path) -> None:
    """120 runs: 50, 50, 20, each page after the last run of the one before, newest first."""
    app = make_dash_app(tmp_path / "app")
    async with app.engine(steps=False) as engine:
        for n in range(120):
            await engine.start("pay", n, run_id=f"run-{n:03}")
        every = [r.run_id for r in await engine.list_runs(limit=200)]
    seen: list[str] = []
    async with client(app) as http:
        url: str | None = "/"
        while url is not None:
            page = (await http.get(url)).text
            seen.extend(run_ids(page))
            more = re.search(r'rel="next" href="([^"]+)"', page)
            url = None if more is None else html.unescape(more.group(1))
        assert 400 == (await http.get("/?after=nope")).status_code
    assert every == seen
    assert 120 == len(set(seen))


async def test_a_run_page_shows_attempts_of_m_wake_at_policy_and_error(
    dash: tuple[DashApp, dict[str, str]],
) -> None:
    """'attempt 1 of 3', the next attempt at wake_at (UTC ms), the policy's repr, the error."""
    app, ids = dash
    async with app.engine(steps=False) as engine:
        _, charge = await engine.checkpoints(ids["retrying"])
    assert charge.wake_at is not None
    async with client(app) as http:
        page = (await http.get(run_url(ids["retrying"]))).text
    assert "attempt 1 of 1" in page  # the local step: its default policy
    assert "attempt 1 of 3" in page
    stamp = re.escape(__import__("effects.durable._views", fromlist=["iso"]).iso(charge.wake_at))
    assert re.search(rf"<td class=\"t\">{stamp}</td>", page)
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", page)
    assert "from_step_options(retries=3, backoff=&#x27;exp&#x27;" in page
    assert 'class="badge s-retrying"' in page
    assert "<script>alert" not in page


async def test_the_event_trail_is_paged_by_100_and_filters_failed_events(
    dash: tuple[DashApp, dict[str, str]],
) -> None:
    """A 2,000-event run: pages of 100 (at most 200); failed only keeps warnings and errors."""
    app, ids = dash
    async with app.engine() as engine:
        await engine.start("chatty", 1000, run_id="chatty")
        await engine.run_until_idle()
        events = await engine.events("chatty")
    assert len(events) > 2000
    async with client(app) as http:
        first = (await http.get(run_url("chatty"))).text
        assert 100 == first.count('<tr class="l-')
        assert f"1-100 of {len(events)}" in first
        later = (await http.get(run_url("chatty") + "?from=100&limit=500")).text
        assert 200 == later.count('<tr class="l-')
        assert f"101-300 of {len(events)}" in later
        failed = (await http.get(run_url(ids["retrying"]) + "?failed=1")).text
    levels = re.findall(r'<tr class="l-(\w+)">', failed)
    assert levels
    assert set(levels) <= {"warning", "error"}


async def test_the_queues_page_shows_slots_in_use_and_attempts_waiting(
    dash: tuple[DashApp, dict[str, str]],
) -> None:
    """The payments queue (concurrency 1) is listed with its counts."""
    app, _ = dash
    async with app.engine(steps=False) as engine:
        stats = await engine.store.queue_stats()
    async with client(app) as http:
        page = (await http.get("/queues")).text
    assert "payments" in page
    in_use, waiting = stats.get("payments", (0, 0))
    assert re.search(rf'<td>payments</td><td class="n">{in_use}</td><td class="n">1</td>'
                     rf'<td class="n">{waiting}</td>', page)  # fmt: skip


async def test_an_unknown_run_is_a_404_page_and_an_id_with_a_slash_is_one_segment(
    dash: tuple[DashApp, dict[str, str]],
) -> None:
    """No such run: 404; ``declined/1 <...>`` is reached at its percent-encoded segment."""
    app, ids = dash
    async with client(app) as http:
        missing = await http.get(run_url("no such run"))
        assert 404 == missing.status_code
        assert "no run" in missing.text
        assert 404 == (await http.get("/api/runs/nope")).status_code
        found = await http.get(run_url(ids["failed"]))
        assert 200 == found.status_code
        assert html.escape(ids["failed"]) in found.text
        assert 404 == (await http.get("/nothing/here")).status_code


# -- JSON ------------------------------------------------------------------------------------


def cli(app: DashApp, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "effects.durable", "--app", "app:engine", *args],
        cwd=app.root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    return done.stdout


async def test_the_json_routes_answer_exactly_what_the_command_line_prints(
    dash: tuple[DashApp, dict[str, str]],
) -> None:
    """/api/runs == runs --json (with its options and after=); /api/runs/ID == show ID --json."""
    app, ids = dash
    cases = [
        ((), {}),
        (("--status", "suspended", "--limit", "2"), {"status": "suspended", "limit": "2"}),
        (("--workflow", "pay", "--after", ids["waiting2"]), {"workflow": "pay",
                                                               "after": ids["waiting2"]}),
    ]  # fmt: skip
    async with client(app) as http:
        for args, params in cases:
            api = await http.get("/api/runs", params=params)
            assert "application/json" == api.headers["content-type"]
            assert cli(app, "runs", *args, "--json") == api.text
        shown = await http.get(run_url(ids["failed"]).replace("/runs/", "/api/runs/"))
        assert cli(app, "show", ids["failed"], "--json") == shown.text
        assert "policy" in json.loads(shown.text)["checkpoints"][0]
        bad = await http.get("/api/runs", params={"after": "nope"})
        assert (400, "after: ") == (bad.status_code, bad.json()["error"][:7])
        assert 400 == (await http.get("/api/runs?limit=0")).status_code


# -- actions ---------------------------------------------------------------------------------


async def post(http: httpx.AsyncClient, run_id: str, action: str, **fields: str) -> httpx.Response:
    """Post a run page's *action* form, with the page's CSRF field."""
    page = (await http.get(run_url(run_id))).text
    return await http.post(run_url(run_id, action), data={"csrf": csrf_of(page), **fields})


async def test_each_action_changes_the_run_and_answers_303_to_its_page(
    dash: tuple[DashApp, dict[str, str]],
) -> None:
    """Retry, Redispatch, Cancel, Cancel and compensate: each as the CLI does it, then 303."""
    app, ids = dash
    async with client(app) as http:
        page = (await http.get(run_url(ids["failed"]))).text
        assert ">Retry</button>" in page
        assert ">Cancel</button>" not in page
        done = await post(http, ids["failed"], "retry")
        assert (303, run_url(ids["failed"])) == (done.status_code, done.headers["location"])
        assert "pending" == await status_of(app, ids["failed"])

        page = (await http.get(run_url(ids["waiting"]))).text
        for label in ("Redispatch", "Cancel", "Cancel and compensate"):
            assert f">{label}</button>" in page
        done = await post(http, ids["waiting"], "redispatch")
        assert 303 == done.status_code
        async with app.engine(steps=False) as engine:
            (cp,) = await engine.checkpoints(ids["waiting"])
        assert 2 == cp.attempts

        done = await post(http, ids["waiting"], "cancel")
        assert 303 == done.status_code
        assert "cancelled" == await status_of(app, ids["waiting"])

        done = await post(http, ids["saga"], "cancel", compensate="1")
        assert 303 == done.status_code
        async with app.engine(steps=False) as engine:
            saga = await engine.get_run(ids["saga"])
        assert ("pending", "compensate") == (saga.status, saga.cancel)

        refused = await post(http, ids["waiting"], "redispatch")  # cancelled: finished
        assert 409 == refused.status_code
        assert "finished" in refused.text
        assert 404 == (await post(http, ids["waiting"], "explode")).status_code


async def test_bulk_retry_previews_without_changing_then_applies_to_the_matches(
    dash: tuple[DashApp, dict[str, str]],
) -> None:
    """The preview shows N and the filter and changes nothing; Apply: matched N, applied M."""
    app, ids = dash
    async with client(app) as http:
        listing = (await http.get("/?workflow=declined")).text
        assert "Retry all 1 matching" in listing
        preview = await http.get("/bulk/retry?workflow=declined")
        assert "1 failed, dead or cancelled run(s) match" in preview.text
        assert "workflow = <code>declined</code>" in preview.text
        assert "failed" == await status_of(app, ids["failed"])
        fields = {"csrf": csrf_of(preview.text), "workflow": "declined"}
        done = await http.post("/bulk/retry", data=fields)
        assert "matched 1, applied 1" in done.text
        assert "pending" == await status_of(app, ids["failed"])
        again = await http.post("/bulk/retry", data=fields, headers={"Accept": "application/json"})
        assert {"matched": 0, "applied": 0} == again.json()


async def test_bulk_retry_requeues_at_most_500_newest_first(tmp_path: Path) -> None:
    """505 failed runs: the apply requeues the newest 500 and says matched 505, applied 500."""
    app = make_dash_app(tmp_path / "app")
    async with app.engine() as engine:
        for n in range(505):
            await engine.start("declined", {"message": "no"}, run_id=f"d-{n:03}")
        await engine.run_until_idle()
        newest_first = [r.run_id for r in await engine.list_runs(status="failed", limit=600)]
    async with client(app) as http:
        preview = await http.get("/bulk/retry?status=failed")
        done = await http.post(
            "/bulk/retry",
            data={"csrf": csrf_of(preview.text), "status": "failed"},
            headers={"Accept": "application/json"},
        )
    assert {"matched": 505, "applied": 500} == done.json()
    async with app.engine(steps=False) as engine:
        left = [r.run_id for r in await engine.list_runs(status="failed", limit=10)]
    assert sorted(newest_first[500:]) == sorted(left)


# -- security --------------------------------------------------------------------------------


async def test_a_post_without_the_csrf_field_or_from_another_origin_is_refused(
    dash: tuple[DashApp, dict[str, str]],
) -> None:
    """403 with a one-line reason and nothing changed: no field, a wrong one, another origin."""
    app, ids = dash
    target = run_url(ids["waiting"], "cancel")
    async with client(app) as http:
        csrf = csrf_of((await http.get(run_url(ids["waiting"]))).text)
        cases = [
            ({}, {}, "missing or wrong CSRF field\n"),
            ({"csrf": "forged"}, {}, "missing or wrong CSRF field\n"),
            ({"csrf": csrf}, {"Origin": "http://evil.example"}, "cross-origin\n"),
            ({"csrf": csrf}, {"Origin": "null"}, "cross-origin\n"),
        ]
        for data, headers, reason in cases:
            refused = await http.post(target, data=data, headers=headers)
            assert (403, reason) == (refused.status_code, refused.text), (data, headers)
        no_cookie = httpx.AsyncClient(transport=http._transport, base_url=ORIGIN)
        async with no_cookie:
            refused = await no_cookie.post(target, data={"csrf": csrf}, headers={"Origin": ORIGIN})
            assert 403 == refused.status_code
            refused = await no_cookie.post(target, data={"csrf": csrf})  # no Origin, no Referer
            assert (403, "cross-origin\n") == (refused.status_code, refused.text)
        assert "suspended" == await status_of(app, ids["waiting"])
        # A same-origin Referer stands in for a missing Origin.
        http.headers.pop("Origin")
        done = await http.post(target, data={"csrf": csrf}, headers={"Referer": f"{ORIGIN}/x"})
        assert 303 == done.status_code


async def test_a_store_that_fails_is_a_503_naming_it_and_nothing_changes(
    dash: tuple[DashApp, dict[str, str]],
) -> None:
    """Another process holds the SQLite store's write lock past the busy timeout: the action
    answers 503 with the store's error (a page, or JSON), and the run is as it was."""
    app, ids = dash
    module = app.module()
    engine = Engine(f"{app.url}?busy_timeout_ms=100", workflows=module.WORKFLOWS)
    async with engine:
        transport = httpx.ASGITransport(app=dashboard.app(engine))
        async with httpx.AsyncClient(
            transport=transport, base_url=ORIGIN, headers={"Origin": ORIGIN}
        ) as http:
            csrf = csrf_of((await http.get(run_url(ids["waiting"]))).text)
            lock = sqlite3.connect(app.root / "durable.db", isolation_level=None)
            try:
                lock.execute("BEGIN EXCLUSIVE")
                failed = await http.post(run_url(ids["waiting"], "cancel"), data={"csrf": csrf})
                as_json = await http.post(
                    run_url(ids["waiting"], "cancel"),
                    data={"csrf": csrf},
                    headers={"Accept": "application/json"},
                )
            finally:
                lock.close()
    assert 503 == failed.status_code
    assert "store error: " in failed.text
    assert "busy_timeout_ms=100" in failed.text  # the message says what held it up
    assert (503, "store error: ") == (as_json.status_code, as_json.json()["error"][:13])
    assert "suspended" == await status_of(app, ids["waiting"])


async def test_read_only_shows_no_buttons_and_refuses_every_post(
    dash: tuple[DashApp, dict[str, str]],
) -> None:
    """--read-only: no forms that POST, and every POST is 403 read-only, nothing changed."""
    app, ids = dash
    async with client(app, read_only=True) as http:
        for url in (run_url(ids["failed"]), run_url(ids["waiting"]), "/?status=failed"):
            page = (await http.get(url)).text
            assert 'method="post"' not in page
            assert "Retry all" not in page
        for url in (run_url(ids["failed"], "retry"), "/bulk/retry", "/", "/api/runs"):
            refused = await http.post(url, data={"csrf": "x"})
            assert (403, "read-only\n") == (refused.status_code, refused.text)
    assert "failed" == await status_of(app, ids["failed"])


async def test_a_token_is_needed_by_bearer_header_or_the_cookie_query_token_sets(
    dash: tuple[DashApp, dict[str, str]],
) -> None:
    """401 + WWW-Authenticate without it; Bearer works; ?token= sets the cookie and 303s."""
    app, ids = dash
    async with client(app, token="s3cret", mount="/ops") as http:
        for url in ("/ops/", "/ops/api/runs", "/ops/static/dashboard.css", "/ops/nothing"):
            refused = await http.get(url)
            assert (401, "Bearer") == (refused.status_code, refused.headers["www-authenticate"])
        assert (
            401 == (await http.get("/ops/", headers={"Authorization": "Bearer nope"})).status_code
        )
        assert 401 == (await http.get("/ops/?token=nope")).status_code
        assert (
            200 == (await http.get("/ops/", headers={"Authorization": "Bearer s3cret"})).status_code
        )
        landing = await http.get("/ops/runs/pay-1?token=s3cret&failed=1")
        assert (303, "/ops/runs/pay-1?failed=1") == (
            landing.status_code, landing.headers["location"])  # fmt: skip
        cookie = landing.headers["set-cookie"]
        assert "effects_durable_token=s3cret" in cookie
        for part in ("HttpOnly", "SameSite=Strict", "Path=/ops"):
            assert part in cookie
        assert 200 == (await http.get("/ops/runs/pay-1")).status_code  # the cookie now
        page = (await http.get(run_url(ids["waiting"]).replace("/runs", "/ops/runs"))).text
        done = await http.post(
            "/ops" + run_url(ids["waiting"], "cancel"), data={"csrf": csrf_of(page)}
        )
        assert (303, "/ops" + run_url(ids["waiting"])) == (
            done.status_code, done.headers["location"])  # fmt: skip


async def test_under_a_mount_every_link_asset_and_redirect_starts_with_its_path(
    dash: tuple[DashApp, dict[str, str]],
) -> None:
    """Mount("/ops"): links, assets, forms and the CSRF cookie's path are under /ops."""
    app, ids = dash
    async with client(app, mount="/ops") as http:
        answer = await http.get("/ops/")
        page = answer.text
        assert "Path=/ops" in answer.headers["set-cookie"]
        links = re.findall(r'(?:href|src|action)="([^"]+)"', page)
        assert links
        assert all(link.startswith("/ops/") for link in links), links
        assert "text/css" in (await http.get("/ops/static/dashboard.css")).headers["content-type"]
        assert 200 == (await http.get("/ops/static/dashboard.js")).status_code
        run_page = (await http.get("/ops" + run_url(ids["failed"]))).text
        assert all(
            link.startswith("/ops/")
            for link in re.findall(r'(?:href|src|action|data-stream)="([^"]+)"', run_page)
        )


async def test_stored_text_is_escaped_and_pages_have_a_strict_csp_and_no_inline_script(
    dash: tuple[DashApp, dict[str, str]],
) -> None:
    """A <script> in an id or error renders as text, escapes are visible; CSP on every answer."""
    app, ids = dash
    async with client(app) as http:
        answers = [await http.get(u) for u in ("/", run_url(ids["failed"]), "/queues",
                                               run_url(ids["retrying"]), "/static/dashboard.js",
                                               "/nope", "/api/runs")]  # fmt: skip
        answers.append(await http.post(run_url(ids["failed"], "retry")))
    for answer in answers:
        assert "default-src 'self'" == answer.headers["content-security-policy"]
        assert "nosniff" == answer.headers["x-content-type-options"]
    for answer in answers[:4]:
        page = answer.text
        assert "\x1b" not in page
        assert "\u202e" not in page
        assert not re.search(r"<script(?! src=)", page)
        assert not re.search(r"\son[a-z]+=", page)
        assert "cdn" not in page.lower()
    failed = answers[1].text
    assert "&lt;script&gt;alert(&#x27;xss&#x27;)&lt;/script&gt;" in failed
    assert "\\x1b[31mred\\u202e" in failed
    assert html.escape(ids["failed"]) in failed
    assert HOSTILE not in failed


def test_app_checks_its_arguments() -> None:
    """app() takes an Engine, and a token that is a non-empty string, or None."""
    from effects.durable import Engine

    with pytest.raises(TypeError, match="Engine"):
        dashboard.app("sqlite:///x.db")  # type: ignore[arg-type]
    engine = Engine("memory://app-arguments")
    with pytest.raises(ValueError, match="empty"):
        dashboard.app(engine, token="")
    with pytest.raises(TypeError, match="token"):
        dashboard.app(engine, token=123)  # type: ignore[arg-type]


def test_without_the_extra_the_import_names_the_pip_command() -> None:
    """Importing effects.durable.dashboard without Starlette: ImportError naming the extra."""
    code = (
        "import sys; sys.modules['starlette'] = None\n"
        "try:\n    import effects.durable.dashboard\n"
        "except ImportError as e:\n    print(e)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert "pip install 'effect-schedules[dashboard]'" in done.stdout, done.stderr


async def test_hostile_addresses_and_parameters_are_refused_with_one_line(
    dash: tuple[DashApp, dict[str, str]],
) -> None:
    """Invalid UTF-8 in an id, an extra segment, a huge or negative page: 4xx, never a 500."""
    app, ids = dash
    async with client(app) as http:
        assert 404 == (await http.get("/runs/%ff%fe")).status_code
        assert 404 == (await http.get("/runs/pay-1/retry/again")).status_code
        assert 405 == (await http.get("/runs/pay-1/retry")).status_code
        assert 400 == (await http.get("/runs/pay-1?from=-1")).status_code
        assert 400 == (await http.get("/runs/pay-1?limit=many")).status_code
        far = await http.get(f"/runs/pay-1?from={10**30}")
        assert (200, "0 of ") == (far.status_code, re.search(r"0 of ", far.text).group(0))  # type: ignore[union-attr]
        assert 200 == (await http.get("/api/runs?limit=" + "9" * 40)).status_code
        assert 200 == (await http.get("/?workflow=%00%1b&id=%E2%80%AE")).status_code
        assert 404 == (await http.get("/static/..%2F..%2Fapp.py")).status_code
        assert 404 == (await http.get("/static/app.py")).status_code
    assert "suspended" == await status_of(app, ids["waiting"])
