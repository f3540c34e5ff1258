"""A dnstap writer for tests: builds dnstap messages and speaks Frame Streams to a socket,
well or badly, as the test asks."""

from __future__ import annotations

import dataclasses
import socket
import struct
import time
from pathlib import Path
from typing import Any

import dns.edns
import dns.flags
import dns.message
import dns.rcode

from dnsfleet.dnstap.framestreams import (
    CONTENT_TYPE,
    FINISH,
    READY,
    START,
    STOP,
    decode_control,
    encode_control,
)
from dnsfleet.dnstap.message import CLIENT_QUERY, CLIENT_RESPONSE, Dnstap
from dnsfleet.dnstap.protocol import IngestSettings


def pair(
    name: str,
    qtype: str = "A",
    rcode: int = 0,
    *,
    ede: int | None = None,
    port: int = 40000,
    qid: int = 1,
    identity: bytes = b"r1",
    t0: float = 1_700_000_000.0,
    latency: float = 0.002,
    query_time_in_response: bool = False,
    tc: bool = False,
) -> tuple[bytes, bytes]:
    """A CLIENT_QUERY and its CLIENT_RESPONSE, serialized."""
    q = dns.message.make_query(name, qtype, use_edns=0)
    q.id = qid
    r = dns.message.make_response(q)
    r.set_rcode(dns.rcode.Rcode(rcode))
    if ede is not None:
        r.use_edns(0, options=[dns.edns.EDEOption(dns.edns.EDECode(ede))])
    if tc:
        r.flags |= dns.flags.TC
    cq = _message(identity, CLIENT_QUERY, port, q.to_wire(), t0, query_time=None)
    qt = t0 if query_time_in_response else None
    cr = _message(identity, CLIENT_RESPONSE, port, r.to_wire(), t0 + latency, query_time=qt)
    return cq, cr


def _message(
    identity: bytes,
    mtype: int,
    port: int,
    wire: bytes,
    when: float,
    *,
    query_time: float | None,
) -> bytes:
    d: Any = Dnstap()
    d.identity = identity
    d.type = 1
    m = d.message
    m.type = mtype
    m.socket_family = 1
    m.socket_protocol = 1
    m.query_address = bytes([127, 0, 0, 1])
    m.query_port = port
    sec, nsec = int(when), round((when % 1) * 1e9)
    if mtype == CLIENT_QUERY:
        m.query_message = wire
        m.query_time_sec, m.query_time_nsec = sec, nsec
    else:
        m.response_message = wire
        m.response_time_sec, m.response_time_nsec = sec, nsec
        if query_time is not None:
            m.query_time_sec = int(query_time)
            m.query_time_nsec = round((query_time % 1) * 1e9)
    return bytes(d.SerializeToString())


def ingest_settings(path: Path, **over: Any) -> IngestSettings:
    """The ingest process's settings for a socket at ``path``, short timeouts; an
    ``identities`` given as a dict is taken as its pairs."""
    s = IngestSettings(
        socket=str(path),
        socket_mode=0o660,
        identities=(("r1", "127.0.0.1:53"),),
        handshake_timeout=1.0,
        idle_timeout=1.0,
        max_connections=4,
    )
    if isinstance(over.get("identities"), dict):
        over["identities"] = tuple(over["identities"].items())
    return dataclasses.replace(s, **over)


def frames(*payloads: bytes) -> bytes:
    return b"".join(struct.pack(">I", len(p)) + p for p in payloads)


class Writer:
    """A Frame Streams writer on a unix (path) or TCP ((host, port)) socket."""

    def __init__(self, where: str | tuple[str, int], timeout: float = 10.0) -> None:
        family = socket.AF_UNIX if isinstance(where, str) else socket.AF_INET
        deadline = time.monotonic() + timeout
        while True:
            self.sock = socket.socket(family, socket.SOCK_STREAM)
            self.sock.settimeout(timeout)
            try:
                self.sock.connect(where)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def handshake(self, content_type: bytes = CONTENT_TYPE) -> int:
        """READY, read ACCEPT, START; the control type the reader answered with."""
        self.sock.sendall(encode_control(READY, (content_type,)))
        ctype = self.read_control()
        self.sock.sendall(encode_control(START, (content_type,)))
        return ctype

    def read_control(self) -> int:
        head = self._exact(8)
        (length,) = struct.unpack(">I", head[4:])
        return decode_control(self._exact(length))[0]

    def _exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionResetError("the reader closed the stream")
            buf += chunk
        return buf

    def send(self, *payloads: bytes) -> None:
        self.sock.sendall(frames(*payloads))

    def stop(self) -> bool:
        """STOP; True when the reader answered FINISH."""
        self.sock.sendall(encode_control(STOP))
        try:
            return self.read_control() == FINISH
        finally:
            self.sock.close()

    def close(self) -> None:
        self.sock.close()
