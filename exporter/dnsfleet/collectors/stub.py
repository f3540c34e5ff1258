"""Stub resolvers: what the clients of each watched resolv.conf suffer right now.

For every configured resolv.conf (read through --path.rootfs), probe each nameserver glibc
would use, over the transport it would use (``options use-vc`` -> TCP), with the query the
config says a client makes; classify the server (:class:`ServerState`) and run the failover
model (:mod:`dnsfleet.stubmodel`) for glibc and musl.

Probe timeout: ``probe_timeout`` (default 1 s) bounded by the scrape deadline, not the
file's ``timeout`` (5 s by default). A server that answers after the probe timeout but
within the client's timeout is counted as silent: the model then over-states the delay,
which is the side to err on for an alert, and scrapes stay fast. All nameservers of all
files are probed concurrently and each distinct server is probed once per scrape.

A missing or unreadable file is reported per file
(``dnsfleet_stub_resolv_conf_read_failure``), never as a failed scrape: containers and pods
come and go and their resolv.conf with them.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass

import dns.rcode

from dnsfleet.collectors.base import DEADLINE_MARGIN, CollectContext, Collector
from dnsfleet.config import Module, ResolvConfWatch, Transport, parse_address
from dnsfleet.dnswire import Query, build_query
from dnsfleet.exposition import Family
from dnsfleet.hostfs import HostFS, HostReadError
from dnsfleet.parsers.resolvconf import (
    NAMESERVER_PORT,
    Nameserver,
    ResolvConf,
    parse_resolv_conf,
)
from dnsfleet.probes import ProbeResult, Reason, probe
from dnsfleet.stubmodel import (
    DEFAULT_TCP_SYN_RETRIES,
    FAILURE_STATES,
    LIBCS,
    ServerOutcome,
    ServerState,
    Verdict,
    model,
    tcp_connect_timeout,
)

log = logging.getLogger(__name__)

READ_FAILURES: tuple[str, ...] = ("missing", "unreadable")
# glibc and musl query 127.0.0.1 when resolv.conf names no usable nameserver.
IMPLICIT_NAMESERVER = Nameserver(address="127.0.0.1", version=4)
MIN_PROBE_TIMEOUT = 0.05

SockAddr = tuple[str, int] | tuple[str, int, int, int]
Resolve = Callable[[Nameserver], tuple[SockAddr, socket.AddressFamily]]


def default_resolve(ns: Nameserver) -> tuple[SockAddr, socket.AddressFamily]:
    if ns.version == 4:
        return (ns.address, NAMESERVER_PORT), socket.AF_INET
    try:
        _, _, scope_id = parse_address(ns.text)
    except ValueError:
        scope_id = 0  # glibc ignores a zone it cannot convert, too
    return (ns.address, NAMESERVER_PORT, 0, scope_id), socket.AF_INET6


def classify(result: ProbeResult, *, transport: str) -> ServerOutcome:
    """What a glibc client makes of this server (see stubmodel for the source)."""
    if result.rcode >= 0:
        if result.rcode in (dns.rcode.SERVFAIL, dns.rcode.NOTIMP):
            return ServerOutcome(ServerState.SERVFAIL, result.duration)
        if result.rcode == dns.rcode.REFUSED:
            return ServerOutcome(ServerState.RCODE_REFUSED, result.duration)
        return ServerOutcome(ServerState.ANSWERING, result.duration)
    reason = result.reason
    if reason is Reason.TIMEOUT:
        return ServerOutcome(ServerState.SILENT)
    if reason is Reason.REFUSED:
        return ServerOutcome(ServerState.REFUSED, result.duration)
    if reason is Reason.UNREACHABLE:
        return ServerOutcome(ServerState.UNREACHABLE, result.duration)
    if reason is Reason.MALFORMED and transport == "udp":
        # send_dg drops datagrams that are not an answer to its query and keeps waiting.
        return ServerOutcome(ServerState.SILENT)
    return ServerOutcome(ServerState.ERROR, result.duration)


@dataclass(frozen=True)
class FileReport:
    watch: ResolvConfWatch
    conf: ResolvConf | None
    read_failure: str = ""  # one of READ_FAILURES, "" when read
    detail: str = ""
    servers: tuple[Nameserver, ...] = ()
    outcomes: tuple[ServerOutcome, ...] = ()
    details: tuple[str, ...] = ()  # probe detail per server, for the on-call tool
    verdicts: tuple[Verdict, ...] = ()


def read_watch(fs: HostFS, watch: ResolvConfWatch) -> tuple[ResolvConf | None, str, str]:
    path = fs.root(watch.path)
    try:
        text = fs.read_text(path, limit=1024 * 1024)
    except FileNotFoundError:
        return None, "missing", f"{path}: no such file"
    except (HostReadError, OSError) as e:
        return None, "unreadable", str(e)
    return parse_resolv_conf(text), "", ""


def syn_retries(fs: HostFS) -> int:
    try:
        text = fs.read_optional(fs.proc("sys", "net", "ipv4", "tcp_syn_retries"))
    except HostReadError:
        text = None
    try:
        return int(text.strip()) if text else DEFAULT_TCP_SYN_RETRIES
    except ValueError:
        return DEFAULT_TCP_SYN_RETRIES


_Tasks = dict[tuple[object, ...], "asyncio.Task[ProbeResult]"]
# One watched file on its way to a report: (watch, conf or None, failure, detail, the
# nameservers, their probe tasks).
_Pending = tuple[
    ResolvConfWatch,
    ResolvConf | None,
    str,
    str,
    tuple[Nameserver, ...],
    list["asyncio.Task[ProbeResult]"],
]


async def assess(
    fs: HostFS,
    watches: tuple[ResolvConfWatch, ...],
    *,
    deadline: float,
    resolve: Resolve = default_resolve,
) -> list[FileReport]:
    """Read, probe and model every watched file. ``deadline`` is ``loop.time()``-based."""
    loop = asyncio.get_running_loop()
    read = await asyncio.to_thread(lambda: [read_watch(fs, w) for w in watches])
    connect_timeout = tcp_connect_timeout(await asyncio.to_thread(syn_retries, fs))
    tasks: _Tasks = {}
    pending: list[_Pending] = []
    for watch, (conf, failure, detail) in zip(watches, read, strict=True):
        if conf is None:
            log.warning("stub: resolv.conf %s: %s", watch.path, detail)
            pending.append((watch, None, failure, detail, (), []))
            continue
        servers = conf.servers or (IMPLICIT_NAMESERVER,)
        timeout = max(
            min(watch.probe_timeout, deadline - loop.time() - DEADLINE_MARGIN),
            MIN_PROBE_TIMEOUT,
        )
        probes = [
            _probe_task(tasks, ns, watch, conf, resolve=resolve, timeout=timeout) for ns in servers
        ]
        pending.append((watch, conf, "", "", servers, probes))
    if tasks:
        await asyncio.gather(*tasks.values())
    return [_report(p, connect_timeout=connect_timeout) for p in pending]


def _probe_task(
    tasks: _Tasks,
    ns: Nameserver,
    watch: ResolvConfWatch,
    conf: ResolvConf,
    *,
    resolve: Resolve,
    timeout: float,
) -> asyncio.Task[ProbeResult]:
    """The probe of one nameserver as this file's clients query it; files that query one
    server alike share one probe."""
    transport: Transport = "tcp" if conf.use_vc else "udp"
    sockaddr, family = resolve(ns)
    key = (sockaddr, transport, watch.query_name, watch.qtype, conf.edns0, watch.probe_timeout)
    if key not in tasks:
        module = Module(
            name="stub",
            query_name=watch.query_name,
            query_type=watch.query_type,
            transport=transport,
            edns=conf.edns0,
        )
        # glibc sends EDNS only with options edns0, and never NSID.
        query: Query = build_query(
            watch.query_name,
            watch.qtype,
            module.qclass,
            recursion_desired=True,
            edns=conf.edns0,
            payload=1232,
            nsid=False,
        )
        tasks[key] = asyncio.ensure_future(
            probe(sockaddr=sockaddr, family=family, module=module, query=query, timeout=timeout)
        )
    return tasks[key]


def _report(pending: _Pending, *, connect_timeout: float) -> FileReport:
    watch, conf, failure, detail, servers, probes = pending
    if conf is None:
        return FileReport(watch, None, failure, detail)
    transport = "tcp" if conf.use_vc else "udp"
    results = [t.result() for t in probes]
    outcomes = tuple(classify(r, transport=transport) for r in results)
    verdicts = tuple(model(conf, outcomes, libc, connect_timeout=connect_timeout) for libc in LIBCS)
    return FileReport(
        watch,
        conf,
        servers=servers,
        outcomes=outcomes,
        details=tuple(r.detail for r in results),
        verdicts=verdicts,
    )


# The stub families, in exposition order: key -> (name, help).
_STUB: dict[str, tuple[str, str]] = {
    "readable": (
        "dnsfleet_stub_resolv_conf_readable",
        "1 if the watched resolv.conf could be read and parsed.",
    ),
    "read_failure": (
        "dnsfleet_stub_resolv_conf_read_failure",
        "Why the watched resolv.conf could not be read: 1 for the current "
        "reason, 0 for the others.",
    ),
    "problems": (
        "dnsfleet_stub_resolv_conf_problems",
        "Lines of the resolv.conf that glibc ignores or reads differently than written.",
    ),
    "count": (
        "dnsfleet_stub_nameservers",
        "Nameservers in the resolv.conf that clients query (at most 3).",
    ),
    "up": (
        "dnsfleet_stub_nameserver_up",
        "1 if the nameserver gives clients an answer that ends their lookup.",
    ),
    "failure": (
        "dnsfleet_stub_nameserver_failure",
        "How the nameserver fails clients: 1 for the current reason, 0 for "
        "the others (all 0 when it answers).",
    ),
    "timeout": (
        "dnsfleet_stub_timeout_seconds",
        "Seconds glibc waits for the first nameserver in each round (options timeout, at least 1).",
    ),
    "attempts": (
        "dnsfleet_stub_attempts",
        "Rounds glibc makes over the nameservers (options attempts).",
    ),
    "delay": (
        "dnsfleet_stub_expected_delay_seconds",
        "Extra seconds a lookup waits before its answer because of failing "
        "nameservers (0 when the first answers); when resolution fails, the "
        "seconds until the lookup gives up.",
    ),
    "failing": (
        "dnsfleet_stub_resolution_failing",
        "1 if no nameserver gives these clients an answer: lookups fail.",
    ),
}


def families(reports: list[FileReport]) -> list[Family]:
    fams = {key: Family(name, help_) for key, (name, help_) in _STUB.items()}
    for rep in reports:
        f = {"resolv_conf": rep.watch.path}
        fams["readable"].add(0.0 if rep.conf is None else 1.0, f)
        for reason in READ_FAILURES:
            fams["read_failure"].add(
                1.0 if rep.read_failure == reason else 0.0, {**f, "reason": reason}
            )
        if rep.conf is not None:
            _add_conf(fams, rep, rep.conf, f)
    return list(fams.values())


def _add_conf(
    fams: dict[str, Family], rep: FileReport, conf: ResolvConf, f: dict[str, str]
) -> None:
    fams["problems"].add(len(conf.problems), f)
    fams["count"].add(len(conf.servers), f)
    fams["timeout"].add(max(conf.timeout, 1), f)
    fams["attempts"].add(conf.attempts, f)
    for pos, (ns, out) in enumerate(zip(rep.servers, rep.outcomes, strict=True)):
        labels = {**f, "nameserver": ns.text, "position": str(pos)}
        fams["up"].add(1.0 if out.state is ServerState.ANSWERING else 0.0, labels)
        for state in FAILURE_STATES:
            fams["failure"].add(
                1.0 if out.state is state else 0.0, {**labels, "reason": state.value}
            )
    for v in rep.verdicts:
        fams["delay"].add(v.delay, {**f, "libc": v.libc})
        fams["failing"].add(1.0 if v.failing else 0.0, {**f, "libc": v.libc})


async def collect(ctx: CollectContext) -> list[Family]:
    reports = await assess(ctx.fs, ctx.config.resolv_conf, deadline=ctx.deadline)
    ctx.findings.add(*reports)
    return families(reports)


COLLECTOR = Collector(name="stub", run=collect, enabled=lambda cfg: bool(cfg.resolv_conf))
