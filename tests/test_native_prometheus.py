"""Native histograms end to end: the exporter probing real unbound answers a protobuf
request (gzipped too) with every family of its text exposition and the probe latency's
native buckets; Debian's Prometheus 2.42 with the native-histograms feature scrapes it
and computes histogram_count and histogram_quantile from them; and what becomes of the
classic ``_bucket`` series the SLO rules read: 2.42 keeps only the native histogram,
Prometheus 3 keeps both with ``always_scrape_classic_histograms: true`` (docs/metrics.md
says which to set)."""

from __future__ import annotations

import gzip
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pytest

from dnsfleet.expoproto import CONTENT_TYPE as PROTOBUF
from dnsfleet.histograms import LATENCY_BUCKETS
from tests.harness.exporter import ExporterProcess
from tests.harness.gotools import prometheus3_tool
from tests.harness.metricsproto import decode
from tests.harness.monitoring import Prometheus
from tests.harness.servers import Unbound

pytestmark = pytest.mark.integration

LATENCY = "dnsfleet_probe_latency_seconds"
# What Prometheus 2.42 sends with --enable-feature=native-histograms (scrape/scrape.go).
ACCEPT = (
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited,"
    "application/openmetrics-text;version=1.0.0;q=0.8,application/openmetrics-text;"
    "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


@pytest.fixture
def exporter(tmp_path: Path, unbound: Unbound) -> Iterator[ExporterProcess]:
    cfg = tmp_path / "dnsfleet.yml"
    cfg.write_text(
        f"""
resolv_conf: []
modules:
  www: {{query_name: www.example.test, query_type: A}}
  local: {{query_name: a.local.test, query_type: A}}
targets:
  - {{address: "{unbound.address}", module: www, labels: {{site: "lab \\"1\\""}}}}
  - {{address: "{unbound.address}", module: local}}
probe_allowlist: ["127.0.0.0/8"]
"""
    )
    e = ExporterProcess(f"--config.file={cfg}", cwd=tmp_path)
    yield e
    e.stop()


def fetch(url: str, headers: dict[str, str]) -> tuple[dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=30) as resp:
        return dict(resp.headers.items()), resp.read()


def test_protobuf_scrape_has_every_family_and_native_latency(exporter: ExporterProcess) -> None:
    for _ in range(3):  # a few answers in the histograms
        exporter.get("/metrics")
    headers, body = fetch(exporter.base + "/metrics", {"Accept": ACCEPT, "Accept-Encoding": "gzip"})
    assert headers["Content-Type"] == PROTOBUF
    assert headers["Content-Encoding"] == "gzip"
    fams = {f.name: f for f in decode(gzip.decompress(body))}
    text = exporter.get("/metrics")
    assert set(fams) == {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")}
    (hist,) = [
        m.histogram
        for m in fams[LATENCY].metric
        if {lp.name: lp.value for lp in m.label}.get("site") == 'lab "1"'
    ]
    assert hist.sample_count >= 3 and hist.schema == 3 and sum(hist.positive_delta) > 0
    assert [b.upper_bound for b in hist.bucket][-1] == LATENCY_BUCKETS[-1]  # +Inf implied

    # Text requesters get text, as before.
    headers, body = fetch(exporter.base + "/metrics", {"Accept": "text/plain;version=0.0.4"})
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert body.startswith(b"# HELP ")
    _, probe = fetch(exporter.base + "/probe?target=127.0.0.1&module=www", {"Accept": ACCEPT})
    assert probe.startswith(b"# HELP ")  # /probe stays text


def test_protobuf_and_text_scrapes_in_turn(exporter: ExporterProcess) -> None:
    """One exporter scraped in protobuf and in text by turns, gzipped or not: each scrape a
    cycle of its own, written in its format alone (a protobuf scrape writes no text), and
    each says that cycle's counts: one more probe of each target every scrape."""
    attempts = "dnsfleet_probe_attempts_total"
    seen = []
    for i in range(6):
        coding = {"Accept-Encoding": "gzip"} if i % 3 else {}
        if i % 2:
            headers, body = fetch(exporter.base + "/metrics", coding)
            text = gzip.decompress(body) if coding else body
            lines = text.decode().splitlines()
            (line,) = [ln for ln in lines if ln.startswith(attempts) and 'module="www"' in ln]
            seen.append(float(line.rsplit(" ", 1)[1]))
        else:
            headers, body = fetch(exporter.base + "/metrics", {"Accept": ACCEPT, **coding})
            assert headers["Content-Type"] == PROTOBUF
            fams = {f.name: f for f in decode(gzip.decompress(body) if coding else body)}
            (value,) = [
                m.counter.value
                for m in fams[attempts].metric
                if {lp.name: lp.value for lp in m.label}.get("module") == "www"
            ]
            seen.append(value)
    assert seen == [seen[0] + i for i in range(6)], seen


@dataclass
class NativePrometheus(Prometheus):
    """Prometheus 2.x with native histograms on (3.x: ``scrape_native_histograms``)."""

    flags: ClassVar[list[str]] = ["--enable-feature=native-histograms"]

    def command(self, cfg: Path) -> list[str]:
        return [*super().command(cfg), *(self.flags if not self.program else [])]


def scrape_config(exporter: ExporterProcess, **job: Any) -> dict[str, Any]:
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "dnsfleet",
                "static_configs": [{"targets": [f"127.0.0.1:{exporter.port}"]}],
                **job,
            }
        ],
    }


def wait_native(prom: Prometheus) -> tuple[float, float, float]:
    """histogram_quantile(0.5) of the probes' native histogram once a few scrapes are in,
    and the smallest and largest probe latency Prometheus saw meanwhile."""
    rate = f'rate({LATENCY}{{module="www"}}[20s])'
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        got = prom.query(f"histogram_count({rate}) > 0")
        if got:
            break
        time.sleep(1)
    else:
        raise AssertionError("no native histogram_count within 90 s")
    (q,) = prom.query(f"histogram_quantile(0.5, {rate})")
    (lo,) = prom.query('min_over_time(dnsfleet_probe_duration_seconds{module="www"}[1m])')
    (hi,) = prom.query('max_over_time(dnsfleet_probe_duration_seconds{module="www"}[1m])')
    return float(q["value"][1]), float(lo["value"][1]), float(hi["value"][1])


def plausible(q: float, lo: float, hi: float) -> bool:
    # The estimate is interpolated inside one native bucket (a factor 2**(1/8) wide).
    return lo / 2 ** (1 / 8) <= q <= hi * 2 ** (1 / 8)


def test_prometheus_2_42_reads_the_native_histogram(
    exporter: ExporterProcess, tmp_path: Path
) -> None:
    prom = NativePrometheus(tmp_path, scrape_config(exporter)).start()
    try:
        q, lo, hi = wait_native(prom)
        assert plausible(q, lo, hi), (q, lo, hi)
        # 2.42 takes the native histogram and leaves the classic series out: a rule on
        # _bucket{le="1.0"} sees nothing (scrape_classic_histograms came with 2.45).
        assert prom.query(f"{LATENCY}_bucket") == []
        assert prom.query(f'{LATENCY}_count{{module="www"}}') == []
        assert prom.query('dnsfleet_probe_success{module="www"}')
    finally:
        prom.stop()


def test_prometheus_2_42_without_the_feature_keeps_classic_buckets(
    exporter: ExporterProcess, tmp_path: Path
) -> None:
    prom = Prometheus(tmp_path, scrape_config(exporter)).start()
    try:
        got = prom.wait(f'{LATENCY}_bucket{{module="www",le="1.0"}} > 0', timeout=60)
        assert got and prom.query(f'histogram_count(rate({LATENCY}{{module="www"}}[20s]))') == []
    finally:
        prom.stop()


def test_prometheus_3_keeps_both_with_always_scrape_classic_histograms(
    exporter: ExporterProcess, tmp_path: Path
) -> None:
    config = scrape_config(
        exporter, scrape_native_histograms=True, always_scrape_classic_histograms=True
    )
    prom = NativePrometheus(tmp_path, config, program=prometheus3_tool("prometheus")).start()
    try:
        q, lo, hi = wait_native(prom)
        assert plausible(q, lo, hi), (q, lo, hi)
        assert prom.query(f'{LATENCY}_bucket{{module="www",le="1.0"}}')
        assert prom.query(f'{LATENCY}_bucket{{module="www",le="+Inf"}}')
    finally:
        prom.stop()
