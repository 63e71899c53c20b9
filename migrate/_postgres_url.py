"""
PostgreSQL store URLs: our options split from libpq's, and the URL shown with its password masked.

Kept apart from the store itself so a bad URL is a `ConfigError` naming the option even where
psycopg is not installed.
"""

from __future__ import annotations

import re
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs

from migrate._errors import ConfigError

__all__ = ["DEFAULT_SCHEMA", "PostgresOptions", "is_postgres_url", "masked", "parse_postgres_url"]

#: The schema a URL without ``?schema=`` names.
DEFAULT_SCHEMA: Final = "migrate"
_OPTIONS: Final = ("schema", "reconnect_timeout_ms", "options")
_SCHEMA_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
#: Seconds libpq waits for a connection unless the URL says (its own default waits forever).
_CONNECT_TIMEOUT: Final = "10"


@attrs.frozen
class PostgresOptions:
    """
    The store's own options from its URL (every other query parameter goes to libpq).

    Attributes:
        schema: The schema holding the store's tables (created on demand).
        reconnect_timeout_ms: How long a call keeps reconnecting to a server it lost (a
            restart, a failover) before it fails, in milliseconds; 0: fail at once.
        server_options: libpq's ``options`` from the URL (server settings), kept beside our
            ``search_path``.
    """

    schema: str = DEFAULT_SCHEMA
    reconnect_timeout_ms: int = 30_000
    server_options: str = ""


def is_postgres_url(url: str) -> bool:
    """
    Whether *url* names a PostgreSQL store (``postgresql://`` or ``postgres://``).

    Example:
        >>> is_postgres_url("postgresql://db.internal/app"), is_postgres_url("sqlite:///s.db")
        (True, False)
    """
    return url.startswith(("postgresql://", "postgres://"))


def masked(url: str) -> str:
    """
    *url* with its password replaced by ``***``.

    Example:
        >>> masked("postgresql://ada:s3cret@db:5432/app?schema=m")
        'postgresql://ada:***@db:5432/app?schema=m'
        >>> masked("postgres://ada:p@ss:w0rd@db?x=1"), masked("postgresql://ada@db/app")
        ('postgres://ada:***@db?x=1', 'postgresql://ada@db/app')
    """
    scheme, sep, rest = url.partition("://")
    # The authority ends at the first "/", "?" or "#"; its user info at its last "@".
    end = min((i for i in map(rest.find, "/?#") if i >= 0), default=len(rest))
    userinfo, at, host = rest[:end].rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.partition(":")[0]
    return f"{scheme}{sep}{user}:***@{host}{rest[end:]}"


def parse_postgres_url(url: str) -> tuple[str, PostgresOptions]:
    """
    Split ``postgresql://user@host:5432/db?schema=s`` into a libpq URL and our options.

    Our options: ``schema`` (default ``migrate``; letters, digits and underscores, created if
    missing), ``reconnect_timeout_ms`` (default 30000) and ``options`` (server settings, kept
    beside the store's ``search_path``). Every other parameter (``sslmode``, ``connect_timeout``
    (default here 10 seconds), ...) goes to libpq, as do the PG* environment variables and
    ``~/.pgpass`` for what the URL leaves out, such as the password.

    Raises:
        ConfigError: If *url* is not a PostgreSQL URL or one of our options is invalid; the
            message shows the URL with its password masked.

    Example:
        >>> libpq, options = parse_postgres_url("postgresql://ada@db/app?schema=m&sslmode=require")
        >>> libpq, options.schema
        ('postgresql://ada@db/app?sslmode=require&connect_timeout=10', 'm')
    """
    if not is_postgres_url(url):
        msg = f"a PostgreSQL store URL looks like 'postgresql://user@host:5432/db', got {url!r}"
        raise ConfigError(msg)
    shown = masked(url)
    try:
        parts = urlsplit(url)
        _ = parts.port  # a port that is not a number raises here
    except ValueError as error:
        raise ConfigError(f"store {shown!r} is not a valid URL: {error}") from None
    ours: dict[str, str] = {}
    rest: list[tuple[str, str]] = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in _OPTIONS:
            ours[key] = value
        else:
            rest.append((key, value))
    schema = ours.get("schema", DEFAULT_SCHEMA)
    if not _SCHEMA_NAME.fullmatch(schema):
        msg = (
            f"store {shown!r}: schema must be 1 to 48 letters, digits or underscores, not "
            f"starting with a digit, got {schema!r}"
        )
        raise ConfigError(msg)
    timeout = ours.get("reconnect_timeout_ms", "30000")
    if not timeout.isdigit():
        msg = (
            f"store {shown!r}: reconnect_timeout_ms must be a whole number of milliseconds "
            f">= 0, got {timeout!r}"
        )
        raise ConfigError(msg)
    if not any(key == "connect_timeout" for key, _ in rest):
        rest.append(("connect_timeout", _CONNECT_TIMEOUT))
    libpq = urlunsplit(("postgresql", parts.netloc, parts.path, urlencode(rest), ""))
    return libpq, PostgresOptions(schema, int(timeout), ours.get("options", ""))
