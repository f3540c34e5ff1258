"""Consul DNS health: DNS answers checked against the catalog, and the servers behind them.

For each configured agent, concurrently and within the scrape deadline:

* DNS (the agent's DNS port, UDP like clients, through the core probe): A and SRV of
  ``[tag.]<svc>.service.consul`` for every watched service, A of ``<name>.query.consul`` for
  every prepared query. The core's Response only counts answers, so the answer set is
  decoded with dnspython; a message dnspython cannot decode is a malformed probe.
* HTTP (aiohttp): ``/v1/health/service/<svc>`` (passing instances, and the set DNS should
  serve), ``/v1/query`` (prepared-query count), ``/v1/status/leader``, ``/v1/status/peers``,
  ``/v1/agent/self`` (version).
* raft.db size under the configured data dir, through HostFS, when readable.

The A answer set is compared with the catalog: answers that are no passing instance
(clients sent to a failed or deregistered instance) and DNS-eligible instances DNS left
out. Consul trims UDP answers silently to fit the requester's buffer (``enable_truncate``
is off by default), so when UDP returns fewer answers than the catalog has, the lookup is
repeated over TCP before anything is called missing.

An unreachable HTTP API is ``dnsfleet_consul_up 0`` with a logged reason, never a failed
scrape; DNS is probed regardless, since clients depend on it and not on HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, TypeVar

import dns.rdatatype

from dnsfleet.collectors.base import DEADLINE_MARGIN, CollectContext, Collector
from dnsfleet.config import ConsulAgent, ConsulConfig, ConsulService, Module
from dnsfleet.dnswire import build_query, decode_message
from dnsfleet.exposition import Family, labelset
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
from dnsfleet.probes import REASONS, ProbeResult, Reason, failed, probe

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)

T = TypeVar("T")
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


async def check_agent(  # noqa: C901 (not split yet (issue 25 note))
    agent: ConsulAgent, cc: ConsulConfig, *, fs: HostFS, deadline: float
) -> AgentReport:
    loop = asyncio.get_running_loop()
    rep = AgentReport(agent)

    def budget() -> float:
        return min(cc.timeout, deadline - DEADLINE_MARGIN - loop.time())

    async def guarded(what: str, coro: Awaitable[T]) -> T | None:
        try:
            return await coro
        except (APIError, ValueError, OSError) as e:
            rep.problems.append(f"{what}: {e}")
            return None

    async def dns_side() -> None:
        jobs = [
            lookup(agent, service_name(s), t, timeout=budget())
            for s in cc.services
            for t in ("A", "SRV")
        ]
        jobs += [lookup(agent, query_name(q), "A", timeout=budget()) for q in cc.prepared_queries]
        rep.lookups = list(await asyncio.gather(*jobs))
        for svc, a in zip(cc.services, rep.lookups[0::2], strict=False):
            rep.service_dns[svc.label] = a

    async def http_side() -> None:
        headers = {}
        if agent.token_file:
            try:
                headers[TOKEN_HEADER] = await asyncio.to_thread(read_token, agent.token_file)
            except APIError as e:
                rep.problems.append(str(e))
                return
        base = agent.http_address + "/v1"
        async with _aiohttp().ClientSession(headers=headers) as session:

            def get(path: str, params: dict[str, str] | None = None) -> Awaitable[Fetched]:
                return fetch(session, base + path, timeout=budget(), params=params)

            async def leader() -> None:
                got = await get("/status/leader")
                rep.up = True
                rep.leader = parse_leader(got.text) != ""

            async def peers() -> None:
                rep.peers = len(parse_peers((await get("/status/peers")).text))

            async def self_() -> None:
                rep.info = parse_agent_self((await get("/agent/self")).text)

            async def queries() -> None:
                got = await get("/query")
                if got.acl_filtered:
                    rep.problems.append(
                        "query list filtered by ACLs: the token lacks query:read on some queries"
                    )
                rep.prepared_queries = parse_query_list(got.text)

            async def health(svc: ConsulService) -> None:
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
                rep.health[svc.label] = parse_health_service(got.text)

            await asyncio.gather(
                guarded("status/leader", leader()),
                guarded("status/peers", peers()),
                guarded("agent/self", self_()),
                guarded("query", queries()),
                *(guarded(f"health/service/{s.label}", health(s)) for s in cc.services),
            )

    async def raft() -> None:
        if agent.data_dir:
            rep.raft_db_bytes = await asyncio.to_thread(raft_db_size, fs, agent.data_dir)

    await asyncio.gather(dns_side(), http_side(), guarded("raft.db", raft()))
    await recheck_over_tcp(rep, cc, budget)
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


@dataclass(frozen=True, slots=True)
class Comparison:
    stale: int  # DNS answers that are no instance DNS should serve
    missing: int  # instances DNS should serve but did not


def compare(
    dns_addresses: frozenset[str],
    health: ServiceHealth,
    *,
    only_passing: bool,
    a_record_limit: int | None,
) -> Comparison:
    """Pure. What DNS should serve is the catalog's non-critical instances, or its passing
    ones with the agent's dns_config.only_passing; a "warning" instance in the answer is
    Consul's documented default, not a mismatch. "Missing" is capped by a_record_limit."""
    eligible = health.dns_addresses(only_passing=only_passing)
    expected = len(eligible) if a_record_limit is None else min(len(eligible), a_record_limit)
    return Comparison(
        stale=len(dns_addresses - eligible),
        missing=max(expected - len(dns_addresses & eligible), 0),
    )


# --------------------------------------------------------------------------- metrics


def families(reports: list[AgentReport], cc: ConsulConfig) -> list[Family]:
    """Pure: reports -> metric families."""
    up = Family(
        "dnsfleet_consul_up", "1 if the agent's HTTP API answered /v1/status/leader in this scrape."
    )
    for rep in reports:
        up.add(1.0 if rep.up else 0.0, {"agent": rep.agent.name})
    return [up, *_dns_families(reports), *_service_families(reports, cc), *_raft_families(reports)]


def _dns_families(reports: list[AgentReport]) -> list[Family]:
    """The lookups of each agent's DNS interface."""
    success = Family(
        "dnsfleet_consul_dns_probe_success",
        "1 if the agent's DNS answered the lookup (NOERROR or NXDOMAIN).",
    )
    latency = Family(
        "dnsfleet_consul_dns_latency_seconds", "Duration of the last DNS lookup, answer or not."
    )
    failure = Family(
        "dnsfleet_consul_dns_probe_failure",
        "1 for the reason the last DNS lookup failed, 0 for every other reason.",
    )
    query_answers = Family(
        "dnsfleet_consul_dns_query_answers",
        "Answer records of the asked type in the last DNS lookup.",
    )
    for rep in reports:
        for lk in rep.lookups:
            labels = {"agent": rep.agent.name, "query": lk.query}
            r = lk.result
            success.add(1.0 if r.success else 0.0, labels)
            latency.add(r.duration, labels)
            query_answers.add(lk.answers, labels)
            base = labelset(labels)
            for reason in REASONS:
                failure.add_raw(
                    f'{base},reason="{reason.value}"', 1.0 if r.reason is reason else 0.0
                )
    return [success, latency, failure, query_answers]


def _service_families(reports: list[AgentReport], cc: ConsulConfig) -> list[Family]:
    """Each watched service: its DNS answer against the catalog's healthy instances."""
    answers = Family(
        "dnsfleet_consul_dns_answers", "Distinct addresses in the service's DNS A answer."
    )
    healthy = Family(
        "dnsfleet_consul_healthy_instances",
        "Service instances with all checks passing, from the catalog.",
    )
    stale = Family(
        "dnsfleet_consul_dns_stale_answers",
        "DNS A answers that are no instance the catalog says DNS should serve.",
    )
    missing = Family(
        "dnsfleet_consul_dns_missing_instances",
        "Instances DNS should serve (per the catalog) that its answer lacks.",
    )
    for rep in reports:
        a = rep.agent
        for svc in cc.services:
            sl = {"agent": a.name, "service": svc.label}
            lk_a = rep.service_dns.get(svc.label)
            h = rep.health.get(svc.label)
            if lk_a is not None and lk_a.result.success:
                answers.add(len(lk_a.addresses), sl)
            if h is not None:
                healthy.add(len(h.passing), sl)
            if lk_a is not None and lk_a.result.success and h is not None:
                c = compare(
                    lk_a.addresses,
                    h,
                    only_passing=a.dns_only_passing,
                    a_record_limit=a.a_record_limit,
                )
                stale.add(c.stale, sl)
                missing.add(c.missing, sl)
    return [answers, healthy, stale, missing]


def _raft_families(reports: list[AgentReport]) -> list[Family]:
    """Prepared queries, Raft leader and peers, the Raft database and the agent itself."""
    prepared = Family(
        "dnsfleet_consul_prepared_queries",
        "Prepared queries defined (readable with the configured token).",
    )
    leader = Family(
        "dnsfleet_consul_leader_present", "1 if /v1/status/leader names a leader, 0 if it is empty."
    )
    peers = Family("dnsfleet_consul_raft_peers", "Raft peers from /v1/status/peers.")
    raft_db = Family(
        "dnsfleet_consul_raft_db_bytes",
        "Size of <data_dir>/raft/raft.db; the BoltDB file never shrinks.",
    )
    raft_db = Family(
        "dnsfleet_consul_raft_db_bytes",
        "Size of <data_dir>/raft/raft.db; the BoltDB file never shrinks.",
    )
    info = Family(
        "dnsfleet_consul_agent_info",
        "The agent's version, datacenter and node as labels; always 1.",
    )
    for rep in reports:
        agent_l = {"agent": rep.agent.name}
        if rep.prepared_queries is not None:
            prepared.add(rep.prepared_queries, agent_l)
        if rep.leader is not None:
            leader.add(1.0 if rep.leader else 0.0, agent_l)
        if rep.peers is not None:
            peers.add(rep.peers, agent_l)
        if rep.raft_db_bytes is not None:
            raft_db.add(rep.raft_db_bytes, agent_l)
        if rep.info is not None:
            info.add(
                1,
                {
                    "agent": rep.agent.name,
                    "version": rep.info.version,
                    "datacenter": rep.info.datacenter,
                    "node": rep.info.node,
                    "server": "true" if rep.info.server else "false",
                },
            )
    return [prepared, leader, peers, raft_db, info]


async def collect(ctx: CollectContext) -> list[Family]:
    cc = ctx.config.consul
    start = time.monotonic()
    reports = await asyncio.gather(
        *(check_agent(a, cc, fs=ctx.fs, deadline=ctx.deadline) for a in cc.agents)
    )
    log.debug("consul: %d agents in %.3fs", len(reports), time.monotonic() - start)
    return families(list(reports), cc)


COLLECTOR = Collector(name="consul", run=collect, enabled=lambda cfg: bool(cfg.consul.agents))
