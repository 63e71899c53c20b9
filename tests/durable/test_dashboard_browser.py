"""
The dashboard in a real headless browser: Playwright for Python driving the distribution's
Chromium (``apt-get install chromium``), against the real ``dashboard`` command. Every page is
watched for page errors and console errors (a CSP violation is one); each action is clicked;
a ``<script>`` in stored text must render as text; the live stream must update an open page
when another process finishes the run. Screenshots of the pages are kept as artifacts, in the
folder the session prints (``DASHBOARD_ARTIFACTS``, or a temporary folder).

These tests skip, saying why, only when no Chromium can be found.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import pytest

from tests.durable.dashboard_support import (
    DashApp,
    Served,
    make_dash_app,
    seed,
    served,
    wait_until,
)

pytestmark = [pytest.mark.timeout(300)]

T = TypeVar("T")

_CHROMIUM = next(
    (found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None
)
_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: How long a wait for the page may take before the test fails (a bound on a hang).
PATIENCE_MS = 30_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """The distribution's Chromium, headless, driven by plain ``sync_playwright()``."""
    if _CHROMIUM is None:
        # Playwright cannot download a browser here, so these tests need the distribution's
        # Chromium; .ci/run installs it (as root with apt-get), and DESIGN.md asks for a skip
        # that says why only on a machine where none can be had.
        pytest.skip("no Chromium on PATH (apt-get install chromium); the browser tests need one")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=_CHROMIUM, args=_ARGS)
        yield launched
        launched.close()


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots go; the folder is printed."""
    given = os.environ.get("DASHBOARD_ARTIFACTS")
    folder = Path(given) if given else tmp_path_factory.mktemp("dashboard-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"\ndashboard screenshots: {folder}")
    return folder


def in_thread(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to its end in a thread of its own (Playwright's loop holds this one)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, make()).result()


@pytest.fixture
def app(tmp_path: Path) -> DashApp:
    made = make_dash_app(tmp_path / "app")
    in_thread(lambda: seed(made))
    return made


@pytest.fixture
def server(app: DashApp) -> Iterator[Served]:
    yield from served(app.root)


class Watched:
    """A browser page whose page errors, console errors and dialogs are recorded."""

    def __init__(self, browser: Any) -> None:
        self.context = browser.new_context(viewport={"width": 1360, "height": 900})
        self.page = self.context.new_page()
        self.page.set_default_timeout(PATIENCE_MS)
        self.problems: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.page.on(
            "console",
            lambda message: (
                message.type == "error" and self.problems.append(f"console: {message.text}")
            ),
        )

        def dialog(found: Any) -> None:
            self.dialogs.append(found.message)
            found.dismiss()

        self.page.on("dialog", dialog)

    def close(self) -> None:
        assert [] == self.problems
        assert [] == self.dialogs
        self.context.close()


@pytest.fixture
def watched(browser: Any) -> Iterator[Watched]:
    """A fresh page; at the end, no page error, console error or dialog may have happened."""
    page = Watched(browser)
    yield page
    page.close()


def run_url(server: Served, run_id: str) -> str:
    return f"{server.url}runs/{quote(run_id, safe='')}"


def test_the_pages_render_without_errors_and_are_kept_as_screenshots(
    watched: Watched, server: Served, artifacts: Path
) -> None:
    """Runs, a retrying run, a failed run, queues: no errors; screenshots saved."""
    page = watched.page
    page.goto(server.url)
    assert 5 == page.locator("table.runs tbody tr").count()
    page.screenshot(path=artifacts / "dashboard-runs.png", full_page=True)
    page.get_by_role("link", name="order-<1>").click()
    page.wait_for_selector("table.checkpoints")
    assert "attempt 1 of 3" in page.inner_text("table.checkpoints")
    page.screenshot(path=artifacts / "dashboard-run.png", full_page=True)
    page.goto(run_url(server, "declined/1 <script>x</script>"))
    assert "declined/1 <script>x</script>" == page.inner_text("h1.id")
    page.screenshot(path=artifacts / "dashboard-run-failed.png", full_page=True)
    page.goto(f"{server.url}queues")
    assert "payments" in page.inner_text("table.queues")
    page.screenshot(path=artifacts / "dashboard-queues.png", full_page=True)


def test_a_script_in_stored_text_renders_as_text_and_no_dialog_fires(
    watched: Watched, server: Served
) -> None:
    """The hostile error message and run id show literally, escapes visible; no alert()."""
    page = watched.page
    for url in (
        server.url,
        run_url(server, "order-<1>"),
        run_url(server, "declined/1 <script>x</script>"),
    ):
        page.goto(url)
        page.wait_for_load_state("load")
    shown = page.inner_text("main")
    assert "card <script>alert('xss')</script> declined \\x1b[31mred\\u202e" in shown
    assert 0 == page.locator("main script").count()


def test_each_action_button_does_what_it_says(watched: Watched, server: Served) -> None:
    """Bulk retry with its preview, Redispatch, Cancel, Retry, Cancel and compensate."""
    page = watched.page
    page.goto(f"{server.url}?status=failed")
    page.get_by_role("link", name="Retry all 1 matching").click()
    assert "1 failed, dead or cancelled run(s) match" in page.inner_text("main")
    page.get_by_role("button", name="Apply").click()
    assert "matched 1, applied 1" in page.inner_text("main")

    page.goto(run_url(server, "pay-1"))
    page.get_by_role("button", name="Redispatch").click()
    page.wait_for_url(run_url(server, "pay-1"))
    assert "attempt 2 of 1" in page.inner_text("table.checkpoints")

    page.get_by_role("button", name="Cancel", exact=True).click()
    page.wait_for_selector(".status .s-cancelled")
    page.get_by_role("button", name="Retry").click()
    page.wait_for_selector(".status .s-pending")

    page.goto(run_url(server, "saga-1"))
    page.get_by_role("button", name="Cancel and compensate").click()
    page.wait_for_selector(".status .s-pending")
    assert "asked for, with compensation" in page.inner_text("dl.facts")


def test_an_open_run_page_updates_when_another_process_finishes_the_run(
    watched: Watched, server: Served, app: DashApp
) -> None:
    """The page of a waiting run, left open: a worker process completes it; the page shows it."""
    page = watched.page
    page.goto(run_url(server, "pay-2"))
    page.wait_for_selector("main.streaming")
    page.evaluate("window.stillTheSamePage = true")
    assert page.locator(".status .s-suspended").is_visible()
    worker = subprocess.Popen(
        [sys.executable, "-m", "effects.durable", "--app", "app:engine", "work", "--poll", "50ms"],
        cwd=app.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        page.wait_for_selector(".status .s-completed")
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    assert page.evaluate("window.stillTheSamePage === true")  # updated in place, not reloaded
    assert "42" in page.inner_text(".payloads")
    # A selector, not wait_for_function: its polling evaluates a string, which the page's CSP
    # (no 'unsafe-eval') refuses whenever the first check is not already true.
    page.wait_for_selector("main#main:not(.streaming)", state="attached")


def test_a_run_of_2000_events_renders_its_first_page_of_100(
    watched: Watched, server: Served, app: DashApp, artifacts: Path
) -> None:
    """A long trail: the first page of 100 events renders, with a link to the later ones."""

    async def chatter() -> None:
        async with app.engine() as engine:
            await engine.start("chatty", 1000, run_id="chatty")
            await engine.run_until_idle()

    in_thread(chatter)
    page = watched.page
    page.goto(run_url(server, "chatty"))
    assert 100 == page.locator("table.events tbody tr").count()
    assert page.get_by_role("link", name="Later →").is_visible()
    page.get_by_role("link", name="failed only").click()
    assert 0 == page.locator("table.events tbody tr").count()
    page.screenshot(path=artifacts / "dashboard-run-long.png")


def ids_shown(page: Any) -> list[str]:
    """The run ids the runs page lists, in order."""
    return [str(text) for text in page.locator("table.runs td.id").all_inner_texts()]


def test_filters_keyset_pages_progress_and_the_failed_only_trail(
    watched: Watched, server: Served, app: DashApp, artifacts: Path
) -> None:
    """Older/Newest keyset pages of 50, a status chip, the filter form (workflow, id prefix,
    retrying), a run's heartbeat progress, next attempt and policy, and its failed-only trail."""

    async def more() -> None:
        async with app.engine(steps=False) as engine:
            for n in range(55):
                await engine.start("pay", n, run_id=f"bulk-{n:02d}")
        async with app.engine() as engine:
            await engine.start("crunching", 1, run_id="crunch-1")
            await engine.run_until_idle()

    in_thread(more)
    page = watched.page
    page.goto(server.url)
    first = ids_shown(page)
    assert 50 == len(first)
    assert "crunch-1" == first[0]  # newest first
    page.get_by_role("link", name="Older →").click()
    second = ids_shown(page)
    assert 61 - 50 == len(second)
    assert set() == set(first) & set(second)
    assert 0 == page.get_by_role("link", name="Older →").count()
    page.get_by_role("link", name="← Newest").click()
    assert first == ids_shown(page)

    page.locator("nav.chips a.s-failed").click()
    assert ["declined/1 <script>x</script>"] == ids_shown(page)
    page.get_by_role("link", name="Clear").click()
    page.fill("input[name=workflow]", "pay")
    page.fill("input[name=id]", "bulk-1")
    page.get_by_role("button", name="Filter").click()
    assert [f"bulk-{n}" for n in range(19, 9, -1)] == sorted(ids_shown(page), reverse=True)
    assert "workflow = pay, run id starts with bulk-1" in page.inner_text("p.muted")
    page.get_by_role("link", name="Clear").click()
    page.check("input[name=retrying]")
    page.get_by_role("button", name="Filter").click()
    assert {"crunch-1", "order-<1>"} == set(ids_shown(page))
    page.screenshot(path=artifacts / "dashboard-runs-retrying.png", full_page=True)

    page.get_by_role("link", name="crunch-1").click()
    row = page.locator("table.checkpoints tbody tr").first.inner_text()
    assert "attempt 1 of 3" in row
    assert '{"done": 3, "of": 10}' in row
    assert "from_step_options(retries=3, backoff='exp', backoff_ms=3600000)" in row
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", row)  # the next attempt
    page.screenshot(path=artifacts / "dashboard-run-progress.png", full_page=True)
    every = len(page.locator("table.events tbody tr").all())
    page.get_by_role("link", name="failed only").click()
    levels = page.locator("table.events tbody tr td:nth-child(3)").all_inner_texts()
    assert ["warning"] == levels  # step.failed; every other event of this run is info
    assert every > 1
    page.get_by_role("link", name="all", exact=True).click()
    assert every == len(page.locator("table.events tbody tr").all())


OPS_TEXT = '''
"""The user's own service: the dashboard mounted at /ops, the engine opened by its lifespan."""

import contextlib

from starlette.applications import Starlette
from starlette.routing import Mount

from app import engine
from effects.durable import dashboard


@contextlib.asynccontextmanager
async def lifespan(_):
    async with engine:
        yield


service = Starlette(routes=[Mount("/ops", app=dashboard.app(engine))], lifespan=lifespan)
'''


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def mounted(app: DashApp) -> Iterator[str]:
    """The app's dashboard under Mount("/ops") of a Starlette service run by uvicorn: its URL."""
    (app.root / "ops.py").write_text(OPS_TEXT)
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "ops:service", "--port", str(port), "--no-access-log"],
        cwd=app.root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}/ops/"

    def up() -> bool:
        assert process.poll() is None, process.communicate()
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    try:
        wait_until(up, 60, "the mounted dashboard")
        yield url
    finally:
        process.terminate()
        process.communicate(timeout=60)


def test_under_a_mount_the_pages_work_offline(watched: Watched, mounted: str) -> None:
    """Mounted at /ops in the user's service: every request the pages make (styles, script,
    icon, live stream, actions) goes to /ops of that server, none elsewhere (no CDN: it works
    offline); styles and script apply; an action answers with the run's page under /ops."""
    origin = mounted.removesuffix("/ops/")
    seen: list[str] = []
    elsewhere: list[str] = []

    def only_here(route: Any) -> None:
        target = str(route.request.url)
        if target.startswith(f"{origin}/ops/"):
            seen.append(target)
            route.continue_()
        else:
            elsewhere.append(target)
            route.abort()

    watched.context.route("**/*", only_here)
    page = watched.page
    page.goto(mounted)
    header = "getComputedStyle(document.querySelector('header.top')).backgroundColor"
    assert page.evaluate(header) not in ("", "rgba(0, 0, 0, 0)")  # dashboard.css applied
    page.get_by_role("link", name="pay-1").click()
    page.wait_for_selector("main.streaming")  # dashboard.js ran and opened the stream
    page.get_by_role("button", name="Cancel", exact=True).click()
    page.wait_for_selector(".status .s-cancelled")
    assert f"{mounted}runs/pay-1" == page.url
    assert [] == elsewhere
    assert any(url.endswith("/ops/static/dashboard.css") for url in seen)
    assert any(url.endswith("/ops/static/dashboard.js") for url in seen)
    assert any("/ops/api/runs/pay-1/stream" in url for url in seen)
