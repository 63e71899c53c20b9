"""
HTTP helpers for retry policies: Retry-After, status classification and a request error.

``retry_after`` reads the Retry-After header of RFC 9110 (section 10.2.3) from any headers or
response object; ``ApiRequestError`` carries a status, whether it is transient and what the server
asked for; ``request_failure`` finds one inside a wrapped error; ``respect_retry_after`` makes a
schedule wait at least what the server asked and stop when it asks too much.

Example:
    >>> from schedules import exponential
    >>> policy = respect_retry_after(exponential("250ms").max_delay("4s"), limit=60)
    >>> busy = ApiRequestError(503, retry_after=7.0)
    >>> policy.delays(3, input=busy)
    [7.0, 7.0, 7.0]
    >>> policy.delays(3, input=ApiRequestError(429, retry_after=3600.0))
    []
"""

from __future__ import annotations

import calendar
import math
import re
import time
from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeVar

# Imported under private names: only this module's own names are public here.
from effects.errors import EffectsError as _EffectsError
from schedules import MAX_DELAY as _MAX_DELAY
from schedules import DurationLike, RandomLike, Schedule, ScheduleLike, as_schedule, to_seconds
from schedules._frozen import frozen

__all__ = [
    "ApiRequestError",
    "TRANSIENT_STATUSES",
    "is_transient_status",
    "request_failure",
    "respect_retry_after",
    "retry_after",
]

_I = TypeVar("_I")
_O = TypeVar("_O")

TRANSIENT_STATUSES: Final = frozenset({408, 425, 429, 500, 502, 503, 504})
"""Statuses worth retrying unchanged: timeout, too early, too many requests, server trouble."""

# RFC 9111 section 1.2.2: a delta-seconds too large to represent is taken as 2**31.
_DELTA_SECONDS_CAP: Final = float(2**31)
_MAX_CAUSE_DEPTH: Final = 32
# Longest header value read as a date: the longest form (RFC 850, "Wednesday, ...") with slack
# for the runs of spaces lenient parsing tolerates.
_LONGEST_DATE: Final = 100

_NAMES: Final = ("retry-after", b"retry-after")
_DELTA = re.compile(r"[0-9]+", re.ASCII)
_MONTHS: Final = {
    name: number
    for number, name in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1
    )
}
_TIME = r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
# RFC 9110 section 5.6.7: IMF-fixdate, then the obsolete RFC 850 and asctime forms. Names are
# matched without regard to case and runs of spaces are tolerated, as recipients should be lenient.
_IMF_FIXDATE = re.compile(
    rf"[a-z]{{3}}, +(?P<day>[0-9]{{2}}) (?P<month>[a-z]{{3}}) (?P<year>[0-9]{{4}}) {_TIME} +gmt",
    re.ASCII | re.IGNORECASE,
)
_RFC850 = re.compile(
    rf"[a-z]{{6,9}}, +(?P<day>[0-9]{{2}})-(?P<month>[a-z]{{3}})-(?P<year>[0-9]{{2}}) {_TIME} +gmt",
    re.ASCII | re.IGNORECASE,
)
_ASCTIME = re.compile(
    rf"[a-z]{{3}} +(?P<month>[a-z]{{3}}) +(?P<day>[0-9]{{1,2}}) {_TIME} +(?P<year>[0-9]{{4}})",
    re.ASCII | re.IGNORECASE,
)


def _header_value(source: object) -> str | None:
    """Return the first Retry-After value found in *source*, or None."""
    if isinstance(source, bytes):
        return source.decode("latin-1")
    if isinstance(source, str):
        return source
    # Responses and HTTP errors (urllib, httpx, requests) expose their headers as `.headers`.
    headers: object = getattr(source, "headers", source)
    getter = getattr(headers, "get", None)
    if callable(getter):
        # Message, httpx.Headers and requests' dict are case-insensitive; a dict may not be.
        value: object = getter("Retry-After")
        if value is None and isinstance(headers, Mapping):
            mapping: Mapping[object, object] = headers  # pyright: ignore[reportUnknownVariableType]
            value = next(
                (v for k, v in mapping.items() if isinstance(k, str) and k.lower() in _NAMES),
                None,
            )
    elif isinstance(headers, Iterable) and not isinstance(headers, str | bytes):
        pairs: Iterable[Any] = headers  # pyright: ignore[reportUnknownVariableType]
        value = next(
            (v for k, v in pairs if isinstance(k, str | bytes) and k.lower() in _NAMES), None
        )
    else:
        return None
    if isinstance(value, bytes):
        return value.decode("latin-1")
    return value if isinstance(value, str) else None


def _http_date(text: str, now: float) -> float | None:
    """Return the epoch seconds of an HTTP-date, or None."""
    match = _IMF_FIXDATE.fullmatch(text) or _ASCTIME.fullmatch(text)
    rfc850 = None if match else _RFC850.fullmatch(text)
    if rfc850:
        match = rfc850
    if match is None:
        return None
    month = _MONTHS.get(match["month"].lower())
    day, year = int(match["day"]), int(match["year"])
    hour, minute, second = int(match["hour"]), int(match["minute"]), int(match["second"])
    if month is None or hour > 23 or minute > 59 or second > 60:  # 60: a leap second
        return None
    if rfc850:
        # RFC 9110 section 5.6.7: a two-digit year more than 50 years ahead is in the past.
        this_year = time.gmtime(now).tm_year
        year += this_year - this_year % 100
        if year > this_year + 50:
            year -= 100
    if not 1 <= day <= calendar.monthrange(year, month)[1]:
        return None
    return float(calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0)))


def retry_after(headers_or_response: object, now: float) -> float | None:
    """
    Return the wait in seconds that a Retry-After header asks for, or None.

    The header is read from a mapping of headers (names matched without regard to case), an
    ``http.client.HTTPMessage``, a list of ``(name, value)`` pairs, or anything with a
    ``.headers`` attribute (a urllib ``HTTPError``, an ``httpx.Response``); a ``str`` or
    ``bytes`` is taken as the header value itself. Per RFC 9110 section 10.2.3 the value is
    either delta-seconds (a non-negative integer; surrounding spaces are allowed) or an HTTP-date
    (IMF-fixdate, or the obsolete RFC 850 and asctime forms). Delta-seconds may have leading
    zeros (``"007"`` is 7 s); values too large to represent count as 2**31 s (RFC 9111 section
    1.2.2). Anything else (signs, fractions, exponents, non-ASCII digits, text longer than any
    date) is ignored. Never raises, and takes time linear in the value's length.

    Args:
        headers_or_response: Where to find the header, as above.
        now: The current wall-clock time in epoch seconds (``time.time()``), used for dates.

    Returns:
        Seconds to wait (0.0 for a date in the past), or None if the header is missing, not
        text, or unparseable (including negative or fractional numbers).

    Example:
        >>> retry_after({"retry-after": " 120 "}, now=0.0)
        120.0
        >>> retry_after({"Retry-After": "Thu, 01 Jan 1970 00:01:30 GMT"}, now=60.0)
        30.0
        >>> retry_after({"Retry-After": "soon"}, now=0.0) is None
        True
    """
    try:
        value = _header_value(headers_or_response)
        if value is None:
            return None
        text = value.strip(" \t")
        if _DELTA.fullmatch(text):
            # Leading zeros are allowed (1*DIGIT) and change nothing: "0005" is 5 s, never read
            # as a huge number. Past 10 digits it is surely over the cap; checking the length
            # first also spares int() and float() a string of thousands of digits.
            digits = text.lstrip("0") or "0"
            return (
                _DELTA_SECONDS_CAP if len(digits) > 10 else min(float(digits), _DELTA_SECONDS_CAP)
            )
        if not math.isfinite(now) or len(text) > _LONGEST_DATE:
            # No HTTP-date is this long (IMF-fixdate is 29 characters): garbage, ignored.
            return None
        when = _http_date(" ".join(text.split()) if "  " in text else text, now)
    except Exception:  # noqa: BLE001 - documented never to raise, whatever the input object does
        return None
    return None if when is None else max(0.0, when - now)


def is_transient_status(status: int | None) -> bool:
    """
    Return whether an HTTP status is worth retrying unchanged (it is in ``TRANSIENT_STATUSES``).

    Example:
        >>> [is_transient_status(s) for s in (200, 400, 404, 429, 500, 501, 503)]
        [False, False, False, True, True, False, True]
    """
    return status in TRANSIENT_STATUSES


class ApiRequestError(_EffectsError):
    """
    A failed request to a remote API: its status, whether it is transient, and Retry-After.

    Its ``retryable`` attribute is ``transient``, so a retry never repeats a request the
    classification calls permanent. Raise it where the provider is called, ``from`` the
    provider's own error.

    Args:
        status: The HTTP status, or None if no response arrived (a network error).
        transient: Whether the same request may succeed later; None classifies *status* with
            ``is_transient_status`` (a missing status is then not transient).
        retry_after: Seconds the server asked to wait (Retry-After), or None if it did not say.
        message: Free text for people, e.g. the reason phrase and the URL.

    Raises:
        ValueError: If *retry_after* is negative, NaN or infinite.

    Example:
        >>> error = ApiRequestError(503, retry_after=2.0, message="Service Unavailable")
        >>> error.transient, error.retryable, str(error)
        (True, True, 'HTTP 503: Service Unavailable (retry after 2.0 s)')
        >>> ApiRequestError(400).transient
        False
    """

    status: int | None
    transient: bool
    retry_after: float | None
    message: str

    def __init__(
        self,
        status: int | None,
        transient: bool | None = None,
        retry_after: DurationLike | None = None,
        message: str = "",
    ) -> None:
        super().__init__(status, transient, retry_after, message)
        self.status = status
        self.transient = is_transient_status(status) if transient is None else transient
        self.retry_after = (
            None if retry_after is None else to_seconds(retry_after, name="retry_after")
        )
        self.message = message

    @property
    def retryable(self) -> bool:
        """Same as ``transient``: the retry runtime never retries an error whose value is False."""
        return self.transient

    def __str__(self) -> str:
        head = "no response" if self.status is None else f"HTTP {self.status}"
        text = f"{head}: {self.message}" if self.message else head
        if self.retry_after is not None:
            text += f" (retry after {self.retry_after} s)"
        return text

    def __repr__(self) -> str:
        return (
            f"ApiRequestError({self.status!r}, transient={self.transient!r}, "
            f"retry_after={self.retry_after!r}, message={self.message!r})"
        )

    @classmethod
    def from_response(cls, response: object, now: float | None = None) -> ApiRequestError:
        """
        Build the error from a response or HTTP error: a urllib ``HTTPError``, an
        ``httpx.Response``, an ``http.client.HTTPResponse``, or anything alike.

        The status is read from ``status_code``, ``status`` or ``code``; the message is the
        reason phrase and, when known, the URL; Retry-After is parsed with ``retry_after``.

        Args:
            response: The response or error.
            now: Wall-clock epoch seconds for Retry-After dates; None means ``time.time()``.

        Example:
            >>> import email.message, urllib.error
            >>> headers = email.message.Message()
            >>> headers["Retry-After"] = "5"
            >>> error = urllib.error.HTTPError("http://x/a", 429, "Slow down", headers, None)
            >>> ApiRequestError.from_response(error)
            ApiRequestError(429, transient=True, retry_after=5.0, message='Slow down http://x/a')
        """
        status: int | None = None
        for name in ("status_code", "status", "code"):
            candidate = getattr(response, name, None)
            if isinstance(candidate, int) and not isinstance(candidate, bool):
                status = candidate
                break
        reason = next(
            (
                str(text)
                for name in ("reason_phrase", "reason", "msg")
                if (text := getattr(response, name, None)) and isinstance(text, str)
            ),
            "",
        )
        url = _url_of(response)
        message = f"{reason} {url}" if reason and url else reason or url
        wall = time.time() if now is None else now
        return cls(status, retry_after=retry_after(response, wall), message=message)


def _url_of(response: object) -> str:
    """Return the URL a response or HTTP error came from, or ''."""
    for name in ("url", "filename"):
        try:
            url = getattr(response, name, None)
        except Exception:  # noqa: BLE001 - httpx raises when a response has no request
            url = None
        if url is not None and not callable(url):
            return str(url)
    return ""


def request_failure(error: object) -> ApiRequestError | None:
    """
    Find the ``ApiRequestError`` in *error*, its ``cause`` attribute or its ``__cause__`` chain.

    Adapters (``migrate.SourceError``, ``migrate.DestinationError``) keep the provider's error
    as ``cause``; ``raise ... from`` keeps it as ``__cause__``. The search is breadth-first,
    stops after 32 links and never loops on a cyclic chain.

    Returns:
        The nearest ``ApiRequestError``, or None if there is none.

    Example:
        >>> try:
        ...     try:
        ...         raise ApiRequestError(503)
        ...     except ApiRequestError as api:
        ...         raise RuntimeError("read failed") from api
        ... except RuntimeError as wrapped:
        ...     request_failure(wrapped)
        ApiRequestError(503, transient=True, retry_after=None, message='')
    """
    if isinstance(error, ApiRequestError):  # the common case, without allocating
        return error
    queue: list[object] = [error]
    seen: set[int] = set()
    while queue and len(seen) < _MAX_CAUSE_DEPTH:
        current = queue.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ApiRequestError):
            return current
        queue.append(getattr(current, "cause", None))
        queue.append(getattr(current, "__cause__", None))
    return None


def _seconds_text(seconds: float) -> str:
    """Seconds as schedules' reprs write them: ``60`` for whole numbers, else ``0.25``."""
    return str(int(seconds)) if seconds.is_integer() else repr(seconds)


@frozen(repr=False)
class _RespectRetryAfter(Schedule[_I, _O]):
    """The schedule built by ``respect_retry_after``; its state is the wrapped schedule's."""

    schedule: Schedule[_I, _O]
    limit: float

    def initial(self) -> Any:
        return self.schedule.initial()

    def step(
        self,
        now: float,
        input: _I,  # noqa: A002 - the step contract's name for it
        state: Any,
        rng: RandomLike,
    ) -> tuple[Any, _O, float | None]:
        state, output, delay = self.schedule.step(now, input, state, rng)
        if delay is None:
            return state, output, None
        failure = request_failure(input)
        asked = None if failure is None else failure.retry_after
        if asked is None:
            return state, output, delay
        if asked > self.limit:
            return state, output, None
        return state, output, asked if asked > delay else delay

    def __repr__(self) -> str:
        return f"respect_retry_after({self.schedule!r}, limit={_seconds_text(self.limit)})"


def respect_retry_after(
    schedule: ScheduleLike[_I, _O], limit: DurationLike = 60.0
) -> Schedule[_I, _O]:
    """
    Make *schedule* wait at least what the server asked, and stop when it asks for too much.

    The schedule's input must be the error: a step whose error holds an ``ApiRequestError``
    (found with ``request_failure``) with a ``retry_after`` waits
    ``max(schedule's delay, retry_after)``, and stops instead when ``retry_after`` exceeds
    *limit*. The server's delay is never shortened, so apply caps such as ``max_delay`` to
    *schedule* before wrapping it, not after. Errors without Retry-After keep the schedule's delay;
    when *schedule* stops, this stops. State and output are *schedule*'s.

    Args:
        schedule: The policy to follow when the server says nothing (or asks for less).
        limit: The longest Retry-After to honour, in seconds, a ``timedelta`` or a string
            like ``"1 minute"``; longer requests stop the retries. At most ``MAX_DELAY``:
            larger values are taken as ``MAX_DELAY``.

    Raises:
        ValueError: If *limit* is a negative, NaN, infinite or unparseable duration.
        TypeError: If *schedule* has no ``initial()`` and ``step()`` (not a schedule).

    Example:
        >>> from schedules import exponential
        >>> policy = respect_retry_after(exponential(1).max_delay(4), limit="1 minute")
        >>> policy
        respect_retry_after(exponential(1).max_delay(4), limit=60)
        >>> policy.delays(4, input=ApiRequestError(503))
        [1.0, 2.0, 4.0, 4.0]
        >>> policy.delays(2, input=ApiRequestError(429, retry_after=30))
        [30.0, 30.0]
        >>> policy.delays(2, input=ApiRequestError(429, retry_after=61))
        []
    """
    seconds = min(to_seconds(limit, name="limit"), _MAX_DELAY)
    return _RespectRetryAfter(as_schedule(schedule), seconds)
