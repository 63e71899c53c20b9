"""
The operator dashboard of ``effects.durable``: runs, a run, queues, and their actions, in a
browser (the ``dashboard`` extra: ``pip install 'effect-schedules[dashboard]'``).

Serve it with ``python -m effects.durable --app module:engine dashboard``, or mount
``app(engine)`` in your own Starlette or FastAPI service::

    from starlette.applications import Starlette
    from starlette.routing import Mount

    service = Starlette(routes=[Mount("/ops", app=dashboard.app(engine, token=TOKEN))])

The host opens and closes the engine (e.g. in its lifespan); the app opens nothing. Links,
assets and redirects follow the request's ``root_path``, so the app works under any mount point.
"""

from __future__ import annotations

try:
    import python_multipart  # noqa: F401  # pyright: ignore[reportUnusedImport] - forms need it
    import starlette  # noqa: F401  # pyright: ignore[reportUnusedImport]
except ImportError as missing:
    msg = (
        "effects.durable.dashboard needs the dashboard extra (Starlette, uvicorn and"
        " python-multipart): pip install 'effect-schedules[dashboard]'"
    )
    raise ImportError(msg, name=missing.name) from missing

from starlette.applications import Starlette

from effects.durable._dashboard.routes import build
from effects.durable._engine import Engine

__all__ = ["app"]


def app(engine: Engine, *, read_only: bool = False, token: str | None = None) -> Starlette:
    """
    The dashboard of *engine* as an ASGI app (Starlette) to serve or mount.

    Args:
        engine: An ``Engine`` its host has opened (``async with engine:``) and keeps open
            while the app serves; the app opens and closes nothing.
        read_only: Show no action buttons, and refuse every POST (403 ``read-only``).
        token: When given, every request needs ``Authorization: Bearer TOKEN``, or the
            HttpOnly cookie that visiting any page with ``?token=TOKEN`` once sets; without
            it the answer is 401. Give one whenever the app is reachable from another host.

    Raises:
        TypeError: If *engine* is not an ``Engine``, or *token* is given but is not a string.
        ValueError: If *token* is the empty string.
    """
    if not isinstance(engine, Engine):  # pyright: ignore[reportUnnecessaryIsInstance]
        msg = f"app() takes an effects.durable.Engine, got {engine!r}"
        raise TypeError(msg)
    if token is not None and not isinstance(token, str):  # pyright: ignore[reportUnnecessaryIsInstance]
        msg = f"token must be a string or None, got {type(token).__name__}"
        raise TypeError(msg)
    if token == "":
        msg = "token must not be empty: give a secret, or None for no token"
        raise ValueError(msg)
    return build(engine, read_only=bool(read_only), token=token)
