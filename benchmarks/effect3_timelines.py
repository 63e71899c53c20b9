"""
Timelines of ``schedules`` and ``effects.repeat`` beside Effect 3's own, side by side (opt-in).

Run: ``.venv/bin/python benchmarks/effect3_timelines.py --effect-dir DIR``, where DIR holds
``node_modules/effect`` (``mkdir DIR && cd DIR && npm install effect@3``) and ``node`` is on
PATH. Not part of CI: without node or the package it says so and exits 0.

Each case runs the same schedule over the same attempt timeline (attempt durations, a clock
that may start far from 0) in both: ours through ``schedules.simulate`` or ``effects.repeat``
under a ``VirtualClock``, Effect's by stepping the schedule (``Schedule.step``) or running
``Effect.repeat`` under its ``TestClock``. Times are compared in whole milliseconds. Cases where
we differ on purpose (the table of docs/explanation/differences-from-effect.md) are marked so;
any other difference is a bug.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from effects import repeat, use_clock
from effects.testing import VirtualClock
from schedules import (
    Schedule,
    cron,
    exponential,
    fibonacci,
    fixed,
    forever,
    recurs,
    simulate,
    spaced,
)

JS = r"""
import { Effect, Schedule, TestClock, TestContext, Clock, Fiber } from "effect"
import * as SD from "effect/ScheduleDecision"
import * as Intervals from "effect/ScheduleIntervals"

const go = (e) => e !== "stop"
const schedules = {
  "within-vs-upTo": () => Schedule.upTo(Schedule.spaced("200 millis"), "300 millis"),
  "times-in-union": () => Schedule.union(
    Schedule.intersect(Schedule.whileInput(Schedule.spaced("1 second"), go), Schedule.recurs(2)),
    Schedule.spaced("5 seconds")),
  "recurs-in-union": () => Schedule.union(Schedule.recurs(1), Schedule.spaced("1 second")),
  "reset-after-at-1e6": () => Schedule.resetAfter(
    Schedule.intersect(Schedule.forever, Schedule.spaced("100 millis")), "800 millis"),
  "fixed-slow": () => Schedule.fixed("1 second"),
  "fixed-overrun": () => Schedule.fixed("1 second"),
  "exponential-and-spaced": () => Schedule.intersect(
    Schedule.exponential("100 millis"), Schedule.spaced("300 millis")),
  "fibonacci": () => Schedule.fibonacci("50 millis"),
  "cron-daily-utc": () => Schedule.cron("0 3 * * *", "UTC"),
  "cron-either-day": () => Schedule.cron("0 0 13 * 5", "UTC"),
  "cron-leap-day": () => Schedule.cron("0 0 29 2 *", "UTC"),
  "cron-weekdays-new-york": () => Schedule.cron("0 9 * * mon-fri", "America/New_York"),
  "cron-fall-back-berlin": () => Schedule.cron("*/30 * * * *", "Europe/Berlin"),
  "cron-spring-gap-berlin": () => Schedule.cron("30 2 * * *", "Europe/Berlin"),
}

function timeline(s, inputs, took, start) {
  let state = s.initial, started = start, out = []
  for (let k = 0; k < inputs.length; k++) {
    const now = started + (took[k] ?? 0)
    const [st, , d] = Effect.runSync(s.step(now, inputs[k], state))
    state = st
    if (SD.isDone(d)) { out.push([started, now, null]); break }
    const delay = Intervals.start(d.intervals) - now
    out.push([started, now, delay])
    started = now + delay
  }
  return out
}

async function repeated(options, took, failAt) {
  const starts = []
  let n = 0
  const run = Effect.gen(function* () {
    starts.push(yield* Clock.currentTimeMillis)
    n += 1
    if (took) yield* Effect.sleep(took)
    if (failAt && n === failAt) return yield* Effect.fail("boom")
    return n
  })
  const program = Effect.gen(function* () {
    const fiber = yield* Effect.fork(Effect.either(Effect.repeat(run, options)))
    yield* TestClock.adjust("10 hours")
    return yield* Fiber.join(fiber)
  })
  const result = await Effect.runPromise(program.pipe(Effect.provide(TestContext.TestContext)))
  return { starts, failed: result._tag === "Left" }
}

const cases = JSON.parse(process.argv[2])
const results = {}
for (const [name, c] of Object.entries(cases.schedules)) {
  results[name] = timeline(schedules[name](), c.inputs, c.took, c.start)
}
const repeats = {
  "repeat-until-3": [
    { schedule: Schedule.spaced("1 second"), until: (n) => n >= 3, times: 60 }, 300],
  "repeat-times-2": [{ times: 2 }, 0],
  "repeat-fails-at-3": [{ schedule: Schedule.spaced("1 second"), times: 10 }, 100, 3],
  "repeat-fixed": [{ schedule: Schedule.fixed("1 second"), times: 3 }, 300],
  "repeat-times-0": [{ times: 0, until: (n) => n >= 5 }, 0],
}
for (const [name, [options, took, failAt]] of Object.entries(repeats)) {
  results[name] = await repeated(options, took, failAt)
}
console.log(JSON.stringify(results))
"""

SCHEDULES: dict[str, tuple[Schedule[Any, Any], list[Any], list[float], float]] = {
    "within-vs-upTo": (spaced(0.2).within(0.3), [None] * 8, [], 0.0),
    "times-in-union": (
        spaced(1).while_input(lambda e: e != "stop").times(2) | spaced(5),
        ["go", "stop", "go", "go", "go"],
        [],
        0.0,
    ),
    "recurs-in-union": (recurs(1) | spaced(1), [None] * 4, [], 0.0),
    "reset-after-at-1e6": ((forever() & spaced(0.1)).reset_after(0.8), [None] * 12, [], 1e6),
    "fixed-slow": (fixed(1), [None] * 5, [0.3] * 5, 0.0),
    "fixed-overrun": (fixed(1), [None] * 5, [1.5, 0.2, 0.2, 2.5, 0.1], 0.0),
    "exponential-and-spaced": (
        exponential(0.1) & spaced(0.3),
        [None] * 6,
        [0.05] * 6,
        12_345.0,
    ),
    "fibonacci": (fibonacci(0.05), [None] * 8, [], 0.0),
    # cron reads epoch seconds: these start at fixed instants (2026-03-28 12:00 UTC and so on).
    "cron-daily-utc": (cron("0 3 * * *"), [None] * 5, [1.5, 0.0, 30.0], 1_774_699_200.0),
    "cron-either-day": (cron("0 0 13 * 5"), [None] * 7, [], 1_772_323_200.0),
    "cron-leap-day": (cron("0 0 29 2 *"), [None] * 3, [], 1_772_323_200.0),
    "cron-weekdays-new-york": (
        cron("0 9 * * mon-fri", tz="America/New_York"),
        [None] * 6,
        [],
        1_772_798_400.0,
    ),
    "cron-fall-back-berlin": (
        cron("*/30 * * * *", tz="Europe/Berlin"),
        [None] * 6,
        [],
        1_792_885_500.0,
    ),
    "cron-spring-gap-berlin": (
        cron("30 2 * * *", tz="Europe/Berlin"),
        [None] * 3,
        [],
        1_774_699_200.0,
    ),
}
# Differences docs/explanation/differences-from-effect.md lists; anything else is a bug.
ON_PURPOSE = {
    "within-vs-upTo": "within never waits past the limit; upTo's last wait does",
    "fixed-overrun": "after an overrun our grid restarts; Effect's keeps its phase",
    "repeat-times-0": "times=0 is a single run; Effect ignores times: 0",
    "cron-spring-gap-berlin": "a skipped 02:30 fires at 03:00 (after the gap); Effect's at 03:30",
    "cron-leap-day": "a wait of years is cut at MAX_DELAY (a wake-up; the output keeps the due)",
}
REPEATS: dict[str, tuple[Callable[[], Any], float, int | None]] = {
    "repeat-until-3": (lambda: repeat(spaced(1), until=lambda n: n >= 3, times=60), 0.3, None),
    "repeat-times-2": (lambda: repeat(times=2), 0.0, None),
    "repeat-fails-at-3": (lambda: repeat(spaced(1), times=10), 0.1, 3),
    "repeat-fixed": (lambda: repeat(fixed(1), times=3), 0.3, None),
    "repeat-times-0": (lambda: repeat(times=0, until=lambda n: n >= 5), 0.0, None),
}


def ms(seconds: float) -> int:
    """Seconds as whole milliseconds."""
    return round(seconds * 1000)


def ours_schedule(name: str) -> list[list[int | None]]:
    """Our timeline of case *name*: ``[started, now, delay]`` per step, in milliseconds."""
    schedule, inputs, took, start = SCHEDULES[name]
    steps = simulate(
        schedule,
        inputs,
        seed=0,
        start=start,
        attempt_time=lambda k: took[k - 1] if k <= len(took) else 0.0,
    )
    return [[ms(s.started), ms(s.now), None if s.delay is None else ms(s.delay)] for s in steps]


def ours_repeat(name: str) -> dict[str, Any]:
    """Our run starts of repeat case *name*, in milliseconds, and whether it failed."""
    make, took, fail_at = REPEATS[name]
    clock = VirtualClock()
    starts: list[float] = []

    def run() -> int:
        starts.append(clock.now())
        clock.advance(took)
        if len(starts) == fail_at:
            raise RuntimeError("boom")
        return len(starts)

    failed = False
    with use_clock(clock):
        try:
            make()(run)()
        except RuntimeError:
            failed = True
    return {"starts": [ms(s) for s in starts], "failed": failed}


def main() -> int:
    """Compare every case and print one line each; exit 1 on an unexpected difference."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--effect-dir", default=os.environ.get("EFFECT3_DIR", ""))
    directory = Path(parser.parse_args().effect_dir or ".")
    node = shutil.which("node")
    if node is None or not (directory / "node_modules" / "effect").is_dir():
        print("skipped: needs node on PATH and --effect-dir holding node_modules/effect (effect@3)")
        return 0
    cases = {
        "schedules": {
            name: {"inputs": inputs, "took": [ms(t) for t in took], "start": ms(start)}
            for name, (_, inputs, took, start) in SCHEDULES.items()
        }
    }
    script = directory / "_effect3_timelines.mjs"
    script.write_text(JS, encoding="utf-8")
    try:
        shown = subprocess.run(
            [node, str(script), json.dumps(cases)],
            cwd=directory,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
    finally:
        script.unlink()
    theirs: dict[str, Any] = json.loads(shown.stdout)
    version = json.loads((directory / "node_modules" / "effect" / "package.json").read_text())
    print(f"Effect {version['version']} beside schedules/effects; times in ms")
    unexpected = 0
    for name in [*SCHEDULES, *REPEATS]:
        ours = ours_schedule(name) if name in SCHEDULES else ours_repeat(name)
        same = ours == theirs[name]
        verdict = "same" if same else f"differs on purpose: {ON_PURPOSE.get(name)}"
        if not same and name not in ON_PURPOSE:
            verdict, unexpected = "DIFFERS", unexpected + 1
        print(f"{name:<24} {verdict}")
        if not same:
            print(f"    ours:   {ours}\n    Effect: {theirs[name]}")
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
