"""DNS over UDP on a *connected* socket.

A connected UDP socket is told of ICMP port-unreachable (ECONNREFUSED on the next recv), so
a host whose DNS service is down reads as ``refused`` at once instead of as a timeout. An
unconnected socket never sees that on Linux: without IP_RECVERR the kernel reports an ICMP
error only to a connected socket (``__udp4_lib_err`` in net/ipv4/udp.c). The kernel also drops
datagrams from any other address or port, as a stub resolver would ignore them.

Built on raw non-blocking sockets and shared timers (a batch's heap; expiry.py for single
exchanges). The common probes share sockets instead (udpbatch.py for a /metrics batch,
udpshared.py for /probe): these are for what those cannot serve. A probe's own port
is half of what makes an answer unguessable to an off-path spoofer (the ID the other).
In-flight probes share one epoll of their own (:class:`_Mux`), watched by the loop as one
fd (``add_reader`` per socket cost more than the sendto, ~20 µs a probe). A probe makes
six system calls: socket, connect, send, epoll_ctl, recv, close.
"""

from __future__ import annotations

import _socket
import asyncio
import heapq
import os
import select
import socket
import struct
import time
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from dnsfleet.dnswire import Malformed, Query, parse_response
from dnsfleet.probes.expiry import Expiries
from dnsfleet.probes.reasons import Reason, classify_oserror
from dnsfleet.probes.result import Exchange, unanswered

MAX_DATAGRAM = 65535
READ_BURST = 64
_DGRAM_NONBLOCK = socket.SOCK_DGRAM | socket.SOCK_NONBLOCK


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
        self.loop_ref = weakref.ref(loop)
        self.expiries = Expiries()  # of single exchanges
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
# The mux of the loop that asked last, held weakly as _MUXES holds it: a WeakKeyDictionary
# lookup is Python code that makes a weak reference per call.
_last: list[weakref.ref[_Mux]] = []


def _mux(loop: asyncio.AbstractEventLoop) -> _Mux:
    mux = _last[0]() if _last else None
    if mux is not None and mux.loop_ref() is loop:
        return mux
    mux = _MUXES.get(loop)
    if mux is None:
        mux = _MUXES[loop] = _Mux(loop)
    _last[:] = [weakref.ref(mux)]
    return mux


Sockaddr = tuple[str, int] | tuple[str, int, int, int]


class _Probe:
    """One query on its own connected socket, driven by callbacks: readable (from the
    multiplexer) and expired (from a timer). ``done(index, exchange)`` is called once."""

    __slots__ = (
        "done",
        "expires",
        "fd",
        "group",
        "ignored",
        "index",
        "mux",
        "qid",
        "query",
        "sock",
        "start",
    )

    def __init__(
        self, mux: _Mux, query: Query, done: Callable[[int, Exchange], None], index: int = 0
    ) -> None:
        self.mux = mux
        self.query = query
        self.done: Callable[[int, Exchange], None] | None = done
        self.index = index
        self.ignored = 0
        self.sock: _socket.socket | None = None
        self.fd = -1
        self.qid = 0
        self.start = 0.0
        self.expires = 0.0  # loop time
        # The group of single exchanges it waits in (expiry.py); None in a batch.
        self.group: dict[Any, float] | None = None

    def send(self, sockaddr: Sockaddr, family: socket.AddressFamily) -> bool:
        """Open, connect and send; False when that already ended the probe."""
        self.start = time.monotonic()
        try:
            # Non-blocking from birth (no fcntl/ioctl to make it so), and the C socket type
            # itself: socket.socket adds only Python-level wrappers around the same calls.
            sock = _socket.socket(family, _DGRAM_NONBLOCK)
        except OSError as e:
            self._finish(Exchange(None, Reason.NETWORK_ERROR, 0.0, f"socket: {e.strerror or e}"))
            return False
        self.sock = sock
        self.qid = self.mux.next_id()
        try:
            sock.connect(sockaddr)
            sock.send(self.query.with_id(self.qid))
        except OSError as e:
            self._finish(Exchange(None, classify_oserror(e), self._elapsed(), e.strerror or str(e)))
            return False
        self.fd = sock.fileno()
        self.mux.add(self.fd, self.readable)
        return True

    def _elapsed(self) -> float:
        return time.monotonic() - self.start

    def _finish(self, ex: Exchange) -> None:
        group = self.group
        if group is not None:
            self.group = None
            del group[self]
        done, self.done = self.done, None
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()  # takes it out of the epoll set too
            if self.fd >= 0:
                self.mux.remove(self.fd)
        if done is not None:
            done(self.index, ex)

    def readable(self) -> None:
        mux = self.mux
        # At most READ_BURST datagrams per turn: a peer flooding datagrams that are not
        # our answer as fast as they are read would otherwise hold the loop here for good.
        # The mux's epoll is level-triggered, so what is left wakes the loop again.
        for _ in range(READ_BURST):
            if self.sock is None:
                return
            try:
                n = self.sock.recv_into(mux.buf)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                self._finish(
                    Exchange(None, classify_oserror(e), self._elapsed(), e.strerror or str(e))
                )
                return
            try:
                resp = parse_response(mux.view[:n].tobytes(), self.query, self.qid)
            except Malformed as e:
                self._finish(Exchange(None, Reason.MALFORMED, self._elapsed(), str(e)))
                return
            if resp is None:
                self.ignored += 1  # not an answer to our query: keep waiting, like a stub
                continue
            self._finish(Exchange(resp, None, self._elapsed()))

    def expire(self, timeout: float) -> None:
        if self.sock is None:
            return
        # An answer the kernel already holds counts: when the loop runs late (a busy
        # machine, thousands of probes in flight), the timer and the datagram come due in
        # the same round, and the epoll batch may not have reached this socket yet.
        self.readable()
        if self.sock is None:
            return
        self._finish(unanswered(self.ignored, timeout, self._elapsed()))

    def cancel(self) -> None:
        self.done = None
        if self.sock is None:
            return  # ended already: the common case, the exchange's own clean-up
        self._finish(Exchange(None, Reason.NETWORK_ERROR, self._elapsed(), "cancelled"))


async def exchange(
    *,
    sockaddr: Sockaddr,
    family: socket.AddressFamily,
    query: Query,
    timeout: float,
) -> Exchange:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[Exchange] = loop.create_future()

    def resolve(_: int, ex: Exchange) -> None:
        if not fut.done():  # the caller may have been cancelled meanwhile
            fut.set_result(ex)

    mux = _mux(loop)
    probe = _Probe(mux, query, resolve)
    if not probe.send(sockaddr, family):
        return fut.result()
    mux.expiries.add(loop, probe, timeout)
    try:
        return await fut
    finally:
        probe.cancel()  # a no-op once finished; closes the socket if the caller gave up


BatchItem = tuple[Sockaddr, socket.AddressFamily, Query, float]  # ..., module timeout


class _Batch:
    """The state of one :func:`exchange_many`. A class with an explicit close rather than
    closures: closures that call each other form a reference cycle, which kept a whole
    batch (its probes, its items, the caller's results) alive until a full garbage
    collection, and RSS 3.5 MB higher at 1,000 targets."""

    __slots__ = (
        "concurrency",
        "deadline",
        "expiries",
        "finished",
        "in_flight",
        "items",
        "loop",
        "mux",
        "next_item",
        "on_result",
        "starting",
        "timer",
        "timer_at",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        items: Sequence[BatchItem],
        deadline: float,
        concurrency: int,
        on_result: Callable[[int, Exchange | None], None],
    ) -> None:
        self.loop = loop
        self.mux = _mux(loop)
        self.items = items
        self.deadline = deadline
        self.concurrency = concurrency
        self.on_result: Callable[[int, Exchange | None], None] | None = on_result
        self.finished: asyncio.Future[None] = loop.create_future()
        # (loop time, sequence, probe, its timeout), earliest first.
        self.expiries: list[tuple[float, int, _Probe, float]] = []
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0
        self.in_flight = 0
        self.next_item = 0
        self.starting = False

    def start_more(self) -> None:
        self.starting = True
        items, loop, on_result = self.items, self.loop, self.on_result
        assert on_result is not None
        mux, deadline, expiries, done = self.mux, self.deadline, self.expiries, self.done
        total = len(items)
        while self.in_flight < self.concurrency and self.next_item < total:
            i = self.next_item
            self.next_item += 1
            sockaddr, family, query, timeout = items[i]
            now = loop.time()
            budget = min(timeout, deadline - now)
            if budget <= 0:
                on_result(i, None)
                continue
            probe = _Probe(mux, query, done, i)
            self.in_flight += 1
            if probe.send(sockaddr, family):
                expires = probe.expires = now + budget
                heapq.heappush(expiries, (expires, i, probe, budget))
                if self.timer is None or expires < self.timer_at:
                    self.arm(expires)
        self.starting = False
        if not self.in_flight and self.next_item >= total and not self.finished.done():
            self.finished.set_result(None)

    def done(self, i: int, ex: Exchange) -> None:
        self.in_flight -= 1
        if self.on_result is not None:
            self.on_result(i, ex)
        if self.starting:  # a failed send inside start_more's loop: it carries on
            return
        if self.next_item < len(self.items):
            self.start_more()
        elif not self.in_flight and not self.finished.done():
            # Every item started: the last answers only end the batch, without a call to
            # start_more per answer that finds nothing left to start.
            self.finished.set_result(None)

    def arm(self, when: float) -> None:
        if self.timer is None or when < self.timer_at:
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_at(when, self.sweep)
            self.timer_at = when

    def sweep(self) -> None:
        self.timer = None
        now = self.loop.time()
        expiries = self.expiries
        while expiries and expiries[0][0] <= now:
            _, _, probe, budget = heapq.heappop(expiries)
            probe.expire(budget)
        while expiries and expiries[0][2].sock is None:
            heapq.heappop(expiries)  # answered already
        if expiries:
            self.arm(expiries[0][0])

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.on_result = None
        for _, _, probe, _ in self.expiries:
            if probe.sock is not None:
                probe.cancel()
        self.expiries.clear()
        self.items = ()


async def exchange_many(
    items: Sequence[BatchItem],
    *,
    deadline: float,
    concurrency: int,
    on_result: Callable[[int, Exchange | None], None],
) -> None:
    """Send each of ``items`` as :func:`exchange` would, at most ``concurrency`` in flight,
    each with ``min(its timeout, deadline - now)`` when it starts (``deadline`` in loop
    time); ``on_result(i, exchange)`` for each, with None for an item the deadline left no
    time to start. One future for the batch instead of a task, a future and a timer per
    probe (in a 1,000-target /metrics cycle those cost more than the probes' system calls):
    expiries come from one timer that moves to the earliest deadline in flight."""
    if not items:
        return
    batch = _Batch(asyncio.get_running_loop(), items, deadline, concurrency, on_result)
    try:
        batch.start_more()
        await batch.finished
    finally:
        batch.close()
