"""A /metrics batch's plain UDP probes through a few shared, unconnected sockets: a probe
costs a ``sendto`` and its share of the ``recvfrom`` calls that drain each readiness event
where a socket of its own cost six system calls (socket, connect, send, epoll_ctl, recv,
close). ``udp.py``'s socket per probe stays for ``/probe`` and for an IPv6 zone.

Kept from the connected socket: answers matched by (source address, source port, DNS ID),
then the question; ICMP errors per target, from the error queue (``IP_RECVERR``: the
original destination as ``msg_name``, our query as data, ``ee_errno``; ``ip_recv_error``
in net/ipv4/ip_sockglue.c); answers unguessable off-path (a random ID free among the
probes to the target on its socket, a random socket of the pool). docs/design.md,
"Shared sockets", says why a pool and what each choice costs.
"""

from __future__ import annotations

import asyncio
import errno
import heapq
import os
import socket
import time
from array import array
from collections.abc import Callable, Sequence
from operator import itemgetter

from dnsfleet import eventloop
from dnsfleet.dnswire import Malformed, Query, parse_response
from dnsfleet.probes import sharedsock, udp
from dnsfleet.probes.batchslot import Shared, Slot, expired, since
from dnsfleet.probes.reasons import Reason, classify_oserror
from dnsfleet.probes.result import Exchange
from dnsfleet.probes.sharedsock import Sockaddr, by_id, shareable

Item = tuple[Sockaddr, socket.AddressFamily, Query, float]  # ..., module timeout

MAX_DATAGRAM = 65535
READ_BURST = 64  # datagrams per socket per readiness event: a flood cannot hold the loop
PROBES_PER_SOCKET = 64  # a socket more per this many probes of a family ...
MAX_SOCKETS = 16  # ... up to this many per family and batch
MAX_ID_DRAWS = 64
_SEND_RETRIES = 2
_FAMILY = itemgetter(1)


class SharedBatch:
    """The state of one :func:`exchange_many`, as ``udp._Batch`` is for per-probe sockets:
    one future, one timer at the earliest expiry, an explicit close."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        items: Sequence[Item],
        deadline: float,
        concurrency: int,
        on_result: Callable[[int, Exchange | None], None],
    ) -> None:
        self.loop = loop
        self.items = items
        self.deadline = deadline
        self.concurrency = concurrency
        self.on_result: Callable[[int, Exchange | None], None] | None = on_result
        self.finished: asyncio.Future[None] = loop.create_future()
        self.expiries: list[tuple[float, int, Slot]] = []
        self.timer: asyncio.TimerHandle | None = None
        self.timer_at = 0.0
        self.in_flight = 0
        self.rewatch = eventloop.drops_reader_on_error(loop)
        self.next_item = 0
        self.starting = False
        self.pools: dict[socket.AddressFamily, list[Shared]] = {}
        self.failed: dict[socket.AddressFamily, OSError] = {}  # a family without a pool
        self.buf = bytearray(MAX_DATAGRAM)
        self.view = memoryview(self.buf)
        self.random = array("H")

    def _draws(self) -> array[int]:
        """Random 16-bit numbers from the kernel's CSPRNG, 4,096 per getrandom(2); at least
        two (a socket and an ID) when it returns. An array: no int object made for a draw
        until it is taken (list(struct.unpack(...)) cost 4 times as much a refill)."""
        if len(self.random) < 2:
            self.random = array("H", os.urandom(8192))
        return self.random

    def _pool(self, family: socket.AddressFamily) -> list[Shared] | None:
        pool = self.pools.get(family)
        if pool is not None or family in self.failed:
            return pool
        count = list(map(_FAMILY, self.items)).count(family)
        size = min(MAX_SOCKETS, -(-count // PROBES_PER_SOCKET))
        per_socket = -(-min(count, self.concurrency) // size)
        rcvbuf = sharedsock.rcvbuf_for(per_socket)
        made: list[Shared] = []
        try:
            for _ in range(size):
                made.append(Shared(family, rcvbuf))
        except OSError as e:
            for s in made:
                s.sock.close()
            self.failed[family] = e
            return None
        for s in made:
            self.loop.add_reader(s.fd, self._batched, self._readable, s)
        self.pools[family] = made
        return made

    def start_more(self) -> None:
        self.starting = True
        items, loop, deadline = self.items, self.loop, self.deadline
        total = len(items)
        while self.in_flight < self.concurrency and self.next_item < total:
            i = self.next_item
            self.next_item += 1
            sockaddr, family, query, timeout = items[i]
            now = loop.time()
            left = deadline - now
            budget = timeout if timeout < left else left  # min() without its call
            if budget <= 0:
                assert self.on_result is not None
                self.on_result(i, None)
                continue
            self.in_flight += 1
            slot = Slot(i, query, budget)
            shared = self._place(slot, sockaddr, family)
            if shared is None:
                continue  # ended already
            expires = now + budget
            heapq.heappush(self.expiries, (expires, i, slot))
            if self.timer is None or expires < self.timer_at:
                self._arm(expires)
            if shared.pending or not self._send(shared, slot, sockaddr):
                # The socket's send buffer is full: wait until it drains rather than fail.
                if not shared.pending:
                    loop.add_writer(shared.fd, self._writable, shared)
                shared.pending.append((slot, sockaddr))
        self.starting = False
        if not self.in_flight and self.next_item >= total and not self.finished.done():
            self.finished.set_result(None)

    def _place(self, slot: Slot, sockaddr: Sockaddr, family: socket.AddressFamily) -> Shared | None:
        """Pick a random socket of the pool and a random ID free for the target on it."""
        pool = self.pools.get(family) or self._pool(family)
        if pool is None:
            error = self.failed[family].strerror
            self._end(slot, Exchange(None, Reason.NETWORK_ERROR, 0.0, f"socket: {error}"))
            return None
        draws = self.random if len(self.random) > 1 else self._draws()
        shared = pool[draws.pop() % len(pool)]
        ids = shared.peers.get(sockaddr)
        if ids is None:
            slot.qid = draws.pop()
            shared.peers[sockaddr] = slot
            return shared
        if isinstance(ids, Slot):
            ids = shared.peers[sockaddr] = {ids.qid: ids}
        for _ in range(MAX_ID_DRAWS):
            qid = self._draws().pop()
            if qid not in ids:
                slot.qid = qid
                ids[qid] = slot
                return shared
        self._end(slot, Exchange(None, Reason.NETWORK_ERROR, 0.0, "no free query ID"))
        return None

    def _send(self, shared: Shared, slot: Slot, sockaddr: Sockaddr) -> bool:
        """Send the query; False when the socket's buffer is full (the caller queues it)."""
        attempt = 0  # a loop without range's iterator: most sends succeed at once
        while True:
            try:
                shared.sock.sendto(slot.query.with_id(slot.qid), sockaddr)
            except (BlockingIOError, InterruptedError):
                return False
            except OSError as e:
                shared.errored = True
                if e.errno == errno.ENOBUFS:
                    return False
                # With IP_RECVERR the socket's pending error (another target's ICMP error)
                # fails the next send (sock_alloc_send_pskb checks sk_err): read the error
                # queue, which gives it to its own probe, and send again.
                if attempt < _SEND_RETRIES and self._drain_errors(shared):
                    attempt += 1
                    continue
                detail = e.strerror or str(e)
                self._end(slot, Exchange(None, classify_oserror(e), since(slot), detail))
                return True
            slot.sent = True
            return True

    def _writable(self, shared: Shared) -> None:
        pending = shared.pending
        while pending:
            slot, sockaddr = pending[0]
            if not slot.ended and not self._send(shared, slot, sockaddr):
                return  # still full: the loop calls again when it drains
            pending.popleft()
        self.loop.remove_writer(shared.fd)

    def _batched(self, fn: Callable[..., None], *args: object) -> None:
        """``fn`` (a drain, the timeouts' sweep); the probes it ends are replaced after it, all
        at once. A send per answer, from its callback, woke the resolver for each (it had gone
        idle), and the wake-up is charged to the sender: at 10,000 targets a sendto cost twice
        what it did at 1,000, whose sends go out in a burst."""
        was, self.starting = self.starting, True
        try:
            fn(*args)
        finally:
            self.starting = was
        if not was:
            self._refill()

    def _readable(self, shared: Shared, woken: bool = True) -> None:
        sock, buf = shared.sock, self.buf
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
            self._datagram(shared, addr, n)
        else:
            drain = True  # a burst's worth: an error may wait behind the datagrams left
        if drain:  # level-triggered, EPOLLERR would wake the loop until the queue is read
            self._drain_errors(shared)
        if woken and self.rewatch and (drain or shared.errored):  # as udpshared's
            shared.errored = False
            self.loop.call_soon(self._watch, shared)

    def _watch(self, shared: Shared) -> None:
        """Watch the socket again: uvloop stopped at the error it reported, its reader and
        writer each run once (eventloop.drops_reader_on_error)."""
        if shared.sock.fileno() >= 0:
            self.loop.remove_reader(shared.fd)
            self.loop.add_reader(shared.fd, self._batched, self._readable, shared)
            if shared.pending:
                self.loop.remove_writer(shared.fd)
                self.loop.add_writer(shared.fd, self._writable, shared)

    def _datagram(self, shared: Shared, peer: Sockaddr, n: int) -> None:
        ids = shared.peers.get(peer)
        if ids is None:
            return  # not from a target of ours: the connected socket's kernel dropped these
        buf = self.buf
        qid = buf[0] << 8 | buf[1] if n >= 2 else -1
        # _by_id inline: one probe to this target on this socket is the common case.
        slot = (ids if ids.qid == qid else None) if isinstance(ids, Slot) else ids.get(qid)
        if slot is None:
            for other in (ids,) if isinstance(ids, Slot) else ids.values():
                if not other.ended:
                    other.ignored += 1  # another ID: not an answer, keep waiting
            return
        if slot.ended:
            return  # a late answer, or a second one
        try:
            resp = parse_response(self.view[:n].tobytes(), slot.query, qid)
        except Malformed as e:
            self._end(slot, Exchange(None, Reason.MALFORMED, since(slot), str(e)))
            return
        if resp is None:
            slot.ignored += 1
            return
        # _end without its call: a datagram is read inside _batched, which refills after.
        slot.ended = True
        self.in_flight -= 1
        if self.on_result is not None:
            self.on_result(slot.index, Exchange(resp, None, time.monotonic() - slot.start))

    def _drain_errors(self, shared: Shared) -> int:
        """Give each queued ICMP error to the probe whose query it returns; how many read."""
        got = 0
        for report in sharedsock.queued_errors(shared.sock, READ_BURST):
            got += 1
            shared.errored = True
            ids = None if report is None else shared.peers.get(report[0])
            if report is None or ids is None:
                continue
            _, qid, err = report
            slot = by_id(ids, qid)
            if slot is not None and not slot.ended:
                reason = classify_oserror(OSError(err, os.strerror(err)))
                self._end(slot, Exchange(None, reason, since(slot), os.strerror(err)))
        return got

    def _end(self, slot: Slot, ex: Exchange) -> None:
        slot.ended = True
        self.in_flight -= 1
        if self.on_result is not None:
            self.on_result(slot.index, ex)
        if not self.starting:
            self._refill()

    def _refill(self) -> None:
        if self.next_item < len(self.items):
            self.start_more()
        elif not self.in_flight and not self.finished.done():
            self.finished.set_result(None)

    def _arm(self, when: float) -> None:
        if self.timer is None or when < self.timer_at:
            if self.timer is not None:
                self.timer.cancel()
            self.timer = self.loop.call_at(when, self._sweep)
            self.timer_at = when

    def _sweep(self) -> None:
        self.timer = None
        self._batched(self._expire)

    def _expire(self) -> None:
        now = self.loop.time()
        expiries = self.expiries
        if expiries and expiries[0][0] <= now:
            # An answer the kernel already holds counts (the loop may run late on a busy
            # machine, and the timer and the datagram come due in the same round).
            for pool in self.pools.values():
                for shared in pool:
                    self._readable(shared, woken=False)
        while expiries and expiries[0][0] <= now:
            _, _, slot = heapq.heappop(expiries)
            if not slot.ended:
                self._end(slot, expired(slot))
        while expiries and expiries[0][2].ended:
            heapq.heappop(expiries)
        if expiries:
            self._arm(expiries[0][0])

    def close(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.on_result = None
        for pool in self.pools.values():
            for shared in pool:
                self.loop.remove_reader(shared.fd)
                if shared.pending:
                    self.loop.remove_writer(shared.fd)
                shared.sock.close()
        self.pools.clear()
        self.failed.clear()
        self.expiries.clear()
        self.items = ()


async def exchange_many(
    items: Sequence[Item],
    *,
    deadline: float,
    concurrency: int,
    on_result: Callable[[int, Exchange | None], None],
) -> None:
    """``udp.exchange_many``'s contract: the items that are :func:`shareable` go through the
    batch's shared sockets, the rest through ``udp.exchange_many`` (a socket per probe),
    the concurrency limit shared between the two in proportion."""
    if not items:
        return
    families = list(map(_FAMILY, items))  # in C: a scan per item cost ~25 bytecodes
    alone = []
    if families.count(socket.AF_INET) < len(items):  # any IPv4 target is shareable
        alone = [i for i, it in enumerate(items) if not shareable(it[0], it[1])]
    if alone:
        taken = set(alone)
        shared = [i for i in range(len(items)) if i not in taken]
        limit = max(1, concurrency * len(shared) // len(items)) if shared else 0
        await asyncio.gather(
            exchange_many(
                [items[i] for i in shared],
                deadline=deadline,
                concurrency=limit,
                on_result=lambda j, ex: on_result(shared[j], ex),
            ),
            udp.exchange_many(
                [items[i] for i in alone],
                deadline=deadline,
                concurrency=max(1, concurrency - limit),
                on_result=lambda j, ex: on_result(alone[j], ex),
            ),
        )
        return
    batch = SharedBatch(asyncio.get_running_loop(), items, deadline, concurrency, on_result)
    try:
        batch.start_more()
        await batch.finished
    finally:
        batch.close()
