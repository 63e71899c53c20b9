"""Loading a config file: a Python file defining ``config = migrate.Config(...)``."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import attrs

from migrate._definition import Config
from migrate._errors import ConfigError

__all__ = ["DEFAULT_CONFIG", "load_config"]

DEFAULT_CONFIG = "migrate_config.py"


def load_config(path: str | os.PathLike[str] | None = None) -> Config:
    """
    Load a config file: run it as a fresh module and take its ``config`` variable.

    The returned config's ``base_dir`` is the file's folder, so a relative store path is relative
    to the config file, wherever the command runs from.

    Args:
        path: The config file; ``None`` means ``migrate_config.py`` in the working folder.

    Raises:
        ConfigError: If the file is missing, raises while it runs (chained), defines no
            ``config``, its ``config`` is not a `Config`, or the definitions are invalid
            (duplicate or unknown ids, dependency cycles).
    """
    file = Path(DEFAULT_CONFIG if path is None else path).resolve()
    if not file.is_file():
        raise ConfigError(f"config file not found: {file}")
    module_name = f"_migrate_config_{abs(hash(str(file)))}"
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ConfigError(f"cannot load {file} as Python")
    module = importlib.util.module_from_spec(spec)
    # Registered while it runs so dataclasses, pickling and relative lookups behave.
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except ConfigError as error:
        raise ConfigError(f"{file}: {error}") from error
    except Exception as error:
        raise ConfigError(f"{file}: {type(error).__name__}: {error}") from error
    finally:
        sys.modules.pop(module_name, None)
    if not hasattr(module, "config"):
        raise ConfigError(f"{file} defines no 'config' variable (config = migrate.Config(...))")
    config = module.config
    if not isinstance(config, Config):
        raise ConfigError(f"{file}: 'config' must be a migrate.Config, got {type(config).__name__}")
    base_dir = file.parent if config.base_dir is None else file.parent / config.base_dir
    return attrs.evolve(config, base_dir=base_dir)
