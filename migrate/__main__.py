"""Entry point of ``python -m migrate`` (the same as the ``migrate`` command)."""

from __future__ import annotations

from migrate._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
