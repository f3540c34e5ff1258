"""One lookup, walked against the real nameservers the way the libc would, and what the
application waited: wall time, outcome, datagrams and connections sent, the search suffix
and the nameserver that answered. Never raises for the network.

The walk's names and verdicts come from :mod:`dnsfleet.podview.walk`; this module sends.

glibc (resolv/res_send.c, ``__res_context_send`` and ``send_dg``): ``attempts`` rounds
over the servers, the wait of server *i* from ``stubmodel.glibc_waits``; A and AAAA go out
together on one *connected* UDP socket per server, kept for the transaction (one name
tried) and closed at its end (``__res_iclose``, without RES_STAYOPEN), so every retry of a
name leaves from the same source port (behind a service VIP, conntrack sends them all to
the same backend) and the next name from a new one; ``single-request`` sends AAAA only
after the A reply. ICMP port unreachable
moves on at once; SERVFAIL, NOTIMP and REFUSED move on to the next server; a truncated
reply is asked again over TCP (``send_vc``), as is everything with ``use-vc``.

musl (src/network/res_msend.c, 1.2.3): one unconnected socket per step; every unanswered
query goes to every server at once, again every ``timeout / attempts`` seconds until
``timeout``; only NOERROR and NXDOMAIN are taken, SERVFAIL is asked again at once, other
rcodes and ICMP errors are ignored. musl 1.2.3 has no TCP.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from dnsfleet.dnswire import FLAG_TC, Malformed, Query, build_query, parse_response
from dnsfleet.parsers.resolvconf import RES_MAXRETRY, ResolvConf
from dnsfleet.podview.walk import (
    Libc,
    Outcome,
    Reply,
    Step,
    Verdict,
    next_index,
    qtypes,
    steps,
    verdict,
    walk_outcome,
)
from dnsfleet.probes import tcp
from dnsfleet.stubmodel import MUSL_MAX_ATTEMPTS, MUSL_MAX_TIMEOUT, glibc_waits

SockAddr = tuple[str, int] | tuple[str, int, int, int]


@dataclass(frozen=True, slots=True)
class Server:
    text: str  # the nameserver as resolv.conf names it, for the answer's label
    sockaddr: SockAddr
    family: socket.AddressFamily


@dataclass(frozen=True, slots=True)
class StepRecord:
    step: Step
    replies: tuple[Reply, ...]
    verdict: Verdict
    queries: int
    nameserver: str  # the server whose replies decided the step; "" when none replied


@dataclass(frozen=True, slots=True)
class Lookup:
    name: str
    libc: Libc
    outcome: Outcome
    duration: float  # seconds the application waited
    queries: int  # UDP datagrams and TCP queries sent: the amplification
    suffix: str | None  # the search domain of the answer ("" for the name as is)
    nameserver: str  # the server that answered ("" when none did)
    steps: tuple[StepRecord, ...]
    cut_short: bool = False  # the deadline ended the walk before the libc would have


@dataclass
class _Walk:
    conf: ResolvConf
    libc: Libc
    servers: tuple[Server, ...]
    sent: int = 0
    sockets: dict[int, socket.socket] = field(default_factory=dict)

    def close(self) -> None:
        for s in self.sockets.values():
            s.close()
        self.sockets.clear()


def _reply(data: bytes, query: Query, qid: int) -> tuple[Reply, bool] | None:
    try:
        r = parse_response(data, query, qid)
    except Malformed:
        return None  # send_dg and res_msend drop what they cannot read and keep waiting
    if r is None:
        return None
    rc = r.rcode & 0x0F
    # An address is what the application wants: a CNAME alone (a truncated reply cut before
    # the address, a CNAME to a name without one) is no answer to either libc.
    reply = {
        0: Reply.ANSWER if r.matching_answers else Reply.NODATA,
        2: Reply.SERVFAIL,
        3: Reply.NXDOMAIN,
    }
    return reply.get(rc, Reply.OTHER), bool(r.flags & FLAG_TC)


def _queries(qname: str, types: tuple[int, ...], conf: ResolvConf) -> list[tuple[Query, int]]:
    # glibc sends EDNS only with options edns0; musl never does.
    return [
        (build_query(qname, t, edns=conf.edns0, nsid=False), secrets.randbits(16)) for t in types
    ]


async def _tcp(
    walk: _Walk, server: Server, qs: list[tuple[Query, int]], wait: float
) -> list[Reply]:
    out = []
    for q, _ in qs:
        walk.sent += 1
        ex = await tcp.exchange(
            sockaddr=server.sockaddr, family=server.family, query=q, timeout=wait
        )
        if ex.response is None:
            out.append(
                Reply.CONN_REFUSED if ex.error and ex.error.value == "refused" else Reply.TIMEOUT
            )
        else:
            rc = ex.response.rcode & 0x0F
            ans = Reply.ANSWER if ex.response.matching_answers else Reply.NODATA
            out.append({0: ans, 2: Reply.SERVFAIL, 3: Reply.NXDOMAIN}.get(rc, Reply.OTHER))
    return out


def _socket(walk: _Walk, i: int) -> socket.socket:
    if i not in walk.sockets:
        server = walk.servers[i]
        s = socket.socket(server.family, socket.SOCK_DGRAM)
        s.setblocking(False)
        s.connect(server.sockaddr)
        walk.sockets[i] = s
    return walk.sockets[i]


async def _glibc_try(
    walk: _Walk, i: int, qs: list[tuple[Query, int]], wait: float
) -> tuple[list[Reply | None], bool]:
    """One ``send_dg`` call: (replies, None for each missing; whether one was truncated)."""
    loop = asyncio.get_running_loop()
    sock = _socket(walk, i)
    got: list[Reply | None] = [None] * len(qs)
    tc = False
    sequential = walk.conf.single_request or walk.conf.single_request_reopen
    end = loop.time() + wait
    pending = [0] if sequential else list(range(len(qs)))
    try:
        for k in pending:
            walk.sent += 1
            sock.send(qs[k][0].with_id(qs[k][1]))
        while any(g is None for g in got) and loop.time() < end:
            async with asyncio.timeout_at(end):
                data = await loop.sock_recv(sock, 65535)
            for k, (q, qid) in enumerate(qs):
                r = _reply(data, q, qid)
                if r is None or got[k] is not None:
                    continue
                got[k], trunc = r
                tc = tc or trunc
                if sequential and k + 1 < len(qs) and got[k + 1] is None:
                    walk.sent += 1
                    sock.send(qs[k + 1][0].with_id(qs[k + 1][1]))
            if any(g in (Reply.SERVFAIL, Reply.OTHER) for g in got):
                break  # send_dg: next server, keeping what already came
    except TimeoutError:
        pass
    except ConnectionRefusedError:
        return [Reply.CONN_REFUSED if g is None else g for g in got], tc
    except OSError:
        return [Reply.CONN_REFUSED if g is None else g for g in got], tc
    return got, tc


async def _glibc_step(walk: _Walk, step: Step) -> tuple[tuple[Reply, ...], str]:
    qs = _queries(step.qname, qtypes(walk.conf, walk.libc), walk.conf)
    n = len(walk.servers)
    rounds = max(min(walk.conf.attempts, RES_MAXRETRY), 0)
    waits = glibc_waits(walk.conf.timeout, n)
    last: list[Reply] = [Reply.TIMEOUT] * len(qs)
    refused_everywhere = True
    decided_by = ""
    for _ in range(1 if walk.conf.use_vc else rounds):
        for i in range(n):
            if walk.conf.use_vc:
                got: list[Reply | None] = list(
                    await _tcp(walk, walk.servers[i], qs, float(waits[i]))
                )
                tc = False
            else:
                got, tc = await _glibc_try(walk, i, qs, float(waits[i]))
            if tc:
                got = list(await _tcp(walk, walk.servers[i], qs, float(waits[i])))
            replies = [Reply.TIMEOUT if g is None else g for g in got]
            if any(r is not Reply.CONN_REFUSED for r in replies):
                refused_everywhere = False
            if any(g is not None and g is not Reply.CONN_REFUSED for g in got):
                last, decided_by = replies, walk.servers[i].text
            usable = [r in (Reply.ANSWER, Reply.NODATA, Reply.NXDOMAIN) for r in replies]
            if all(usable) or (any(usable) and Reply.TIMEOUT in replies):
                # Both judged, or the wait ran out with one: send_dg returns what it has.
                return tuple(replies), walk.servers[i].text
    if refused_everywhere and rounds:
        return tuple(Reply.CONN_REFUSED for _ in qs), ""
    return tuple(last), decided_by


async def _musl_step(walk: _Walk, step: Step) -> tuple[tuple[Reply, ...], str]:
    loop = asyncio.get_running_loop()
    qs = _queries(step.qname, qtypes(walk.conf, walk.libc), walk.conf)
    written_t = walk.conf.timeout_written if walk.conf.timeout_written is not None else 5
    written_a = walk.conf.attempts_written if walk.conf.attempts_written is not None else 2
    total = min(max(written_t, 0), MUSL_MAX_TIMEOUT)
    tries = min(max(written_a, 1), MUSL_MAX_ATTEMPTS)
    interval = total / tries
    got: list[Reply | None] = [None] * len(qs)
    by: list[str] = [""] * len(qs)
    family = (
        socket.AF_INET6
        if any(s.family == socket.AF_INET6 for s in walk.servers)
        else socket.AF_INET
    )
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        start = loop.time()
        sends = 0
        while loop.time() - start < total and any(g is None for g in got) and sends < tries:
            for k, (q, qid) in enumerate(qs):
                if got[k] is None:
                    for server in walk.servers:
                        walk.sent += 1
                        _sendto(sock, q.with_id(qid), server, family)
            sends += 1
            until = min(start + sends * interval, start + total)
            await _musl_collect(walk, sock, qs=qs, got=got, by=by, until=until)
        if any(g is None for g in got):
            await _musl_collect(walk, sock, qs=qs, got=got, by=by, until=start + total)
    replies = tuple(Reply.TIMEOUT if g is None else g for g in got)
    return replies, next((b for b in by if b), "")


def _sendto(sock: socket.socket, wire: bytes, server: Server, family: socket.AddressFamily) -> None:
    addr: SockAddr = server.sockaddr
    if family == socket.AF_INET6 and server.family == socket.AF_INET:
        addr = ("::ffff:" + server.sockaddr[0], server.sockaddr[1], 0, 0)
    with contextlib.suppress(OSError):  # res_msend does not look at sendto's result either
        sock.sendto(wire, addr)


async def _musl_collect(
    walk: _Walk,
    sock: socket.socket,
    *,
    qs: list[tuple[Query, int]],
    got: list[Reply | None],
    by: list[str],
    until: float,
) -> None:
    loop = asyncio.get_running_loop()
    servfail_retry = 2 * len(qs)
    while any(g is None for g in got) and loop.time() < until:
        try:
            async with asyncio.timeout_at(until):
                data, addr = await _recvfrom(loop, sock)
        except TimeoutError:
            return
        except OSError:
            continue
        server = next((s for s in walk.servers if _same(s, addr)), None)
        if server is None:
            continue
        for k, (q, qid) in enumerate(qs):
            r = _reply(data, q, qid)
            if r is None or got[k] is not None:
                continue
            if r[0] is Reply.SERVFAIL and servfail_retry > 0:
                servfail_retry -= 1
                walk.sent += 1
                _sendto(sock, q.with_id(qid), server, sock.family)
            if r[0] in (Reply.ANSWER, Reply.NODATA, Reply.NXDOMAIN):
                got[k], by[k] = r[0], server.text


async def _recvfrom(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> tuple[bytes, Any]:
    """``loop.sock_recvfrom``, which uvloop does not implement (NotImplementedError)."""
    with contextlib.suppress(BlockingIOError):
        return sock.recvfrom(65535)
    ready: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, readable)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
    return await _recvfrom(loop, sock)


def _same(server: Server, addr: tuple[object, ...]) -> bool:
    host = str(addr[0]).removeprefix("::ffff:")
    return host == server.sockaddr[0] and addr[1] == server.sockaddr[1]


async def lookup(
    conf: ResolvConf,
    name: str,
    libc: Libc,
    servers: tuple[Server, ...],
    *,
    budget: float,
    clock: Callable[[], float] = time.monotonic,
) -> Lookup:
    """Walk ``name`` as ``libc`` would with ``conf``; give up after ``budget`` seconds
    (then ``cut_short``)."""
    walk = _Walk(conf, libc, servers)
    plan = steps(conf, name, libc)
    records: list[StepRecord] = []
    start = clock()
    cut = False
    try:
        async with asyncio.timeout(budget):
            at: int | None = 0 if plan else None
            while at is not None and len(records) <= len(plan):
                step = plan[at]
                before = walk.sent
                if libc is Libc.GLIBC:
                    replies, by = await _glibc_step(walk, step)
                else:
                    replies, by = await _musl_step(walk, step)
                walk.close()  # res_send.c closes its sockets when a transaction ends
                v = verdict(libc, step, replies)
                records.append(StepRecord(step, replies, v, walk.sent - before, by))
                at = next_index(plan, at, v)
    except TimeoutError:
        cut = True
    finally:
        walk.close()
    duration = clock() - start
    decided = tuple((r.step, r.verdict) for r in records)
    outcome = Outcome.TIMEOUT if cut else walk_outcome(libc, decided)
    answered = records[-1] if records and outcome is Outcome.ANSWER else None
    return Lookup(
        name=name,
        libc=libc,
        outcome=outcome,
        duration=duration,
        queries=walk.sent,
        suffix=answered.step.suffix if answered else None,
        nameserver=answered.nameserver if answered else "",
        steps=tuple(records),
        cut_short=cut,
    )


__all__ = ["Lookup", "Server", "StepRecord", "lookup"]
