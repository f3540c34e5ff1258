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
import os
import socket
import ssl
import time
from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

from dnsfleet.config import Module
from dnsfleet.config.transport import read_ca_file
from dnsfleet.dnswire import Response
from dnsfleet.probes.reasons import Reason, classify_oserror
from dnsfleet.probes.result import Exchange, TlsInfo

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


async def recv(loop: asyncio.AbstractEventLoop, sock: socket.socket, n: int) -> bytes:
    """``loop.sock_recv`` that always lets the loop run first. sock_recv returns at once,
    without suspending, while the socket holds data: a peer that keeps it readable (HTTP/2
    PING frames, frames h2 ignores, a trickle of padding) kept a read loop running without
    ever giving the loop a turn, so the probe's own timeout never fired and every other
    request waited (a 3 s /probe took 61 s, /-/healthy as long). One turn per read costs
    a few microseconds; the probe's deadline is then met whatever the peer sends."""
    await asyncio.sleep(0)
    return await loop.sock_recv(sock, n)


# What identifies a version of a CA file: path, device, inode, size, modification time in ns
# (as the web configuration's guard tells a changed file); None for the system store.
CaStamp = tuple[str, int, int, int, int] | None


def ca_stamp(ca_file: str | None) -> CaStamp:
    """The stamp of the CA file as it is now. A file the loader checked that is gone or
    unreadable since raises OSError, which ends as the probe's internal failure."""
    if ca_file is None:
        return None
    st = os.stat(ca_file)
    return (ca_file, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=64)
def _context(stamp: CaStamp, alpn: tuple[str, ...]) -> ssl.SSLContext:
    # Keyed on the file's stamp, not on the module: a replaced CA file is a new key, so the
    # context is built from what the file holds now. (A module's id() is reused once the old
    # Module is collected: after a CA rotation and reload, a quarter of the reloads got a
    # context built from the old file.) With the system store this costs ~35 ms; once.
    cadata = read_ca_file(stamp[0]) if stamp is not None else None
    ctx = ssl.create_default_context(cadata=cadata)
    if alpn:
        ctx.set_alpn_protocols(list(alpn))
    return ctx


def context_for(module: Module, alpn: tuple[str, ...] = ()) -> ssl.SSLContext:
    """The module's client context: certificate and name verified, TLS 1.2 or later."""
    return _context(ca_stamp(module.tls_ca_file), alpn)


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
    return earliest_not_after([c.get_info() for c in get() or []])


def earliest_not_after(infos: Iterable[Mapping[str, Any]]) -> float | None:
    """Pure: the earliest ``notAfter`` of certificates described as ``getpeercert()``
    dicts, epoch seconds; None when there is none, or when any certificate's notAfter is
    missing or not a time (``ssl.cert_time_to_seconds`` raises on it): the earliest expiry
    of a chain with an unreadable date is not known, so the series is left out rather than
    made up from the others. The handshake itself was judged by OpenSSL already."""
    times: list[float] = []
    for info in infos:
        text = info.get("notAfter")
        if not isinstance(text, str):
            return None
        try:
            times.append(float(ssl.cert_time_to_seconds(text)))
        except (ValueError, OverflowError):
            return None
    return min(times) if times else None


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


class Connection:
    """TLS driven by hand over a non-blocking socket: an ``ssl.SSLObject`` on two memory
    BIOs, bytes moved with the loop's ``sock_recv``/``sock_sendall``. asyncio's own TLS
    (SSLProtocol behind StreamReader/Writer) cost ~1.2-2 ms more client CPU per probe than
    this, on a ~3 ms handshake (bench/bench_encrypted.py; the design doc has the figures).
    The SSLObject is OpenSSL's, as asyncio's: verification and the errors are the same."""

    __slots__ = ("buffered", "inc", "info", "loop", "obj", "out", "sock")

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket,
                 ctx: ssl.SSLContext, hostname: str) -> None:  # fmt: skip
        self.loop, self.sock = loop, sock
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self.inc, self.out, server_hostname=hostname)
        self.buffered = bytearray()  # plaintext read but not yet consumed

    async def _flush(self) -> None:
        if self.out.pending:
            await self.loop.sock_sendall(self.sock, self.out.read())

    async def _fill(self) -> None:
        data = await recv(self.loop, self.sock, 65536)
        if not data:
            self.inc.write_eof()
        else:
            self.inc.write(data)

    async def handshake(self) -> None:
        while True:
            try:
                self.obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                await self._flush()
                if self.inc.eof:
                    raise ConnectionResetError("closed by the server") from None
                await self._fill()
        await self._flush()

    async def send(self, data: bytes) -> None:
        self.obj.write(data)
        await self._flush()

    async def read(self, n: int) -> bytes:
        """Up to ``n`` bytes of plaintext; b"" at the end of the stream."""
        while not self.buffered:
            try:
                self.buffered += self.obj.read(max(n, 16384))
                if not self.buffered:
                    return b""
            except ssl.SSLWantReadError:
                if self.inc.eof:
                    return b""
                await self._fill()
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                return b""
        out = bytes(self.buffered[:n])
        del self.buffered[:n]
        return out

    async def readexactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = await self.read(n - len(buf))
            if not chunk:
                raise asyncio.IncompleteReadError(bytes(buf), n)
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()  # no close_notify round trip: the answer is in


class Attempt:
    """One encrypted probe: since when it runs, how far it got (``stage``: connect, tls,
    exchange), the connection and its handshake's facts. The caller holds the deadline
    (asyncio.timeout, which cancels what runs here) and closes the attempt."""

    __slots__ = ("conn", "info", "stage", "start")

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.stage = "connect"
        self.conn: Connection | None = None
        self.info: TlsInfo | None = None

    def fail(self, reason: Reason, detail: str) -> Exchange:
        return Exchange(None, reason, time.monotonic() - self.start, detail, tls=self.info)

    def answer(self, resp: Response) -> Exchange:
        return Exchange(resp, None, time.monotonic() - self.start, tls=self.info)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    async def open(
        self,
        *,
        sockaddr: Sockaddr,
        family: socket.AddressFamily,
        module: Module,
        alpn: tuple[str, ...] = (),
    ) -> Connection | Exchange:
        """TCP then TLS to ``sockaddr``: the connection, or the failed Exchange."""
        loop = asyncio.get_running_loop()
        # Before the socket: a CA file gone since the load is the exporter's failure
        # (internal), not the handshake's.
        ctx = context_for(module, alpn)
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as e:
            return self.fail(Reason.NETWORK_ERROR, f"socket: {e.strerror or e}")
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await loop.sock_connect(sock, sockaddr)
            t_tcp = time.monotonic()
            self.stage = "tls"
            conn = Connection(loop, sock, ctx, server_hostname(module, sockaddr))
            await conn.handshake()
        except OSError as e:  # ssl.SSLError is an OSError
            sock.close()
            if self.stage == "connect":
                return self.fail(classify_oserror(e), e.strerror or str(e))
            return self.fail(*classify_tls_error(e))
        except BaseException:
            sock.close()
            raise
        self.stage = "exchange"
        self.conn = conn
        self.info = TlsInfo(
            handshake=time.monotonic() - t_tcp,
            connect=t_tcp - self.start,
            cert_expiry=earliest_expiry(conn.obj),
            alpn=conn.obj.selected_alpn_protocol(),
        )
        return conn


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
