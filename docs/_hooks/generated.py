"""
An MkDocs hook: the parts of pages that are generated from the code at build time.

A page holds a marker comment where a generated part goes:

- ``<!-- generated: cli schedules -->``, ``... cli effects.durable -->``, ``... cli migrate -->``:
  the command's usage, its global options and every subcommand with its arguments, read from
  the argparse parser the command itself runs, so the page cannot drift from the code.
- ``<!-- generated: event-names -->``: the engine's event names, from ``EventName``.

An unknown marker fails the build, so a typo cannot leave a page silently empty.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from typing import Any, get_args

from effects.durable._cli import _parser as durable_parser
from effects.durable._names import EventName
from migrate._cli import _parser as migrate_parser
from schedules._cli import _parser as schedules_parser

__all__ = ["cli_markdown", "expand", "on_page_markdown"]

MARKER = re.compile(r"<!-- generated: (?P<what>[\w.-]+)(?: (?P<arg>[\w.-]+))? -->")
WIDTH = 80


def _parsers() -> dict[str, Callable[[], argparse.ArgumentParser]]:
    return {
        "schedules": schedules_parser,
        "effects.durable": durable_parser,
        "migrate": migrate_parser,
    }


def _formatter(prog: str) -> argparse.HelpFormatter:
    # A fixed width, so the page does not depend on the terminal that built it.
    return argparse.HelpFormatter(prog, width=WIDTH, max_help_position=32)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    shown = ", ".join(f"`{flag}`" for flag in action.option_strings)
    if action.nargs == 0:
        return shown
    metavar = action.metavar or (
        "{" + ",".join(map(str, action.choices)) + "}" if action.choices else action.dest.upper()
    )
    return f"{shown} `{metavar}`"


def _help(action: argparse.Action, prog: str) -> str:
    text = (action.help or "") % {"prog": prog, "default": action.default}
    if not text and not action.option_strings and action.nargs not in ("*", "?"):
        text = "required"
    extras: list[str] = []
    if action.choices and action.option_strings and action.metavar:
        extras.append("one of " + ", ".join(f"`{c}`" for c in action.choices))
    if action.nargs in ("*", "+") or isinstance(action, argparse._AppendAction):
        extras.append("repeatable" if action.option_strings else "zero or more")
    if action.required and action.option_strings:
        extras.append("required")
    return _cell("; ".join(x for x in [text, *extras] if x))


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        action
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction | argparse._SubParsersAction)
        and action.help != argparse.SUPPRESS
    ]


def _table(actions: list[argparse.Action], prog: str) -> list[str]:
    if not actions:
        return []
    rows = ["| argument | meaning |", "|---|---|"]
    rows += [f"| {_flags(a)} | {_help(a, prog)} |" for a in actions]
    return [*rows, ""]


def _usage(parser: argparse.ArgumentParser) -> list[str]:
    parser.formatter_class = _formatter
    usage = parser.format_usage().removeprefix("usage: ").rstrip()
    return ["```text", usage, "```", ""]


def cli_markdown(name: str) -> str:
    """
    The reference of the command *name* (a key of the parsers), as Markdown: each subcommand
    under a heading whose anchor is ``NAME-COMMAND`` (``durable-work``, ``migrate-run``).
    """
    parser = _parsers()[name]()
    anchor = name.rsplit(".", maxsplit=1)[-1]
    lines = [*_usage(parser)]
    if parser.description:
        lines += [parser.description, ""]
    lines += _table(_arguments(parser), parser.prog)
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    helps = {c.dest: c.help for sub in subparsers for c in sub._choices_actions}
    for sub in subparsers:
        for command, child in sub.choices.items():
            lines += [f"### `{command}` {{#{anchor}-{command}}}", ""]
            summary = helps.get(command) or child.description
            if summary:
                lines += [summary[0].upper() + summary[1:] + ".", ""]
            lines += _usage(child)
            # An option the command shares with its parser (`--app` after the command) is
            # listed once, above.
            own = [a for a in _arguments(child) if a.default != argparse.SUPPRESS]
            lines += _table(own, child.prog)
    if parser.epilog:
        lines += [parser.epilog, ""]
    return "\n".join(lines)


def _event_names() -> str:
    return "\n".join(f"- `{name}`" for name in get_args(EventName)) + "\n"


def expand(markdown: str) -> str:
    """*markdown* with every generated marker replaced by what it names."""

    def one(match: re.Match[str]) -> str:
        what, arg = match["what"], match["arg"]
        if what == "cli" and arg in _parsers():
            return cli_markdown(arg)
        if what == "event-names" and arg is None:
            return _event_names()
        msg = f"unknown generated marker {match[0]!r}"
        raise ValueError(msg)

    return MARKER.sub(one, markdown)


def on_page_markdown(markdown: str, **kwargs: Any) -> str:
    """MkDocs: expand the page's generated markers."""
    return expand(markdown)
