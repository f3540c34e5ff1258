"""A hostile DNS-over-HTTPS endpoint on loopback: HTTP/2 framed by h2 over TLS with a
trustme certificate for 127.0.0.1. ``ping_flood``: the connection is kept readable with
PING frames and the request is never answered (for at most ``flood_for`` seconds, then
the connection closes). ``bad_status``: the request is answered with ``:status: abc``."""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any, Literal

import h2.config
import h2.connection
import h2.events
import trustme

Behaviour = Literal["ping_flood", "bad_status"]


class HostileDoH:
    def __init__(self, behaviour: Behaviour, *, flood_for: float = 20.0) -> None:
        self.behaviour = behaviour
        self.flood_for = flood_for
        self.ca = trustme.CA()
        self.ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.ca.issue_cert("127.0.0.1").configure_cert(self.ctx)
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
                else:
                    self._bad_status(tls, h2c)
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

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()
