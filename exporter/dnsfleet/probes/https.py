"""DNS over HTTPS (RFC 8484), GET or POST, over HTTP/2: a fresh connection and TLS
handshake per probe (tlsconn.py, shared with DoT), one request.

HTTP/2 is framed by ``h2`` (sans-I/O, pure Python) over the TLS connection tlsconn.py drives
by hand (an ``ssl.SSLObject`` on memory BIOs; asyncio's own TLS cost more client CPU per
probe): unbound and Knot Resolver serve DoH over HTTP/2 only (aiohttp speaks HTTP/1.1). The
POST body and its END_STREAM go in one DATA frame: Knot Resolver 5.6 answers 400 when
END_STREAM comes in a separate empty frame, as some clients send it. The query ID is 0 (RFC
8484 4.1, for HTTP caches). The ALPN must come back ``h2``; anything else is a failed
handshake.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
from dataclasses import dataclass, field
from typing import Any

from dnsfleet.config import Module
from dnsfleet.config.transport import DEFAULT_DOH_PATH
from dnsfleet.dnswire import Malformed, Query, parse_response
from dnsfleet.probes.reasons import Reason
from dnsfleet.probes.result import Exchange
from dnsfleet.probes.tlsconn import (
    Attempt,
    Connection,
    Sockaddr,
    deadline_failure,
    stream_failure,
)

MAX_BODY = 65535
CONTENT_TYPE = b"application/dns-message"
# HTTP/2 read from a DoH peer before its response ends, at most: the response is at most
# MAX_BODY of DATA plus a few hundred bytes of other frames (SETTINGS, HEADERS,
# WINDOW_UPDATE). A peer that sends more is sending something else without end (PING
# frames, SETTINGS, frames h2 ignores), each costing the event loop ~10 us in h2: a peer
# flooding PINGs for a 2 s timeout held the loop ~2 s per probe, and every /-/healthy
# waited up to 3.5 s meanwhile. At this cap a probe costs at most ~8,000 frames.
MAX_READ = 2 * 65536
# Plaintext handed to h2 per turn of the event loop: ~240 PING frames, ~3 ms.
READ_SLICE = 4096


def request_headers(
    module: Module, query: Query, sockaddr: Sockaddr
) -> tuple[list[tuple[bytes, bytes]], bytes | None]:
    """Pure: the request's headers and, for POST, its body."""
    url = module.doh_url
    if url is not None:
        authority, path = url.authority, url.path
    else:
        host = sockaddr[0]
        authority = f"[{host}]:{sockaddr[1]}" if ":" in host else f"{host}:{sockaddr[1]}"
        authority = module.server_name or authority
        path = DEFAULT_DOH_PATH
    headers = [
        (b":method", module.https_method.encode()),
        (b":scheme", b"https"),
        (b":authority", authority.encode()),
    ]
    body: bytes | None = None
    if module.https_method == "GET":
        dns_param = base64.urlsafe_b64encode(query.wire).rstrip(b"=")
        sep = b"&" if "?" in path else b"?"
        headers.append((b":path", path.encode() + sep + b"dns=" + dns_param))
    else:
        body = query.wire
        headers += [
            (b":path", path.encode()),
            (b"content-type", CONTENT_TYPE),
            (b"content-length", str(len(body)).encode()),
        ]
    headers.append((b"accept", CONTENT_TYPE))
    return headers, body


@dataclass(slots=True)
class _Response:
    """What came back on our stream so far; ``failure`` ends the exchange."""

    status: int | None = None
    body: bytearray = field(default_factory=bytearray)
    ended: bool = False
    got: int = 0  # bytes read from the connection
    failure: tuple[Reason, str] | None = None


def _on_event(ev: Any, h2c: Any, sid: int, r: _Response) -> None:
    import h2.events  # noqa: PLC0415 - see exchange

    if isinstance(ev, h2.events.ConnectionTerminated):
        r.failure = (
            Reason.MALFORMED if r.got else Reason.NETWORK_ERROR,
            f"HTTP/2 connection closed by the server ({ev.error_code!s})",
        )
    elif getattr(ev, "stream_id", None) != sid:
        return
    elif isinstance(ev, h2.events.ResponseReceived):
        status = next((v for k, v in ev.headers if k == b":status"), None)
        if status is not None and not (len(status) == 3 and status.isdigit()):
            # h2 passes :status as sent; RFC 9110 §15: three digits.
            r.failure = (
                Reason.MALFORMED,
                f"HTTP/2 :status {bytes(status)[:16]!r} is not a status code",
            )
        else:
            r.status = int(status) if status is not None else None
    elif isinstance(ev, h2.events.DataReceived):
        r.body += ev.data
        h2c.acknowledge_received_data(ev.flow_controlled_length, sid)
        if len(r.body) > MAX_BODY:
            r.failure = (Reason.MALFORMED, f"response body over {MAX_BODY} bytes")
    elif isinstance(ev, h2.events.StreamEnded):
        r.ended = True
    elif isinstance(ev, h2.events.StreamReset):
        r.failure = (
            Reason.HTTP_STATUS if r.status else Reason.MALFORMED,
            f"stream reset by the server (error {ev.error_code!s})",
        )


async def _request(conn: Connection, module: Module, query: Query, sockaddr: Sockaddr,
                   r: _Response) -> None:  # fmt: skip
    """One request on a fresh HTTP/2 connection; fills ``r`` until the stream ends."""
    import h2.config  # noqa: PLC0415 - see exchange
    import h2.connection  # noqa: PLC0415

    h2c: Any = h2.connection.H2Connection(
        h2.config.H2Configuration(client_side=True, header_encoding=None)
    )
    h2c.initiate_connection()
    sid = h2c.get_next_available_stream_id()
    headers, payload = request_headers(module, query, sockaddr)
    h2c.send_headers(sid, headers, end_stream=payload is None)
    if payload is not None:
        h2c.send_data(sid, payload, end_stream=True)  # body and END_STREAM in one frame
    await conn.send(h2c.data_to_send())
    while not r.ended and r.failure is None:
        # A turn for the loop between slices: Connection.read returns without suspending
        # while it holds decrypted bytes, and sock_sendall while the socket takes them.
        await asyncio.sleep(0)
        data = await conn.read(READ_SLICE)
        if not data:
            r.failure = (
                Reason.MALFORMED if r.got else Reason.NETWORK_ERROR,
                f"connection closed after {r.got} bytes, before the response ended",
            )
            return
        r.got += len(data)
        if r.got > MAX_READ:
            r.failure = (
                Reason.MALFORMED,
                f"over {MAX_READ} bytes of HTTP/2 from the server without the response ending",
            )
            return
        for ev in h2c.receive_data(data):
            _on_event(ev, h2c, sid, r)
        pending = h2c.data_to_send()
        if pending:
            await conn.send(pending)


async def exchange(
    *,
    sockaddr: Sockaddr,
    family: socket.AddressFamily,
    query: Query,
    timeout: float,
    module: Module,
) -> Exchange:
    # Imported here: only DoH modules pay for h2 (~1.4 MiB, ~40 ms).
    import h2.exceptions  # noqa: PLC0415

    at = Attempt()
    r = _Response()
    try:
        async with asyncio.timeout(timeout):
            conn = await at.open(sockaddr=sockaddr, family=family, module=module, alpn=("h2",))
            if isinstance(conn, Exchange):
                return conn
            alpn = conn.obj.selected_alpn_protocol()
            if alpn != "h2":
                return at.fail(
                    Reason.TLS_HANDSHAKE,
                    f"the server did not agree to HTTP/2 (ALPN {alpn or 'none'})",
                )
            await _request(conn, module, query, sockaddr, r)
    except TimeoutError:
        return at.fail(*deadline_failure(at.stage, r.got, timeout))
    except h2.exceptions.H2Error as e:
        return at.fail(Reason.MALFORMED, f"HTTP/2: {e}")
    except (OSError, ssl.SSLError) as e:
        return at.fail(*stream_failure(e))
    finally:
        at.close()
    if r.failure is not None:
        return at.fail(*r.failure)
    if r.status != 200:
        return at.fail(Reason.HTTP_STATUS, f"HTTP status {r.status}" if r.status else "no status")
    try:
        resp = parse_response(bytes(r.body), query, 0)
    except Malformed as e:
        return at.fail(Reason.MALFORMED, str(e))
    if resp is None:
        return at.fail(Reason.MALFORMED, f"{len(r.body)}-byte body is not an answer to the query")
    return at.answer(resp)
