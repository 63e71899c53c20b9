"""Entry point of ``python -m schedules`` (see :mod:`schedules._cli`)."""

from __future__ import annotations

import os
import sys

from schedules._cli import main


def _run() -> int:
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``... | head``): stop quietly, as other command-line tools do,
        # and keep Python from complaining again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return code


if __name__ == "__main__":
    raise SystemExit(_run())
