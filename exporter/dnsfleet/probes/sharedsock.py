"""The socket side of :mod:`udpbatch`: an unconnected UDP socket that is told of ICMP errors
and sized for a batch, the error a queued ICMP report carries, and which targets such a
socket can serve."""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Iterator
from typing import Protocol, TypeVar

Sockaddr = tuple[str, int] | tuple[str, int, int, int]

# Linux constants Python 3.11's socket module lacks (include/uapi/linux/in.h, in6.h,
# asm-generic/socket.h).
IP_RECVERR = 11
IPV6_RECVERR = 25
SO_RCVBUFFORCE = 33
_RECVERR = {socket.AF_INET: (socket.IPPROTO_IP, IP_RECVERR), socket.AF_INET6: (41, IPV6_RECVERR)}
_LEVELS = frozenset(_RECVERR.values())
_EE_ERRNO = struct.Struct("=I")  # struct sock_extended_err's first field
_V4_MAPPED = bytes(10) + b"\xff\xff"  # ::ffff:0:0/96

RCVBUF_PER_PROBE = 4096  # an answer's skb on loopback takes about this much of the buffer
RCVBUF_MIN = 1 << 18  # junk from a hostile target that knows the port eats buffer, too
RCVBUF_MAX = 8 << 20


def shareable(sockaddr: Sockaddr, family: socket.AddressFamily) -> bool:
    """Whether a probe to ``sockaddr`` can go through a shared socket: not a zoned IPv6
    address, whose answers recvfrom reports with a scope the matching would have to
    spell as the configuration does; nor an address recvfrom spells otherwise than the
    configuration (glibc's inet_ntop writes ``::ffff:127.0.0.1`` where ipaddress wrote
    ``::ffff:7f00:1``), nor an IPv4-mapped one at all: its ICMP errors are IPv4's, which
    an AF_INET6 socket queues only with IP_RECVERR (``__udp4_lib_err``)."""
    if family == socket.AF_INET:
        return True
    if family != socket.AF_INET6 or (len(sockaddr) == 4 and sockaddr[3]):
        return False
    packed = socket.inet_pton(socket.AF_INET6, sockaddr[0])
    if packed.startswith(_V4_MAPPED):
        return False
    return socket.inet_ntop(socket.AF_INET6, packed) == sockaddr[0]


def rcvbuf_for(in_flight: int) -> int:
    """The receive buffer for a socket that may have ``in_flight`` probes at once."""
    return min(RCVBUF_MAX, max(RCVBUF_MIN, in_flight * RCVBUF_PER_PROBE))


def open_socket(family: socket.AddressFamily, rcvbuf: int) -> socket.socket:
    """A non-blocking unconnected UDP socket with IP_RECVERR (IPV6_RECVERR): without it Linux
    tells an unconnected socket of no ICMP error at all (``__udp4_lib_err``)."""
    sock = socket.socket(family, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)
    try:
        sock.setsockopt(*_RECVERR[family], 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        # SO_RCVBUF is capped at net.core.rmem_max; with CAP_NET_ADMIN the batch may ask past
        # it, else it keeps what the cap allows (the kernel reports twice what it set).
        if sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) < 2 * rcvbuf:
            with contextlib.suppress(PermissionError):
                sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf)
    except OSError:
        sock.close()
        raise
    return sock


def icmp_errno(ancdata: list[tuple[int, int, bytes]]) -> int | None:
    """The errno (``ee_errno``) of a report read from the error queue
    (``recvmsg(..., MSG_ERRQUEUE)``), or None when it carries none."""
    for level, kind, data in ancdata:
        if (level, kind) in _LEVELS and len(data) >= _EE_ERRNO.size:
            errno: int = _EE_ERRNO.unpack_from(data)[0]
            return errno
    return None


class _Identified(Protocol):
    qid: int


Q = TypeVar("Q", bound=_Identified)


def by_id(ids: Q | dict[int, Q], qid: int) -> Q | None:
    """The query with ID ``qid`` among a target's queries on a socket: one, or several by ID."""
    if isinstance(ids, dict):
        return ids.get(qid)
    return ids if ids.qid == qid else None


def queued_errors(sock: socket.socket, limit: int) -> Iterator[tuple[Sockaddr, int, int] | None]:
    """Up to ``limit`` reports read from ``sock``'s error queue: (the target's sockaddr, the
    returned query's ID, the errno) for each that says so, None for one that does not."""
    for _ in range(limit):
        try:
            data, ancdata, _, addr = sock.recvmsg(512, 512, socket.MSG_ERRQUEUE)
        except OSError:
            return
        err = icmp_errno(ancdata)
        if err is None or not addr or len(data) < 2:
            yield None
        else:
            yield addr, int.from_bytes(data[:2], "big"), err
