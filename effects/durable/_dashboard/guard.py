"""
The security of every request, before any route sees it (an ASGI middleware):

- With a token, every request needs ``Authorization: Bearer T`` or the cookie that ``?token=T``
  sets once (HttpOnly, SameSite=Strict, Path = the mount point; the answer is a 303 to the URL
  without it). A missing or wrong token is 401 with ``WWW-Authenticate: Bearer``.
- A POST is refused (403, one line) when the dashboard is read-only, or when its ``Origin`` (or,
  without one, its ``Referer``) is not this dashboard's origin. Its CSRF field is the route's to
  check (``routes``): it is in the body.
- Every answer carries ``Content-Security-Policy: default-src 'self'`` and its companions.
"""

from __future__ import annotations

import hmac
from typing import Final
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CSRF_COOKIE", "TOKEN_COOKIE", "Guard", "mount_point", "same_token"]

#: The cookie ``?token=T`` sets.
TOKEN_COOKIE: Final = "effects_durable_token"  # noqa: S105 - a name, not a secret
#: The cookie whose value every form's ``csrf`` field must repeat.
CSRF_COOKIE: Final = "effects_durable_csrf"

_SECURITY_HEADERS: Final = (
    (b"content-security-policy", b"default-src 'self'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
)
_UNAUTHORIZED: Final = (
    "unauthorized: this dashboard needs its token (Authorization: Bearer TOKEN, or ?token=TOKEN"
    " once)\n"
)


def mount_point(scope: Scope) -> str:
    """Where the dashboard is mounted: the request's ``root_path`` (``""`` at the top)."""
    root: str = scope.get("root_path", "")
    return root.rstrip("/")


def same_token(given: str, token: str) -> bool:
    """Whether *given* is *token*, compared in constant time."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), token.encode("utf-8"))


class Guard:
    """The middleware: see the module docstring. *token* ``None``: no token is asked for."""

    def __init__(self, app: ASGIApp, *, token: str | None, read_only: bool) -> None:
        self.app = app
        self.token = token
        self.read_only = read_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in _SECURITY_HEADERS:
                    headers.raw.append((name, value))
            await send(message)

        refusal = self._refusal(scope)
        if refusal is not None:
            status, body, extra = refusal
            await _answer(secured, status, body, extra)
            return
        await self.app(scope, receive, secured)

    def _refusal(self, scope: Scope) -> tuple[int, str, list[tuple[bytes, bytes]]] | None:
        """Why this request is refused, as ``(status, body, headers)``; ``None``: let it in."""
        headers = Headers(scope=scope)
        if self.token is not None:
            query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), True)
            given = [value for key, value in query if key == "token"]
            if given:
                if not same_token(given[-1], self.token):
                    return 401, _UNAUTHORIZED, [(b"www-authenticate", b"Bearer")]
                return self._cookie_redirect(scope, [(k, v) for k, v in query if k != "token"])
            if not self._authorized(headers, scope):
                return 401, _UNAUTHORIZED, [(b"www-authenticate", b"Bearer")]
        if scope.get("method") == "POST":
            if self.read_only:
                return 403, "read-only\n", []
            if not _same_origin(scope, headers):
                return 403, "cross-origin\n", []
        return None

    def _authorized(self, headers: Headers, scope: Scope) -> bool:
        assert self.token is not None
        authorization = headers.get("authorization")
        if authorization is not None:
            scheme, _, credentials = authorization.partition(" ")
            return scheme.lower() == "bearer" and same_token(credentials.strip(), self.token)
        for name, value in _cookies(headers):
            if name == TOKEN_COOKIE:
                return same_token(value, self.token)
        return False

    def _cookie_redirect(
        self, scope: Scope, rest: list[tuple[str, str]]
    ) -> tuple[int, str, list[tuple[bytes, bytes]]]:
        """``?token=T`` was right: set the cookie, and send the browser to the URL without it."""
        assert self.token is not None
        raw = scope.get("raw_path")
        path = raw.decode("latin-1") if isinstance(raw, bytes) else quote(scope["path"])
        location = path + (f"?{urlencode(rest)}" if rest else "")
        secure = "; Secure" if scope.get("scheme") == "https" else ""
        cookie = (
            f"{TOKEN_COOKIE}={quote(self.token, safe='')}; Path={mount_point(scope) or '/'};"
            f" HttpOnly; SameSite=Strict{secure}"
        )
        return (
            303,
            "",
            [(b"location", location.encode("latin-1")), (b"set-cookie", cookie.encode())],
        )


def _cookies(headers: Headers) -> list[tuple[str, str]]:
    """The request's cookies, values percent-decoded (as ``_cookie_redirect`` encoded them)."""
    found: list[tuple[str, str]] = []
    for header in headers.getlist("cookie"):
        for part in header.split(";"):
            name, sep, value = part.strip().partition("=")
            if sep:
                found.append((name, unquote(value)))
    return found


def _same_origin(scope: Scope, headers: Headers) -> bool:
    """Whether the POST comes from a page of this dashboard's origin (its ``Host``)."""
    host = headers.get("host")
    if not host:
        return False
    expected = f"{scope.get('scheme', 'http')}://{host}".lower()
    origin = headers.get("origin")
    if origin is not None:
        return origin.lower() == expected
    referer = headers.get("referer")
    if not referer:
        return False
    parts = urlsplit(referer)
    return f"{parts.scheme}://{parts.netloc}".lower() == expected


async def _answer(send: Send, status: int, body: str, headers: list[tuple[bytes, bytes]]) -> None:
    data = body.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", str(len(data)).encode()),
                (b"cache-control", b"no-store"),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": data})
