"""
The documentation site builds in strict mode, documents every public name, loads nothing from
another host, and works offline in a real browser (search and navigation); the reference pages
list every name the code emits (events, metrics, spans).

The build takes seconds (MkDocs, Material, mkdocstrings); one test builds it and checks the
result, so the suite builds it once.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import importlib
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest

from tests.doc_blocks import ROOT

pytestmark = [pytest.mark.timeout(600)]

DOCS = ROOT / "docs"
#: Every public module and the API page that documents it.
API = {
    "schedules": "schedules",
    "schedules.testing": "schedules",
    "effects": "effects",
    "effects.testing": "effects",
    "effects.http": "effects",
    "effects.instrumentation": "effects",
    "effects.durable": "effects-durable",
    "effects.durable.dashboard": "effects-durable",
    "effects.durable.instrumentation": "effects-durable",
    "migrate": "migrate",
    "migrate.durable": "migrate",
    "migrate.instrumentation": "migrate",
}
#: Modules whose names are documented where a package above re-exports them; the names these
#: packages do not re-export are documented from the module itself.
REEXPORTED = {"effects.errors": "effects", "effects.durable.errors": "effects.durable"}
#: What makes a browser load something from another host: a script, image or frame source, a
#: stylesheet or font link, a CSS import or url() (links a reader may follow are fine).
_EXTERNAL = re.compile(
    r"""<(?:script|img|iframe|source|audio|video)\b[^>]*\bsrc\s*=\s*["']?(?:https?:)?//"""
    r"""|<link\b[^>]*\bhref\s*=\s*["']?(?:https?:)?//"""
    r"""|@import\s+(?:url\()?["']?(?:https?:)?//|url\(\s*["']?(?:https?:)?//""",
    re.I,
)
_CHROMIUM = next(
    (found for name in ("chromium", "chromium-browser") if (found := shutil.which(name))), None
)


def _anchors(html: str) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', html))


def _build(target: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )


@contextlib.contextmanager
def _served(folder: Path) -> Iterator[str]:
    """*folder* over HTTP on a free port of 127.0.0.1, as a reader's browser would load it."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            pass

    handler = functools.partial(Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def _check_offline_in_a_browser(site: Path) -> None:
    """Search and navigation work with no request leaving 127.0.0.1."""
    from playwright.sync_api import sync_playwright

    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
    with _served(site) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=_CHROMIUM, args=args)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            elsewhere: list[str] = []

            def route(request_route: object) -> None:
                request = request_route.request  # type: ignore[attr-defined]
                if request.url.startswith(base):
                    request_route.continue_()  # type: ignore[attr-defined]
                else:
                    elsewhere.append(request.url)
                    request_route.abort()  # type: ignore[attr-defined]

            page.route("**/*", route)
            page.goto(base, wait_until="networkidle")
            assert "effect-schedules" in page.title()
            query = page.locator("input[data-md-component='search-query']")
            query.click()
            query.press_sequentially("glossary", delay=20)  # as typed: Material reads keys
            first = ".md-search-result__item a[href*='explanation/glossary/']"
            result = page.wait_for_selector(first, timeout=30_000)
            assert result is not None
            result.click()
            page.wait_for_load_state("networkidle")
            assert "glossary" in page.url, page.url
            page.click("nav.md-nav--primary a[href$='reference/']")
            page.wait_for_load_state("networkidle")
            assert "Reference" in page.inner_text("h1")
            assert [] == elsewhere
        finally:
            browser.close()


def test_the_site_builds_strict_and_works_offline(tmp_path: Path) -> None:
    """Strict build; every public name has an anchor; nothing external; search works offline."""
    site = tmp_path / "site"
    done = _build(site)
    assert 0 == done.returncode, done.stdout + done.stderr

    pages = {
        p: p.read_text(encoding="utf-8") for p in site.rglob("*") if p.suffix in (".html", ".css")
    }
    missing = []
    for module, page in API.items():
        anchors = _anchors((site / "reference" / "api" / page / "index.html").read_text())
        names = importlib.import_module(module).__all__
        missing += [] if module in anchors else [module]
        missing += [f"{module}.{n}" for n in names if f"{module}.{n}" not in anchors]
    for module, package in REEXPORTED.items():
        anchors = _anchors((site / "reference" / "api" / API[package] / "index.html").read_text())
        exported = importlib.import_module(package).__all__
        for name in importlib.import_module(module).__all__:
            shown = f"{package}.{name}" if name in exported else f"{module}.{name}"
            missing += [] if shown in anchors else [shown]
    assert [] == missing

    external = sorted(
        f"{p.relative_to(site)}: {m.group(0)}"
        for p, text in pages.items()
        for m in _EXTERNAL.finditer(text)
    )
    assert [] == external
    assert (site / "search" / "search_index.json").stat().st_size > 10_000
    dashboard = (site / "how-to" / "dashboard" / "index.html").read_text(encoding="utf-8")
    for shot in ("dashboard-runs.png", "dashboard-run.png", "dashboard-queues.png"):
        assert f"../../{shot}" in dashboard
        assert (site / shot).exists()
    assert not (site / "_incoming").exists()

    if _CHROMIUM is None:
        pytest.skip("no Chromium on PATH (apt-get install chromium): the site was not browsed")
    _check_offline_in_a_browser(site)


def _source_names(pattern: str, *files: str) -> set[str]:
    """The string literals (f-string prefixes included) of *files* that match *pattern*."""
    found: set[str] = set()
    for name in files:
        text = (ROOT / name).read_text(encoding="utf-8")
        found |= {m.group(1).rstrip(".") for m in re.finditer(pattern, text)}
    return found


def test_the_telemetry_reference_lists_every_name_the_code_emits() -> None:
    """Each metric, span, span event and attribute name in the adapters is on the page."""
    page = (DOCS / "reference" / "telemetry.md").read_text(encoding="utf-8")
    names = _source_names(
        r"""(?<![\w.])["']f?((?:durable|migration)\.[a-z_]+(?:\.[a-z_]*)*)[\s"'{]""",
        "effects/durable/instrumentation.py",
        "migrate/_runner.py",
        "migrate/_telemetry.py",
        "migrate/_window_loop.py",
    )
    names |= {"effects.retries", "effects_retries_total", "durable_step_attempts_total"}
    names |= {"durable_runs_total"}
    assert len(names) >= 25
    assert [] == sorted(n for n in names if f"`{n}" not in page)


def test_the_event_reference_describes_every_event() -> None:
    """Each name of ``EventName`` has a row in the event tables, and no row names another."""
    from effects.durable._names import EventName

    page = (DOCS / "reference" / "events.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \|", page, re.M))
    assert set(get_args(EventName)) == rows
