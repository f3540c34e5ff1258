"""DNS over HTTPS (RFC 8484), GET or POST, over HTTP/2: a fresh connection and TLS
handshake per probe (tls.py), one request.

HTTP/2 is framed by ``h2`` (sans-I/O, pure Python) over asyncio's own TLS: unbound and Knot
Resolver serve DoH over HTTP/2 only (aiohttp speaks HTTP/1.1). The POST body and its
END_STREAM go in one DATA frame: Knot Resolver 5.6 answers 400 when END_STREAM comes in a
separate empty frame, as some clients send it. The query ID is 0 (RFC 8484 4.1, for HTTP
caches). The ALPN must come back ``h2``; anything else is a failed handshake.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import time
from typing import Any

from dnsfleet.config import Module
from dnsfleet.config.transport import DEFAULT_DOH_PATH
from dnsfleet.dnswire import Malformed, Query, parse_response
from dnsfleet.probes.result import Exchange, Reason, TlsInfo
from dnsfleet.probes.tls import Connection, connect, context_for, server_hostname
from dnsfleet.probes.udp import Sockaddr, classify_oserror

MAX_BODY = 65535
CONTENT_TYPE = b"application/dns-message"


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


async def exchange(
    *,
    sockaddr: Sockaddr,
    family: socket.AddressFamily,
    query: Query,
    timeout: float,
    module: Module,
) -> Exchange:
    # Imported here: only DoH modules pay for h2 (~1.4 MiB, ~40 ms).
    import h2.config  # noqa: PLC0415
    import h2.connection  # noqa: PLC0415
    import h2.events  # noqa: PLC0415
    import h2.exceptions  # noqa: PLC0415

    start = time.monotonic()
    info: TlsInfo | None = None
    got = 0

    def elapsed() -> float:
        return time.monotonic() - start

    def fail(reason: Reason, detail: str) -> Exchange:
        return Exchange(None, reason, elapsed(), detail, tls=info)

    conn: Connection | None = None
    stage = ["connect"]
    status: int | None = None
    body = bytearray()
    try:
        async with asyncio.timeout(timeout):
            opened = await connect(
                sockaddr=sockaddr,
                family=family,
                ctx=context_for(module, ("h2",)),
                hostname=server_hostname(module, sockaddr),
                start=start,
                fail=fail,
                stage=stage,
            )
            if isinstance(opened, Exchange):
                return opened
            conn = opened
            info = conn.info
            if info.alpn != "h2":
                return fail(
                    Reason.TLS_HANDSHAKE,
                    f"the server did not agree to HTTP/2 (ALPN {info.alpn or 'none'})",
                )
            h2c: Any = h2.connection.H2Connection(
                h2.config.H2Configuration(client_side=True, header_encoding=None)
            )
            h2c.initiate_connection()
            sid = h2c.get_next_available_stream_id()
            headers, payload = request_headers(module, query, sockaddr)
            h2c.send_headers(sid, headers, end_stream=payload is None)
            if payload is not None:
                h2c.send_data(sid, payload, end_stream=True)
            conn.writer.write(h2c.data_to_send())
            ended = False
            while not ended:
                data = await conn.reader.read(65536)
                if not data:
                    return fail(
                        Reason.MALFORMED if got else Reason.NETWORK_ERROR,
                        f"connection closed after {got} bytes, before the response ended",
                    )
                got += len(data)
                for ev in h2c.receive_data(data):
                    if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                        for k, v in ev.headers:
                            if k == b":status":
                                status = int(v)
                    elif isinstance(ev, h2.events.DataReceived) and ev.stream_id == sid:
                        body += ev.data
                        h2c.acknowledge_received_data(ev.flow_controlled_length, sid)
                        if len(body) > MAX_BODY:
                            return fail(Reason.MALFORMED, f"response body over {MAX_BODY} bytes")
                    elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                        ended = True
                    elif isinstance(ev, h2.events.StreamReset) and ev.stream_id == sid:
                        return fail(
                            Reason.HTTP_STATUS if status else Reason.MALFORMED,
                            f"stream reset by the server (error {ev.error_code!s})",
                        )
                    elif isinstance(ev, h2.events.ConnectionTerminated):
                        return fail(
                            Reason.MALFORMED if got else Reason.NETWORK_ERROR,
                            f"HTTP/2 connection closed by the server ({ev.error_code!s})",
                        )
                pending = h2c.data_to_send()
                if pending:
                    conn.writer.write(pending)
    except TimeoutError:
        if stage[0] == "tls":
            return fail(Reason.TLS_HANDSHAKE, f"no TLS handshake within {timeout:.3g}s")
        if got:
            return fail(Reason.TIMEOUT, f"incomplete response within {timeout:.3g}s")
        return fail(Reason.TIMEOUT, f"no answer within {timeout:.3g}s")
    except h2.exceptions.H2Error as e:
        return fail(Reason.MALFORMED, f"HTTP/2: {e}")
    except (OSError, ssl.SSLError) as e:
        return fail(classify_oserror(e) if isinstance(e, OSError) else Reason.NETWORK_ERROR,
                    str(e))  # fmt: skip
    finally:
        if conn is not None:
            conn.close()
    if status != 200:
        return fail(Reason.HTTP_STATUS, f"HTTP status {status}" if status else "no HTTP status")
    try:
        resp = parse_response(bytes(body), query, 0)
    except Malformed as e:
        return fail(Reason.MALFORMED, str(e))
    if resp is None:
        return fail(Reason.MALFORMED, f"{len(body)}-byte body is not an answer to the query")
    return Exchange(resp, None, elapsed(), tls=info)
