"""PowerDNS Recursor, dnsdist and Knot Resolver statistics, read from the real Debian 12
daemons on loopback and normalised into the dnsfleet_resolver_* families; CoreDNS (not
packaged in Debian) from an exposition written after CoreDNS's documented metric names,
not captured from a running CoreDNS. The captured expositions of the three real daemons are
kept in tests/fixtures/resolver/ for the parser tests (refresh: DNSFLEET_CAPTURE=1)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dns.message
import dns.query
import dns.rcode
import pytest
import yaml

from dnsfleet.app import Exporter
from dnsfleet.hostfs import HostFS
from dnsfleet.parsers.promtext import parse_prometheus_text, parse_resolver_metrics
from tests.harness.metrics import matching
from tests.harness.resolverfamilies import Dnsdist, Kresd, PdnsRecursor, wait_http
from tests.harness.servers import Named, Unbound
from tests.harness.tools import num
from tests.test_resolver_real import scrape

FIXTURES = Path(__file__).parent / "fixtures" / "resolver"


def exporter(tmp_path: Path, target: dict[str, Any], **module: Any) -> Exporter:
    path = tmp_path / "dnsfleet.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "resolv_conf": [],
                "modules": {
                    "m": {
                        "query_name": "www.example.test",
                        "query_type": "A",
                        "timeout": "1s",
                        **module,
                    }
                },
                "targets": [{"module": "m", "labels": {"site": "lab"}, **target}],
            }
        )
    )
    return Exporter(fs=HostFS(), config_file=str(path))


def ask(address: str, name: str, n: int) -> None:
    host, port = address.rsplit(":", 1)
    for _ in range(n):
        dns.query.udp(dns.message.make_query(name, "A"), host, port=int(port), timeout=3)


def capture(name: str, url: str, headers: dict[str, str] | None = None) -> None:
    if os.environ.get("DNSFLEET_CAPTURE"):
        FIXTURES.mkdir(parents=True, exist_ok=True)
        (FIXTURES / name).write_text(wait_http(url, headers=headers))


@pytest.fixture
def pdns(tmp_path: Path, named: Named) -> Iterator[PdnsRecursor]:
    p = PdnsRecursor(tmp_path / "pdns", forwards={"example.test": named.address})
    p.start()
    yield p
    p.stop()


@pytest.mark.integration
def test_pdns_recursor(pdns: PdnsRecursor, tmp_path: Path) -> None:
    exp = exporter(
        tmp_path,
        {
            "address": pdns.address,
            "stats": {"type": "pdns-recursor", "url": pdns.metrics_url, "api_key": pdns.api_key},
        },
    )
    ask(pdns.address, "www.example.test", 5)
    ask(pdns.address, "nope.example.test", 3)
    s = scrape(exp)
    t = pdns.address
    assert matching(s, "dnsfleet_resolver_stats_up", target=t) == 1
    assert matching(s, "dnsfleet_resolver_info", target=t, software="pdns-recursor") == 1
    assert num(matching(s, "dnsfleet_resolver_queries_total", target=t)) >= 8
    assert num(matching(s, "dnsfleet_resolver_cache_hits_total", target=t)) >= 4
    assert num(matching(s, "dnsfleet_resolver_responses_total", target=t, rcode="NXDOMAIN")) >= 3
    assert matching(s, "dnsfleet_resolver_rcode_stats_available", target=t) == 1
    start = num(matching(s, "dnsfleet_resolver_start_time_seconds", target=t))
    assert start == pytest.approx(time.time(), abs=30)
    capture("pdns-recursor-4.8.metrics.txt", pdns.metrics_url, {"X-API-Key": pdns.api_key})
    # A restart moves the start time. The old process must have run for longer than the
    # judgement's blind spot (restarts.judge_start: uptime in whole seconds, 1 s tolerance,
    # plus the two read windows on a busy machine) before it is replaced: 4 s.
    time.sleep(4.0)
    pdns.stop()
    pdns.start()
    s = scrape(exp)
    assert num(matching(s, "dnsfleet_resolver_start_time_seconds", target=t)) > start
    # /config never shows the API key.
    from dnsfleet.config import to_yaml

    assert pdns.api_key not in to_yaml(exp.config)


@pytest.mark.integration
def test_pdns_recursor_wrong_url_is_unreadable(pdns: PdnsRecursor, tmp_path: Path) -> None:
    exp = exporter(
        tmp_path,
        {
            "address": pdns.address,
            "stats": {
                "type": "pdns-recursor",
                "url": pdns.metrics_url.replace("/metrics", "/nope"),
            },
        },
    )
    s = scrape(exp)
    assert matching(s, "dnsfleet_resolver_stats_up", target=pdns.address) == 0


@pytest.fixture
def pool(tmp_path: Path, named: Named) -> Iterator[tuple[Dnsdist, Unbound, Unbound]]:
    stubs = {"example.test.": f"127.0.0.1@{named.port}"}
    b1 = Unbound(tmp_path / "b1", stubs=stubs, extra_server='  nsid: "ascii_b1"\n')
    b2 = Unbound(tmp_path / "b2", stubs=stubs, extra_server='  nsid: "ascii_b2"\n')
    b1.start()
    b2.start()
    d = Dnsdist(tmp_path / "dnsdist", backends={"b1": b1.address, "b2": b2.address})
    try:
        d.start()
        yield d, b1, b2
    finally:
        d.stop()
        b1.stop()
        b2.stop()


@pytest.mark.integration
def test_dnsdist_pool(pool: tuple[Dnsdist, Unbound, Unbound], tmp_path: Path) -> None:
    """dnsdist round-robin over two unbound with NSID: per-backend statistics from dnsdist;
    answering from either backend is no flapping on a `backends: pool` target; the canary
    keeps state per backend, so a flush of the backend its answers come from is counted
    once and nothing else is."""
    d, b1, b2 = pool
    exp = exporter(
        tmp_path,
        {
            "address": d.address,
            "backends": "pool",
            "stats": {"type": "dnsdist", "url": d.metrics_url},
        },
        canary="canary.example.test",
        canary_tolerance="500ms",
    )
    ask(d.address, "www.example.test", 6)
    for _ in range(4):
        s = scrape(exp)
        time.sleep(0.6)
    t = d.address
    assert matching(s, "dnsfleet_resolver_stats_up", target=t) == 1
    assert matching(s, "dnsfleet_resolver_info", target=t, software="dnsdist") == 1
    # The 6 asked plus at least the probe and canary queries of the three scrapes before
    # the last: the last scrape's own queries race its statistics read.
    assert num(matching(s, "dnsfleet_resolver_queries_total", target=t)) >= 12
    for name, u in (("b1", b1), ("b2", b2)):
        assert (
            matching(
                s, "dnsfleet_resolver_backend_up", target=t, backend=name, backend_address=u.address
            )
            == 1
        )
        assert (
            num(matching(s, "dnsfleet_resolver_backend_queries_total", target=t, backend=name)) >= 3
        )
    assert matching(s, "dnsfleet_resolver_backend_changes_total", target=t, module="m") == 0
    watch = next(iter(exp.prober.watch.states.values()))
    seen = set(watch.canary.baselines)
    assert seen <= {"b1", "b2"} and seen, seen
    assert watch.canary.resets == 0
    # The backend label describes the canary's answer, not the main probe's.
    assert matching(s, "dnsfleet_resolver_backend_info", target=t, backend=sorted(seen)[0]) == 1
    flushed = {"b1": b1, "b2": b2}[sorted(seen)[0]]
    flushed.control("flush", "canary.example.test")
    for _ in range(3):
        time.sleep(0.6)
        s = scrape(exp)
    assert matching(s, "dnsfleet_resolver_cache_resets_total", target=t) == 1
    capture("dnsdist-1.7.metrics.txt", d.metrics_url)


@pytest.mark.integration
def test_knot_resolver(tmp_path: Path, named: Named) -> None:
    k = Kresd(tmp_path / "kresd", upstream=f"127.0.0.1@{named.port}")
    k.start()
    try:
        exp = exporter(
            tmp_path,
            {"address": k.address, "stats": {"type": "knot-resolver", "url": k.metrics_url}},
        )
        ask(k.address, "www.example.test", 4)
        ask(k.address, "nope.example.test", 2)
        s = scrape(exp)
        t = k.address
        assert matching(s, "dnsfleet_resolver_stats_up", target=t) == 1
        assert matching(s, "dnsfleet_resolver_info", target=t, software="knot-resolver") == 1
        assert num(matching(s, "dnsfleet_resolver_queries_total", target=t)) >= 6
        assert (
            num(matching(s, "dnsfleet_resolver_responses_total", target=t, rcode="NXDOMAIN")) >= 2
        )
        # kresd publishes no start time: nothing rather than a made-up one.
        assert matching(s, "dnsfleet_resolver_start_time_seconds", target=t) is None
        capture("knot-resolver-5.6.metrics.txt", k.metrics_url)
    finally:
        k.stop()


# ------------------------------------------------------------------ parsers on captures


@pytest.mark.unit
def test_parsers_on_captured_expositions() -> None:
    pd = parse_resolver_metrics(
        "pdns-recursor", (FIXTURES / "pdns-recursor-4.8.metrics.txt").read_text()
    )
    assert pd.software == "pdns-recursor" and pd.queries >= 8
    # Only an uptime: the start time is the restart judgement's business, not the parser's.
    assert pd.start_time is None and pd.uptime is not None and 0 <= pd.uptime < 600
    dd = parse_resolver_metrics("dnsdist", (FIXTURES / "dnsdist-1.7.metrics.txt").read_text())
    assert dd.start_time is None and dd.uptime == 5
    assert {b.name for b in dd.backends} == {"b1", "b2"} and all(b.up for b in dd.backends)
    kr = parse_resolver_metrics(
        "knot-resolver", (FIXTURES / "knot-resolver-5.6.metrics.txt").read_text()
    )
    assert kr.start_time is None and kr.queries >= 6


@pytest.mark.unit
def test_coredns_parser() -> None:
    """Written from CoreDNS's documented names (plugin/metrics and plugin/cache READMEs);
    not captured from a running CoreDNS, which Debian does not package."""
    text = (FIXTURES / "coredns-documented.metrics.txt").read_text()
    st = parse_resolver_metrics("coredns", text)
    assert st.software == "coredns" and st.version == "1.11.1"
    assert st.start_time == 1_700_000_000.5
    assert st.queries == 1500 and (st.cache_hits, st.cache_misses) == (1200, 300)
    assert dict(st.responses or ())["SERVFAIL"] == 7
    assert dict(st.responses or ())["NXDOMAIN"] == 40


@pytest.mark.unit
@pytest.mark.parametrize("text", ["bad line\n", 'x{a="1"} notanumber\n'])
def test_garbled_exposition_is_an_error(text: str) -> None:
    with pytest.raises(ValueError, match="line 1"):
        parse_prometheus_text(text)


@pytest.mark.unit
def test_missing_required_counter_is_an_error() -> None:
    with pytest.raises(ValueError, match="no pdns_recursor_uptime"):
        parse_resolver_metrics("pdns-recursor", "pdns_recursor_questions 3\n")


@pytest.mark.unit
def test_rcode_names_match_dnspython() -> None:
    text = (FIXTURES / "coredns-documented.metrics.txt").read_text()
    for rcode, _ in parse_resolver_metrics("coredns", text).responses or ():
        dns.rcode.from_text(rcode)
