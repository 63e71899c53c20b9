"""
The docs' pytest example for durable workflows (docs/how-to/testing.md) passes on a plain
install (no extras, no anyio), and still with anyio installed.

A fresh virtual environment gets the checkout without extras plus pytest (pip's cache and its
configured index), then runs the docs' example in a pytest subprocess. About 10 s.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "how-to" / "testing.md"
BLOCK = re.compile(r"```python\n(?P<code>.*?)```", re.S)
FAILING = """
async def test_a_failing_assertion_fails(durable_engine):
    async with durable_engine() as engine:
        assert engine is None
"""


def docs_example() -> str:
    """The docs' python block that tests a workflow with the ``durable_engine`` fixture."""
    found = [
        match["code"]
        for match in BLOCK.finditer(PAGE.read_text(encoding="utf-8"))
        if "durable_engine(" in match["code"] and "def test_" in match["code"]
    ]
    assert 1 == len(found), "docs/how-to/testing.md has one pytest example for durable_engine"
    return found[0]


def run(*command: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run *command* with a clean environment (no PYTHONPATH, no pytest options from outside)."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"PYTHONPATH", "PYTEST_ADDOPTS", "PYTEST_PLUGINS", "VIRTUAL_ENV"}
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return subprocess.run(
        [str(part) for part in command],
        capture_output=True,
        text=True,
        check=False,
        cwd=cwd,
        env=env,
        timeout=300,
    )


def pip_install(python: Path, *requirements: str | Path) -> None:
    """Install *requirements* into the environment of *python*, with this pip and its cache."""
    done = run(sys.executable, "-m", "pip", "--python", python, "install", "-q", *requirements)
    assert 0 == done.returncode, done.stdout + done.stderr


def test_the_docs_example_passes_without_anyio_and_with_it(tmp_path: Path) -> None:
    """As written and unmarked, the example passes on a plain install, then with anyio too."""
    environment = tmp_path / "env"
    venv.EnvBuilder(with_pip=False).create(environment)
    python = environment / "bin" / "python"
    pip_install(python, ROOT, "pytest")
    project = tmp_path / "project"
    (project / "tests").mkdir(parents=True)
    (project / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    example = docs_example()
    (project / "tests" / "test_as_written.py").write_text(example, encoding="utf-8")
    unmarked = example.replace("@pytest.mark.anyio\n", "")
    (project / "tests" / "test_unmarked.py").write_text(unmarked, encoding="utf-8")
    (project / "tests" / "test_failing.py").write_text(FAILING, encoding="utf-8")
    pytest_command: tuple[str | Path, ...] = (python, "-m", "pytest", "-q", "-p")
    pytest_command += ("no:cacheprovider", "--strict-markers", "-W", "error", "tests")

    no_anyio = run(python, "-c", "import anyio", cwd=project)
    plain = run(*pytest_command, cwd=project)
    pip_install(python, "anyio")
    with_anyio = run(*pytest_command, cwd=project)

    assert "No module named 'anyio'" in no_anyio.stderr
    assert (1, "1 failed, 2 passed") == (plain.returncode, last_line(plain)), plain.stdout
    assert "FAILED tests/test_failing.py::test_a_failing_assertion_fails - AssertionError" in (
        plain.stdout
    )
    assert (1, "1 failed, 2 passed") == (with_anyio.returncode, last_line(with_anyio)), (
        with_anyio.stdout
    )


def last_line(done: subprocess.CompletedProcess[str]) -> str:
    """The counts of pytest's closing line, without its timing (``"2 passed"``)."""
    lines = done.stdout.strip().splitlines() or [""]
    return lines[-1].split(" in ")[0].strip("= ")
