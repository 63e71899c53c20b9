"""
Every code example of the documentation pages runs as written (see ``tests/doc_blocks.py`` for
the markers): a page's blocks run in order, in one namespace and one folder of their own, as a
reader following the page would run them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from pathlib import Path

import pytest

from effects import use_clock
from effects.testing import VirtualClock
from tests.doc_blocks import ROOT, blocks, run_console, run_python

DOCS = ROOT / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if not p.relative_to(DOCS).parts[0].startswith("_"))


def test_the_pages_have_examples() -> None:
    """The pages hold runnable examples (a pattern that found none would pass every test)."""
    assert len([b for p in PAGES for b in blocks(p) if b.runs]) >= 60


@pytest.mark.parametrize(
    "page",
    [pytest.param(p, id=str(p.relative_to(DOCS))) for p in PAGES if any(b.runs for b in blocks(p))],
)
def test_page_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each page's examples run in order, under a virtual clock (so no retry waits for real)."""
    where = str(page.relative_to(ROOT))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    try:
        with use_clock(VirtualClock()):
            for block in blocks(page):
                if not block.runs:
                    continue
                if block.file is not None:
                    target = tmp_path / block.file
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(block.code, encoding="utf-8")
                    if block.lang == "python":
                        compile(block.code, f"{where}:{block.line}", "exec")
                elif block.lang == "console":
                    run_console(block, tmp_path, where)
                else:
                    run_python(block, namespace, where)
    finally:
        # A page that starts processes in the background writes their pids to NAME.pid (as a
        # reader would, to stop them later); any still running when the page fails are stopped.
        for pid_file in tmp_path.glob("*.pid"):
            with contextlib.suppress(ValueError, ProcessLookupError):
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
        # Modules a page wrote (shop.py, migrate_config.py) must not answer the next page's
        # imports of the same name.
        for name in set(sys.modules) - before:
            origin = getattr(sys.modules[name], "__file__", None) or ""
            if origin.startswith(str(tmp_path)):
                del sys.modules[name]
