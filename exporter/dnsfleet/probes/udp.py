"""DNS over UDP on a *connected* socket.

A connected UDP socket is told of ICMP port-unreachable (ECONNREFUSED on the next recv), so
a host whose DNS service is down reads as ``refused`` at once instead of as a timeout. An
unconnected socket never sees that on Linux: without IP_RECVERR the kernel reports an ICMP
error only to a connected socket (``__udp4_lib_err`` in net/ipv4/udp.c). The kernel also drops
datagrams from any other address or port, as a stub resolver would ignore them.

Built on raw non-blocking sockets and one timer per probe: this is the hot path of a
1,000-target scrape and of /probe. A socket per probe is kept on purpose: its random source
port is half of what makes an answer unguessable to an off-path spoofer (the random ID is
the other). In-flight probes share one epoll of their own (:class:`_Mux`), which the event
loop watches as a single fd: ``loop.add_reader``/``remove_reader`` per socket cost more than
the sendto itself (asyncio's transport check and selector bookkeeping, ~20 µs a probe).
A probe makes six system calls: socket, connect, send, epoll_ctl, recv, close.
"""

from __future__ import annotations

import asyncio
import errno
import os
import select
import socket
import struct
import time
import weakref
from collections.abc import Callable

from dnsfleet.dnswire import Malformed, Query, parse_response
from dnsfleet.probes.result import Exchange, Reason

MAX_DATAGRAM = 65535
_DGRAM_NONBLOCK = socket.SOCK_DGRAM | socket.SOCK_NONBLOCK
UNREACHABLE_ERRNOS = frozenset(
    {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.EHOSTDOWN, errno.EADDRNOTAVAIL}
)


class _Mux:
    """One epoll for the UDP probes of one event loop, itself watched by the loop as a
    single fd. Made with the loop's first probe and kept for the loop's life (making it and
    registering it with the loop costs four system calls; made per burst of probes it came
    and went every few probes under /probe load). It holds the loop weakly, so it goes, and
    its descriptor with it, when the loop is collected.

    It also keeps one receive buffer (a 64 KiB bytes object per probe cost an mmap, an
    mremap and a munmap) and a pool of random query IDs (one getrandom(2) per 256 probes
    instead of per probe; still the kernel's CSPRNG, which is what makes IDs unguessable)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.ep = select.epoll()
        self.handlers: dict[int, Callable[[], None]] = {}
        self.buf = bytearray(MAX_DATAGRAM)
        self.view = memoryview(self.buf)
        self.ids: list[int] = []
        loop.add_reader(self.ep.fileno(), self._ready)

    def _ready(self) -> None:
        # Level-triggered: whatever is left beyond this batch wakes the loop again.
        handlers = self.handlers
        for fd, _ in self.ep.poll(0, 256):
            cb = handlers.get(fd)
            if cb is not None:
                cb()

    def add(self, fd: int, cb: Callable[[], None]) -> None:
        self.ep.register(fd, select.EPOLLIN)  # EPOLLERR (ICMP errors) is always reported
        self.handlers[fd] = cb

    def remove(self, fd: int) -> None:
        """Forget ``fd``; the caller closes it, which takes it out of the epoll set (the
        kernel drops a closed file's registrations), so no EPOLL_CTL_DEL is needed."""
        self.handlers.pop(fd, None)

    def next_id(self) -> int:
        if not self.ids:
            self.ids = list(struct.unpack("256H", os.urandom(512)))
        return self.ids.pop()


_MUXES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Mux] = weakref.WeakKeyDictionary()


def _mux(loop: asyncio.AbstractEventLoop) -> _Mux:
    mux = _MUXES.get(loop)
    if mux is None:
        mux = _MUXES[loop] = _Mux(loop)
    return mux


def classify_oserror(e: OSError) -> Reason:
    if isinstance(e, ConnectionRefusedError) or e.errno == errno.ECONNREFUSED:
        return Reason.REFUSED
    if e.errno in UNREACHABLE_ERRNOS:
        return Reason.UNREACHABLE
    return Reason.NETWORK_ERROR


async def exchange(
    *,
    sockaddr: tuple[str, int] | tuple[str, int, int, int],
    family: socket.AddressFamily,
    query: Query,
    timeout: float,
) -> Exchange:
    loop = asyncio.get_running_loop()
    start = time.monotonic()
    try:
        # Non-blocking from birth: no fcntl/ioctl to make it so.
        sock = socket.socket(family, _DGRAM_NONBLOCK)
    except OSError as e:
        return Exchange(None, Reason.NETWORK_ERROR, 0.0, f"socket: {e.strerror or e}")
    mux = _mux(loop)
    qid = mux.next_id()
    fut: asyncio.Future[Exchange] = loop.create_future()
    ignored = 0

    def finish(ex: Exchange) -> None:
        if not fut.done():
            fut.set_result(ex)

    def on_readable() -> None:
        nonlocal ignored
        while not fut.done():
            try:
                n = sock.recv_into(mux.buf)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                finish(
                    Exchange(
                        None, classify_oserror(e), time.monotonic() - start, e.strerror or str(e)
                    )
                )
                return
            data = mux.view[:n].tobytes()
            try:
                resp = parse_response(data, query, qid)
            except Malformed as e:
                finish(Exchange(None, Reason.MALFORMED, time.monotonic() - start, str(e)))
                return
            if resp is None:
                ignored += 1  # not an answer to our query: keep waiting, like a stub
                continue
            finish(Exchange(resp, None, time.monotonic() - start))

    def on_timeout() -> None:
        # An answer the kernel already holds counts: when the loop runs late (a busy
        # machine, thousands of probes in flight), the timer and the datagram come due in
        # the same round, and the epoll batch may not have reached this socket yet.
        on_readable()
        if fut.done():
            return
        if ignored:
            finish(
                Exchange(
                    None,
                    Reason.MALFORMED,
                    time.monotonic() - start,
                    f"{ignored} datagram(s) that were not an answer to the query, "
                    "and no answer before the timeout",
                )
            )
        else:
            finish(
                Exchange(
                    None,
                    Reason.TIMEOUT,
                    time.monotonic() - start,
                    f"no answer within {timeout:.3g}s",
                )
            )

    fd = sock.fileno()
    registered = False
    handle = None
    try:
        try:
            sock.connect(sockaddr)
            sock.send(query.with_id(qid))
        except OSError as e:
            return Exchange(
                None, classify_oserror(e), time.monotonic() - start, e.strerror or str(e)
            )
        mux.add(fd, on_readable)
        registered = True
        handle = loop.call_later(timeout, on_timeout)
        return await fut
    finally:
        if handle is not None:
            handle.cancel()
        sock.close()
        if registered:
            mux.remove(fd)
