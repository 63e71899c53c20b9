"""Text for people: times, counted nouns, and source data made safe to print on a terminal."""

from __future__ import annotations

import datetime
import re

__all__ = [
    "format_time",
    "natural_key",
    "plural",
    "printable",
    "storable",
    "stored_text",
    "unstorable_part",
]


def format_time(timestamp: float) -> str:
    """
    Format *timestamp* (epoch seconds) as ISO-8601 UTC with second precision.

    Example:
        >>> format_time(0)
        '1970-01-01T00:00:00Z'
    """
    moment = datetime.datetime.fromtimestamp(timestamp, tz=datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def plural(count: int, noun: str, nouns: str | None = None) -> str:
    """
    *count* (with thousands separators) and *noun*, or *nouns* (default: *noun* + ``s``)
    unless *count* is 1.

    Example:
        >>> plural(1, "item"), plural(0, "item"), plural(12345, "failed item")
        ('1 item', '0 items', '12,345 failed items')
        >>> plural(2, "identity", "identities")
        '2 identities'
    """
    if count == 1:
        return f"{count:,} {noun}"
    return f"{count:,} {nouns if nouns is not None else noun + 's'}"


# C0 controls (escape sequences start with ESC), DEL, C1 controls (0x9b is a one-byte CSI), line
# and paragraph separators, and the bidirectional overrides that reorder what a terminal shows.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """
    *text* with control characters and terminal escape sequences shown as escapes.

    Source data reaches ``migrate failures``, ``run`` and ``status`` through error messages and
    identities; printed raw, an ``ESC [`` sequence in a CSV cell could move the cursor, recolour
    or retitle the terminal, or hide the lines above it. Newlines and tabs become ``\\n`` and
    ``\\t`` too, so one value stays on one line. Backslashes are kept as they are.

    Example:
        >>> printable("ok\\x1b[2J\\ttab\\nnew line\\u202e")
        'ok\\\\x1b[2J\\\\ttab\\\\nnew line\\\\u202e'
    """
    if text.isprintable():
        return text
    return _UNPRINTABLE.sub(_escape, text)


_DIGITS = re.compile(r"([0-9]+)")


def natural_key(identity: str) -> tuple[tuple[int, int, str, str], ...]:
    """
    Sort key putting identities in natural order: runs of digits compare as numbers (before
    text at the same place), the rest as text; equal numbers by their text (``"007"`` first).

    Runs of digits are compared as text (fewer significant digits first, then digit by digit),
    never converted to ``int``: an identity of any length works, beyond Python's limit on
    integer conversions (``sys.get_int_max_str_digits()``, 4300 digits by default).

    Example:
        >>> sorted(["13", "7", "b2", "b10", "a", "100", "007"], key=natural_key)
        ['007', '7', '13', '100', 'a', 'b2', 'b10']
    """
    parts = _DIGITS.split(identity)
    # split() with a group alternates text, digits, text, ...: odd positions are digit runs.
    key: list[tuple[int, int, str, str]] = []
    for index, part in enumerate(parts):
        if not part:
            continue
        if index % 2:
            significant = part.lstrip("0")
            key.append((0, len(significant), significant, part))
        else:
            key.append((1, 0, part, ""))
    return tuple(key)


def storable(text: str) -> bool:
    """
    Whether *text* can be stored as it is, in every store: it encodes as UTF-8, so it holds no
    lone surrogate (which JSON's ``\\ud800`` escapes produce, and which no database accepts), and
    it holds no U+0000 (NUL), which PostgreSQL's ``text`` and ``jsonb`` cannot hold.

    Example:
        >>> storable("Zoë"), storable("a\\ud800"), storable("a\\x00b")
        (True, False, False)
    """
    if "\x00" in text:
        return False
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def unstorable_part(text: str) -> str:
    """
    What in *text* no store can hold, for a message: ``"U+0000 (NUL)"`` or ``"a lone
    surrogate"`` (the first of the two when it holds both).

    Example:
        >>> unstorable_part("a\\x00"), unstorable_part("a\\udc80")
        ('U+0000 (NUL)', 'a lone surrogate')
    """
    return "U+0000 (NUL)" if "\x00" in text else "a lone surrogate"


def stored_text(text: str) -> str:
    """
    *text* made storable: lone surrogates become ``\\udXXX`` escapes and U+0000 becomes
    ``\\x00``; other text is kept.

    Example:
        >>> stored_text("a\\ud800b"), stored_text("a\\x00b")
        ('a\\\\ud800b', 'a\\\\x00b')
    """
    if storable(text):
        return text
    return text.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")
