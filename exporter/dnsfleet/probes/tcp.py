"""DNS over TCP: two-octet length framing (RFC 1035 §4.2.2), one query per connection."""

from __future__ import annotations

import asyncio
import secrets
import socket
import time

from dnsfleet.dnswire import Malformed, Query, header_id, parse_response
from dnsfleet.probes.reasons import Reason, classify_oserror
from dnsfleet.probes.result import Exchange


async def _read_exactly(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, n: int, got: list[int]
) -> bytes:
    # ``got`` counts every byte as it arrives, so a peer that sends one octet of the length
    # prefix and closes reads as a broken answer (malformed), not as a network error.
    buf = bytearray()
    while len(buf) < n:
        # A turn for the loop before each read (tlsconn.recv says why): a peer trickling
        # its answer a byte at a time while the socket stays readable must not hold it.
        await asyncio.sleep(0)
        chunk = await loop.sock_recv(sock, n - len(buf))
        if not chunk:
            raise EOFError(f"connection closed after {got[0]} bytes of the response")
        buf += chunk
        got[0] += len(chunk)
    return bytes(buf)


async def exchange(
    *,
    sockaddr: tuple[str, int] | tuple[str, int, int, int],
    family: socket.AddressFamily,
    query: Query,
    timeout: float,
) -> Exchange:
    loop = asyncio.get_running_loop()
    start = time.monotonic()

    def elapsed() -> float:
        return time.monotonic() - start

    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as e:
        return Exchange(None, Reason.NETWORK_ERROR, 0.0, f"socket: {e.strerror or e}")
    sock.setblocking(False)
    qid = secrets.randbits(16)
    wire = query.with_id(qid)
    got = [0]
    expected = 0
    try:
        async with asyncio.timeout(timeout):
            await loop.sock_connect(sock, sockaddr)
            await loop.sock_sendall(sock, len(wire).to_bytes(2, "big") + wire)
            expected = int.from_bytes(await _read_exactly(loop, sock, 2, got), "big")
            expected += 2
            data = await _read_exactly(loop, sock, expected - 2, got)
    except TimeoutError:
        if got[0]:
            return Exchange(
                None,
                Reason.TIMEOUT,
                elapsed(),
                f"incomplete response: {got[0]} of {expected or '?'} bytes within {timeout:.3g}s",
            )
        return Exchange(None, Reason.TIMEOUT, elapsed(), f"no answer within {timeout:.3g}s")
    except EOFError as e:
        return Exchange(
            None, Reason.MALFORMED if got[0] else Reason.NETWORK_ERROR, elapsed(), str(e)
        )
    except OSError as e:
        return Exchange(None, classify_oserror(e), elapsed(), e.strerror or str(e))
    finally:
        sock.close()
    try:
        resp = parse_response(data, query, qid)
    except Malformed as e:
        return Exchange(None, Reason.MALFORMED, elapsed(), str(e))
    if resp is None:
        # On a connection of our own anything but our answer is a broken server.
        rid = header_id(data)
        return Exchange(
            None,
            Reason.MALFORMED,
            elapsed(),
            f"answer does not match the query (id {rid}, sent {qid})",
        )
    return Exchange(resp, None, elapsed())
