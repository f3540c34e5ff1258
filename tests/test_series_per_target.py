"""What one default UDP probe target costs in series, on the real exporter probing a real
unbound on loopback and a silent loopback port: on /metrics 18 while healthy (success,
duration, rcode, answer RRs, attempts, the 13 series of the latency histogram), 20 while
failing for one reason (the failure gauge and that reason's counter); on /probe the four
per-probe gauges, and the failure gauge while failing."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.exporter import ExporterProcess
from tests.harness.metrics import samples
from tests.harness.servers import Blackhole, Unbound

pytestmark = pytest.mark.integration

HEADERS = {"X-Prometheus-Scrape-Timeout-Seconds": "5"}


@pytest.fixture
def exporter(tmp_path: Path, unbound: Unbound, blackhole: Blackhole) -> Iterator[ExporterProcess]:
    cfg = tmp_path / "dnsfleet.yml"
    cfg.write_text(
        f"""
resolv_conf: []
modules:
  udp:
    query_name: www.example.test
    timeout: 1s
targets:
  - {{address: "{unbound.address}", module: udp}}
  - {{address: "{blackhole.address}", module: udp}}
probe_allowlist: ["127.0.0.0/8"]
"""
    )
    e = ExporterProcess(f"--config.file={cfg}", cwd=tmp_path)
    yield e
    e.stop()


def per_target(text: str) -> Counter[str]:
    """Series per value of the ``target`` label."""
    return Counter(dict(labels).get("target", "") for _, labels in samples(text))


def test_series_per_default_udp_target(
    exporter: ExporterProcess, unbound: Unbound, blackhole: Blackhole
) -> None:
    # /probe first, until unbound answers (its first lookup of the session may SERVFAIL
    # while BIND starts): /probe leaves the /metrics counters alone.
    probe = f"/probe?target={unbound.address}&module=udp"
    deadline = time.monotonic() + 60
    for _ in range(60):
        healthy = samples(exporter.get(probe))
        if healthy[("dnsfleet_probe_success", frozenset())] == 1 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert sorted(n for n, _ in healthy if n.startswith("dnsfleet_probe_")) == [
        "dnsfleet_probe_answer_rrs",
        "dnsfleet_probe_dns_rcode",
        "dnsfleet_probe_duration_seconds",
        "dnsfleet_probe_success",
    ]
    silent = samples(exporter.get(f"/probe?target={blackhole.address}&module=udp"))
    assert len([n for n, _ in silent if n.startswith("dnsfleet_probe_")]) == 5
    assert silent[("dnsfleet_probe_failure", frozenset({("reason", "timeout")}))] == 1

    # Three scrapes: the failures series is born at 0 in the first, counts from the second.
    for scrape in range(3):
        text = exporter.get("/metrics", headers=HEADERS)
        got = samples(text)
        assert got[("dnsfleet_probe_success", frozenset({("target", unbound.address),
                                                          ("module", "udp")}))] == 1  # fmt: skip
        count = per_target(text)
        assert count[unbound.address] == 18, (scrape, sorted(
            n for n, labels in got if ("target", unbound.address) in labels))  # fmt: skip
        assert count[blackhole.address] == 20, (scrape, sorted(
            n for n, labels in got if ("target", blackhole.address) in labels))  # fmt: skip
    failing = frozenset({("target", blackhole.address), ("module", "udp"), ("reason", "timeout")})
    assert got[("dnsfleet_probe_failure", failing)] == 1
    assert got[("dnsfleet_probe_failures_total", failing)] == 3
