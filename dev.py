"""
Project runner: ``python3 dev.py test``, ``python3 dev.py demo`` or ``python3 dev.py docs``.

Each command makes (or refreshes) an isolated virtual environment in ``.venv``, installs the
project from ``pyproject.toml`` with its ``dev``, ``plot``, ``bench`` and ``docs`` extras, then
runs. Only Python 3.11+ and pip are needed. The environment is rebuilt when ``pyproject.toml``
changes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import threading
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"
STAMP = VENV / ".installed-from"
PACKAGES = ["schedules", "effects", "migrate"]


def _run(*args: str | Path) -> int:
    print("+", " ".join(str(a) for a in args), flush=True)
    # Only this file's fixed commands run here, never user input.
    return subprocess.call([str(a) for a in args], cwd=ROOT)  # noqa: S603


def ensure_env() -> None:
    """Create ``.venv`` and install the project into it unless it is already current."""
    # Checked at run time so an older interpreter gets a message, not a traceback.
    if sys.version_info < (3, 11):  # noqa: UP036
        sys.exit(f"dev.py needs Python 3.11 or newer, not {sys.version.split()[0]}")
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if PY.exists() and STAMP.exists() and STAMP.read_text() == wanted:
        return
    if not PY.exists():
        venv.EnvBuilder(with_pip=True).create(VENV)
    pip: list[str | Path] = [PY, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    if _run(*pip, "-e", ".[dev,plot,bench,docs]") != 0:
        sys.exit("dev.py: installing the project into .venv failed")
    STAMP.write_text(wanted)


def test() -> int:
    """
    Run the whole suite: pytest, and meanwhile ruff, mypy --strict, pyright (strict) and the typing
    cases, one after another at a lower priority; their output is printed after pytest's.
    """
    env_bin = BIN
    # Each example is a program of its own (each has a demo.py): mypy checks them one by one.
    examples: list[list[str | Path]] = [
        [PY, "-m", "mypy", p.relative_to(ROOT)]
        for p in sorted((ROOT / "examples").iterdir())
        if p.is_dir() and not p.name.startswith(("_", "."))
    ]
    checks: list[list[str | Path]] = [
        [env_bin / "ruff", "check", "."],
        [env_bin / "ruff", "format", "--check", "."],
        [PY, "-m", "mypy", *PACKAGES, "tests/typing", "benchmarks", "docs/_hooks", "dev.py"],
        *examples,
        [env_bin / "pyright"],
    ]
    # Much of the suite waits on subprocesses, servers and sleeps: the static checks fill that
    # idle CPU instead of running after it, niced so that the tests keep the CPU they need.
    results: list[tuple[list[str | Path], int, str]] = []
    worker = threading.Thread(target=lambda: results.extend(map(_checked, checks)), daemon=True)
    worker.start()
    failed: list[str] = []
    if _run(PY, "-m", "pytest", "-q", "-n", "2", "--dist", "worksteal") != 0:
        failed.append("-m pytest -q")
    worker.join()
    for step, code, output in results:
        print("+", " ".join(map(str, step)), flush=True)
        print(output, end="", flush=True)
        if code != 0:
            failed.append(" ".join(map(str, step[1:4])))
    if failed:
        print("FAILED:", ", ".join(failed), flush=True)
        return 1
    print("all checks passed", flush=True)
    return 0


def _checked(step: list[str | Path]) -> tuple[list[str | Path], int, str]:
    """Run *step* niced, its output captured: the step, its exit code and its output."""
    done = subprocess.run(  # noqa: S603 - this file's fixed commands only
        [str(a) for a in step],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
        preexec_fn=(lambda: os.nice(10)) if os.name == "posix" else None,
    )
    return step, done.returncode, done.stdout


def demo() -> int:
    """Run the main demo (the migration example)."""
    demo_main = ROOT / "examples" / "library_migration" / "demo.py"
    if demo_main.exists():
        return _run(PY, demo_main)
    return _run(
        PY,
        "-m",
        "schedules",
        "show",
        "exponential('250ms').jittered().max_delay('4s').times(4)",
    )


def docs() -> int:
    """
    Serve the documentation site at http://127.0.0.1:8000/ (rebuilt on every edit), or with
    ``--build [DIR]`` build it into DIR (default ``site/``), strict: any warning fails.
    """
    # Material prints a notice about a future MkDocs on every build; it is not about this site.
    os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")
    args = sys.argv[2:]
    if args[:1] == ["--build"]:
        target = args[1] if len(args) > 1 else "site"
        return _run(PY, "-m", "mkdocs", "build", "--strict", "--site-dir", Path(target).resolve())
    if args:
        print("usage: python3 dev.py docs [--build [DIR]]", file=sys.stderr)
        return 2
    return _run(PY, "-m", "mkdocs", "serve")


def main() -> int:
    commands = {"test": test, "demo": demo, "docs": docs}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        print(f"usage: python3 dev.py {{{'|'.join(commands)}}}", file=sys.stderr)
        return 2
    ensure_env()
    return commands[sys.argv[1]]()


if __name__ == "__main__":
    sys.exit(main())
