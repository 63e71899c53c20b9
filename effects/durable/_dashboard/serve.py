"""
The ``dashboard`` command's server: uvicorn on a socket bound before the first stdout line, so
``--port 0`` can say the port it picked; stdout carries only that line (no access log; uvicorn's
own warnings go to stderr). SIGTERM or Ctrl-C stops it gracefully (open streams are closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
import socket
import sys
from collections.abc import Generator
from typing import Final

import uvicorn

from effects.durable._engine import Engine
from effects.durable.dashboard import app

__all__ = ["bind", "is_loopback", "serve"]

#: How long a stop waits for open answers (live streams) before it closes them, in seconds.
_GRACE_S: Final = 2


def is_loopback(host: str) -> bool:
    """Whether *host* is a loopback address: 127.0.0.0/8, ``::1`` or ``localhost``."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind(host: str, port: int) -> tuple[socket.socket, str]:
    """
    A listening socket on *host* and *port* (0: a free one), and its URL.

    Raises:
        OSError: If the address cannot be bound (in use, not this machine's).
    """
    bare = host.strip("[]")
    family, kind, proto, _, address = socket.getaddrinfo(
        bare, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    bound = sock.getsockname()[1]
    shown = f"[{bare}]" if ":" in bare else bare
    return sock, f"http://{shown}:{bound}/"


class _Server(uvicorn.Server):
    """uvicorn's server with our signal handling: a first signal stops it, a second at once."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None]:
        loop = asyncio.get_running_loop()

        def stop() -> None:
            if self.should_exit:
                self.force_exit = True
            self.should_exit = True

        installed: list[signal.Signals] = []
        for signum in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.add_signal_handler(signum, stop)
                installed.append(signum)
        try:
            yield
        finally:
            for signum in installed:
                loop.remove_signal_handler(signum)


async def serve(engine: Engine, sock: socket.socket, *, read_only: bool, token: str | None) -> None:
    """Serve the dashboard of the opened *engine* on the bound *sock* until a signal stops it."""
    config = uvicorn.Config(
        app(engine, read_only=read_only, token=token),
        lifespan="off",
        access_log=False,
        log_config=None,
        log_level="warning",
        timeout_graceful_shutdown=_GRACE_S,
        server_header=False,
    )
    server = _Server(config)
    try:
        await server.serve(sockets=[sock])
    finally:
        sock.close()
        sys.stdout.flush()
