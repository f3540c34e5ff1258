"""`make bench` counts series per target from a real scrape (bench/series.py): the counter
is the measuring instrument, so it is held to a small exposition counted by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from bench.common import cycling_script, mmm
from bench.series import count_series

pytestmark = pytest.mark.unit

EXPOSITION = """\
# HELP dnsfleet_probe_success Whether the probe succeeded.
# TYPE dnsfleet_probe_success gauge
dnsfleet_probe_success{target="127.0.1.1:53"} 1
dnsfleet_probe_success{target="127.0.1.2:53"} 0
# HELP dnsfleet_probe_failures_total Failures by reason.
# TYPE dnsfleet_probe_failures_total counter
dnsfleet_probe_failures_total{target="127.0.1.1:53",reason="timeout"} 0
dnsfleet_probe_failures_total{target="127.0.1.2:53",reason="timeout"} 3
dnsfleet_probe_failures_total{target="127.0.1.2:53",reason="refused"} 1
# HELP dnsfleet_probe_latency_seconds Latency.
# TYPE dnsfleet_probe_latency_seconds histogram
dnsfleet_probe_latency_seconds_bucket{target="127.0.1.1:53",le="0.01"} 1
dnsfleet_probe_latency_seconds_bucket{target="127.0.1.1:53",le="+Inf"} 1
dnsfleet_probe_latency_seconds_sum{target="127.0.1.1:53"} 0.002
dnsfleet_probe_latency_seconds_count{target="127.0.1.1:53"} 1
dnsfleet_probe_latency_seconds_bucket{target="127.0.1.2:53",le="0.01"} 0
dnsfleet_probe_latency_seconds_bucket{target="127.0.1.2:53",le="+Inf"} 0
dnsfleet_probe_latency_seconds_sum{target="127.0.1.2:53"} 0
dnsfleet_probe_latency_seconds_count{target="127.0.1.2:53"} 0
# HELP dnsfleet_scrapes_total Scrapes.
# TYPE dnsfleet_scrapes_total counter
dnsfleet_scrapes_total 7
# HELP dnsfleet_target_info A label value that only looks like a target label.
# TYPE dnsfleet_target_info gauge
dnsfleet_target_info{note="x,target=\\"127.0.9.9:53\\""} 1
"""


def test_series_per_target_counted_by_family() -> None:
    c = count_series(EXPOSITION, "127.0.1.1:53")
    assert c.targets == 2
    assert c.total == 2 + 3 + 8  # families without a target label are not counted
    assert c.total_native == 2 + 3 + 2  # a histogram's label set is one native series
    assert c.per_target == 6.5
    assert c.one == {
        "dnsfleet_probe_failures_total": 1,
        "dnsfleet_probe_latency_seconds": 4,
        "dnsfleet_probe_success": 1,
    }
    assert c.one_native == {
        "dnsfleet_probe_failures_total": 1,
        "dnsfleet_probe_latency_seconds": 1,
        "dnsfleet_probe_success": 1,
    }


def test_min_median_max() -> None:
    assert mmm([0.3, 0.1, 0.2]) == "0.10-0.20-0.30"
    assert mmm([12.25], ".1f") == "12.2-12.2-12.2"
    assert mmm([]) == "-"


def test_cycling_script_lists_every_path_once(tmp_path: Path) -> None:
    paths = [f"/probe?target=127.0.1.{i}:53" for i in range(1, 4)]
    text = cycling_script(tmp_path / "s.lua", paths).read_text()
    assert [line.strip(' ",') for line in text.splitlines()[1:4]] == paths
    assert "i = i % n + 1" in text
