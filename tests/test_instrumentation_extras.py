"""
Without its extra, every telemetry adapter raises ``ImportError`` naming the pip extra, while
importing the instrumentation modules still works (checked in a process where those packages
cannot be imported).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Run in a fresh interpreter: a meta path finder refuses opentelemetry, prometheus_client and
# structlog, as if they were not installed; then each adapter is called.
SCRIPT = """
import json, sys

class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {"opentelemetry", "prometheus_client", "structlog"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
import effects.durable.instrumentation as durable
import effects.instrumentation as hooks
import migrate.instrumentation as runs
from effects.durable import Engine

engine = Engine("memory://extras")
calls = {
    "effects.durable.instrumentation.attach_otel": lambda: durable.attach_otel(engine),
    "effects.durable.instrumentation.attach_prometheus": lambda: durable.attach_prometheus(engine),
    "effects.instrumentation.otel_hook": hooks.otel_hook,
    "effects.instrumentation.prometheus_hook": hooks.prometheus_hook,
    "effects.instrumentation.structlog_hook": hooks.structlog_hook,
    "migrate.instrumentation.attach_otel": runs.attach_otel,
}
said = {}
for name, call in calls.items():
    try:
        call()
    except ImportError as error:
        said[name] = [str(error), type(error.__cause__).__name__]
    else:
        said[name] = None
print(json.dumps(said))
"""


def test_each_adapter_without_its_extra_raises_import_error_naming_the_extra() -> None:
    """The message names the pip command; the cause is the missing module's error."""
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    said = json.loads(done.stdout)
    otel = "pip install 'effect-schedules[otel]'"
    prometheus = "pip install 'effect-schedules[prometheus]'"
    assert {
        "effects.durable.instrumentation.attach_otel": [
            f"attach_otel needs opentelemetry: {otel}",
            "ModuleNotFoundError",
        ],
        "effects.durable.instrumentation.attach_prometheus": [
            f"attach_prometheus needs prometheus_client: {prometheus}",
            "ModuleNotFoundError",
        ],
        "effects.instrumentation.otel_hook": [
            f"otel_hook needs opentelemetry: {otel}",
            "ModuleNotFoundError",
        ],
        "effects.instrumentation.prometheus_hook": [
            f"prometheus_hook needs prometheus_client: {prometheus}",
            "ModuleNotFoundError",
        ],
        "effects.instrumentation.structlog_hook": [
            "structlog_hook needs structlog: pip install 'effect-schedules[structlog]'",
            "ModuleNotFoundError",
        ],
        "migrate.instrumentation.attach_otel": [
            f"attach_otel needs opentelemetry: {otel}",
            "ModuleNotFoundError",
        ],
    } == said


def test_importing_the_package_roots_loads_no_telemetry_package() -> None:
    """effects, effects.durable and migrate import none of the optional packages."""
    script = (
        "import sys, effects, effects.durable, migrate;"
        " print(sorted({m.partition('.')[0] for m in sys.modules}"
        " & {'opentelemetry', 'prometheus_client', 'structlog'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "[]" == done.stdout.strip()
