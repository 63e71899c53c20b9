"""Finding the engine a command line names: ``--app module:attribute``."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from typing import Final

from effects.durable._engine import Engine

__all__ = ["AppError", "load_engine"]

_DOTTED: Final = re.compile(r"[^\W\d]\w*(\.[^\W\d]\w*)*")


class AppError(Exception):
    """``--app`` names no usable engine; the message says why, in one line."""


def load_engine(spec: str) -> Engine:
    """
    Import the module of *spec* (``"module:attribute"``) and return its ``Engine``.

    The module is looked for in the working directory first, then on ``sys.path``. The attribute
    (dotted names reach inside it: ``"app:workers.engine"``) is an ``Engine``, or a function of no
    arguments that returns one.

    Raises:
        AppError: If *spec* is malformed, the module is missing or raises while it is imported,
            the attribute is missing, or it is (or its function returns) something else than an
            ``Engine``.
    """
    module_name, _, attribute = spec.partition(":")
    if not _DOTTED.fullmatch(module_name) or not _DOTTED.fullmatch(attribute):
        msg = f"--app must look like module:attribute (e.g. myapp.workers:engine), got {spec!r}"
        raise AppError(msg)
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if module_name == missing or module_name.startswith(f"{missing}."):
            msg = (
                f"--app {spec}: no module named {missing!r} "
                f"(looked in the working directory {cwd} and on sys.path)"
            )
            raise AppError(msg) from None
        raise AppError(_raised(f"importing {module_name}", spec, error)) from None
    except (Exception, SystemExit) as error:  # noqa: BLE001 - whatever the user's module raises
        raise AppError(_raised(f"importing {module_name}", spec, error)) from None
    value: object = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            engines = sorted(n for n, v in vars(module).items() if isinstance(v, Engine))
            hint = f"; its engines: {', '.join(engines)}" if engines else ""
            msg = f"--app {spec}: module {module_name} has no attribute {attribute!r}{hint}"
            raise AppError(msg) from None
        except Exception as error:  # noqa: BLE001 - a module __getattr__ may raise anything
            raise AppError(_raised(f"reading {module_name}.{attribute}", spec, error)) from None
    if isinstance(value, Engine):
        return value
    where = f"{module_name}.{attribute}"
    if not callable(value):
        msg = (
            f"--app {spec}: {where} is a {type(value).__name__}, not an effects.durable.Engine "
            "(or a function of no arguments returning one)"
        )
        raise AppError(msg)
    try:
        inspect.signature(value).bind()
    except TypeError:
        msg = (
            f"--app {spec}: {where} needs arguments; give an Engine or a function of no "
            "arguments returning one"
        )
        raise AppError(msg) from None
    except ValueError:  # no signature to inspect (some builtins): just try the call
        pass
    try:
        made = value()
    except (Exception, SystemExit) as error:  # noqa: BLE001 - whatever the factory raises
        raise AppError(_raised(f"calling {where}()", spec, error)) from None
    if inspect.isawaitable(made):
        close = getattr(made, "close", None)
        if callable(close):
            close()  # never awaited: close it so Python does not warn at exit
        msg = f"--app {spec}: {where}() is async; give a plain function that returns the Engine"
        raise AppError(msg)
    if not isinstance(made, Engine):
        msg = f"--app {spec}: {where}() returned a {type(made).__name__}, not an Engine"
        raise AppError(msg)
    return made


def _raised(doing: str, spec: str, error: BaseException) -> str:
    try:
        text = str(error)
    except Exception:  # noqa: BLE001 - a broken __str__ must not hide the failure
        text = "<unprintable>"
    detail = f"{type(error).__name__}: {text}" if text else type(error).__name__
    return f"--app {spec}: {doing} raised {detail}"
