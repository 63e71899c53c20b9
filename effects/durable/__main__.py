"""Entry point of ``python -m effects.durable`` (see ``effects.durable._cli``)."""

from __future__ import annotations

from effects.durable._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
