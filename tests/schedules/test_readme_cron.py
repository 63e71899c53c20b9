"""The python blocks of README_cron.md run as tests/test_readme.py runs the README's."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

from effects import use_clock
from effects.testing import VirtualClock

TEXT = Path(__file__).resolve().parents[2] / "README_cron.md"
BLOCK = re.compile(r"```python\n(?P<code>.*?)```", re.S)
BLOCKS = [
    (TEXT.read_text(encoding="utf-8").count("\n", 0, m.start()) + 1, m.group("code"))
    for m in BLOCK.finditer(TEXT.read_text(encoding="utf-8"))
]


def test_the_text_has_examples() -> None:
    """The regex finds the examples (one that found none would pass every test)."""
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize(("line", "code"), BLOCKS, ids=[f"line-{line}" for line, _ in BLOCKS])
def test_each_example_runs(line: int, code: str) -> None:
    """Each doctest block passes, under a virtual clock as the README's are."""
    parser = doctest.DocTestParser()
    test = parser.get_doctest(code, {}, f"README_cron.md:{line}", str(TEXT), line)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    with use_clock(VirtualClock()):
        runner.run(test)
    assert 0 == runner.failures, f"README_cron.md line {line}: doctest failed"
