"""DNS over TLS (RFC 7858): TCP, a TLS handshake (tlsconn.py), then the two-octet length
framing of DNS over TCP; one query per connection, a fresh handshake per probe (what a client
that does not keep connections open pays).

unbound 1.17 adds a ~40 ms Nagle stall to each fresh DoT connection on loopback
(NLnetLabs/unbound#1045, fixed after 1.17 by PR #1214): clients pay it too, so the probe
does not work around it with TCP_QUICKACK.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import ssl
import time

from dnsfleet.config import Module
from dnsfleet.dnswire import Malformed, Query, header_id, parse_response
from dnsfleet.probes.result import Exchange, Reason, TlsInfo
from dnsfleet.probes.tlsconn import (
    Connection,
    Sockaddr,
    connect,
    context_for,
    deadline_failure,
    server_hostname,
    stream_failure,
)


async def exchange(
    *,
    sockaddr: Sockaddr,
    family: socket.AddressFamily,
    query: Query,
    timeout: float,
    module: Module,
) -> Exchange:
    start = time.monotonic()
    info: TlsInfo | None = None
    got = 0

    def fail(reason: Reason, detail: str) -> Exchange:
        return Exchange(None, reason, time.monotonic() - start, detail, tls=info)

    qid = secrets.randbits(16)
    conn: Connection | None = None
    stage = ["connect"]
    try:
        async with asyncio.timeout(timeout):
            opened = await connect(
                sockaddr=sockaddr,
                family=family,
                ctx=context_for(module),
                hostname=server_hostname(module, sockaddr),
                start=start,
                fail=fail,
                stage=stage,
            )
            if isinstance(opened, Exchange):
                return opened
            conn, info = opened, opened.info
            assert info is not None
            wire = query.with_id(qid)
            await conn.send(len(wire).to_bytes(2, "big") + wire)
            head = await conn.readexactly(2)
            got = 2
            data = await conn.readexactly(int.from_bytes(head, "big"))
    except TimeoutError:
        return fail(*deadline_failure(stage[0], got, timeout))
    except asyncio.IncompleteReadError as e:
        got += len(e.partial)
        return fail(
            Reason.MALFORMED if got else Reason.NETWORK_ERROR,
            f"connection closed after {got} bytes of the response",
        )
    except (OSError, ssl.SSLError) as e:
        return fail(*stream_failure(e))
    finally:
        if conn is not None:
            conn.close()
    try:
        resp = parse_response(data, query, qid)
    except Malformed as e:
        return fail(Reason.MALFORMED, str(e))
    if resp is None:
        return fail(Reason.MALFORMED, f"not the answer (id {header_id(data)}, sent {qid})")
    return Exchange(resp, None, time.monotonic() - start, tls=info)
