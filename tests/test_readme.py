"""
The README examples run as written: doctest blocks as doctests, other python blocks run.

The documentation pages' examples run in ``tests/test_docs_examples.py``.
"""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

from effects import use_clock
from effects.testing import VirtualClock

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"(?P<mark><!-- not run: [^>]+ -->\n)?```python\n(?P<code>.*?)```", re.S)


def _blocks() -> list[tuple[int, str, bool]]:
    text = README.read_text(encoding="utf-8")
    return [
        (text.count("\n", 0, m.start()) + 1, m.group("code"), m.group("mark") is not None)
        for m in BLOCK.finditer(text)
    ]


BLOCKS = _blocks()


def test_readme_has_examples() -> None:
    """The README keeps a runnable example of each package (a regex that found none would pass)."""
    assert len([b for b in BLOCKS if not b[2]]) >= 4


@pytest.mark.parametrize(
    ("line", "code"),
    [pytest.param(line, code, id=f"line-{line}") for line, code, skip in BLOCKS if not skip],
)
def test_readme_example_runs(line: int, code: str, tmp_path: Path) -> None:
    """Each python block of the README runs (under a virtual clock, so nothing waits)."""
    namespace: dict[str, object] = {"__name__": f"readme_line_{line}"}
    with use_clock(VirtualClock()):
        if ">>>" in code:
            parser = doctest.DocTestParser()
            test = parser.get_doctest(code, namespace, f"README.md:{line}", str(README), line)
            runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
            runner.run(test)
            assert 0 == runner.failures, f"README.md line {line}: doctest failed"
        else:
            exec(compile(code, f"README.md:{line}", "exec"), namespace)
