"""Resolver detail on the real daemons: after one bounded dnsperf run of the lab's query mix
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
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dns.exception
import dns.message
import dns.query
import pytest

from dnsfleet.collectors.resolver import resolver_families
from dnsfleet.config import StatsSource
from dnsfleet.exposition import Labels
from dnsfleet.parsers.resolver import ResolverStats
from dnsfleet.parsers.resolverdetail import QTYPES
from dnsfleet.resolverstats import read_stats
from tests.harness import gotools
from tests.harness.metrics import Samples, matching, of, samples
from tests.harness.process import HttpOk, ManagedProcess
from tests.harness.resolverfamilies import Dnsdist, Kresd, PdnsRecursor, wait_http
from tests.harness.servers import Blackhole, Unbound, wait_dns
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

NAMED_SET = QTYPES  # the documented set; the folding below is the test's own
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
    labels = Labels({"target": address})
    return st, of(resolver_families([(labels, st, None)]))


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
        p.stop(timeout=10)


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


# ---------------------------------------------------------------- PowerDNS Recursor


@pytest.fixture(scope="module")
def pdns_loaded(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[PdnsRecursor]:
    work = tmp_path_factory.mktemp("pdns22")
    lua = work / "pdns" / "recursor.lua"
    lua.parent.mkdir(parents=True)
    # Only the lab's anchors: everything else is insecure, not bogus for want of a root.
    lua.write_text(
        "clearTA()\n" + "".join(f'addTA("{z}", "{ds}")\n' for z, ds in lab.auth.ds.items())
    )
    p = PdnsRecursor(
        work / "pdns",
        forwards=lab.zones(),
        extra=f"dnssec=validate\nlua-config-file={lua}\nallow-from=127.0.0.1/32\n"
        "network-timeout=500\n",
    )
    p.start()
    try:
        load(lab, p.address, "pdns")
        settle(lambda: rec_control(p), lambda v: v.get("concurrent-queries") == 0)
        yield p
    finally:
        p.stop()


def bracketed(
    source: StatsSource, p: PdnsRecursor
) -> tuple[ResolverStats, Samples, dict[str, float]]:
    """dnsfleet's reading between two rec_control readings that agree, and whose
    `concurrent-queries` dnsfleet saw too: the recursor's own background work (a refresh of
    a trust anchor or of the root's NS set) moves a counter or that gauge now and then, for
    a moment, and a comparison across such a moment compares two different instants. Up to
    ten tries, a moment apart."""
    before = rec_control(p)
    for _ in range(10):
        st, got = dnsfleet(source, p.address)
        after = rec_control(p)
        in_flight = matching(got, "dnsfleet_resolver_recursions_in_flight")
        if after == before and in_flight == after.get("concurrent-queries"):
            break
        time.sleep(0.5)
        before = rec_control(p)
    return st, got, after


def rec_control(p: PdnsRecursor) -> dict[str, float]:
    out = subprocess.run(
        [binary("rec_control"), f"--socket-dir={p.workdir}", "get-all"],
        capture_output=True,
        text=True,
        timeout=20,
        check=True,
    ).stdout
    got = {}
    for line in out.splitlines():
        key, _, val = line.partition("\t")
        # The counters compared here; others move on their own (CPU, host UDP errors).
        if key.startswith(PDNS_COMPARED):
            got[key] = float(val)
    return got


PDNS_COMPARED = (
    "answers",
    "all-outqueries",
    "tcp-outqueries",
    "outgoing-timeouts",
    "over-capacity-drops",
    "too-old-drops",
    "query-pipe-full-drops",
    "policy-result-drop",
    "unauthorized-",
    "client-parse-errors",
    "concurrent-queries",
    "cache-entries",
    "packetcache-entries",
    "negcache-entries",
    "nsspeeds-entries",
    "dnssec-result-",
)


def test_pdns_recursor_equals_rec_control(pdns_loaded: PdnsRecursor) -> None:
    p = pdns_loaded
    source = StatsSource(type="pdns-recursor", url=p.metrics_url, api_key=p.api_key)
    st, got, rc = bracketed(source, p)
    assert st.version and matching(got, "dnsfleet_resolver_info", version=st.version) == 1
    name = "dnsfleet_resolver_response_latency_seconds"
    lat = buckets(got, name)
    assert sorted(lat.values()) == list(lat.values()) and lat[math.inf] > 0
    # Every answer, packet-cache hits included: more than the answers* intervals, which
    # count the answers that went through the resolve path only.
    resolved = sum(rc[k] for k in ("answers0-1", "answers1-10", "answers10-100"))
    resolved += rc["answers100-1000"] + rc["answers-slow"]
    assert lat[math.inf] >= resolved > 0
    rtt = buckets(got, "dnsfleet_resolver_upstream_rtt_seconds")
    assert rtt[math.inf] > 0
    assert (
        matching(got, "dnsfleet_resolver_upstream_queries_total")
        == rc["all-outqueries"] + rc["tcp-outqueries"]
    )
    assert matching(got, "dnsfleet_resolver_upstream_timeouts_total") == rc["outgoing-timeouts"] > 0
    assert by_label(got, "dnsfleet_resolver_queries_dropped_total", "reason") == {
        "overload": rc["over-capacity-drops"] + rc["too-old-drops"] + rc["query-pipe-full-drops"],
        "policy": rc["policy-result-drop"],
        "acl": rc["unauthorized-udp"] + rc["unauthorized-tcp"],
        "malformed": rc["client-parse-errors"],
    }
    assert rc["unauthorized-udp"] == REFUSED_QUERIES
    assert matching(got, "dnsfleet_resolver_recursions_in_flight") == rc["concurrent-queries"]
    assert by_label(got, "dnsfleet_resolver_cache_entries", "cache") == {
        "rrset": rc["cache-entries"],
        "packet": rc["packetcache-entries"],
        "negative": rc["negcache-entries"],
        "infra": rc["nsspeeds-entries"],
    }
    assert num(matching(got, "dnsfleet_resolver_memory_bytes", pool="other")) > 0
    dnssec = by_label(got, "dnsfleet_resolver_dnssec_answers_total", "result")
    assert dnssec == {
        "secure": rc["dnssec-result-secure"],
        "insecure": rc["dnssec-result-insecure"] + rc["dnssec-result-nta"],
        "bogus": rc["dnssec-result-bogus"],
        "indeterminate": rc["dnssec-result-indeterminate"],
    }
    assert dnssec["secure"] > 0 and dnssec["bogus"] > 0 and dnssec["insecure"] > 0
    assert matching(got, "dnsfleet_resolver_queries_by_type_total") is None  # not counted


# ---------------------------------------------------------------- dnsdist


@pytest.fixture(scope="module")
def dnsdist_loaded(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dnsdist]:
    d = Dnsdist(
        tmp_path_factory.mktemp("dnsdist22"),
        backends={"auth": lab.auth.address},
        check_name="example.test.",
        extra=f"""
setACL({{"127.0.0.1/32"}})
getPool(""):setCache(newPacketCache(1000))
newServer({{address="{lab.dead.address}", name="dead", pool="dead"}}):setUp()
addAction("timeout.test.", PoolAction("dead"))
addAction("drop.test.", DropAction())
""",
    )
    d.start()
    try:
        load(lab, d.address, "dnsdist")
        settle(lambda: dnsdist_stats(d))
        yield d
    finally:
        d.stop()


def dnsdist_stats(d: Dnsdist) -> dict[str, float]:
    req = urllib.request.Request(
        f"http://127.0.0.1:{d.web_port}/jsonstat?command=stats",
        headers={"X-API-Key": "dnsfleet-test"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:
        doc = json.loads(resp.read())
    # The counters compared here; others move on their own (CPU, memory, uptime).
    keep: tuple[str, ...] = ("latency", "rule-drop", "acl-drops", "dyn-blocked")
    keep += ("downstream-timeouts", "noncompliant-queries", "empty-queries", "cache-")
    keep += ("queries", "responses")
    return {
        k: float(v)
        for k, v in doc.items()
        if k.startswith(keep) and not k.startswith("latency-avg") and isinstance(v, int | float)
    }


def test_dnsdist_equals_its_api(dnsdist_loaded: Dnsdist) -> None:
    d = dnsdist_loaded
    st, got = dnsfleet(StatsSource(type="dnsdist", url=d.metrics_url), d.address)
    js = dnsdist_stats(d)
    assert st.version and matching(got, "dnsfleet_resolver_info", version=st.version) == 1
    # Its per-interval latency counters (ms), made cumulative, are dnsfleet's buckets (s).
    acc, want = 0.0, {}
    for key, bound in (
        ("latency0-1", 0.001),
        ("latency1-10", 0.01),
        ("latency10-50", 0.05),
        ("latency50-100", 0.1),
        ("latency100-1000", 1.0),
        ("latency-slow", math.inf),
    ):
        acc += js[key]
        want[bound] = acc
    assert buckets(got, "dnsfleet_resolver_response_latency_seconds") == want
    assert want[math.inf] > 0
    assert by_label(got, "dnsfleet_resolver_queries_dropped_total", "reason") == {
        "rate_limit": js["dyn-blocked"],
        "policy": js["rule-drop"],
        "acl": js["acl-drops"],
        "malformed": js["noncompliant-queries"] + js["empty-queries"],
    }
    assert js["rule-drop"] == 20 and js["acl-drops"] == REFUSED_QUERIES
    assert (
        matching(got, "dnsfleet_resolver_upstream_timeouts_total") == js["downstream-timeouts"] > 0
    )
    upstream = num(matching(got, "dnsfleet_resolver_upstream_queries_total"))
    assert upstream >= js["cache-misses"] > 0
    assert num(matching(got, "dnsfleet_resolver_cache_entries", cache="packet")) > 0
    assert matching(got, "dnsfleet_resolver_recursions_in_flight") == 0


# ---------------------------------------------------------------- Knot Resolver


@pytest.fixture(scope="module")
def kresd_loaded(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kresd]:
    k = Kresd(
        tmp_path_factory.mktemp("kresd22"),
        upstream=lab.auth.address.replace(":", "@"),
        start_time_metric=True,
    )
    k.start()
    try:
        load(lab, k.address, "kresd")
        settle(lambda: kresd_stats(k), lambda v: v["worker.concurrent"] == 0)
        yield k
    finally:
        k.stop()


def kresd_stats(k: Kresd) -> dict[str, float]:
    """The counters compared here (others move on their own: page faults, cache reads)."""
    doc = json.loads(wait_http(f"http://127.0.0.1:{k.web_port}/stats"))
    return {
        key: float(v)
        for key, v in doc.items()
        if key.startswith(("answer.", "worker."))
        if key not in ("worker.rss", "worker.usertime", "worker.systime", "worker.csw")
        if key != "worker.pagefaults"
    } | {"cache.count_entries": float(doc["cache.count_entries"])}


def test_knot_resolver_equals_its_stats(kresd_loaded: Kresd) -> None:
    k = kresd_loaded
    st, got = dnsfleet(StatsSource(type="knot-resolver", url=k.metrics_url), k.address)
    js = kresd_stats(k)
    # The version comes from the build_info line of docs/configuration.md's snippet.
    kresd_version = subprocess.run(
        [binary("kresd"), "--version"], capture_output=True, text=True, timeout=10, check=True
    ).stdout
    assert st.version and st.version in kresd_version
    acc, want = 0.0, {}
    for ms in (1, 10, 50, 100, 250, 500, 1000, 1500):
        acc += js[f"answer.{ms}ms"]
        want[ms / 1000] = acc
    want[math.inf] = acc + js["answer.slow"]
    name = "dnsfleet_resolver_response_latency_seconds"
    assert buckets(got, name) == want and want[math.inf] > 0
    assert math.isnan(num(matching(got, name + "_sum")))  # kresd's own is made up
    assert (
        matching(got, "dnsfleet_resolver_upstream_queries_total")
        == (js["worker.udp"] + js["worker.tcp"] + js["worker.tls"])
        > 0
    )
    assert matching(got, "dnsfleet_resolver_upstream_timeouts_total") == js["worker.timeout"]
    assert by_label(got, "dnsfleet_resolver_queries_dropped_total", "reason") == {
        "malformed": js["worker.dropped"]
    }
    assert matching(got, "dnsfleet_resolver_recursions_in_flight") == js["worker.concurrent"]
    assert (
        matching(got, "dnsfleet_resolver_cache_entries", cache="rrset")
        == js["cache.count_entries"]
        > 0
    )
    assert num(matching(got, "dnsfleet_resolver_memory_bytes", pool="other")) > 0


# ---------------------------------------------------------------- CoreDNS


@dataclass
class CoreDNS:
    address: str
    metrics_url: str
    binary: str


@pytest.fixture(scope="module")
def coredns_loaded(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoreDNS]:
    work = tmp_path_factory.mktemp("coredns22")
    exe = gotools.coredns()
    port, mport = free_port(), free_port()
    (work / "Corefile").write_text(f"""
.:{port} {{
    bind 127.0.0.1
    acl {{
        block net {REFUSED_SOURCE}/32
    }}
    prometheus 127.0.0.1:{mport}
    errors
    cache 300 {{
        serve_stale 1h
    }}
    forward . {lab.auth.address} {{
        max_concurrent 100
    }}
}}
""")
    p = ManagedProcess([exe, "-conf", str(work / "Corefile")], work / "coredns.log", cwd=work)
    c = CoreDNS(f"127.0.0.1:{port}", f"http://127.0.0.1:{mport}/metrics", exe)
    try:
        wait_dns("127.0.0.1", port, "example.test", "SOA")
        load(lab, c.address, "coredns")
        settle(
            lambda: [
                ln for ln in wait_http(c.metrics_url).splitlines() if ln.startswith("coredns_")
            ]
        )
        yield c
    finally:
        p.stop(timeout=10)


def test_coredns(coredns_loaded: CoreDNS, lab: Lab) -> None:
    """CoreDNS's own figures are its /metrics, which dnsfleet reads: here the families are
    checked against the load that was sent (the query file's own counts)."""
    c = coredns_loaded
    st, got = dnsfleet(StatsSource(type="coredns", url=c.metrics_url), c.address)
    version = subprocess.run(
        [c.binary, "-version"], capture_output=True, text=True, timeout=10, check=True
    ).stdout
    assert st.version and f"CoreDNS-{st.version}" in version
    sent: dict[str, float] = {}
    for line in lab.queries.read_text().splitlines():
        qtype = line.split()[1]
        sent[qtype] = sent.get(qtype, 0) + 1
    qtypes = by_label(got, "dnsfleet_resolver_queries_by_type_total", "qtype")
    want = fold(sent)
    # A and SOA also carry the start-up check and the refused client's queries.
    assert {k: v for k, v in qtypes.items() if k not in ("A", "SOA")} == {
        k: v for k, v in want.items() if k not in ("A", "SOA")
    }
    assert want["A"] + REFUSED_QUERIES <= qtypes["A"] <= want["A"] + REFUSED_QUERIES + 2
    name = "dnsfleet_resolver_response_latency_seconds"
    assert num(matching(got, name + "_count")) == sum(qtypes.values())
    rtt = num(matching(got, "dnsfleet_resolver_upstream_rtt_seconds_count"))
    assert rtt == num(matching(got, "dnsfleet_resolver_upstream_queries_total")) > 0
    assert by_label(got, "dnsfleet_resolver_queries_dropped_total", "reason") == {
        "overload": 0,
        "policy": 0,
        "acl": REFUSED_QUERIES,
    }
    cache = by_label(got, "dnsfleet_resolver_cache_entries", "cache")
    assert cache["message"] > 0 and cache["negative"] > 0
    assert num(matching(got, "dnsfleet_resolver_memory_bytes", pool="other")) > 0
