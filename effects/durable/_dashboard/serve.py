"""
The ``dashboard`` command's server: uvicorn on a socket bound before the first stdout line, so
``--port 0`` can say the port it picked; stdout carries only that line (no access log; uvicorn's
own warnings go to stderr). SIGTERM or Ctrl-C stops it gracefully (open streams are closed).

Without a token the command serves loopback only, and answers only requests whose ``Host`` is a
loopback name: a page of another site whose name its DNS points at 127.0.0.1 (DNS rebinding) is
the browser's same origin as that name, so the same-origin and CSRF checks alone would let it
read runs and post actions; it gets 400 ``host: not a loopback name``.
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
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from effects.durable._engine import Engine
from effects.durable.dashboard import app

__all__ = ["bind", "is_loopback", "loopback_host", "serve"]

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


def loopback_host(header: str | None) -> bool:
    """Whether a ``Host`` header (``name``, ``name:port``, ``[v6]:port``) names loopback."""
    if not header:
        return False
    name = header.strip()
    if name.startswith("["):
        name = name[1 : name.find("]")] if "]" in name else ""
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    return is_loopback(name.rstrip("."))


class _LoopbackOnly:
    """The middleware of a command serving without a token: see the module docstring."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not loopback_host(Headers(scope=scope).get("host")):
            body = b"host: not a loopback name\n"
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [
                        (b"content-type", b"text/plain; charset=utf-8"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


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
    served: ASGIApp = app(engine, read_only=read_only, token=token)
    if token is None:
        served = _LoopbackOnly(served)
    config = uvicorn.Config(
        served,
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
