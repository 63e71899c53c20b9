"""
The code blocks of the README and of the documentation pages, and how they are run as tests.

A fenced block may be preceded by one marker comment (on the line right above its fence):

- ``<!-- not run: reason -->``: shown, never run (it needs a server, a second machine, ...);
- ``<!-- file: NAME -->``: written to the file NAME in the page's folder (a config, a module, a
  CSV) before the blocks after it run; a ``python`` file is also compiled, so a syntax error
  in it fails;
- ``<!-- run -->`` above a ``console`` block: each ``$ command`` runs in bash in the page's
  folder, and what it prints (stdout and stderr, as a terminal shows them) must match the lines
  shown under it, with ``...`` standing for any text (as in a doctest) and runs of spaces
  compared as one.

Unmarked ``python`` blocks run: ``>>>`` blocks as doctests, others with ``exec``. Other
unmarked blocks (``console``, ``text``, ...) are shown only.
"""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import attrs

__all__ = ["Block", "blocks", "run_console", "run_python"]

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
_FENCE = re.compile(
    r"^(?P<indent>[ ]*)(?:<!-- (?P<mark>[^>]*?) -->\n(?P=indent))?"
    r"```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```[ ]*$",
    re.S | re.M,
)
_OPTIONS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@attrs.frozen
class Block:
    """A fenced code block: where it starts, its language, its marker and its text."""

    line: int
    lang: str
    mark: str
    code: str

    @property
    def skipped(self) -> bool:
        """Marked ``not run``."""
        return self.mark.startswith("not run:")

    @property
    def file(self) -> str | None:
        """The file name of a ``file:`` block, else None."""
        return self.mark.removeprefix("file:").strip() if self.mark.startswith("file:") else None

    @property
    def runs(self) -> bool:
        """Whether the block is run (or written) as a test."""
        if self.skipped:
            return False
        if self.file is not None:
            return True
        if self.lang == "console":
            return self.mark == "run"
        return self.lang == "python"


def blocks(path: Path) -> list[Block]:
    """Every fenced block of the Markdown file *path*, in order."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in _FENCE.finditer(text):
        body = textwrap.dedent(match["body"]) if match["indent"] else match["body"]
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(line, match["lang"], (match["mark"] or "").strip(), body))
    return found


def run_python(block: Block, namespace: dict[str, Any], where: str) -> None:
    """Run a python *block* in *namespace*: as a doctest when it has ``>>>``, else with exec."""
    name = f"{where}:{block.line}"
    if ">>>" in block.code:
        test = doctest.DocTestParser().get_doctest(block.code, namespace, name, where, block.line)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test, clear_globs=False)
        namespace.update(test.globs)  # the DocTest ran on a copy: later blocks see its names
        assert 0 == runner.failures, f"{name}: doctest failed"
    else:
        exec(compile(block.code, name, "exec"), namespace)


def _commands(code: str) -> list[tuple[str, str]]:
    """The ``$ command`` lines of a console block, each with the output shown under it."""
    pairs: list[tuple[str, list[str]]] = []
    for line in code.splitlines():
        if line.startswith("$ "):
            pairs.append((line[2:], []))
        elif pairs:
            pairs[-1][1].append(line)
        elif line.strip():
            msg = f"output before the first command: {line!r}"
            raise ValueError(msg)
    # A line ending with a backslash goes on with the next shown line.
    joined: list[tuple[str, str]] = []
    for first, output in pairs:
        command = first
        while command.endswith("\\") and output:
            command = command[:-1] + " " + output.pop(0).strip()
        joined.append((command, "\n".join(output) + "\n" if output else ""))
    return joined


def run_console(block: Block, folder: Path, where: str) -> None:
    """Run each command of a ``<!-- run -->`` console *block* in *folder*; check its output."""
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(ROOT)])
    env.pop("COLUMNS", None)
    for command, expected in _commands(block.code):
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=folder,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=120,
            check=False,
        )
        got = done.stdout
        checker = doctest.OutputChecker()
        if not checker.check_output(expected, got, _OPTIONS):
            example = doctest.Example(command, expected)
            diff = checker.output_difference(example, got, _OPTIONS)
            msg = f"{where}:{block.line}: `{command}` (exit {done.returncode}) printed otherwise\n"
            raise AssertionError(msg + diff)
