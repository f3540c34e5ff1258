"""DNS over UDP on a *connected* socket.

A connected UDP socket is told of ICMP port-unreachable (ECONNREFUSED on the next recv), so
a host whose DNS service is down reads as ``refused`` at once instead of as a timeout. An
unconnected socket never sees that on Linux: without IP_RECVERR the kernel reports an ICMP
error only to a connected socket (``__udp4_lib_err`` in net/ipv4/udp.c). The kernel also drops
datagrams from any other address or port, as a stub resolver would ignore them.

Built on raw non-blocking sockets and one timer per probe: this is the hot path of a
1,000-target scrape. In-flight probes share one epoll of their own (:class:`_Mux`), which the
event loop watches as a single fd: ``loop.add_reader``/``remove_reader`` per socket cost more
than the sendto itself (asyncio's transport check and selector bookkeeping, ~20 µs a probe).
"""

from __future__ import annotations

import asyncio
import errno
import secrets
import select
import socket
import time
import weakref
from collections.abc import Callable

from dnsfleet.dnswire import Malformed, Query, parse_response
from dnsfleet.probes.result import Exchange, Reason

MAX_DATAGRAM = 65535
UNREACHABLE_ERRNOS = frozenset(
    {errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN, errno.EHOSTDOWN, errno.EADDRNOTAVAIL}
)


class _Mux:
    """One epoll for the UDP probes in flight on one event loop, itself watched by the loop.
    It exists only while probes are in flight, so nothing outlives a scrape or a loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.ep = select.epoll()
        self.handlers: dict[int, Callable[[], None]] = {}
        loop.add_reader(self.ep.fileno(), self._ready)

    def _ready(self) -> None:
        # Level-triggered: whatever is left beyond this batch wakes the loop again.
        for fd, _ in self.ep.poll(0, 256):
            cb = self.handlers.get(fd)
            if cb is not None:
                cb()

    def add(self, fd: int, cb: Callable[[], None]) -> None:
        self.ep.register(fd, select.EPOLLIN)  # EPOLLERR (ICMP errors) is always reported
        self.handlers[fd] = cb

    def remove(self, fd: int) -> None:
        if self.handlers.pop(fd, None) is not None:
            self.ep.unregister(fd)
        if not self.handlers:
            self.loop.remove_reader(self.ep.fileno())
            self.ep.close()
            if _MUXES.get(self.loop) is self:
                del _MUXES[self.loop]


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
        sock = socket.socket(family, socket.SOCK_DGRAM)
    except OSError as e:
        return Exchange(None, Reason.NETWORK_ERROR, 0.0, f"socket: {e.strerror or e}")
    sock.setblocking(False)
    qid = secrets.randbits(16)
    fut: asyncio.Future[Exchange] = loop.create_future()
    ignored = 0

    def finish(ex: Exchange) -> None:
        if not fut.done():
            fut.set_result(ex)

    def on_readable() -> None:
        nonlocal ignored
        while not fut.done():
            try:
                data = sock.recv(MAX_DATAGRAM)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                finish(
                    Exchange(
                        None, classify_oserror(e), time.monotonic() - start, e.strerror or str(e)
                    )
                )
                return
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
    mux: _Mux | None = None
    handle = None
    try:
        try:
            sock.connect(sockaddr)
            sock.send(query.with_id(qid))
        except OSError as e:
            return Exchange(
                None, classify_oserror(e), time.monotonic() - start, e.strerror or str(e)
            )
        mux = _mux(loop)
        mux.add(fd, on_readable)
        handle = loop.call_at(loop.time() + timeout, on_timeout)
        return await fut
    finally:
        if mux is not None:
            mux.remove(fd)
        if handle is not None:
            handle.cancel()
        sock.close()
