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

from dnsfleet.config import Module
from dnsfleet.dnswire import Malformed, Query, header_id, parse_response
from dnsfleet.probes.reasons import Reason
from dnsfleet.probes.result import Exchange
from dnsfleet.probes.tlsconn import Attempt, Sockaddr, deadline_failure, stream_failure


async def exchange(
    *,
    sockaddr: Sockaddr,
    family: socket.AddressFamily,
    query: Query,
    timeout: float,
    module: Module,
) -> Exchange:
    at = Attempt()
    qid = secrets.randbits(16)
    got = 0
    try:
        async with asyncio.timeout(timeout):
            conn = await at.open(sockaddr=sockaddr, family=family, module=module)
            if isinstance(conn, Exchange):
                return conn
            wire = query.with_id(qid)
            await conn.send(len(wire).to_bytes(2, "big") + wire)
            head = await conn.readexactly(2)
            got = 2
            data = await conn.readexactly(int.from_bytes(head, "big"))
    except TimeoutError:
        return at.fail(*deadline_failure(at.stage, got, timeout))
    except asyncio.IncompleteReadError as e:
        got += len(e.partial)
        return at.fail(
            Reason.MALFORMED if got else Reason.NETWORK_ERROR,
            f"connection closed after {got} bytes of the response",
        )
    except (OSError, ssl.SSLError) as e:
        return at.fail(*stream_failure(e))
    finally:
        at.close()
    try:
        resp = parse_response(data, query, qid)
    except Malformed as e:
        return at.fail(Reason.MALFORMED, str(e))
    if resp is None:
        return at.fail(Reason.MALFORMED, f"not the answer (id {header_id(data)}, sent {qid})")
    return at.answer(resp)
