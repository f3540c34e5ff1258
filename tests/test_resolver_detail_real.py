"""Issue 22 on the real daemons: after one bounded dnsperf run of the lab's query mix
(tests/harness/statslab.py), every latency, upstream, drop, recursion, cache, memory, qtype
and DNSSEC family dnsfleet reads equals the daemon's own tool, read independently here:

- unbound: `unbound-control stats_noreset` (what letsencrypt/unbound_exporter mirrors);
- BIND: prometheus-community's bind_exporter (Debian prometheus-bind-exporter) scraping the
  same named, family by family, as an SRE would chart them;
- PowerDNS Recursor: `rec_control get-all`; dnsdist: its JSON API; Knot Resolver: its
  `/stats` JSON.

Each daemon is started once per module and loaded once; the comparisons are taken after
its statistics stopped moving (no query in flight)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.query
import pytest

from dnsfleet.collectors.resolver import stats_families
from dnsfleet.config import StatsSource
from dnsfleet.parsers.resolver import ResolverStats
from dnsfleet.resolverstats import read_stats
from tests.harness.metrics import Samples, matching, of, samples
from tests.harness.process import HttpOk, ManagedProcess
from tests.harness.resolverfamilies import wait_http
from tests.harness.servers import Blackhole, Unbound, _stop
from tests.harness.statslab import (
    RRL_SOURCE,
    AuthServer,
    BindResolver,
    dnsperf,
    settle,
    write_queries,
)
from tests.harness.tools import binary, free_port, num

pytestmark = pytest.mark.integration

NAMED_SET = [
    "A",
    "AAAA",
    "CNAME",
    "MX",
    "NS",
    "PTR",
    "SOA",
    "SRV",
    "TXT",
    "DS",
    "DNSKEY",
    "HTTPS",
    "SVCB",
    "ANY",
]
REFUSED_SOURCE = "127.0.0.2"  # access control refuses it on every resolver here
REFUSED_QUERIES = 5


@dataclass
class Lab:
    auth: AuthServer
    dead: Blackhole
    queries: Path
    count: int
    workdir: Path

    def zones(self) -> dict[str, str]:
        z = {name: self.auth.address for name in ("example.test", "bogus.test")}
        z.update({"insecure.test": self.auth.address, "drop.test": self.auth.address})
        z["timeout.test"] = self.dead.address
        return z


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    work = tmp_path_factory.mktemp("statslab")
    auth = AuthServer(work / "auth").start()
    dead = Blackhole()
    queries = work / "queries.txt"
    n = write_queries(queries)
    try:
        yield Lab(auth, dead, queries, n, work)
    finally:
        dead.close()
        auth.stop()


def from_refused_source(address: str) -> None:
    host, port = address.rsplit(":", 1)
    for i in range(REFUSED_QUERIES):
        q = dns.message.make_query(f"r{i}.insecure.test", "A")
        # PowerDNS Recursor and dnsdist drop them silently.
        with contextlib.suppress(dns.exception.Timeout):
            dns.query.udp(q, host, port=int(port), timeout=0.5, source=REFUSED_SOURCE)


def rrl_burst(address: str) -> None:
    """20 identical queries at once from the rate-limited client: beyond 5 a second
    BIND drops or slips (TC) the responses."""
    host, port = address.rsplit(":", 1)
    q = dns.message.make_query("www.example.test", "A")
    for _ in range(20):
        with contextlib.suppress(dns.exception.Timeout):
            dns.query.udp(q, host, port=int(port), timeout=0.2, source=RRL_SOURCE)


def load(lab: Lab, address: str, name: str) -> str:
    out = dnsperf(address, lab.queries, lab.workdir / f"dnsperf-{name}.txt")
    from_refused_source(address)
    return out


def dnsfleet(source: StatsSource, address: str) -> tuple[ResolverStats, Samples]:
    """dnsfleet's reading, rendered into its families and read back."""

    async def read() -> ResolverStats:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            return await read_stats(source, session)

    st = asyncio.run(read())
    labels = f'target="{address}"'
    return st, of(stats_families([(labels, st, None)]))


def fold(counts: dict[str, float]) -> dict[str, float]:
    """The test's own fold of per-type counts into the documented set."""
    out = dict.fromkeys([*NAMED_SET, "other"], 0.0)
    for k, v in counts.items():
        out[k if k in NAMED_SET else "other"] += v
    return out


def by_label(got: Samples, name: str, label: str) -> dict[str, float]:
    return {dict(lab)[label]: v for (n, lab), v in got.items() if n == name and label in dict(lab)}


def buckets(got: Samples, name: str) -> dict[float, float]:
    return {float(dict(lab)["le"]): v for (n, lab), v in got.items() if n == name + "_bucket"}


# ---------------------------------------------------------------- unbound


@pytest.fixture(scope="module")
def unbound_loaded(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Unbound]:
    anchors = "\n".join(f'  trust-anchor: "{z}. DS {ds}"' for z, ds in lab.auth.ds.items())
    u = Unbound(
        tmp_path_factory.mktemp("unbound22"),
        stubs={f"{z}.": a.replace(":", "@") for z, a in lab.zones().items()},
        extra_server=f"""  module-config: "validator iterator"
{anchors}
  num-threads: 2
  num-queries-per-thread: 32
  ratelimit: 20
  access-control: 127.0.0.1/32 allow
  access-control: {REFUSED_SOURCE}/32 refuse
  infra-cache-max-rtt: 300
  max-sent-count: 4
""",
    )
    u.start()
    try:
        load(lab, u.address, "unbound")
        settle(
            lambda: [
                ln
                for ln in u.control("stats_noreset").splitlines()
                if ln.startswith(("total.num.", "num.", "total.requestlist.current"))
            ],
            lambda lines: "total.requestlist.current.all=0" in lines,
        )
        yield u
    finally:
        u.stop()


def test_unbound_equals_stats_noreset(unbound_loaded: Unbound) -> None:
    u = unbound_loaded
    source = StatsSource(type="unbound", control=f"unix://{u.control_socket}")
    st, got = dnsfleet(source, u.address)
    raw = dict(
        line.split("=", 1) for line in u.control("stats_noreset").splitlines() if "=" in line
    )

    def v(key: str) -> float:
        return float(raw[key])

    # Latency: unbound's own 40 intervals, made cumulative on their upper bounds.
    want: dict[float, float] = {}
    acc = 0.0
    for key in (k for k in raw if k.startswith("histogram.")):
        acc += v(key)
        want[float(key.split(".to.")[1])] = acc
    want[math.inf] = acc
    name = "dnsfleet_resolver_response_latency_seconds"
    assert buckets(got, name) == want
    assert matching(got, name + "_count") == v("total.num.recursivereplies") > 0
    assert num(matching(got, name + "_sum")) == pytest.approx(
        v("total.recursion.time.avg") * v("total.num.recursivereplies")
    )
    assert matching(got, "dnsfleet_resolver_upstream_queries_total") == v("num.query.udpout") + v(
        "num.query.tcpout"
    )
    assert by_label(got, "dnsfleet_resolver_queries_dropped_total", "reason") == {
        "rate_limit": v("num.query.ratelimited") + v("total.num.queries_ip_ratelimited"),
        "overload": v("total.requestlist.exceeded"),
        "acl": v("unwanted.queries"),
    }
    assert v("unwanted.queries") == REFUSED_QUERIES
    assert matching(got, "dnsfleet_resolver_recursions_in_flight") == v(
        "total.requestlist.current.user"
    )
    threads = int(u.control("status").split("threads:")[1].split()[0])
    per = int(u.control("get_option", "num-queries-per-thread").strip())
    assert matching(got, "dnsfleet_resolver_recursions_limit") == threads * per == 64
    assert by_label(got, "dnsfleet_resolver_cache_entries", "cache") == {
        "message": v("msg.cache.count"),
        "rrset": v("rrset.cache.count"),
        "key": v("key.cache.count"),
        "infra": v("infra.cache.count"),
    }
    mem = by_label(got, "dnsfleet_resolver_memory_bytes", "pool")
    assert mem["cache"] == sum(v(k) for k in raw if k.startswith("mem.cache."))
    assert mem["modules"] == sum(v(k) for k in raw if k.startswith("mem.mod."))
    qtypes = {
        k.removeprefix("num.query.type."): v(k) for k in raw if k.startswith("num.query.type.")
    }
    assert by_label(got, "dnsfleet_resolver_queries_by_type_total", "qtype") == fold(qtypes)
    assert sum(qtypes.values()) == v("total.num.queries")
    dnssec = by_label(got, "dnsfleet_resolver_dnssec_answers_total", "result")
    assert dnssec == {"secure": v("num.answer.secure"), "bogus": v("num.answer.bogus")}
    assert dnssec["secure"] > 0 and dnssec["bogus"] > 0
    assert st.version and matching(got, "dnsfleet_resolver_info", version=st.version) == 1


# ---------------------------------------------------------------- BIND


@pytest.fixture(scope="module")
def bind_loaded(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[BindResolver]:
    b = BindResolver(tmp_path_factory.mktemp("bind22"), forwards=lab.zones(), ds=lab.auth.ds)
    b.start()
    try:
        load(lab, b.address, "bind")
        rrl_burst(b.address)

        def server() -> dict[str, Any]:
            doc: dict[str, Any] = json.loads(wait_http(b.stats_url + "/json/v1/server"))
            doc.pop("current-time", None)
            return doc

        # Nothing recursing (RecursClients is left out of the JSON while 0).
        settle(server, lambda doc: not doc["nsstats"].get("RecursClients"))
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def bind_exporter(
    bind_loaded: BindResolver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    port = free_port()
    log = tmp_path_factory.mktemp("bind_exporter") / "bind_exporter.log"
    p = ManagedProcess(
        [
            binary("prometheus-bind-exporter"),
            f"--bind.stats-url={bind_loaded.stats_url}/",
            f"--bind.pid-file={bind_loaded.pid_file}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        log,
        what="bind_exporter",
    )
    url = f"http://127.0.0.1:{port}/metrics"
    try:
        p.wait_until(HttpOk(url))
        yield url
    finally:
        _stop(p)


def test_bind_equals_bind_exporter(bind_loaded: BindResolver, bind_exporter: str) -> None:
    """Family by family, the values an SRE charts from bind_exporter 0.6.1 (it reads
    BIND's XML v3; dnsfleet reads the JSON) equal dnsfleet's."""
    b = bind_loaded
    source = StatsSource(type="bind", url=b.stats_url)
    st, got = dnsfleet(source, b.address)
    theirs = samples(wait_http(bind_exporter))

    def their(name: str, **match: str) -> float:
        want = set(match.items())
        vals = [
            val
            for (n, lab), val in theirs.items()
            if n == name and want <= lab and ("view", "_bind") not in lab
        ]
        assert vals, f"bind_exporter has no {name} {match}"
        return sum(vals)

    assert their("bind_up") == 1
    # Incoming queries by type, folded into the documented set.
    types = {
        dict(lab)["type"]: val
        for (n, lab), val in theirs.items()
        if n == "bind_incoming_queries_total"
    }
    assert by_label(got, "dnsfleet_resolver_queries_by_type_total", "qtype") == fold(types)
    assert matching(got, "dnsfleet_resolver_queries_total") == their(
        "bind_incoming_requests_total", opcode="QUERY"
    )
    # Responses by rcode (bind_responses_total's Success + Nxrrset + Referral = NOERROR).
    for rcode, n in by_label(got, "dnsfleet_resolver_responses_total", "rcode").items():
        assert n == their("bind_response_rcodes_total", rcode=rcode), rcode
    assert by_label(got, "dnsfleet_resolver_responses_total", "rcode")["NOERROR"] == sum(
        their("bind_responses_total", result=r) for r in ("Success", "Nxrrset", "Referral")
    )
    # Query errors and drops: bind_exporter's Dropped (QryDropped) includes RRL drops.
    dropped = by_label(got, "dnsfleet_resolver_queries_dropped_total", "reason")
    assert dropped["rate_limit"] + dropped["policy"] == their(
        "bind_query_errors_total", error="Dropped"
    )
    assert dropped["rate_limit"] > 0  # rrl_burst
    # DNSSEC validation.
    dnssec = by_label(got, "dnsfleet_resolver_dnssec_answers_total", "result")
    assert dnssec["secure"] == their("bind_resolver_dnssec_validation_success_total") > 0
    assert dnssec["bogus"] == their("bind_resolver_dnssec_validation_errors_total") > 0
    # Upstream RTT histogram: same bounds, same cumulative counts (their sum is NaN).
    theirs_rtt = {
        float(dict(lab)["le"]): val
        for (n, lab), val in theirs.items()
        if n == "bind_resolver_query_duration_seconds_bucket" and ("view", "_default") in lab
    }
    name = "dnsfleet_resolver_upstream_rtt_seconds"
    assert buckets(got, name) == theirs_rtt
    assert (
        matching(got, name + "_count")
        == their("bind_resolver_query_duration_seconds_count", view="_default")
        > 0
    )
    assert matching(got, "dnsfleet_resolver_upstream_queries_total") == their(
        "bind_resolver_queries_total"
    )
    assert (
        matching(got, "dnsfleet_resolver_upstream_timeouts_total")
        == their("bind_resolver_query_errors_total", error="QueryTimeout")
        > 0
    )
    # bind_exporter types it a counter, so client_python's parser reads it with _total.
    assert matching(got, "dnsfleet_resolver_recursions_in_flight") == their(
        "bind_recursive_clients_total"
    )
    cache = by_label(got, "dnsfleet_resolver_cache_entries", "cache")
    assert cache["rrset"] == their("bind_resolver_cache_rrsets") > 0
    assert num(matching(got, "dnsfleet_resolver_start_time_seconds")) // 1 == their(
        "bind_boot_time_seconds"
    )
    # Memory: the cache pool plus the rest is BIND's own InUse.
    mem_doc = json.loads(wait_http(b.stats_url + "/json/v1/mem"))
    mem = by_label(got, "dnsfleet_resolver_memory_bytes", "pool")
    assert mem["cache"] > 0 and mem["other"] > 0
    assert mem["cache"] + mem["other"] == pytest.approx(mem_doc["memory"]["InUse"], rel=0.05)
    assert st.version.startswith("9.")
