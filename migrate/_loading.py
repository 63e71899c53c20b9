"""Loading a config file: a Python file defining ``config = migrate.Config(...)``."""

from __future__ import annotations

import contextvars
import importlib.machinery
import importlib.util
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType
from typing import Final

import attrs

from migrate._definition import Config
from migrate._errors import ConfigError

__all__ = ["DEFAULT_CONFIG", "LOADING", "load_config", "load_config_and_engine", "resolved"]

DEFAULT_CONFIG = "migrate_config.py"
_MARK = "__migrate_config__"  # set on the modules load_config made
#: The config file being loaded, while its module runs: what it builds from its own config
#: (``engine = migrate.durable.engine(config)``) gets the base_dir the loaded config gets.
LOADING: Final[contextvars.ContextVar[Path | None]] = contextvars.ContextVar(
    "migrate_loading", default=None
)


def resolved(config: Config, file: Path | None = None) -> Config:
    """
    *config* with the base_dir of the config file *file* (default: the one being loaded, if
    any): its folder, or the config's own relative base_dir under it.
    """
    file = LOADING.get() if file is None else file
    if file is None:
        return config
    base_dir = file.parent if config.base_dir is None else file.parent / config.base_dir
    return attrs.evolve(config, base_dir=base_dir)


def _module_name(file: Path) -> str:
    """
    The name the config is imported under: its file's stem (``migrate_config``), so classes and
    functions defined in it pickle as ``migrate_config.X`` and a worker process can import them
    again; a private name when the stem is taken by another module or is not an identifier.
    """
    stem = file.stem
    taken = sys.modules.get(stem)
    # A config loaded before (this file or another one of that name) gives its place, as a
    # module imported again would; any other module of that name keeps it.
    if stem.isidentifier() and (taken is None or getattr(taken, _MARK, False)):
        return stem
    return f"_migrate_config_{abs(hash(str(file)))}"


def _where(error: BaseException, file: Path) -> str:
    """``FILE, line N`` of the config line that led to *error* (its own line for a syntax
    error), and the line that raised it when that is in another file."""
    if isinstance(error, SyntaxError) and error.filename == str(file):
        return f"{file}, line {error.lineno}"
    frames = traceback.extract_tb(error.__traceback__)
    ours = [frame for frame in frames if frame.filename == str(file)]
    if not ours:
        return str(file)
    where = f"{file}, line {ours[-1].lineno}"
    last = frames[-1]
    if last.filename != str(file):
        where += f" (raised at {last.filename}, line {last.lineno})"
    return where


def _execute(spec: importlib.machinery.ModuleSpec, module: ModuleType, file: Path) -> None:
    assert spec.loader is not None
    try:
        spec.loader.exec_module(module)
    except ConfigError as error:
        raise ConfigError(f"{_where(error, file)}: {error}") from error
    except SystemExit as error:
        raise ConfigError(
            f"{_where(error, file)}: the config called sys.exit({error.code!r}) while loading"
        ) from error
    except Exception as error:
        raise ConfigError(f"{_where(error, file)}: {type(error).__name__}: {error}") from error


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """
    Load a config file: import it as a module and take its ``config`` variable.

    The file is imported as a real module named after it (``migrate_config``), with its folder
    on ``sys.path``: it can import the modules beside it, and what it defines can be pickled.
    The returned config's ``base_dir`` is the file's folder, so a relative store path, and the
    relative paths of its file sources, are relative to the config file wherever the command
    runs from.

    Args:
        path: The config file; ``None`` means ``migrate_config.py`` in the working folder.

    Raises:
        ConfigError: If the file is missing or is a folder, raises (or calls ``sys.exit()``)
            while it runs (the message names the file and line; chained), defines no
            ``config``, its ``config`` is not a `Config`, or the definitions are invalid
            (duplicate or unknown ids, dependency cycles).
    """
    return load_config_and_engine(path)[0]


def load_config_and_engine(path: str | os.PathLike[str] | None = None) -> tuple[Config, object]:
    """
    `load_config`, and the config module's ``engine`` variable (``None`` when it has none):
    the durable engine ``migrate run --durable`` and ``migrate work`` use.
    """
    file = Path(DEFAULT_CONFIG if path is None else path).resolve()
    if file.is_dir():
        inside = file / DEFAULT_CONFIG
        hint = f"; did you mean {inside}?" if inside.is_file() else ""
        raise ConfigError(f"config {file} is a folder, not a config file{hint}")
    if not file.is_file():
        raise ConfigError(f"config file not found: {file}")
    name = _module_name(file)
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot load {file} as Python")
    module = importlib.util.module_from_spec(spec)
    setattr(module, _MARK, True)
    folder = str(file.parent)
    # Like `python migrate_config.py`: its folder first on sys.path, for its sibling modules
    # (also those a process imports later, in this process or a worker it starts).
    if folder not in sys.path:
        sys.path.insert(0, folder)
    previous = sys.modules.get(name)
    sys.modules[name] = module
    loading = LOADING.set(file)
    try:
        _execute(spec, module, file)
    except BaseException:
        if previous is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = previous
        raise
    finally:
        LOADING.reset(loading)
    if not hasattr(module, "config"):
        raise ConfigError(f"{file} defines no 'config' variable (config = migrate.Config(...))")
    config = module.config
    if not isinstance(config, Config):
        raise ConfigError(f"{file}: 'config' must be a migrate.Config, got {type(config).__name__}")
    return resolved(config, file), getattr(module, "engine", None)
