"""The sagas text for the README (``README_saga.md``, until it is merged) runs as written."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

from effects import use_clock
from effects.durable import MemoryStore
from effects.testing import VirtualClock

TEXT = Path(__file__).resolve().parents[2] / "README_saga.md"
BLOCK = re.compile(r"```python\n(?P<code>.*?)```", re.S)
BLOCKS = [
    (TEXT.read_text(encoding="utf-8").count("\n", 0, m.start()) + 1, m.group("code"))
    for m in BLOCK.finditer(TEXT.read_text(encoding="utf-8"))
]


def test_the_text_has_its_three_examples() -> None:
    """Compensation, error routes and cancel each have a runnable example."""
    assert 3 == len(BLOCKS)


@pytest.mark.parametrize(("line", "code"), [pytest.param(*b, id=f"line-{b[0]}") for b in BLOCKS])
def test_each_example_runs(line: int, code: str) -> None:
    """Each python block is a doctest that passes (under a virtual clock, as the README's)."""
    for name in ("saga-readme", "routes-readme", "cancel-readme"):
        MemoryStore.drop(name)
    with use_clock(VirtualClock()):
        parser = doctest.DocTestParser()
        namespace: dict[str, object] = {"__name__": f"readme_saga_line_{line}"}
        test = parser.get_doctest(code, namespace, f"README_saga.md:{line}", str(TEXT), line)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test)
    assert 0 == runner.failures, f"README_saga.md line {line}: doctest failed"
