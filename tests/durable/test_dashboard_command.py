"""
``python -m effects.durable dashboard``: its first stdout line, a free port, a graceful stop,
fail-closed host and token checks, a store that does not exist, and the live stream over a real
server while another process finishes the run.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from effects.durable._dashboard.serve import is_loopback, loopback_host
from tests.durable.dashboard_support import (
    DashApp,
    Served,
    dashboard_command,
    make_dash_app,
    seed,
    served,
)

pytestmark = [pytest.mark.timeout(300)]


@pytest.fixture
def app(tmp_path: Path) -> DashApp:
    """The app with the runs of ``seed``."""
    made = make_dash_app(tmp_path / "app")
    asyncio.run(seed(made))
    return made


@pytest.fixture
def server(app: DashApp) -> Iterator[Served]:
    """The app's dashboard, served by the command."""
    yield from served(app.root)


def command(folder: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return subprocess.run(
        [sys.executable, "-m", "effects.durable", "--app", "app:engine", "dashboard", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def test_the_first_stdout_line_is_the_url_and_sigterm_stops_it_cleanly(server: Served) -> None:
    """``dashboard: http://127.0.0.1:PORT/`` (a free port), pages served; SIGTERM: exit 0."""
    for path in ("", "runs/pay-1", "queues", "api/runs", "static/dashboard.css"):
        assert 200 == httpx.get(server.url + path, timeout=30).status_code, path
    code, out, err = server.stop()
    assert (0, "") == (code, out)
    assert "GET /" not in err  # no access log
    assert "stopped" in err


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.1", "example.com"])
def test_a_host_that_is_not_loopback_needs_a_token(app: DashApp, host: str) -> None:
    """Fail closed: a non-loopback host without --token-env exits 2 before listening."""
    done = command(app.root, "--host", host)
    assert 2 == done.returncode
    assert "--token-env" in done.stderr
    assert "" == done.stdout


@pytest.mark.parametrize("value", [None, ""])
def test_a_token_variable_unset_or_empty_exits_2(app: DashApp, value: str | None) -> None:
    """--token-env VAR with VAR unset or empty: exit 2, naming VAR."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "DASH_TOKEN"}
    if value is not None:
        env["DASH_TOKEN"] = value
    done = command(app.root, "--token-env", "DASH_TOKEN", env=env)
    assert 2 == done.returncode
    assert "DASH_TOKEN" in done.stderr


def test_a_store_that_does_not_exist_is_refused_not_created(tmp_path: Path) -> None:
    """No durable.db there: exit 2, and no file is made."""
    app = make_dash_app(tmp_path / "empty")
    done = command(app.root)
    assert 2 == done.returncode
    assert "no store" in done.stderr
    assert not (app.root / "durable.db").exists()


def test_a_bad_port_is_a_usage_error(app: DashApp) -> None:
    """--port outside 0-65535: exit 2."""
    assert 2 == command(app.root, "--port", "70000").returncode


def test_with_a_token_on_any_host_every_request_needs_it(app: DashApp) -> None:
    """--host 0.0.0.0 --token-env: served; 401 without the token, 200 with it."""
    import os

    process = subprocess.Popen(
        [sys.executable, "-m", "effects.durable", "--app", "app:engine", "dashboard",
         "--host", "0.0.0.0", "--port", "0", "--token-env", "DASH_TOKEN"],
        cwd=app.root, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "DASH_TOKEN": "t0ken"},
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("dashboard: http://0.0.0.0:"), line
        port = line.rsplit(":", 1)[1].strip(" /\n")
        base = f"http://127.0.0.1:{port}/"
        assert 401 == httpx.get(base, timeout=30).status_code
        ok = httpx.get(base, headers={"Authorization": "Bearer t0ken"}, timeout=30)
        assert 200 == ok.status_code
    finally:
        process.terminate()
        process.communicate(timeout=60)


def test_without_a_token_a_request_naming_another_host_is_refused(server: Served) -> None:
    """DNS rebinding: a page of another site whose name points at 127.0.0.1 sends that name as
    Host; without a token, only loopback names are answered (reads and actions alike)."""
    port = server.url.rsplit(":", 1)[1].strip("/")
    for host in ("evil.example", f"evil.example:{port}", "", f"10.0.0.1:{port}"):
        refused = httpx.get(server.url, headers={"Host": host}, timeout=30)
        assert (400, "host: not a loopback name\n") == (refused.status_code, refused.text), host
        posted = httpx.post(
            f"{server.url}runs/pay-1/cancel",
            headers={"Host": host, "Origin": f"http://{host}"},
            data={"csrf": "x"},
            timeout=30,
        )
        assert 400 == posted.status_code
    for host in (f"localhost:{port}", "127.0.0.1", f"127.0.0.1:{port}", "localhost."):
        assert 200 == httpx.get(server.url, headers={"Host": host}, timeout=30).status_code, host


def test_loopback_host_headers() -> None:
    """Host header values that name loopback, with or without a port; others do not."""
    good = ["localhost", "LOCALHOST:80", "127.0.0.1:8765", "[::1]:8765", "[::1]", "127.1.2.3"]
    bad = [None, "", "example.com:80", "0.0.0.0:1", "[::]:1", "localhost.evil.example", "[::1"]
    assert all(map(loopback_host, good))
    assert not any(map(loopback_host, bad))


def test_loopback_is_127_slash_8_ipv6_one_and_localhost() -> None:
    """The addresses that need no token."""
    assert all(map(is_loopback, ["127.0.0.1", "127.9.8.7", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "10.0.0.1", "::", "example.com", ""]))


def events_of(url: str, *, until: str, timeout: float = 60) -> list[tuple[str, dict[str, Any]]]:
    """The Server-Sent Events of *url* until one named *until* (or the stream's end)."""
    seen: list[tuple[str, dict[str, Any]]] = []
    with httpx.stream("GET", url, timeout=timeout) as response:
        assert "text/event-stream" in response.headers["content-type"]
        name = ""
        for line in response.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                seen.append((name, json.loads(line[6:])))
                if name == until:
                    break
    return seen


def test_the_stream_ends_once_another_process_finishes_the_run(
    app: DashApp, server: Served
) -> None:
    """A change event for the waiting run; a worker process completes it; a last end event."""
    stream = f"{server.url}api/runs/{quote('pay-1', safe='')}/stream"
    with httpx.stream("GET", stream, timeout=60) as response:
        lines = response.iter_lines()
        first = [next(lines), next(lines)]
        assert "event: change" == first[0]
        assert "suspended" == json.loads(first[1][6:])["status"]
        worker = subprocess.Popen(
            [sys.executable, "-m", "effects.durable", "--app", "app:engine", "work",
             "--poll", "50ms"],
            cwd=app.root, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            rest: list[str] = []
            for line in lines:
                rest.append(line)
                if line.startswith("event: end"):
                    rest.append(next(lines))
                    break
        finally:
            worker.terminate()
            worker.wait(timeout=60)
    assert "completed" == json.loads(rest[-1][6:])["status"]
    # A finished run's stream: one last event, then it closes.
    assert [("end", "completed")] == [
        (name, data["status"]) for name, data in events_of(stream, until="never")
    ]
    assert 404 == httpx.get(f"{server.url}api/runs/nope/stream", timeout=30).status_code


def test_the_dashboard_command_serves_the_read_only_mode(app: DashApp) -> None:
    """--read-only: POSTs are 403 read-only over the real server too."""
    server = dashboard_command(app.root, "--read-only")
    try:
        refused = httpx.post(f"{server.url}runs/pay-1/cancel", data={"csrf": "x"}, timeout=30)
        assert (403, "read-only\n") == (refused.status_code, refused.text)
    finally:
        server.stop()
