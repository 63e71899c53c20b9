"""
A Griffe extension for the API reference: the docstrings' doctests shown as code.

The docstrings are Google style with ``Example:`` sections holding doctests (``>>>`` lines and
their output). Griffe reads ``Example:`` as an admonition of Markdown text, where a doctest's
output (``[0.25, 0.5]``) would read as a link; this wraps each run of doctest lines in a
``pycon`` fence instead, in every docstring, before Griffe parses it. The source is unchanged.
"""

from __future__ import annotations

from typing import Any

import griffe

__all__ = ["DoctestFences", "fence_doctests"]


def fence_doctests(text: str) -> str:
    """*text* with each doctest (from a ``>>>`` line to the next blank line) fenced as pycon."""
    out: list[str] = []
    in_doctest = in_fence = False
    indent = ""
    for line in text.split("\n"):
        stripped = line.lstrip()
        if stripped.startswith("```"):
            in_fence = not in_fence
        if in_doctest and not stripped:
            out.append(f"{indent}```")
            in_doctest = False
        elif not in_doctest and not in_fence and stripped.startswith(">>>"):
            indent = line[: len(line) - len(stripped)]
            out.append(f"{indent}```pycon")
            in_doctest = True
        out.append(line)
    if in_doctest:
        out.append(f"{indent}```")
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Fence the doctests of every docstring Griffe loads."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite *obj*'s docstring, if it has one with a doctest."""
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """The same for a top-level package (``on_object`` sees only its members)."""
        self.on_object(obj=pkg)
