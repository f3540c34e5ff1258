"""What a client's stub resolver suffers when some of its nameservers fail. Pure.

Two libcs are modelled, each after its own source:

glibc (resolv/res_send.c, 2.26 and later; checked against real glibc 2.36 by
tests/test_stub_oracle.py). ``__res_context_send`` asks the servers one after another,
``attempts`` rounds over all of them. In ``send_dg`` the wait for server *index* i is::

    seconds = timeout << i;  if (i > 0) seconds /= nscount;  if (seconds <= 0) seconds = 1;

so with three servers and timeout 5 the waits are 5, 3, 6 s. ``rotate`` only changes where
a process starts (``nameserver_offset``: random per process, then +1 per query); the wait
stays tied to the server's index, not its turn. A server whose host is up but whose port
is closed costs nothing: the UDP socket is connected, ICMP port unreachable comes back as
POLLERR and glibc moves on at once. So does an answer with rcode SERVFAIL, NOTIMP or
REFUSED. Any other answer ends the lookup. ``use-vc`` (TCP) makes one pass only, and
``send_vc`` has no timeout of its own: a server that drops SYNs costs the kernel's connect
timeout (tcp_syn_retries: 127 s by default). ``attempts:0`` makes the retry loop run zero
times: every lookup fails without sending anything.

musl (src/network/res_msend.c). All nameservers are asked at once on one unconnected socket
and the first NOERROR or NXDOMAIN answer wins; SERVFAIL is retried, REFUSED and ICMP errors
are ignored (an unconnected UDP socket never sees ICMP on Linux). ``timeout`` is the total
time of the lookup (``attempts`` only divides it into retransmission intervals), so when no
server gives a usable answer every lookup fails after ``timeout`` seconds; otherwise a
failing server costs nothing.

The delay is per DNS transaction. A lookup of a relative name walks the search list and
pays it once per name it tries, because glibc starts every transaction at the first server
again.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from dnsfleet.parsers.resolvconf import RES_MAXRETRY, ResolvConf

LIBCS: tuple[str, ...] = ("glibc", "musl")
MUSL_MAX_TIMEOUT = 60  # src/network/resolvconf.c
MUSL_MAX_ATTEMPTS = 10
DEFAULT_TCP_SYN_RETRIES = 6


class ServerState(StrEnum):
    """How a nameserver treats the client's query: a closed set, each always exported."""

    ANSWERING = "answering"  # an answer that ends the lookup (NOERROR, NXDOMAIN, ...)
    REFUSED = "refused"  # ICMP port unreachable / TCP RST: host up, no DNS
    SILENT = "silent"  # nothing comes back: blackholed, firewalled, host down
    UNREACHABLE = "unreachable"  # no route / host unreachable reported by the network
    SERVFAIL = "servfail"  # answered SERVFAIL (or NOTIMP)
    RCODE_REFUSED = "rcode_refused"  # answered REFUSED: the server will not serve us
    ERROR = "error"  # anything else that stops the exchange at once


FAILURE_STATES: tuple[ServerState, ...] = tuple(
    s for s in ServerState if s is not ServerState.ANSWERING
)


@dataclass(frozen=True, slots=True)
class ServerOutcome:
    state: ServerState
    # Seconds until the failure showed (an ICMP error, an rcode). A client pays this much,
    # at most its wait, before it moves on. Ignored for SILENT and ANSWERING.
    duration: float = 0.0


@dataclass(frozen=True, slots=True)
class Verdict:
    libc: str
    delay: float  # expected extra seconds before the answer, or before
    #                               the lookup gives up when ``failing``
    failing: bool  # no lookup gets an answer
    costs: tuple[float, ...]  # seconds each server costs a lookup when it is tried
    waits: tuple[float, ...]  # the per-server wait of the libc (glibc: per round)
    delays_by_start: tuple[float, ...] = ()  # glibc rotate: delay for each start server


def glibc_waits(timeout: int, nscount: int) -> tuple[int, ...]:
    """Per-server wait in one round, as ``send_dg`` computes it (integer seconds)."""
    out = []
    for i in range(nscount):
        # C: int << i then int division truncating toward zero; a negative timeout
        # (atoi of "-3") ends <= 0 and becomes 1.
        seconds = timeout * (1 << i)
        if i > 0:
            seconds = int(seconds / nscount)
        out.append(seconds if seconds > 0 else 1)
    return tuple(out)


def tcp_connect_timeout(syn_retries: int = DEFAULT_TCP_SYN_RETRIES) -> float:
    """Linux gives up a connect() after the SYN and ``tcp_syn_retries`` retransmissions,
    doubling from a 1 s RTO: 1 + 2 + ... + 2**n seconds."""
    return float(2 ** (syn_retries + 1) - 1)


def _glibc_cost(outcome: ServerOutcome, wait: float) -> float:
    if outcome.state is ServerState.ANSWERING:
        return 0.0
    if outcome.state is ServerState.SILENT:
        return wait
    return min(max(outcome.duration, 0.0), wait)


def glibc(
    outcomes: tuple[ServerOutcome, ...],
    *,
    timeout: int,
    attempts: int,
    rotate: bool = False,
    use_vc: bool = False,
    connect_timeout: float | None = None,
) -> Verdict:
    n = len(outcomes)
    if n == 0:
        return Verdict("glibc", 0.0, True, (), ())
    if use_vc:
        # send_vc blocks in connect()/read() without a timeout of its own; one pass.
        ct = tcp_connect_timeout() if connect_timeout is None else connect_timeout
        waits: tuple[float, ...] = tuple(ct for _ in outcomes)
        rounds = 1 if attempts > 0 else 0
    else:
        waits = tuple(float(w) for w in glibc_waits(timeout, n))
        rounds = max(min(attempts, RES_MAXRETRY), 0)
    costs = tuple(_glibc_cost(o, w) for o, w in zip(outcomes, waits, strict=True))
    answering = [o.state is ServerState.ANSWERING for o in outcomes]
    failing = rounds == 0 or not any(answering)

    def from_start(start: int) -> float:
        if rounds == 0:
            return 0.0
        order = [(start + k) % n for k in range(n)]
        if failing:
            return rounds * sum(costs)
        elapsed = 0.0
        for i in order:
            if answering[i]:
                return elapsed
            elapsed += costs[i]
        raise AssertionError("unreachable: some server answers")

    starts = range(n) if rotate and n > 1 else range(1)
    by_start = tuple(from_start(s) for s in starts)
    delay = sum(by_start) / len(by_start)
    return Verdict("glibc", delay, failing, costs, waits, by_start if rotate else ())


def musl(outcomes: tuple[ServerOutcome, ...], *, timeout: int, attempts: int) -> Verdict:
    """``timeout``/``attempts`` as written in the file (musl clamps them itself)."""
    total = float(min(max(timeout, 0), MUSL_MAX_TIMEOUT))
    tries = min(max(attempts, 1), MUSL_MAX_ATTEMPTS)
    interval = total / tries
    # timeout:0 makes res_msend's loop run zero times: nothing is sent.
    usable = total > 0 and any(o.state is ServerState.ANSWERING for o in outcomes)
    costs = tuple(0.0 if usable else total for _ in outcomes)
    return Verdict(
        "musl", 0.0 if usable else total, not usable, costs, tuple(interval for _ in outcomes)
    )


def model(
    conf: ResolvConf,
    outcomes: tuple[ServerOutcome, ...],
    libc: str,
    *,
    connect_timeout: float | None = None,
) -> Verdict:
    """The verdict for ``libc`` given how each of ``conf.servers`` behaves."""
    if libc == "glibc":
        return glibc(
            outcomes,
            timeout=conf.timeout,
            attempts=conf.attempts,
            rotate=conf.rotate,
            use_vc=conf.use_vc,
            connect_timeout=connect_timeout,
        )
    if libc == "musl":
        t = conf.timeout_written if conf.timeout_written is not None else 5
        a = conf.attempts_written if conf.attempts_written is not None else 2
        return musl(outcomes, timeout=t, attempts=a)
    raise ValueError(f"unknown libc {libc!r} (known: {', '.join(LIBCS)})")


@dataclass(frozen=True, slots=True)
class VipVerdict:
    """One nameserver that is a service VIP (kube-proxy DNAT) in front of ``backends``
    endpoints, ``dead`` of them silent but still listed."""

    libc: str
    failing_share: float  # transactions (names tried) that fail: every retry pinned
    pinned_cost: float  # seconds one DNS transaction of such a lookup waits before failing
    unpinned_failing_share: float  # were each retry balanced afresh (what clients assume)
    expected_delay: float  # mean seconds a transaction loses to the dead backends


def vip_pinned(
    *, backends: int, dead: int, timeout: int, attempts: int, libc: str = "glibc"
) -> VipVerdict:
    """glibc (res_send.c) asks each name of a lookup from one connected UDP socket per
    nameserver and retries from it, closing it only when that name's transaction ends; musl
    (res_msend.c) has one socket per name too. Every retry has the first one's source port,
    so conntrack sends them all to the backend the first was DNATed to, until the entry
    expires (nf_conntrack_udp_timeout, refreshed by every retry) or kube-proxy removes the
    endpoint and flushes its entries. So a dead backend fails ``dead / backends`` of the
    names tried outright, after every wait, instead of the ``(dead / backends) **
    attempts`` that balancing each retry afresh would give. Per transaction: the next name
    of the walk leaves from a new port and is balanced afresh.
    """
    if backends <= 0 or not 0 <= dead <= backends:
        raise ValueError(f"{dead} dead of {backends} backends")
    share = dead / backends
    if libc == "glibc":
        rounds = max(min(attempts, RES_MAXRETRY), 0)
        cost = float(rounds * glibc_waits(timeout, 1)[0])
        tries = rounds
    elif libc == "musl":
        cost = float(min(max(timeout, 0), MUSL_MAX_TIMEOUT))
        tries = min(max(attempts, 1), MUSL_MAX_ATTEMPTS)
    else:
        raise ValueError(f"unknown libc {libc!r} (known: {', '.join(LIBCS)})")
    return VipVerdict(libc, share, cost, share**tries if tries else 1.0, share * cost)
