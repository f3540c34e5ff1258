"""Log lines as the Prometheus exporters write them (``--log.format``, ``--log.level``).

prometheus/common's promslog (``promslog/slog.go``) configures Go's log/slog: a text
handler writing logfmt, or a JSON handler, one record per line on stderr, with the time
formatted ``2006-01-02T15:04:05.000Z07:00`` (RFC 3339, three fixed decimals) in UTC, the
level in lower case (``debug``, ``info``, ``warn``, ``error``), the call site as
``file:line`` and then ``msg``. The keys here are ``ts``, ``level``, ``source``, ``msg``;
attributes passed with ``extra=`` follow, then ``err`` for an exception's traceback.

A logfmt value is written bare when it is a non-empty run of printable characters other
than space, ``=`` and ``"``; otherwise it is quoted with backslash escapes (the rule of
Go's slog ``needsQuoting``), so a message with spaces, quotes or newlines is still exactly
one line that logfmt parsers (go-logfmt, Loki's ``logfmt`` stage, Vector's
``parse_logfmt``) read back unchanged.

Control and bidi characters in every value are written as visible escapes first
(:func:`dnsfleet.escapes.escape`), in both formats: a parser gives back ``\x1b``, never an
ESC a terminal or log viewer would obey. A traceback keeps its line breaks.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, TextIO

from dnsfleet.escapes import escape

FORMATS = ("logfmt", "json")
LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warn": logging.WARNING,
    "error": logging.ERROR,
}

# Attributes every LogRecord has: anything else on a record came from ``extra=``.
_STANDARD = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
_RESERVED = ("ts", "level", "source", "msg", "err")


def level_name(levelno: int) -> str:
    """promslog's four levels: CRITICAL is written as ``error``, anything below DEBUG as
    ``debug``."""
    if levelno >= logging.ERROR:
        return "error"
    if levelno >= logging.WARNING:
        return "warn"
    return "info" if levelno >= logging.INFO else "debug"


def timestamp(created: float) -> str:
    """``2026-11-23T15:32:31.109Z``: RFC 3339 in UTC with milliseconds."""
    secs = int(created)
    millis = int((created - secs) * 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{millis:03d}Z"


def _needs_quoting(s: str) -> bool:
    if not s:
        return True
    # A backslash alone does not force quoting (slog's rule): a bare value is literal.
    return any(c in ' ="' or not c.isprintable() for c in s)


def logfmt_value(s: str) -> str:
    if not _needs_quoting(s):
        return s
    # JSON string syntax is Go's strconv.Quote syntax for everything a log line holds
    # (\" \\ \n \t \uXXXX); parsers unquote both alike.
    return json.dumps(s, ensure_ascii=False)


def logfmt_key(k: str) -> str:
    """Keys cannot be quoted in logfmt: anything that would break the line becomes ``_``."""
    out = "".join(c if c.isprintable() and c not in ' ="' else "_" for c in k)
    return out or "_"


def fields(record: logging.LogRecord, formatter: logging.Formatter) -> dict[str, Any]:
    out: dict[str, Any] = {
        "ts": timestamp(record.created),
        "level": level_name(record.levelno),
        "source": escape(f"{record.filename}:{record.lineno}"),
        "msg": escape(record.getMessage()),
    }
    for key, value in vars(record).items():
        if key not in _STANDARD:
            # promslog renames a caller's attribute that collides with a reserved key.
            name = escape("logged_" + key if key in _RESERVED else key)
            out[name] = escape(value) if isinstance(value, str) else value
    if record.exc_info:
        out["err"] = escape(formatter.formatException(record.exc_info), keep_newlines=True)
    elif record.exc_text:
        out["err"] = escape(record.exc_text, keep_newlines=True)
    if record.stack_info:
        out["stack"] = escape(record.stack_info, keep_newlines=True)
    return out


class LogfmtFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return " ".join(
            f"{logfmt_key(k)}={logfmt_value(v if isinstance(v, str) else _text(v))}"
            for k, v in fields(record, self).items()
        )


class JSONFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return json.dumps(
            fields(record, self), ensure_ascii=False, separators=(",", ":"), default=_text
        )


def _text(v: object) -> str:
    return escape(str(v))


FORMATTERS: dict[str, type[logging.Formatter]] = {
    "logfmt": LogfmtFormatter,
    "json": JSONFormatter,
}


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """The one handler setup() installs: a second call replaces it, and leaves the handlers
    of others (a test runner's log capture) alone."""


def setup(*, level: str = "info", fmt: str = "logfmt", stream: TextIO | None = None) -> None:
    """Every logger of the process (dnsfleet's, asyncio's, aiohttp's) writes through one
    handler on stderr in the chosen format."""
    handler = _Handler(stream or sys.stderr)
    handler.setFormatter(FORMATTERS[fmt]())
    root = logging.getLogger()
    for old in root.handlers[:]:
        if isinstance(old, _Handler):
            root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(LEVELS[level])
