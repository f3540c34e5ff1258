"""Values in configuration messages and durations: how a value is described and quoted in
an error (never growing with the value), and Go's duration syntax read and written as the
Prometheus ecosystem writes it. Pure; imports only the escape every output applies."""

from __future__ import annotations

import math
import re
from typing import Any

from dnsfleet.escapes import escape


def describe(v: Any) -> str:
    if v is None:
        return "nothing"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, str):
        return f"string {quote(v)}"
    if isinstance(v, int | float):
        return f"{'integer' if isinstance(v, int) else 'number'} {preview(v)}"
    if isinstance(v, dict):
        return "a mapping"
    return "a list" if isinstance(v, list) else type(v).__name__


# Values in messages are cut to this many characters: a message must never grow with the
# value (an alias bomb's list, stringified whole, once took minutes and gigabytes).
MAX_PREVIEW = 80


def preview(v: Any) -> str:
    """``v`` for a message: containers by kind (never walked), scalars cut to MAX_PREVIEW,
    control and bidi characters escaped (a value is printed to a terminal or a log)."""
    if isinstance(v, dict | list | tuple | set):
        return describe(v) if isinstance(v, dict | list) else type(v).__name__
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 256:
        return "a very large integer"  # str() of a huge int is quadratic
    s = str(v)
    if len(s) > MAX_PREVIEW:
        return f"{escape(s[:MAX_PREVIEW])}... ({len(s)} characters)"
    return escape(s)


def quote(v: Any) -> str:
    if isinstance(v, dict | list | tuple | set):
        return preview(v)
    return '"' + preview(v).replace('"', '\\"') + '"'


# Go's time.ParseDuration syntax, as the Prometheus ecosystem writes durations: an optional
# sign, then one or more number+unit parts (`1m30s`, `500us`, `1.5h`); "0" alone is the one
# duration without a unit.
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_BARE_NUMBER = re.compile(r"[-+]?(\d+(\.\d*)?|\.\d+)")


def parse_duration(value: Any) -> float | None:
    """``500ms``, ``2s``, ``1m30s``, ``-1s``, ``0`` -> seconds, as Go's time.ParseDuration
    reads them. None for anything else: a number without a unit (YAML's ``5`` or ``"5"``:
    is it seconds or milliseconds?), NaN, infinities, units Go does not know (``1d``)."""
    if value == 0 and type(value) is int:  # YAML's 0, as "0"
        return 0.0
    if not isinstance(value, str):
        return None
    text = value.strip()
    sign = 1.0
    if text[:1] in ("-", "+"):
        sign, text = (-1.0 if text[0] == "-" else 1.0), text[1:]
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if not m:
            return None
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    return sign * total if text and math.isfinite(total) else None


def format_duration(seconds: float) -> str:
    """``seconds`` as Go's time.Duration.String() writes it (``1m30s``, ``500ms``, ``0s``):
    what /config shows, and what :func:`parse_duration` reads back to the same value."""
    ns = round(seconds * 1e9)
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns == 0:
        return "0s"
    if ns < 1_000_000_000:
        for unit, size in (("ms", 1_000_000), ("us", 1_000), ("ns", 1)):
            if ns >= size:
                return sign + _decimal(ns, size) + unit
    hours, rest = divmod(ns, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    text = (f"{hours}h" if hours else "") + (f"{minutes}m" if hours or minutes else "")
    return sign + text + _decimal(rest, 1_000_000_000) + "s"


def _decimal(value: int, size: int) -> str:
    whole, frac = divmod(value, size)
    digits = f"{frac:0{len(str(size)) - 1}d}".rstrip("0") if frac else ""
    return f"{whole}.{digits}" if digits else str(whole)


def duration_problem(value: Any) -> str:
    """Why ``value`` is no duration, with the likely fix: ``5`` -> did you mean "5s"?"""
    text = value.strip() if isinstance(value, str) else value
    if isinstance(text, int | float) and not isinstance(text, bool) and math.isfinite(text):
        text = f"{text:g}" if isinstance(text, float) else str(text)
    if isinstance(text, str) and _BARE_NUMBER.fullmatch(text):
        return (
            f"invalid duration {quote(value)}: a duration needs a unit "
            f'(did you mean "{text}s"? units: ns, us, ms, s, m, h)'
        )
    return f"invalid duration {quote(value)} (use a number and a unit: 500ms, 2s, 1m)"
