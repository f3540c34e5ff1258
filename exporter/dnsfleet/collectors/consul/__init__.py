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
from dataclasses import dataclass

from dnsfleet.collectors.base import CollectContext, Collector
from dnsfleet.collectors.consul.agent import AgentReport, Lookup, check_agent, decode_answer
from dnsfleet.config import ConsulConfig
from dnsfleet.exposition import Family, labelset
from dnsfleet.parsers.consul import ServiceHealth

__all__ = [
    "COLLECTOR",
    "AgentReport",
    "Lookup",
    "check_agent",
    "compare",
    "decode_answer",
    "families",
]

log = logging.getLogger(__name__)


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
        "1 for the reason the last DNS lookup failed; no series while it succeeded.",
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
            # One series while the lookup fails, none while it succeeds, as
            # dnsfleet_probe_failure: the zeros of the other reasons told a query nothing.
            if r.reason is not None:
                failure.add_raw(labelset(labels).with_(("reason", r.reason.value)), 1.0)
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
