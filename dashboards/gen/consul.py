"""Consul DNS (`$agent`): what its clients get against what the catalog says."""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as dash

from dashboards.gen.vocabulary import SEL, Panel, base, query, tab, ts, variables, with_panels

AGENT = f'{SEL}, agent=~"$agent"'


def consul_dns() -> dash.Dashboard:
    d = base(
        "dnsfleet-consul",
        "dnsfleet / Consul DNS",
        "Consul DNS as its clients see it, against what the catalog says: lookups, "
        "latency, stale and missing answers, leader, raft.db.",
    )
    d = variables(d, agent=True)
    return with_panels(d, _lookups(), _servers())


def _lookups() -> list[Panel]:
    """Lookups against the agents' DNS port and their answers."""
    return [
        ts(
            "Lookup success",
            "1 when a watched service or prepared-query lookup "
            "got NOERROR or NXDOMAIN (DNSConsulDNSDown when all fail for 2m).",
            "bool_yes_no",
            query(f"dnsfleet_consul_dns_probe_success{{{AGENT}}}", "{{agent}} {{query}}"),
            min_val=0,
            max_val=1,
        ),
        ts(
            "Lookup latency",
            "Duration of each lookup against the agent's DNS port.",
            "s",
            query(f"dnsfleet_consul_dns_latency_seconds{{{AGENT}}}", "{{agent}} {{query}}"),
        ),
        ts(
            "Answers against healthy instances",
            "Addresses in each service's A "
            "answer against instances with every check passing in the catalog.",
            "short",
            query(f"dnsfleet_consul_dns_answers{{{AGENT}}}", "{{service}} answered"),
            query(f"dnsfleet_consul_healthy_instances{{{AGENT}}}", "{{service}} healthy"),
        ),
        ts(
            "Stale and missing answers",
            "Answered addresses DNS should not serve, "
            "and instances it should serve but left out (DNSConsulDNSMismatch).",
            "short",
            query(f"dnsfleet_consul_dns_stale_answers{{{AGENT}}}", "{{service}} stale"),
            query(f"dnsfleet_consul_dns_missing_instances{{{AGENT}}}", "{{service}} missing"),
        ),
    ]


def _servers() -> list[Panel]:
    """The agents themselves: API, leader, Raft and raft.db."""
    return [
        ts(
            "Leader and API",
            "1 when the agent's HTTP API answers and when "
            "Raft has a leader (DNSConsulNoLeader, DNSConsulAPIDown).",
            "bool_yes_no",
            query(f"dnsfleet_consul_leader_present{{{AGENT}}}", "{{agent}} leader"),
            query(f"dnsfleet_consul_up{{{AGENT}}}", "{{agent}} API up"),
            min_val=0,
            max_val=1,
        ),
        ts(
            "Raft peers and prepared queries",
            "Raft peers and prepared queries defined, per agent.",
            "short",
            query(f"dnsfleet_consul_raft_peers{{{AGENT}}}", "{{agent}} peers"),
            query(f"dnsfleet_consul_prepared_queries{{{AGENT}}}", "{{agent}} prepared queries"),
        ),
        ts(
            "raft.db size",
            "Size of the server's raft.db; BoltDB never shrinks "
            "(DNSConsulRaftDbLarge above 1 GiB or +128 MiB in 6h).",
            "bytes",
            query(f"dnsfleet_consul_raft_db_bytes{{{AGENT}}}", "{{agent}}"),
        ),
        tab(
            "Agents",
            "Version, datacenter, node and role of each agent.",
            "none",
            query(f"dnsfleet_consul_agent_info{{{AGENT}}}", instant=True, fmt="table"),
        ),
    ]
