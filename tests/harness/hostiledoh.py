"""A hostile DNS-over-HTTPS endpoint on loopback: HTTP/2 framed by h2 over TLS with a
trustme certificate for 127.0.0.1. ``ping_flood``: the connection is kept readable with
PING frames and the request is never answered (for at most ``flood_for`` seconds, then
the connection closes). ``bad_status``: the request is answered with ``:status: abc``.
``bad_chain_date``: every query is answered (an A record), and the server sends, after its
own certificate, an extra one whose notAfter is not a time (month 13): OpenSSL prints it
as "Bad time value", which is no date at all. The extra certificate is off the verified
path, so the handshake succeeds."""

from __future__ import annotations

import base64
import contextlib
import select
import socket
import ssl
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Any, Literal

import dns.message
import dns.rrset
import h2.config
import h2.connection
import h2.events
import trustme
from cryptography import x509

Behaviour = Literal["ping_flood", "bad_status", "bad_chain_date"]


class HostileDoH:
    def __init__(self, behaviour: Behaviour, *, flood_for: float = 20.0) -> None:
        self.behaviour = behaviour
        self.flood_for = flood_for
        self.ca = trustme.CA()
        self.ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.leaf = leaf = self.ca.issue_cert("127.0.0.1")
        leaf.configure_cert(self.ctx)
        if behaviour == "bad_chain_date":
            self._tmp = tempfile.TemporaryDirectory(prefix="hostiledoh-")
            chain = Path(self._tmp.name) / "chain.pem"
            key = Path(self._tmp.name) / "key.pem"
            chain.write_bytes(
                b"".join(b.bytes() for b in leaf.cert_chain_pems) + undated_certificate()
            )
            leaf.private_key_pem.write_to_path(str(key))
            self.ctx.load_cert_chain(str(chain), str(key))
        self.ctx.set_alpn_protocols(["h2"])
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port: int = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def write_ca(self, path: Path) -> Path:
        self.ca.cert_pem.write_to_path(str(path))
        return path

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.connections += 1
            threading.Thread(target=self._connection, args=(conn,), daemon=True).start()

    def _connection(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        try:
            with self.ctx.wrap_socket(conn, server_side=True) as tls:
                h2c: Any = h2.connection.H2Connection(
                    h2.config.H2Configuration(
                        client_side=False, header_encoding=None, validate_outbound_headers=False
                    )
                )
                h2c.initiate_connection()
                tls.sendall(h2c.data_to_send())
                if self.behaviour == "ping_flood":
                    self._flood(tls, h2c)
                elif self.behaviour == "bad_status":
                    self._bad_status(tls, h2c)
                else:
                    self._answer(tls, h2c)
        except (OSError, ssl.SSLError):
            return

    def _flood(self, tls: ssl.SSLSocket, h2c: Any) -> None:
        for i in range(1000):
            h2c.ping(i.to_bytes(8, "big"))
        blob = h2c.data_to_send()
        end = time.monotonic() + self.flood_for
        while time.monotonic() < end and not self._stop.is_set():
            tls.sendall(blob)
            # Read (and drop) what the client sends back (PING ACKs), so its writes never
            # block: a client that is starved then has only itself to blame.
            while tls.pending() or select.select([tls], [], [], 0)[0]:
                with contextlib.suppress(TimeoutError, ssl.SSLWantReadError):
                    if not tls.recv(65536):
                        return

    def _bad_status(self, tls: ssl.SSLSocket, h2c: Any) -> None:
        end = time.monotonic() + 5
        while time.monotonic() < end:
            data = tls.recv(65536)
            if not data:
                return
            for ev in h2c.receive_data(data):
                if isinstance(ev, h2.events.RequestReceived):
                    h2c.send_headers(ev.stream_id, [(b":status", b"abc")], end_stream=True)
            tls.sendall(h2c.data_to_send())

    def plain_chain(self, where: Path) -> tuple[str, str]:
        """The server's own chain and key without the undated certificate, as files for
        ``ctx.load_cert_chain`` (the same server answering, for comparison)."""
        where.mkdir(parents=True, exist_ok=True)
        chain, key = where / "chain.pem", where / "key.pem"
        chain.write_bytes(b"".join(b.bytes() for b in self.leaf.cert_chain_pems))
        self.leaf.private_key_pem.write_to_path(str(key))
        return str(chain), str(key)

    def _answer(self, tls: ssl.SSLSocket, h2c: Any) -> None:
        paths: dict[int, bytes] = {}
        bodies: dict[int, bytes] = {}
        end = time.monotonic() + 5
        while time.monotonic() < end:
            data = tls.recv(65536)
            if not data:
                return
            for ev in h2c.receive_data(data):
                if isinstance(ev, h2.events.RequestReceived):
                    paths[ev.stream_id] = dict(ev.headers).get(b":path", b"")
                elif isinstance(ev, h2.events.DataReceived):
                    bodies[ev.stream_id] = bodies.get(ev.stream_id, b"") + ev.data
                    h2c.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                elif isinstance(ev, h2.events.StreamEnded):
                    wire = _dns_answer(paths.get(ev.stream_id, b""), bodies.get(ev.stream_id))
                    h2c.send_headers(
                        ev.stream_id,
                        [(b":status", b"200"), (b"content-type", b"application/dns-message")],
                    )
                    h2c.send_data(ev.stream_id, wire, end_stream=True)
            tls.sendall(h2c.data_to_send())

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()
        if self.behaviour == "bad_chain_date":
            self._tmp.cleanup()


def _dns_answer(path: bytes, body: bytes | None) -> bytes:
    """The answer to a DoH query: POST's body, or GET's ``dns`` parameter."""
    if body is None:
        param = dict(urllib.parse.parse_qsl(path.partition(b"?")[2].decode()))["dns"]
        body = base64.urlsafe_b64decode(param + "=" * (-len(param) % 4))
    query = dns.message.from_wire(body)
    response = dns.message.make_response(query)
    response.answer.append(dns.rrset.from_text(query.question[0].name, 60, "IN", "A", "192.0.2.1"))
    return response.to_wire()


def undated_certificate() -> bytes:
    """A self-signed certificate (PEM) whose notAfter is in month 13: DER-valid, its
    date not a time. The signature no longer matches; nothing checks it off the path."""
    other = trustme.CA().cert_pem.bytes()
    der = ssl.PEM_cert_to_DER_cert(other.decode())
    cert = x509.load_der_x509_certificate(der)
    # UTCTime before 2050, GeneralizedTime after (RFC 5280 4.1.2.5); trustme's CA ends later.
    when = cert.not_valid_after_utc
    after = when.strftime("%Y%m%d%H%M%SZ" if when.year >= 2050 else "%y%m%d%H%M%SZ").encode()
    assert der.count(after) == 1, "the notAfter is not unique in the DER"
    month = len(after) - 11  # YYMMDDHHMMSSZ or YYYYMMDDHHMMSSZ: the month's first digit
    bad = after[:month] + b"13" + after[month + 2 :]  # same length: no length field moves
    return ssl.DER_cert_to_PEM_cert(der.replace(after, bad)).encode()
