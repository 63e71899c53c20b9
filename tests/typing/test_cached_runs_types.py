"""Static typing of the cache of suspended runs (checked by mypy and pyright, never run).

Each ``# type: ignore[code]`` line is a wrong use that must stay an error: mypy's
``warn_unused_ignores`` and pyright's ``reportUnnecessaryTypeIgnoreComment`` fail if it stops
being one.
"""

from __future__ import annotations

from typing import assert_type

from effects.durable import Engine

assert_type(Engine("memory://typing", cached_runs=1000), Engine)
assert_type(Engine("memory://typing", cached_runs=0), Engine)
# cached_runs is a count of runs, not a size in bytes written as text, nor a float.
Engine("memory://typing", cached_runs="1000")  # type: ignore[arg-type]
Engine("memory://typing", cached_runs=1.5)  # type: ignore[arg-type]
