"""One Consul agent's check in a scrape (see the package docstring): its DNS lookups through
the core probe, its HTTP API, its raft.db size, gathered in an :class:`AgentReport`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

import dns.rdatatype

from dnsfleet.collectors.base import DEADLINE_MARGIN
from dnsfleet.config import ConsulAgent, ConsulConfig, ConsulService, Module
from dnsfleet.dnswire import build_query, decode_message
from dnsfleet.hostfs import HostFS
from dnsfleet.parsers.consul import (
    AgentSelf,
    ServiceHealth,
    parse_agent_self,
    parse_health_service,
    parse_leader,
    parse_peers,
    parse_query_list,
)
from dnsfleet.probes import ProbeResult, Reason, failed, probe

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger("dnsfleet.collectors.consul")  # the collector's logger, as before the split

T = TypeVar("T")
_Get = Callable[..., Awaitable["Fetched"]]  # GET a path under /v1, with query params
DOMAIN = "consul"
MAX_BODY = 16 * 1024 * 1024
TOKEN_HEADER = "X-Consul-Token"
# Health API: set when ACLs removed entries from the list (default-deny, weak token).
FILTERED_HEADER = "X-Consul-Results-Filtered-By-ACLs"


# --------------------------------------------------------------------------- DNS side


@dataclass(frozen=True, slots=True)
class Lookup:
    query: str  # the `query` label: "<name> <TYPE>"
    result: ProbeResult
    answers: int = 0  # answer RRs of the asked type
    addresses: frozenset[str] = frozenset()


def _module(qtype: str, timeout: float, transport: str) -> Module:
    # NXDOMAIN is a valid answer: Consul gives it (with its SOA) for a service with no
    # healthy instance. DNS being up and the service being empty are separate signals.
    return Module(
        name="consul",
        query_name=".",
        query_type=qtype,
        transport="tcp" if transport == "tcp" else "udp",
        timeout=timeout,
        valid_rcodes=("NOERROR", "NXDOMAIN"),
    )


def decode_answer(wire: bytes, qtype: int) -> tuple[int, frozenset[str]]:
    """(answer RRs of ``qtype``, addresses they lead to). For A: the A records (and CNAME
    targets, which Consul serves for a service registered with a hostname). For SRV: the
    A/AAAA records of the SRV targets in ADDITIONAL, where Consul puts them.
    Raises ValueError when dnspython cannot decode the message."""
    msg = decode_message(wire)  # Malformed is a ValueError
    count = 0
    addrs: set[str] = set()
    targets: set[str] = set()
    for rrset in msg.answer:
        if rrset.rdtype == qtype:
            count += len(rrset)
        for rd in rrset:
            if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA):
                addrs.add(rd.address)
            elif rrset.rdtype == dns.rdatatype.CNAME:
                addrs.add(rd.target.to_text(omit_final_dot=True))
            elif rrset.rdtype == dns.rdatatype.SRV:
                targets.add(rd.target.to_text().lower())
    if qtype == dns.rdatatype.SRV:
        for rrset in msg.additional:
            if rrset.rdtype in (dns.rdatatype.A, dns.rdatatype.AAAA) and (
                rrset.name.to_text().lower() in targets
            ):
                addrs.update(rd.address for rd in rrset)
    return count, frozenset(addrs)


async def lookup(
    agent: ConsulAgent, name: str, qtype: str, *, timeout: float, transport: str = "udp"
) -> Lookup:
    label = f"{name} {qtype}"
    if timeout <= 0:
        return Lookup(label, failed(Reason.TIMEOUT, 0.0, "scrape deadline reached"))
    rdtype = dns.rdatatype.from_text(qtype)
    module = _module(qtype, timeout, transport)
    query = build_query(name, rdtype, edns=True, payload=module.edns_udp_size, nsid=False)
    res = await probe(
        sockaddr=agent.dns_sockaddr,
        family=agent.dns_family,
        module=module,
        query=query,
        timeout=timeout,
    )
    if res.reason is Reason.TRUNCATED:
        # What a stub does with TC (Consul sets it only with dns_config.enable_truncate).
        again = await lookup(agent, name, qtype, timeout=timeout - res.duration, transport="tcp")
        r = again.result
        return Lookup(
            label,
            ProbeResult(
                success=r.success,
                reason=r.reason,
                duration=res.duration + r.duration,
                rcode=r.rcode,
                answer_rrs=r.answer_rrs,
                detail=r.detail,
                response=r.response,
            ),
            again.answers,
            again.addresses,
        )
    if res.response is None or not res.success:
        return Lookup(label, res)
    try:
        count, addrs = decode_answer(res.response.wire, rdtype)
    except ValueError as e:
        return Lookup(
            label,
            ProbeResult(
                success=False,
                reason=Reason.MALFORMED,
                duration=res.duration,
                rcode=res.rcode,
                answer_rrs=res.answer_rrs,
                detail=str(e),
                response=res.response,
            ),
        )
    return Lookup(label, res, count, addrs)


def service_name(svc: ConsulService) -> str:
    return f"{svc.label}.service.{DOMAIN}"


def query_name(q: str) -> str:
    return f"{q}.query.{DOMAIN}"


# --------------------------------------------------------------------------- HTTP side


class APIError(Exception):
    """One HTTP call failed; the message is the reason (never carries the token)."""


def _aiohttp() -> ModuleType:
    """aiohttp, imported on first use: it costs ~28 MB of RSS, which an exporter with no
    Consul agent configured should not pay."""
    import aiohttp  # noqa: PLC0415

    return aiohttp


@dataclass(frozen=True, slots=True)
class Fetched:
    text: str
    acl_filtered: bool


async def fetch(
    session: aiohttp.ClientSession,
    url: str,
    *,
    timeout: float,
    params: dict[str, str] | None = None,
) -> Fetched:
    import aiohttp  # noqa: PLC0415 - see _aiohttp()

    if timeout <= 0:
        raise APIError("scrape deadline reached")
    try:
        async with session.get(
            url, params=params, timeout=aiohttp.ClientTimeout(total=timeout)
        ) as resp:
            body = await resp.content.read(MAX_BODY + 1)
            if len(body) > MAX_BODY:
                raise APIError(f"GET {url}: body larger than {MAX_BODY} bytes")
            text = body.decode("utf-8", errors="replace")
            if resp.status != 200:
                raise APIError(f"GET {url}: HTTP {resp.status}: {text.strip()[:200]}")
            filtered = resp.headers.get(FILTERED_HEADER, "").lower() == "true"
            return Fetched(text, filtered)
    except TimeoutError:
        raise APIError(f"GET {url}: no answer within {timeout:.3g}s") from None
    except aiohttp.ClientError as e:
        # ClientError texts name host and port, never request headers.
        raise APIError(f"GET {url}: {type(e).__name__}: {e}") from None


@dataclass(slots=True)
class AgentReport:
    agent: ConsulAgent
    lookups: list[Lookup] = field(default_factory=list)
    service_dns: dict[str, Lookup] = field(default_factory=dict)  # label -> A lookup
    health: dict[str, ServiceHealth] = field(default_factory=dict)  # label -> catalog
    up: bool = False
    leader: bool | None = None
    peers: int | None = None
    prepared_queries: int | None = None
    info: AgentSelf | None = None
    raft_db_bytes: int | None = None
    problems: list[str] = field(default_factory=list)


def read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.read().strip()
    except OSError as e:
        raise APIError(f"cannot read token_file {path}: {e.strerror or e}") from None
    if not token:
        raise APIError(f"token_file {path} is empty")
    return token


def raft_db_size(fs: HostFS, data_dir: str) -> int | None:
    """Apparent size of raft.db (what grows and never shrinks); None when absent."""
    path: Path = fs.root(data_dir, "raft", "raft.db")
    try:
        return fs.stat(path).st_size
    except FileNotFoundError:
        return None


@dataclass(slots=True)
class _AgentCheck:
    """One agent's check in one scrape: the report it fills, and the scrape's deadline that
    bounds every request."""

    agent: ConsulAgent
    cc: ConsulConfig
    fs: HostFS
    deadline: float
    rep: AgentReport
    loop: asyncio.AbstractEventLoop

    def budget(self) -> float:
        return min(self.cc.timeout, self.deadline - DEADLINE_MARGIN - self.loop.time())

    async def guarded(self, what: str, coro: Awaitable[T]) -> T | None:
        try:
            return await coro
        except (APIError, ValueError, OSError) as e:
            self.rep.problems.append(f"{what}: {e}")
            return None

    async def dns_side(self) -> None:
        agent, cc, rep = self.agent, self.cc, self.rep
        jobs = [
            lookup(agent, service_name(s), t, timeout=self.budget())
            for s in cc.services
            for t in ("A", "SRV")
        ]
        jobs += [
            lookup(agent, query_name(q), "A", timeout=self.budget()) for q in cc.prepared_queries
        ]
        rep.lookups = list(await asyncio.gather(*jobs))
        for svc, a in zip(cc.services, rep.lookups[0::2], strict=False):
            rep.service_dns[svc.label] = a

    async def http_side(self) -> None:
        headers = {}
        if self.agent.token_file:
            try:
                headers[TOKEN_HEADER] = await asyncio.to_thread(read_token, self.agent.token_file)
            except APIError as e:
                self.rep.problems.append(str(e))
                return
        base = self.agent.http_address + "/v1"
        async with _aiohttp().ClientSession(headers=headers) as session:

            def get(path: str, params: dict[str, str] | None = None) -> Awaitable[Fetched]:
                return fetch(session, base + path, timeout=self.budget(), params=params)

            await asyncio.gather(
                self.guarded("status/leader", self.leader(get)),
                self.guarded("status/peers", self.peers(get)),
                self.guarded("agent/self", self.self_(get)),
                self.guarded("query", self.queries(get)),
                *(
                    self.guarded(f"health/service/{s.label}", self.health(get, s))
                    for s in self.cc.services
                ),
            )

    async def leader(self, get: _Get) -> None:
        got = await get("/status/leader")
        self.rep.up = True
        self.rep.leader = parse_leader(got.text) != ""

    async def peers(self, get: _Get) -> None:
        self.rep.peers = len(parse_peers((await get("/status/peers")).text))

    async def self_(self, get: _Get) -> None:
        self.rep.info = parse_agent_self((await get("/agent/self")).text)

    async def queries(self, get: _Get) -> None:
        got = await get("/query")
        if got.acl_filtered:
            self.rep.problems.append(
                "query list filtered by ACLs: the token lacks query:read on some queries"
            )
        self.rep.prepared_queries = parse_query_list(got.text)

    async def health(self, get: _Get, svc: ConsulService) -> None:
        # Unfiltered rather than ?passing: DNS also serves "warning" instances
        # unless dns_config.only_passing is set, so the comparison needs them; the
        # passing count is the same filter applied here (all checks passing).
        params = {"tag": svc.tag} if svc.tag else None
        got = await get(f"/health/service/{svc.name}", params)
        if got.acl_filtered:
            raise APIError(
                "results filtered by ACLs: the token lacks service:read "
                "or node:read, so the catalog looks emptier than it is"
            )
        self.rep.health[svc.label] = parse_health_service(got.text)

    async def raft(self) -> None:
        if self.agent.data_dir:
            self.rep.raft_db_bytes = await asyncio.to_thread(
                raft_db_size, self.fs, self.agent.data_dir
            )


async def check_agent(
    agent: ConsulAgent, cc: ConsulConfig, *, fs: HostFS, deadline: float
) -> AgentReport:
    rep = AgentReport(agent)
    check = _AgentCheck(agent, cc, fs, deadline, rep, asyncio.get_running_loop())
    await asyncio.gather(
        check.dns_side(), check.http_side(), check.guarded("raft.db", check.raft())
    )
    await recheck_over_tcp(rep, cc, check.budget)
    for p in rep.problems:
        log.warning("consul agent %s: %s", agent.name, p)
    for lk in rep.lookups:
        if not lk.result.success:
            log.warning(
                "consul agent %s: DNS %s failed: %s: %s",
                agent.name,
                lk.query,
                lk.result.reason,
                lk.result.detail,
            )
    return rep


async def recheck_over_tcp(rep: AgentReport, cc: ConsulConfig, budget: Callable[[], float]) -> None:
    """Repeat over TCP the A lookups whose UDP answer was shorter than the catalog: Consul
    trims UDP answers to the requester's buffer without setting TC by default."""
    agent = rep.agent
    todo = []
    for svc in cc.services:
        a, h = rep.service_dns.get(svc.label), rep.health.get(svc.label)
        if a is None or h is None or not a.result.success:
            continue
        want = h.dns_addresses(only_passing=agent.dns_only_passing)
        if len(a.addresses) < len(want):
            todo.append(svc)
    if not todo:
        return
    again = await asyncio.gather(
        *(lookup(agent, service_name(s), "A", timeout=budget(), transport="tcp") for s in todo)
    )
    for svc, lk in zip(todo, again, strict=True):
        if lk.result.success:
            first = rep.service_dns[svc.label]
            rep.service_dns[svc.label] = Lookup(
                first.query, first.result, first.answers, lk.addresses
            )


# --------------------------------------------------------------------------- comparison
