"""The TLS connection the DoT (tls.py) and DoH (https.py) probes share: the module's client
context, TCP then a full TLS handshake timed apart from the exchange, the handshake's
failure reasons, and the certificate chain's earliest expiry. Not a transport itself: the
two transports stay independent of each other and share this.

The handshake is most of an encrypted probe's latency and CPU (a full handshake costs ~2-4
ms of client CPU here against ~0.3 ms for DNS over TCP), so its time is kept apart
(``TlsInfo.handshake``).
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
from dnsfleet.probes.result import Exchange, Reason, TlsInfo
from dnsfleet.probes.udp import classify_oserror

Sockaddr = tuple[str, int] | tuple[str, int, int, int]

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


def deadline_failure(stage: str, got: int, timeout: float) -> tuple[Reason, str]:
    """What the deadline passing means, by how far the probe got."""
    if stage == "tls":  # TCP connected, TLS did not finish: not a TLS server?
        return Reason.TLS_HANDSHAKE, f"no TLS handshake within {timeout:.3g}s"
    if got:
        return Reason.TIMEOUT, f"incomplete response within {timeout:.3g}s"
    return Reason.TIMEOUT, f"no answer within {timeout:.3g}s"


def stream_failure(e: OSError | ssl.SSLError) -> tuple[Reason, str]:
    """A socket or TLS error after the handshake."""
    return (classify_oserror(e) if isinstance(e, OSError) else Reason.NETWORK_ERROR), str(e)
