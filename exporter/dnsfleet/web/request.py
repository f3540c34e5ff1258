"""The HTTP/1.1 request parser, apart from the connection that feeds it (as h11 and aiohttp
keep theirs): bytes in, a request head or a refusal out, no I/O and no clock, so the framing
rules can be read and tested alone. ``server.HTTPProtocol`` drives it.

:func:`frame` finds one request in a connection's buffer: a TLS ClientHello on the plain
port, the head's end and size, its syntax (:func:`parse_head`), the body's framing
(Content-Length only; chunked is refused), ``Expect``, and the target's form.
:func:`split_target` decodes the path and query once the body is in; :func:`keeps_alive`
reads ``Connection`` as HTTP/1.0 and 1.1 each mean it.

As strict as RFC 9112 asks of a server and as h11 and Go's net/http are: lines end in CRLF
(a bare LF is a 400 at once, not a wait for a CRLF that never comes), header names are
tokens, values carry no control bytes, HTTP/1.1 needs exactly one Host, only HTTP/1.0 and
1.1 are spoken, one Content-Length at most, ``Expect: 100-continue`` is answered (by the
server), the absolute form of the request target is accepted (RFC 9112 §3.2.2), and a TLS
ClientHello on a plain port gets a 400 at once.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MAX_HEAD = 16 * 1024
MAX_BODY = 64 * 1024
MAX_QUERY_PARAMS = 32


class BadRequest(Exception):
    """The request is refused with ``status``; the message is the reason sent."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


# RFC 9110 5.1 token; 5.5 field values: visible characters, SP and HTAB, obs-text.
_TOKEN_CLASS = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]"
_TOKEN = re.compile(_TOKEN_CLASS + rb"+")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
_VERSIONS = ("HTTP/1.0", "HTTP/1.1")
# A well-formed head (with its last CRLF), matched in one pass: request line, then header
# lines. Anything it does not match goes through _slow_parse_head for the precise refusal.
# Values are greedy up to the CRLF (no backtracking: the class excludes CR and LF).
_WELL_FORMED = re.compile(
    rb"([A-Z]+) ([^\x00-\x20\x7f]+) (HTTP/1\.[01])\r\n"
    rb"((?:" + _TOKEN_CLASS + rb"+:[^\x00-\x08\x0a-\x1f\x7f]*\r\n)*)"
)
_HEADER_LINE = re.compile(rb"(" + _TOKEN_CLASS + rb"+):([^\r]*)\r\n")


def _parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:
    """``head``: the request head without its final CRLFCRLF. Returns method, target,
    version and the headers (lower-cased names, repeated ones joined with ", ")."""
    m = _WELL_FORMED.fullmatch(head + b"\r\n")
    if m is None:
        return _slow_parse_head(head)
    method_b, target_b, version_b, block = m.groups()
    headers: dict[str, str] = {}
    hosts = 0
    for name_b, value_b in _HEADER_LINE.findall(block):
        key = name_b.decode("ascii").lower()
        text = value_b.strip(b" \t").decode("latin-1")
        if key in headers:
            if key == "content-length":
                raise BadRequest(400, "more than one Content-Length")
            headers[key] = f"{headers[key]}, {text}"
        else:
            headers[key] = text
        if key == "host":
            hosts += 1
    version = version_b.decode("ascii")
    if hosts != 1 and version == "HTTP/1.1":
        raise BadRequest(400, "HTTP/1.1 needs exactly one Host header")
    return method_b.decode("ascii"), target_b.decode("latin-1"), version, headers


def _slow_parse_head(head: bytes) -> tuple[str, str, str, dict[str, str]]:  # noqa: C901 (the line-by-line reference the fast parser is held to)
    """Line by line, for the precise reason a head is refused."""
    lines = head.split(b"\r\n")
    if any(b"\n" in line or b"\r" in line for line in lines):
        raise BadRequest(400, "bare CR or LF in the request head")
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        raise BadRequest(400, "malformed request line")
    method_b, target_b, version_b = parts
    if not method_b.isalpha() or not method_b.isupper():
        raise BadRequest(400, "malformed method")
    version = version_b.decode("latin-1")
    if version not in _VERSIONS:
        raise BadRequest(400, f"unsupported protocol version {version[:16]!r}")
    if not target_b or _BAD_VALUE.search(target_b) or b" " in target_b:
        raise BadRequest(400, "malformed request target")
    headers: dict[str, str] = {}
    hosts = 0
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(b":")
        if not sep or not _TOKEN.fullmatch(name):
            raise BadRequest(400, "malformed header name")
        value = value.strip(b" \t")
        if _BAD_VALUE.search(value):
            raise BadRequest(400, "control character in a header value")
        key = name.decode("ascii").lower()
        text = value.decode("latin-1")
        if key == "host":
            hosts += 1
        if key == "content-length" and key in headers:
            raise BadRequest(400, "more than one Content-Length")
        headers[key] = f"{headers[key]}, {text}" if key in headers else text
    if version == "HTTP/1.1" and hosts != 1:
        raise BadRequest(400, "HTTP/1.1 needs exactly one Host header")
    return method_b.decode("ascii"), target_b.decode("latin-1"), version, headers


def _origin_form(target: str) -> str:
    """The path and query of a request target. RFC 9112 §3.2.2: a server must accept the
    absolute form (``http://host/path?q``) although clients send it only to proxies."""
    if target[0] == "/":
        return target
    scheme, sep, rest = target.partition("://")
    if not sep or scheme.lower() not in ("http", "https"):
        raise BadRequest(400, "malformed request target")
    slash = rest.find("/")
    query = rest.find("?")
    if slash < 0 or 0 <= query < slash:
        # No path: "http://host" or "http://host?q" asks for "/".
        return "/" + (rest[query:] if query >= 0 else "")
    return rest[slash:]


def _parse_query(qs: str) -> tuple[dict[str, str], frozenset[str]]:
    """As urllib.parse.parse_qsl(keep_blank_values=True, max_num_fields=32) reads a query
    (``+`` is a space, ``%XX`` decoded, the first value of a repeated name kept), without
    its per-call overhead on the /probe path. ValueError past MAX_QUERY_PARAMS."""
    query: dict[str, str] = {}
    if not qs:
        return query, frozenset()
    parts = qs.split("&")
    if len(parts) > MAX_QUERY_PARAMS:
        raise ValueError("too many query parameters")
    if "%" not in qs and "+" not in qs:
        # Nothing to decode (what Prometheus sends for /probe): two comprehensions, a
        # third of the loop's bytecode; a name given twice goes the loop's way.
        pairs = [part.partition("=") for part in parts if part]
        first = {k: v for k, _, v in pairs}
        if len(first) == len(pairs):
            return first, frozenset()
    repeated: set[str] = set()
    for part in parts:
        if not part:
            continue
        k, _, v = part.partition("=")
        if "%" in part or "+" in part:
            k = unquote(k.replace("+", " "))
            v = unquote(v.replace("+", " "))
        if k in query:
            repeated.add(k)
        else:
            query[k] = v
    return query, frozenset(repeated) if repeated else frozenset()


def _tokens(value: str) -> set[str]:
    return {t.strip().lower() for t in value.split(",") if t.strip()}


class Head:
    """A complete request head; its body is ``buf[body_start:end]`` once that much is in.
    A plain slotted class, as ``routes.Request``: one is built per request, and a frozen
    dataclass's ``object.__setattr__`` per field cost more than the rest of framing."""

    __slots__ = ("body_start", "end", "expect_continue", "headers", "method", "target", "version")

    def __init__(
        self,
        *,
        method: str,
        target: str,
        version: str,
        headers: dict[str, str],
        expect_continue: bool,
        body_start: int,
        end: int,
    ) -> None:
        self.method = method
        self.target = target  # origin form: path and query, not yet decoded
        self.version = version
        self.headers = headers  # lower-cased names, repeated ones joined with ", "
        self.expect_continue = expect_continue
        self.body_start = body_start
        self.end = end


def frame(buf: bytes) -> Head | None:
    """The first request of ``buf``: None while its head is incomplete (and within the
    limits); :class:`BadRequest` with the status to answer when it is refused."""
    if buf[:2] == b"\x16\x03":
        # A TLS ClientHello (handshake record, version 3.x) on the plain port.
        raise BadRequest(400, "this port speaks plain HTTP, not TLS")
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > MAX_HEAD:
            raise BadRequest(431, "request head too large")
        if buf.find(b"\n\n") >= 0 or buf.find(b"\r\n\n") >= 0:
            raise BadRequest(400, "bare LF in the request head")
        return None
    if end > MAX_HEAD:
        raise BadRequest(431, "request head too large")
    method, target, version, headers = _parse_head(buf[:end])
    if "transfer-encoding" in headers:
        raise BadRequest(501, "chunked request bodies are not supported")
    clen = 0
    clen_raw = headers.get("content-length")
    if clen_raw is not None:
        if not (clen_raw.isascii() and clen_raw.isdigit()):
            raise BadRequest(400, "invalid Content-Length")
        clen = int(clen_raw)
        if clen > MAX_BODY:
            raise BadRequest(413, "request body too large")
    expect = headers.get("expect")
    if expect is not None and expect.lower() != "100-continue":
        raise BadRequest(417, "only Expect: 100-continue is supported")
    return Head(
        method=method,
        target=_origin_form(target),
        version=version,
        headers=headers,
        expect_continue=expect is not None,
        body_start=end + 4,
        end=end + 4 + clen,
    )


def split_target(target: str) -> tuple[str, dict[str, str], frozenset[str]]:
    """The decoded path, the query (first value of each name) and the names repeated."""
    path, _, qs = target.partition("?")
    try:
        query, repeated = _parse_query(qs)
    except ValueError:
        raise BadRequest(400, "too many query parameters") from None
    return (unquote(path) if "%" in path else path), query, repeated


def keeps_alive(version: str, headers: dict[str, str]) -> bool:
    """Whether the client keeps the connection open after this request: HTTP/1.1 unless
    ``Connection: close``; HTTP/1.0 only with ``Connection: keep-alive``."""
    conn = headers.get("connection")
    if version == "HTTP/1.1":
        return conn is None or "close" not in _tokens(conn)
    tokens = _tokens(conn or "")
    return "keep-alive" in tokens and "close" not in tokens
