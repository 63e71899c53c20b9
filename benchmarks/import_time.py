"""
Import cost of ``schedules`` and ``effects`` beside tenacity, stamina and backoff, in one run.

Run: ``.venv/bin/python benchmarks/import_time.py [--rounds N]``

Each measurement is a fresh interpreter that times one ``import`` statement with
``time.perf_counter`` (interpreter start-up is not counted; what the import pulls in is, such as
``typing``). A first round, not counted, lets every module write its bytecode cache, even under
``PYTHONDONTWRITEBYTECODE``: installed peers come with theirs, and compiling our source on every
import would compare compilers, not imports. The candidates are interleaved round by round so
that load from other processes hits them alike; the table shows the min and median over the
rounds, in milliseconds, and each one's min over tenacity's.

Targets (issue 9): ``import effects`` at most 1.5x ``import tenacity``, ``import schedules`` at
most 1x.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

CANDIDATES = ("tenacity", "stamina", "backoff", "schedules", "effects", "effects.http", "migrate")
TARGETS = {"schedules": 1.0, "effects": 1.5}
PROBE = "import time; t = time.perf_counter(); import {module}; print(time.perf_counter() - t)"
# Bytecode caches are written and read, whatever the caller's environment says.
ENVIRONMENT = {
    name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"
}


def measure(module: str) -> float:
    """Seconds one fresh interpreter takes to import *module*."""
    shown = subprocess.run(
        [sys.executable, "-c", PROBE.format(module=module)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=ENVIRONMENT,
    )
    return float(shown.stdout)


def main() -> None:
    """Measure every candidate, interleaved, and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--rounds", type=int, default=25, help="interleaved rounds (default 25)")
    rounds: int = parser.parse_args().rounds
    for module in CANDIDATES:  # warm-up: bytecode caches written, disk caches filled
        measure(module)
    times: dict[str, list[float]] = {module: [] for module in CANDIDATES}
    for _ in range(rounds):
        for module in CANDIDATES:
            times[module].append(measure(module))
    baseline = min(times["tenacity"])
    print(f"Python {sys.version.split()[0]}; ms per import, min and median of {rounds} rounds")
    print(f"{'module':<14}{'min ms':>9}{'median ms':>11}{'x tenacity':>12}  target")
    for module in CANDIDATES:
        low, middle = min(times[module]), statistics.median(times[module])
        ratio = low / baseline
        target = TARGETS.get(module)
        verdict = (
            "" if target is None else f"<= {target}x: {'meets' if ratio <= target else 'MISSES'}"
        )
        print(f"{module:<14}{low * 1000:>9.2f}{middle * 1000:>11.2f}{ratio:>12.2f}  {verdict}")


if __name__ == "__main__":
    main()
