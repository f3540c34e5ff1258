"""The HTTP server's hand-written pieces held to the libraries they replace: the one-pass
head parser against the line-by-line one (the same result or the same refusal for any
head), the query reader against urllib.parse.parse_qsl, and content-coding negotiation
against RFC 9110 §12.5.3."""

from __future__ import annotations

from urllib.parse import parse_qsl, quote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dnsfleet.endpoints.router import accepts_gzip
from dnsfleet.web.request import (
    MAX_BODY,
    MAX_HEAD,
    MAX_QUERY_PARAMS,
    BadRequest,
    _parse_head,
    _parse_query,
    _slow_parse_head,
    frame,
    keeps_alive,
    split_target,
)

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("value", "gzip"),
    [
        ("gzip", True),
        ("gzip, deflate, br", True),
        ("GZIP;q=0.5", True),
        ("x-gzip", True),
        ("*", True),
        ("*;q=1, gzip;q=0", False),  # N9: gzip refused explicitly wins over *
        ("gzip;q=0, *;q=1", False),
        ("gzip;q=0.000", False),
        ("gzip ; q=0", False),
        ("*;q=0", False),
        ("identity", False),
        ("", False),  # an empty field value: no content coding wanted
        ("br;q=1, *;q=0.1", True),
        ("gzip;q=nan", False),
        ("gzip;q=2", False),  # not a qvalue: ignored as unacceptable
        ("gzip;level=1;q=0.8", True),
        ("deflate, gzip;q=0", False),
    ],
)
def test_accept_encoding(value: str, gzip: bool) -> None:
    assert accepts_gzip(value) is gzip


HEADS = [
    b"GET / HTTP/1.1\r\nHost: x",
    b"GET /probe?target=127.0.0.1:53&module=m HTTP/1.1\r\nHost: 10.0.0.1:9853\r\n"
    b"User-Agent: Prometheus/2.42.0\r\nAccept-Encoding: gzip\r\n"
    b"X-Prometheus-Scrape-Timeout-Seconds: 10",
    b"GET / HTTP/1.0",
    b"GET / HTTP/1.1\r\nHost: a\r\nHost: b",
    b"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\nX: b\r\nx:  c \t",
    b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b",
    b"GET / HTTP/1.1\r\nHost: x\nX: y",
    b"GET /  HTTP/1.1\r\nHost: x",
    b"get / HTTP/1.1\r\nHost: x",
    b"GET / HTTP/2.0\r\nHost: x",
    b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 1",
    b"GET / HTTP/1.1\r\nHost: x\r\nX A: y",
    b"GET / HTTP/1.1\r\nHost: x\r\nV: caf\xe9",
    b"GET / HTTP/1.1\r\nHost:",
    b"GET / HTTP/1.1\r\n: x",
]


def outcome(parse: object, head: bytes) -> object:
    try:
        return parse(head)  # type: ignore[operator]
    except BadRequest as e:
        return ("refused", e.status)


@pytest.mark.parametrize("head", HEADS)
def test_fast_parser_agrees_with_the_line_parser(head: bytes) -> None:
    assert outcome(_parse_head, head) == outcome(_slow_parse_head, head)


_HEAD_BYTES = st.sampled_from(
    [
        *(b"GET", b"POST", b"get", b" ", b"  ", b"/", b"/p?a=b", b"HTTP/1.1", b"HTTP/1.0"),
        *(b"HTTP/1.2", b"\r\n", b"\n", b"\r", b":", b": ", b"Host", b"host", b"X-A"),
        *(b"Content-Length", b"1", b"\t", b"\x00", b"\x7f", b"\xe9", b"a", b"X A", b"\x01"),
    ]
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_HEAD_BYTES, min_size=1, max_size=24))
def test_fast_parser_agrees_on_any_head(parts: list[bytes]) -> None:
    head = b"".join(parts)
    assert outcome(_parse_head, head) == outcome(_slow_parse_head, head)


def reference_query(qs: str) -> tuple[dict[str, str], frozenset[str]] | str:
    try:
        pairs = parse_qsl(qs, keep_blank_values=True, max_num_fields=MAX_QUERY_PARAMS)
    except ValueError:
        return "too many"
    first: dict[str, str] = {}
    repeated = set()
    for k, v in pairs:
        if k in first:
            repeated.add(k)
        first.setdefault(k, v)
    return first, frozenset(repeated)


def ours_query(qs: str) -> tuple[dict[str, str], frozenset[str]] | str:
    try:
        return _parse_query(qs)
    except ValueError:
        return "too many"


_QUERY_TEXT = st.text(alphabet="ab=&+%2F0é ;", max_size=40)


@settings(max_examples=500, deadline=None)
@given(_QUERY_TEXT)
def test_query_reader_agrees_with_parse_qsl(qs: str) -> None:
    assert ours_query(qs) == reference_query(qs)


@pytest.mark.parametrize(
    "qs",
    [
        "target=127.0.0.1:53&module=m",
        "target=%5B%3A%3A1%5D%3A53&module=a+b",
        "a=1&a=2&b",
        "&&a=&=b",
        "&".join(["x=1"] * MAX_QUERY_PARAMS),
        "&".join(["x=1"] * (MAX_QUERY_PARAMS + 1)),
        "name=" + quote("www.example.com.", safe=""),
    ],
)
def test_query_reader_examples(qs: str) -> None:
    assert ours_query(qs) == reference_query(qs)


# ------------------------------------------------ framing, without a connection (frame)


@pytest.mark.parametrize(
    ("buf", "refusal"),
    [
        (b"\x16\x03\x01\x02\x00", (400, "this port speaks plain HTTP, not TLS")),
        (b"GET / HTTP/1.1\nHost: x\n\n", (400, "bare LF in the request head")),
        (b"GET /" + b"a" * MAX_HEAD, (431, "request head too large")),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            (501, "chunked request bodies are not supported"),
        ),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n",
            (400, "invalid Content-Length"),
        ),
        (
            b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (MAX_BODY + 1),
            (413, "request body too large"),
        ),
        (
            b"GET / HTTP/1.1\r\nHost: x\r\nExpect: nothing\r\n\r\n",
            (417, "only Expect: 100-continue is supported"),
        ),
        (b"GET ftp://x/ HTTP/1.1\r\nHost: x\r\n\r\n", (400, "malformed request target")),
    ],
)
def test_frame_refuses(buf: bytes, refusal: tuple[int, str]) -> None:
    with pytest.raises(BadRequest) as e:
        frame(buf)
    assert (e.value.status, str(e.value)) == refusal


def test_frame_waits_for_a_head_and_finds_the_body() -> None:
    assert frame(b"GET / HTTP/1.1\r\nHost: x\r\n") is None
    buf = b"POST http://x/p%20q?a=1&a=2&b HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcGET"
    head = frame(buf)
    assert head is not None
    assert (head.method, head.target, head.expect_continue) == ("POST", "/p%20q?a=1&a=2&b", False)
    assert buf[head.body_start : head.end] == b"abc"
    assert split_target(head.target) == ("/p q", {"a": "1", "b": ""}, frozenset({"a"}))


@pytest.mark.parametrize(
    ("version", "connection", "keep"),
    [
        ("HTTP/1.1", None, True),
        ("HTTP/1.1", "Keep-Alive, Close", False),
        ("HTTP/1.0", None, False),
        ("HTTP/1.0", "keep-alive", True),
    ],
)
def test_keeps_alive(version: str, connection: str | None, keep: bool) -> None:
    headers = {} if connection is None else {"connection": connection}
    assert keeps_alive(version, headers) is keep
