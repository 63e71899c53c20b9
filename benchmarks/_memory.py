"""
Memory measurement shared by the benchmarks: every case runs in a fresh subprocess.

A case is the benchmark script itself run again with ``--memory-case NAME``: it measures in its
own interpreter and prints one JSON object as its last line, which ``fresh`` reads back. So no
case sees what an earlier one allocated, cached or left fragmented.

tracemalloc sees the blocks that are live, not a running count of allocations, so a call is
measured by what it needs at once: ``per_call`` takes, call by call, the traced peak above the
memory live just before the call (reset with ``tracemalloc.reset_peak``), and the blocks live
inside the wrapped function (a snapshot taken there, against one taken just before the call).
The harness's own cost (a do-nothing call measured the same way) is subtracted, and tracemalloc
starts only after imports and a warm-up, so neither is counted. Retained memory is the traced
memory after every call and a ``gc.collect()``, less the memory before them.
"""

from __future__ import annotations

import gc
import json
import resource
import statistics
import subprocess
import sys
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from types import FunctionType, ModuleType
from typing import cast

#: Files whose blocks are the measurement's own: tracemalloc's lists, this harness's variables.
#: (Compared as plain strings: ``Snapshot.filter_traces`` would compile patterns as it goes.)
_HARNESS = frozenset({tracemalloc.__file__, __file__})

Figures = dict[str, float]


def fresh(script: str | Path, *args: str, timeout: float = 300) -> Figures:
    """Run ``python script *args`` in a new interpreter; return the JSON of its last line."""
    done = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"memory case {args} failed:\n{done.stderr}")
    figures: Figures = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def emit(figures: Figures) -> None:
    """Print *figures* as the last line of a case's output, for ``fresh`` to read."""
    print(json.dumps(figures))


def _blocks() -> tuple[int, int]:
    """Traced (bytes, blocks) live now, the harness and tracemalloc excluded."""
    size = count = 0
    for trace in tracemalloc.take_snapshot().traces:
        if trace.traceback[0].filename not in _HARNESS:
            size += trace.size
            count += 1
    return size, count


class Probe:
    """Snapshots taken inside the measured function; call the instance where it does its work."""

    def __init__(self) -> None:
        self.armed = False
        self.inside: list[tuple[int, int]] = []

    def __call__(self) -> None:
        """Record live (bytes, blocks) when armed; a no-op otherwise."""
        if self.armed:
            self.inside.append(_blocks())


def _peaks(call: Callable[[], object], calls: int) -> list[int]:
    """Traced peak above the memory live just before, for each of *calls* calls of *call*."""
    peaks = [0] * calls
    get = tracemalloc.get_traced_memory
    reset = tracemalloc.reset_peak
    for i in range(calls):
        before = get()[0]
        reset()
        call()
        peaks[i] = get()[1] - before
    return peaks


def _inside(call: Callable[[], object], probe: Probe, samples: int) -> tuple[float, float]:
    """Median (bytes, blocks) live when *probe* runs inside *call*, beyond those live before."""
    found: list[tuple[int, int]] = []
    # A collection run by the snapshots' own allocations would free earlier garbage mid-sample.
    gc.disable()
    try:
        for _ in range(samples):
            probe.inside.clear()
            gc.collect()
            before = _blocks()
            probe.armed = True
            call()
            probe.armed = False
            (during,) = probe.inside
            found.append((during[0] - before[0], during[1] - before[1]))
    finally:
        gc.enable()
    probe.inside.clear()
    return statistics.median(b for b, _ in found), statistics.median(n for _, n in found)


def per_call(
    call: Callable[[], object],
    probe: Probe | None,
    *,
    calls: int,
    retained_calls: int,
    samples: int = 30,
    warmup: int = 200,
    garbage_calls: int = 1_000,
) -> Figures:
    """
    Memory of one call of *call*, and the memory kept after *retained_calls* calls.

    *call* must call *probe* once per call, inside the measured function (its last attempt);
    with no *probe* the ``live_*`` figures are left out.
    Returns ``peak_bytes`` (median traced peak of a call above the memory before it, harness
    subtracted), ``live_bytes``/``live_blocks`` (median over *samples* calls of what is live
    inside the function beyond what was live before the call) and ``retained_bytes``/
    ``retained_blocks`` (kept after all calls and ``gc.collect()``; ~0 means no leak), and
    ``cyclic_per_call``: objects per call that only the cyclic garbage collector frees (counted
    by ``gc.collect()`` after *garbage_calls* calls with the collector off; they stay in memory
    until a collection runs).
    """
    for _ in range(warmup):
        call()
    gc.collect()
    gc.disable()
    try:
        for _ in range(garbage_calls):
            call()
    finally:
        garbage = gc.collect()
        gc.enable()
    tracemalloc.start(1)
    try:
        for _ in range(warmup):
            call()

        def nothing() -> None:
            if probe is not None:
                probe()

        harness = statistics.median(_peaks(nothing, calls))
        peak = statistics.median(_peaks(call, calls)) - harness
        live: Figures = {}
        if probe is not None:
            inside_harness = _inside(nothing, probe, samples)
            inside = _inside(call, probe, samples)
            live = {
                "live_bytes": inside[0] - inside_harness[0],
                "live_blocks": inside[1] - inside_harness[1],
            }
        gc.collect()
        start_bytes, start_blocks = _blocks()
        for _ in range(retained_calls):
            call()
        gc.collect()
        end_bytes, end_blocks = _blocks()
    finally:
        tracemalloc.stop()
    return {
        "peak_bytes": peak,
        **live,
        "retained_bytes": end_bytes - start_bytes,
        "retained_blocks": end_blocks - start_blocks,
        "retained_calls": retained_calls,
        "cyclic_per_call": garbage / garbage_calls,
    }


def constructed(make: Callable[[], object], count: int = 1_000) -> Figures:
    """Traced bytes and blocks kept per object by *count* objects built with *make*."""
    make()
    keep: list[object] = [None] * count
    tracemalloc.start(1)
    try:
        gc.collect()
        before_bytes, before_blocks = _blocks()
        for i in range(count):
            keep[i] = make()
        gc.collect()
        after_bytes, after_blocks = _blocks()
    finally:
        tracemalloc.stop()
    return {
        "bytes": (after_bytes - before_bytes) / count,
        "blocks": (after_blocks - before_blocks) / count,
    }


def owned_size(obj: object, shared: tuple[object, ...] = ()) -> int:
    """
    ``sys.getsizeof`` summed over *obj* and what it owns: items of tuples, lists and dicts, and
    the attributes of objects (``__dict__`` or ``__slots__``), each object once; the objects in
    *shared*, types, functions and modules are not counted (they are not per-state).
    """
    seen = {id(item) for item in shared}
    total = 0
    todo = [obj]
    while todo:
        item = todo.pop()
        if id(item) in seen or isinstance(item, type | FunctionType | ModuleType):
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, tuple | list):
            todo.extend(cast("tuple[object, ...] | list[object]", item))
        elif isinstance(item, dict):
            owned = cast("dict[object, object]", item)
            todo.extend(owned.keys())
            todo.extend(owned.values())
        else:
            if hasattr(item, "__dict__"):
                todo.append(vars(item))
            slots = getattr(type(item), "__slots__", ())
            todo.extend(getattr(item, slot) for slot in slots if hasattr(item, slot))
    return total


def peak_rss() -> int:
    """
    Peak resident set of this process so far, in bytes.

    Read from ``VmHWM`` in ``/proc/self/status`` where there is one: ``ru_maxrss`` of a child
    keeps the parent's high-water mark across fork and exec on Linux, so in a subprocess started
    by a big parent it shows the parent's peak, not the child's.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB elsewhere
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def ratio(ours: float, theirs: float) -> str:
    """``theirs / ours`` as text, for a 'x ours' column (``-`` when ours is 0 or less)."""
    if ours <= 0:
        return "-" if theirs <= 0 else "(ours 0)"
    return f"{theirs / ours:.1f}"
