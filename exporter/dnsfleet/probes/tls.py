"""DNS over TLS (RFC 7858): TCP, a TLS handshake, then the two-octet length framing of DNS
over TCP; one query per connection, a fresh handshake per probe (what a client that does
not keep connections open pays). Also the TLS part the DoH probe shares: the module's
context, the handshake with its failure reasons, and the certificate chain's expiry.

The handshake's time is kept apart from the exchange (``TlsInfo.handshake``): it is most of
a DoT probe's latency and CPU (a full handshake costs ~2-4 ms of client CPU here against
~0.3 ms for DNS over TCP). unbound 1.17 adds a ~40 ms Nagle stall to each fresh DoT
connection on loopback (NLnetLabs/unbound#1045, fixed after 1.17 by PR #1214): clients pay
it too, so the probe does not work around it with TCP_QUICKACK.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from dnsfleet.config import Module
from dnsfleet.config.transport import read_ca_file
from dnsfleet.dnswire import Malformed, Query, header_id, parse_response
from dnsfleet.probes.result import Exchange, Reason, TlsInfo
from dnsfleet.probes.udp import Sockaddr, classify_oserror

# OpenSSL X509_V_ERR_* codes (include/openssl/x509_vfy.h) -> what the status page says.
VERIFY_KIND = {
    9: "not yet valid",
    10: "expired",
    2: "untrusted",  # unable to get issuer certificate
    18: "untrusted",  # self-signed leaf
    19: "untrusted",  # self-signed certificate in the chain
    20: "untrusted",  # unable to get local issuer certificate
    21: "untrusted",  # unable to verify the first certificate
    62: "name mismatch",  # hostname
    64: "name mismatch",  # IP address
}
MAX_DNS_MESSAGE = 65535


@lru_cache(maxsize=64)
def _context(ca_file: str | None, alpn: tuple[str, ...], stamp: int) -> ssl.SSLContext:
    # ``stamp`` is the module's identity: a reload (a new Module) builds a fresh context, so
    # a replaced CA file is read again. With the system store this costs ~35 ms; once.
    ctx = ssl.create_default_context(cadata=read_ca_file(ca_file) if ca_file else None)
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def context_for(module: Module, alpn: tuple[str, ...] = ()) -> ssl.SSLContext:
    """The module's client context: certificate and name verified, TLS 1.2 or later."""
    return _context(module.tls_ca_file, alpn, id(module))


def server_hostname(module: Module, sockaddr: Sockaddr) -> str:
    """SNI and the name verified: the configured name, else the target's IP (checked
    against the certificate's IP SANs; Python sends no SNI for an IP)."""
    return module.server_name or sockaddr[0]


def earliest_expiry(sslobj: Any) -> float | None:
    """The earliest notAfter of the certificates the server sent (blackbox_exporter's
    probe_ssl_earliest_cert_expiry), epoch seconds. Python 3.13 has the chain as
    ``SSLObject.get_unverified_chain()``; 3.11 only on the private ``_sslobj``."""
    get = getattr(sslobj, "get_unverified_chain", None)
    if get is None:
        inner = getattr(sslobj, "_sslobj", None)
        get = getattr(inner, "get_unverified_chain", None)
    if get is None:
        return None
    chain = get() or []
    times = [ssl.cert_time_to_seconds(c.get_info()["notAfter"]) for c in chain]
    return float(min(times)) if times else None


def classify_tls_error(e: BaseException) -> tuple[Reason, str]:
    """A failure during the handshake: the certificate's fault, or the handshake's."""
    if isinstance(e, ssl.SSLCertVerificationError):
        # Test before SSLError: it is a subclass.
        kind = VERIFY_KIND.get(e.verify_code or 0, "rejected")
        return Reason.CERTIFICATE, f"certificate {kind}: {e.verify_message}"
    if isinstance(e, ssl.SSLError):
        return Reason.TLS_HANDSHAKE, f"TLS handshake failed: {e.reason or e}"
    if isinstance(e, TimeoutError):
        return Reason.TLS_HANDSHAKE, "no TLS handshake before the deadline"
    if isinstance(e, ConnectionError | EOFError | asyncio.IncompleteReadError):
        return Reason.TLS_HANDSHAKE, f"connection closed during the TLS handshake: {e}"
    if isinstance(e, OSError):
        return Reason.TLS_HANDSHAKE, f"TLS handshake: {e.strerror or e}"
    return Reason.TLS_HANDSHAKE, f"TLS handshake: {e!r}"


@dataclass(slots=True)
class Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    info: TlsInfo

    def close(self) -> None:
        self.writer.transport.abort()  # no close_notify round trip: the answer is in


async def connect(
    *,
    sockaddr: Sockaddr,
    family: socket.AddressFamily,
    ctx: ssl.SSLContext,
    hostname: str,
    start: float,
    fail: Callable[[Reason, str], Exchange],
    stage: list[str],
) -> Connection | Exchange:
    """TCP then TLS to ``sockaddr``: the connection, or the failed Exchange. The caller
    holds the deadline (asyncio.timeout, which cancels what runs here): ``stage[0]`` says
    how far it got, ``tls`` during the handshake."""
    loop = asyncio.get_running_loop()
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError as e:
        return fail(Reason.NETWORK_ERROR, f"socket: {e.strerror or e}")
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        await loop.sock_connect(sock, sockaddr)
    except OSError as e:
        sock.close()
        return fail(classify_oserror(e), e.strerror or str(e))
    except BaseException:
        sock.close()
        raise
    t_tcp = time.monotonic()
    stage[0] = "tls"
    try:
        reader, writer = await asyncio.open_connection(
            sock=sock, ssl=ctx, server_hostname=hostname, limit=MAX_DNS_MESSAGE + 2
        )
    except (OSError, EOFError, ssl.SSLError) as e:
        sock.close()
        reason, detail = classify_tls_error(e)
        return fail(reason, detail)
    except BaseException:
        sock.close()
        raise
    now = time.monotonic()
    stage[0] = "exchange"
    sslobj = writer.get_extra_info("ssl_object")
    info = TlsInfo(
        handshake=now - t_tcp,
        connect=t_tcp - start,
        cert_expiry=earliest_expiry(sslobj),
        alpn=sslobj.selected_alpn_protocol() if sslobj is not None else None,
    )
    return Connection(reader, writer, info)


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

    def elapsed() -> float:
        return time.monotonic() - start

    def fail(reason: Reason, detail: str) -> Exchange:
        return Exchange(None, reason, elapsed(), detail, tls=info)

    import secrets  # noqa: PLC0415 - as tcp.py; kept local to the probe

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
            conn = opened
            info = conn.info
            wire = query.with_id(qid)
            conn.writer.write(len(wire).to_bytes(2, "big") + wire)
            head = await conn.reader.readexactly(2)
            got = 2
            data = await conn.reader.readexactly(int.from_bytes(head, "big"))
    except TimeoutError:
        if stage[0] == "tls":  # TCP connected, TLS did not finish: not a DoT server?
            return fail(Reason.TLS_HANDSHAKE, f"no TLS handshake within {timeout:.3g}s")
        if got:
            return fail(Reason.TIMEOUT, f"incomplete response within {timeout:.3g}s")
        return fail(Reason.TIMEOUT, f"no answer within {timeout:.3g}s")
    except asyncio.IncompleteReadError as e:
        got += len(e.partial)
        return fail(
            Reason.MALFORMED if got else Reason.NETWORK_ERROR,
            f"connection closed after {got} bytes of the response",
        )
    except (OSError, ssl.SSLError) as e:
        return fail(classify_oserror(e) if isinstance(e, OSError) else Reason.NETWORK_ERROR,
                    str(e))  # fmt: skip
    finally:
        if conn is not None:
            conn.close()
    try:
        resp = parse_response(data, query, qid)
    except Malformed as e:
        return fail(Reason.MALFORMED, str(e))
    if resp is None:
        return fail(
            Reason.MALFORMED,
            f"answer does not match the query (id {header_id(data)}, sent {qid})",
        )
    return Exchange(resp, None, elapsed(), tls=info)
