"""effects.http: Retry-After parsing, status classification, ApiRequestError, request_failure."""

from __future__ import annotations

import calendar
import http.client
import io
import json
import random
import urllib.error

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from effects.http import (
    TRANSIENT_STATUSES,
    ApiRequestError,
    is_transient_status,
    request_failure,
    respect_retry_after,
    retry_after,
)
from schedules import MAX_DELAY, exponential, recurs, simulate, spaced

# Sun, 06 Nov 1994 08:49:37 GMT, the RFC's own example.
RFC_EXAMPLE = float(calendar.timegm((1994, 11, 6, 8, 49, 37, 0, 0, 0)))


def message_with(value: str) -> http.client.HTTPMessage:
    """Return an HTTPMessage holding one Retry-After header."""
    headers = http.client.HTTPMessage()
    headers["Retry-After"] = value
    return headers


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("0", 0.0),
        ("1", 1.0),
        ("120", 120.0),
        ("  7\t", 7.0),
        ("007", 7.0),
        ("0000000000005", 5.0),
        ("0" * 5000 + "42", 42.0),
        ("0000000000000", 0.0),
        ("2147483648", 2147483648.0),
        ("99999999999", 2147483648.0),
        ("9" * 5000, 2147483648.0),
    ],
)
def test_delta_seconds(value: str, expected: float) -> None:
    """A non-negative integer is seconds, leading zeros and all; huge ones are 2**31 s."""
    assert expected == retry_after({"Retry-After": value}, now=0.0)


@pytest.mark.parametrize(
    "value",
    [
        "Sun, 06 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
        "sun, 06 nov 1994 08:49:37 gmt",
        "  Sun,  06 Nov 1994 08:49:37 GMT ",
    ],
)
def test_http_dates_in_all_three_forms(value: str) -> None:
    """IMF-fixdate, RFC 850 and asctime dates give the seconds from now to the date."""
    assert 90.0 == retry_after({"Retry-After": value}, now=RFC_EXAMPLE - 90.0)


def test_date_keeps_fractions_of_now() -> None:
    """The wait is the exact float difference from a fractional now."""
    assert 0.25 == retry_after({"Retry-After": "Sun, 06 Nov 1994 08:49:37 GMT"}, RFC_EXAMPLE - 0.25)


def test_date_in_the_past_is_zero() -> None:
    """A date already gone means retry now: 0.0, not a negative number."""
    assert 0.0 == retry_after({"Retry-After": "Sun, 06 Nov 1994 08:49:37 GMT"}, RFC_EXAMPLE + 500)


def test_rfc850_two_digit_year_more_than_50_years_ahead_is_in_the_past() -> None:
    """RFC 9110 5.6.7: '94' read in 2030 is 1994, and '40' read in 2030 is 2040."""
    now_2030 = float(calendar.timegm((2030, 1, 1, 0, 0, 0, 0, 0, 0)))
    assert 0.0 == retry_after({"Retry-After": "Sunday, 06-Nov-94 08:49:37 GMT"}, now_2030)
    in_2040 = calendar.timegm((2040, 11, 5, 0, 0, 0, 0, 0, 0)) - now_2030
    assert in_2040 == retry_after({"Retry-After": "Monday, 05-Nov-40 00:00:00 GMT"}, now_2030)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "   ",
        "-5",
        "+5",
        "1.5",
        "1e3",
        "5 s",
        "soon",
        "\u0661\u0662",  # Arabic-Indic digits: isdigit() is true, but not delta-seconds
        "１２",  # noqa: RUF001 - full-width digits, on purpose
        "Sun, 31 Feb 1994 08:49:37 GMT",
        "Sun, 06 Foo 1994 08:49:37 GMT",
        "Sun, 06 Nov 1994 25:49:37 GMT",
        "Sun, 06 Nov 1994 08:49:37 CET",
        "06 Nov 1994 08:49:37 GMT",
        "1, 2",
        "x" * 1_000_000,
        "Sun, 06 Nov 1994 08:49:37 GMT" + " " * 200 + "x",
        "7" * 5000 + "s",
    ],
    ids=lambda value: repr(value[:40]),
)
def test_garbage_is_none(value: str) -> None:
    """Negative, fractional, non-ASCII or malformed values are unparseable: None."""
    assert retry_after({"Retry-After": value}, now=RFC_EXAMPLE) is None


def test_missing_header_is_none() -> None:
    """No Retry-After header at all gives None."""
    assert retry_after({"Content-Type": "text/plain"}, now=0.0) is None
    assert retry_after(http.client.HTTPMessage(), now=0.0) is None


@pytest.mark.parametrize("name", ["Retry-After", "retry-after", "RETRY-AFTER"])
def test_plain_dict_is_read_without_regard_to_case(name: str) -> None:
    """A plain dict's header name may be in any case."""
    assert 3.0 == retry_after({name: "3"}, now=0.0)


def test_header_sources() -> None:
    """HTTPMessage, pairs, bytes values, bare strings and objects with .headers all work."""
    assert 4.0 == retry_after(message_with("4"), now=0.0)
    assert 5.0 == retry_after([("Content-Length", "0"), ("retry-after", "5")], now=0.0)
    assert 6.0 == retry_after([(b"Retry-After", b"6")], now=0.0)
    assert 7.0 == retry_after({"Retry-After": b"7"}, now=0.0)
    assert 8.0 == retry_after(" 8 ", now=0.0)
    assert 9.0 == retry_after(b"9", now=0.0)


def test_urllib_http_error() -> None:
    """A urllib HTTPError is read through its headers."""
    error = urllib.error.HTTPError("http://h/x", 503, "Busy", message_with("11"), io.BytesIO())
    assert 11.0 == retry_after(error, now=0.0)
    error.close()


def test_httpx_response() -> None:
    """An httpx.Response is read through its (case-insensitive) headers."""
    httpx = pytest.importorskip("httpx")
    response = httpx.Response(429, headers={"retry-after": "12"})
    assert 12.0 == retry_after(response, now=0.0)


@pytest.mark.parametrize(
    "source", [None, 42, object(), {"Retry-After": 5}, [("Retry-After",)], {1: "2"}]
)
def test_odd_inputs_are_none(source: object) -> None:
    """Objects without text headers give None rather than raising."""
    assert retry_after(source, now=0.0) is None


def test_headers_that_raise_give_none() -> None:
    """An object whose header access raises still does not make retry_after raise."""

    class Exploding:
        @property
        def headers(self) -> object:
            raise RuntimeError("boom")

    assert retry_after(Exploding(), now=0.0) is None


@pytest.mark.parametrize("now", [float("nan"), float("inf")])
def test_non_finite_now_gives_none_for_dates_only(now: float) -> None:
    """A broken clock cannot produce a date-based wait, but delta-seconds still parse."""
    assert retry_after({"Retry-After": "Sun, 06 Nov 1994 08:49:37 GMT"}, now) is None
    assert 3.0 == retry_after({"Retry-After": "3"}, now)


@settings(max_examples=300, deadline=None)
@given(st.text(), st.floats(allow_nan=True, allow_infinity=True))
def test_never_raises_for_arbitrary_text(value: str, now: float) -> None:
    """Any header text with any now gives None or a finite, non-negative float."""
    result = retry_after({"Retry-After": value}, now)
    assert result is None or (0.0 <= result < float("inf"))


@settings(max_examples=100, deadline=None)
@given(st.integers(min_value=0, max_value=2**31))
def test_every_non_negative_integer_round_trips(seconds: int) -> None:
    """Delta-seconds up to 2**31 come back exactly."""
    assert float(seconds) == retry_after({"Retry-After": str(seconds)}, now=0.0)


@pytest.mark.parametrize(
    ("status", "transient"),
    [
        (200, False),
        (301, False),
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (408, True),
        (409, False),
        (422, False),
        (425, True),
        (429, True),
        (500, True),
        (501, False),
        (502, True),
        (503, True),
        (504, True),
        (505, False),
        (None, False),
    ],
)
def test_status_classification(status: int | None, transient: bool) -> None:
    """408, 425, 429, 500, 502, 503 and 504 are transient; everything else is not."""
    assert transient == is_transient_status(status)
    assert transient == ApiRequestError(status).transient
    assert transient == ApiRequestError(status).retryable


def test_transient_statuses_constant() -> None:
    """The constant is the design's set."""
    assert frozenset({408, 425, 429, 500, 502, 503, 504}) == TRANSIENT_STATUSES


def test_explicit_transient_overrides_the_status() -> None:
    """A caller can mark a 400 transient or a 503 permanent."""
    assert ApiRequestError(400, transient=True).retryable is True
    assert ApiRequestError(503, transient=False).retryable is False
    assert ApiRequestError(None, transient=True, message="timed out").retryable is True


def test_api_request_error_fields_and_text() -> None:
    """Fields are kept, retry_after takes durations, and str names the status and the wait."""
    error = ApiRequestError(429, retry_after="1.5s", message="Too Many Requests")
    assert (429, True, 1.5, "Too Many Requests") == (
        error.status,
        error.transient,
        error.retry_after,
        error.message,
    )
    assert "HTTP 429: Too Many Requests (retry after 1.5 s)" == str(error)
    assert "no response" == str(ApiRequestError(None))


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_api_request_error_rejects_bad_retry_after(bad: float) -> None:
    """A negative, NaN or infinite retry_after is refused, naming the argument."""
    with pytest.raises(ValueError, match="retry_after"):
        ApiRequestError(503, retry_after=bad)


def test_api_request_error_is_an_effects_error() -> None:
    """It sits under the package's base error."""
    from effects.errors import EffectsError

    assert isinstance(ApiRequestError(500), EffectsError)


def test_from_urllib_http_error() -> None:
    """from_response reads status, reason, URL and Retry-After from a urllib HTTPError."""
    error = urllib.error.HTTPError("http://h/x", 503, "Busy", message_with("2"), io.BytesIO())
    built = ApiRequestError.from_response(error, now=0.0)
    error.close()
    assert (503, True, 2.0, "Busy http://h/x") == (
        built.status,
        built.transient,
        built.retry_after,
        built.message,
    )


def test_from_httpx_response_with_date() -> None:
    """from_response reads an httpx.Response, with Retry-After as a date against now."""
    httpx = pytest.importorskip("httpx")
    request = httpx.Request("GET", "http://h/y")
    response = httpx.Response(
        429, headers={"Retry-After": "Sun, 06 Nov 1994 08:49:37 GMT"}, request=request
    )
    built = ApiRequestError.from_response(response, now=RFC_EXAMPLE - 30)
    assert (429, True, 30.0, "Too Many Requests http://h/y") == (
        built.status,
        built.transient,
        built.retry_after,
        built.message,
    )


def test_from_response_without_request_or_status() -> None:
    """A response with no request and an object with no status still build an error."""
    httpx = pytest.importorskip("httpx")
    assert "Bad Request" == ApiRequestError.from_response(httpx.Response(400)).message
    assert ApiRequestError.from_response(object()).status is None


class WrapperError(Exception):
    """An adapter error keeping the provider's error as `cause`, like migrate's SourceError."""

    def __init__(self, cause: object) -> None:
        super().__init__("wrapped")
        self.cause = cause


def test_request_failure_finds_the_error_itself_cause_and_dunder_cause() -> None:
    """The error itself, its `cause` attribute and its `__cause__` chain are searched."""
    api = ApiRequestError(503)
    assert api is request_failure(api)
    assert api is request_failure(WrapperError(api))
    chained = RuntimeError("outer")
    chained.__cause__ = WrapperError(api)
    assert api is request_failure(chained)


def test_request_failure_is_none_without_one() -> None:
    """Unrelated errors and non-errors give None."""
    assert request_failure(ValueError("x")) is None
    assert request_failure(None) is None
    assert request_failure("text") is None


def test_request_failure_survives_cycles_and_stops_at_depth() -> None:
    """A cyclic chain ends; an error buried deeper than 32 links is not found."""
    first, second = WrapperError(None), WrapperError(None)
    first.cause, second.cause = second, first
    assert request_failure(first) is None
    deep: object = ApiRequestError(500)
    for _ in range(40):
        deep = WrapperError(deep)
    assert request_failure(deep) is None
    shallow: object = ApiRequestError(500)
    for _ in range(10):
        shallow = WrapperError(shallow)
    assert request_failure(shallow) is not None


def test_respect_retry_after_waits_the_longer_of_schedule_and_server() -> None:
    """The delay is max(schedule's delay, Retry-After): the server's wait is never shortened."""
    policy = respect_retry_after(exponential(1).max_delay(4), limit=60)
    assert [1.0, 2.0, 4.0, 4.0] == policy.delays(4, input=ApiRequestError(503))
    assert [3.0, 3.0, 4.0, 4.0] == policy.delays(4, input=ApiRequestError(503, retry_after=3))
    assert [30.0, 30.0] == policy.delays(2, input=ApiRequestError(429, retry_after=30))


def test_respect_retry_after_stops_only_above_the_limit() -> None:
    """Exactly the limit is honoured; a second more stops at once."""
    policy = respect_retry_after(exponential(1), limit="1 minute")
    assert [60.0] == policy.delays(1, input=ApiRequestError(429, retry_after=60))
    assert [] == policy.delays(3, input=ApiRequestError(429, retry_after=61))


def test_respect_retry_after_ignores_errors_without_it() -> None:
    """Plain errors and ApiRequestErrors without Retry-After keep the schedule's delays."""
    policy = respect_retry_after(exponential(1), limit=60)
    assert [1.0, 2.0] == policy.delays(2, input=ValueError("x"))
    assert [1.0, 2.0] == policy.delays(2, input=ApiRequestError(500))


def test_respect_retry_after_finds_wrapped_errors() -> None:
    """An ApiRequestError kept as `cause` by an adapter error is honoured too."""
    policy = respect_retry_after(exponential(1), limit=60)
    wrapped = WrapperError(ApiRequestError(503, retry_after=9))
    assert [9.0] == policy.delays(1, input=wrapped)


def test_respect_retry_after_stops_when_the_schedule_stops() -> None:
    """The wrapped schedule's end is this schedule's end, whatever the server asked."""
    policy = respect_retry_after(exponential(1).times(2), limit=60)
    assert [5.0, 5.0] == policy.delays(input=ApiRequestError(503, retry_after=5))


def test_respect_retry_after_per_step_inputs_and_json_state() -> None:
    """Each step reads its own error; state is the wrapped schedule's and survives JSON."""
    policy = respect_retry_after(exponential(1), limit=60)
    inputs = [ApiRequestError(503), ApiRequestError(429, retry_after=10), ValueError(), None]
    assert [1.0, 10.0, 4.0, 8.0] == [s.delay for s in simulate(policy, inputs)]
    state = policy.initial()
    rng = random.Random(0)
    for error in inputs[:2]:
        state, _, _ = policy.step(0.0, error, json.loads(json.dumps(state)), rng)
    assert 4.0 == policy.step(0.0, ValueError(), json.loads(json.dumps(state)), rng)[2]


def test_respect_retry_after_repr_and_output() -> None:
    """The repr is the expression that built it; the output is the wrapped schedule's."""
    policy = respect_retry_after(exponential("250ms").jittered().max_delay("4s"), limit=60.5)
    assert (
        "respect_retry_after(exponential(0.25).jittered(min=0.8, max=1.2).max_delay(4), "
        "limit=60.5)" == repr(policy)
    )
    outputs = [s.output for s in simulate(respect_retry_after(recurs(3)), [None] * 8)]
    assert [0, 1, 2, 3] == outputs


@pytest.mark.parametrize("limit", [-1, float("nan"), float("inf"), "soon"])
def test_respect_retry_after_rejects_bad_limits(limit: float | str) -> None:
    """A negative, NaN, infinite or unparseable limit is refused, naming the argument."""
    with pytest.raises(ValueError, match="limit"):
        respect_retry_after(exponential(1), limit=limit)


def test_respect_retry_after_limit_above_max_delay_is_max_delay() -> None:
    """A limit past MAX_DELAY is MAX_DELAY, so every delay stays within the schedule contract."""
    policy = respect_retry_after(exponential(1), limit="60 days")
    assert [MAX_DELAY] == policy.delays(1, input=ApiRequestError(503, retry_after=MAX_DELAY))
    assert [] == policy.delays(1, input=ApiRequestError(503, retry_after=MAX_DELAY + 1))


@settings(max_examples=200, deadline=None)
@given(
    st.floats(min_value=0, max_value=1000),
    st.floats(min_value=0, max_value=120),
    st.floats(min_value=0, max_value=120),
)
def test_respect_retry_after_law(base: float, asked: float, limit: float) -> None:
    """Within the limit the delay is >= both the server's and the schedule's; above, it stops."""
    plain = spaced(base)
    policy = respect_retry_after(plain, limit=limit)
    delays = policy.delays(3, input=ApiRequestError(503, retry_after=asked))
    if asked > limit:
        assert [] == delays
    else:
        assert [max(base, asked)] * 3 == delays


def test_api_request_error_survives_pickle() -> None:
    """The error crosses process boundaries (multiprocessing, durable logs) with its fields."""
    import pickle

    error = ApiRequestError(429, transient=True, retry_after=2.5, message="slow down")
    copy = pickle.loads(pickle.dumps(error))
    assert repr(error) == repr(copy)


def test_respect_retry_after_needs_a_schedule() -> None:
    """A value without the step contract is a TypeError at once, not a failure when stepping."""
    with pytest.raises(TypeError, match=r"initial\(\) and step"):
        respect_retry_after(1)  # type: ignore[arg-type]
