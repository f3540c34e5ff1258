"""``/probe``'s plain UDP exchanges through a small pool of long-lived unconnected sockets,
driven by callbacks: a query costs a ``sendto`` and its share of the ``recvfrom`` calls that
drain each readiness event, where a socket of its own (udp.py) cost socket, connect, send,
epoll_ctl, recv and close, and a wake-up of the loop per answer.

What the connected socket gave is kept as the /metrics batch keeps it (probes/udpbatch.py,
docs/design.md "Shared sockets"): an answer is taken only from the target's address and
port, with the query's ID (free among the target's queries on that socket) and question;
ICMP errors per target from the error queue (``IP_RECVERR``, probes/sharedsock.py). The
source port does not stay: a socket serves at most ``ROTATE_QUERIES`` queries or
``ROTATE_SECONDS``, then takes no new ones and closes when its last query has ended, so a
late answer to it is dropped by the kernel as the connected socket's was. Targets a shared
socket cannot serve as configured (an IPv6 zone, an IPv4-mapped address) are refused by
:func:`start` (None): their probes keep udp.py's socket each.
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import struct
import time
from collections.abc import Callable

from dnsfleet import eventloop
from dnsfleet.dnswire import Malformed, Query, parse_response
from dnsfleet.probes import sharedsock
from dnsfleet.probes.expiry import Expiries
from dnsfleet.probes.reasons import Reason, classify_oserror
from dnsfleet.probes.result import Exchange, unanswered
from dnsfleet.probes.sharedsock import Sockaddr, by_id, shareable

POOL = 4  # sockets taking new queries at once, one picked at random per query
ROTATE_QUERIES = 256  # a socket takes at most this many queries ...
ROTATE_SECONDS = 5.0  # ... for at most this long after its first
READ_BURST = 64  # datagrams per socket per readiness event: a flood cannot hold the loop
MAX_DATAGRAM = 65535
MAX_ID_DRAWS = 64
_SEND_RETRIES = 2

Done = Callable[[Exchange], None]


class Pending:
    """One query in flight: ``done(exchange)`` is called once, from a callback of the loop
    (never from :func:`start` itself), unless :meth:`cancel` comes first."""

    __slots__ = ("done", "group", "ignored", "qid", "query", "sock", "sockaddr", "start")

    def __init__(self, query: Query, sockaddr: Sockaddr, done: Done) -> None:
        self.query = query
        self.sockaddr = sockaddr
        self.done: Done | None = done
        self.sock: _Socket | None = None
        self.qid = 0
        self.ignored = 0
        self.start = time.monotonic()
        self.group: dict[object, float] | None = None  # its timeout group (expiry.py)

    def end(self, ex: Exchange) -> None:
        group = self.group
        if group is not None:
            self.group = None
            del group[self]
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.forget(self)
        done, self.done = self.done, None
        if done is not None:
            done(ex)

    def expire(self, timeout: float) -> None:
        sock = self.sock
        if sock is not None:
            # An answer the kernel already holds counts: the timer and the datagram may
            # come due in the same turn of a busy loop.
            sock.readable(woken=False)
        if self.sock is not None:
            self.end(unanswered(self.ignored, timeout, time.monotonic() - self.start))

    def cancel(self) -> None:
        """The requester is gone: end without a call to ``done``."""
        self.done = None
        if self.sock is not None or self.group is not None:
            self.end(Exchange(None, Reason.NETWORK_ERROR, 0.0, "cancelled"))


class _Socket:
    """A socket of the pool. ``peers``: a target's sockaddr (as recvfrom spells it) to its
    query, or to its queries by ID when it has had several here (ended ones included: at
    most ROTATE_QUERIES a socket)."""

    __slots__ = ("errored", "fd", "in_flight", "left", "peers", "pool", "sock", "until")

    def __init__(self, pool: _Pool, family: socket.AddressFamily) -> None:
        self.pool = pool
        sock = self.sock = sharedsock.open_socket(family, sharedsock.RCVBUF_MIN)
        self.fd = sock.fileno()
        self.peers: dict[Sockaddr, Pending | dict[int, Pending]] = {}
        self.in_flight = 0
        self.left = ROTATE_QUERIES
        self.until = time.monotonic() + ROTATE_SECONDS
        self.errored = False  # an error was read since the socket was last watched anew
        pool.loop.add_reader(self.fd, self.readable)

    def place(self, q: Pending) -> bool:
        """Take ``q`` under an ID free for its target here; False when none was found."""
        ids = self.peers.get(q.sockaddr)
        if ids is None:
            q.qid = self.pool.draw()
            self.peers[q.sockaddr] = q
        else:
            if isinstance(ids, Pending):
                ids = self.peers[q.sockaddr] = {ids.qid: ids}
            for _ in range(MAX_ID_DRAWS):
                qid = self.pool.draw()
                if qid not in ids:
                    break
            else:
                return False
            q.qid = qid
            ids[qid] = q
        q.sock = self
        self.in_flight += 1
        self.left -= 1
        return True

    def forget(self, q: Pending) -> None:
        """``q`` has ended. Its ID stays taken while the socket lives, so a late answer to
        it is dropped quietly rather than counted against the target's next query here."""
        self.in_flight -= 1
        if not self.in_flight and self.left <= 0:
            self.close()

    def send(self, q: Pending) -> OSError | None:
        for attempt in range(_SEND_RETRIES + 1):
            try:
                self.sock.sendto(q.query.with_id(q.qid), q.sockaddr)
            except (BlockingIOError, InterruptedError) as e:
                return e  # a full send buffer on an idle loopback: not worth a queue here
            except OSError as e:
                self.errored = True
                # The socket's pending error (another target's ICMP report) fails this send
                # (sock_alloc_send_pskb checks sk_err): give it to its own query, send again.
                if attempt < _SEND_RETRIES and e.errno != errno.ENOBUFS and self.drain_errors():
                    continue
                return e
            return None
        return None

    def readable(self, woken: bool = True) -> None:
        sock, buf = self.sock, self.pool.buf
        drain = True  # woken with nothing to read: EPOLLERR, an ICMP error on the queue
        for _ in range(READ_BURST):
            try:
                n, addr = sock.recvfrom_into(buf)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:  # the pending ICMP error: its details are in the error queue
                drain = True
                break
            drain = False
            self.datagram(addr, n)
        else:
            drain = True  # a burst's worth: an error may wait behind the datagrams left
        if drain and self.fd >= 0:  # level-triggered: EPOLLERR wakes until it is read
            self.drain_errors()
        # The EPOLLERR that uvloop stopped at may have been read before this wake: by a send
        # between its epoll_wait and this callback, or by a timeout's read.
        if woken and self.pool.rewatch and (drain or self.errored) and self.fd >= 0:
            self.errored = False
            self.pool.loop.call_soon(self.watch)

    def watch(self) -> None:
        """Read the socket again on readiness: uvloop stopped at the error it reported
        (eventloop.drops_reader_on_error), after this socket's reader had returned."""
        if self.fd >= 0:
            self.pool.loop.remove_reader(self.fd)
            self.pool.loop.add_reader(self.fd, self.readable)

    def datagram(self, peer: Sockaddr, n: int) -> None:
        ids = self.peers.get(peer)
        if ids is None:
            return  # not from a target in flight here: the connected socket's kernel dropped it
        buf = self.pool.buf
        q = by_id(ids, buf[0] << 8 | buf[1]) if n >= 2 else None
        if q is None:
            for other in (ids,) if isinstance(ids, Pending) else list(ids.values()):
                if other.sock is not None:
                    other.ignored += 1  # another ID: not an answer, keep waiting
            return
        if q.sock is None:
            return  # a late answer, or a second one
        try:
            resp = parse_response(self.pool.view[:n].tobytes(), q.query, q.qid)
        except Malformed as e:
            q.end(Exchange(None, Reason.MALFORMED, time.monotonic() - q.start, str(e)))
            return
        if resp is None:
            q.ignored += 1
            return
        q.end(Exchange(resp, None, time.monotonic() - q.start))

    def drain_errors(self) -> int:
        """Give each queued ICMP error to the query it returns; how many were read."""
        got = 0
        for report in sharedsock.queued_errors(self.sock, READ_BURST):
            got += 1
            self.errored = True
            ids = None if report is None else self.peers.get(report[0])
            if report is None or ids is None:
                continue
            _, qid, err = report
            q = by_id(ids, qid)
            if q is not None and q.sock is not None:
                reason = classify_oserror(OSError(err, os.strerror(err)))
                q.end(Exchange(None, reason, time.monotonic() - q.start, os.strerror(err)))
        return got

    def close(self) -> None:
        if self.fd >= 0:
            if not self.pool.loop.is_closed():
                self.pool.loop.remove_reader(self.fd)
            self.sock.close()
            self.fd = -1


class _Pool:
    """The sockets of one event loop, per address family."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.live: dict[socket.AddressFamily, list[_Socket]] = {}
        self.buf = bytearray(MAX_DATAGRAM)
        self.view = memoryview(self.buf)
        self.random: list[int] = []
        self.expiries = Expiries()
        self.rewatch = eventloop.drops_reader_on_error(loop)

    def draw(self) -> int:
        """A random 16-bit number from the kernel's CSPRNG (4,096 per getrandom(2))."""
        if not self.random:
            self.random = list(struct.unpack("4096H", os.urandom(8192)))
        return self.random.pop()

    def socket_for(self, family: socket.AddressFamily) -> _Socket:
        """A random socket of the family's pool, a fresh one in place of one that is due."""
        live = self.live.get(family)
        if live is None:
            live = self.live[family] = []
        i = self.draw() % POOL
        if i < len(live):
            s = live[i]
            if s.left > 0 and time.monotonic() < s.until:
                return s
            s.left = 0  # retired: takes no new query, closes after its last
            if not s.in_flight:
                s.close()
            s = live[i] = _Socket(self, family)
            return s
        s = _Socket(self, family)
        live.append(s)
        return s

    def close(self) -> None:
        for live in self.live.values():
            for s in live:
                s.close()
        self.live.clear()


_POOLS: dict[asyncio.AbstractEventLoop, _Pool] = {}


def _pool(loop: asyncio.AbstractEventLoop) -> _Pool:
    pool = _POOLS.get(loop)
    if pool is None or pool.loop.is_closed():
        for old in [lp for lp in _POOLS if lp.is_closed()]:
            _POOLS.pop(old).close()  # a loop that has ended: its sockets go with it
        pool = _POOLS[loop] = _Pool(loop)
    return pool


def start(
    loop: asyncio.AbstractEventLoop,
    *,
    sockaddr: Sockaddr,
    family: socket.AddressFamily,
    query: Query,
    timeout: float,
    done: Done,
) -> Pending | None:
    """Send ``query`` to ``sockaddr`` through the pool; ``done(exchange)`` later, as
    udp.exchange would return it. None, with nothing sent, for a target a shared socket
    cannot serve (:func:`sharedsock.shareable`). Never raises for the network."""
    if not shareable(sockaddr, family):
        return None
    pool = _pool(loop)
    q = Pending(query, sockaddr, done)
    try:
        s = pool.socket_for(family)
    except OSError as e:
        loop.call_soon(q.end, Exchange(None, Reason.NETWORK_ERROR, 0.0, f"socket: {e.strerror}"))
        return q
    if not s.place(q):
        loop.call_soon(q.end, Exchange(None, Reason.NETWORK_ERROR, 0.0, "no free query ID"))
        return q
    err = s.send(q)
    if err is not None:
        detail = err.strerror or str(err)
        ex = Exchange(None, classify_oserror(err), time.monotonic() - q.start, detail)
        loop.call_soon(q.end, ex)
        return q
    pool.expiries.add(loop, q, timeout)
    return q
