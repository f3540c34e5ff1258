"""Capacity on a busy host, with real resperf and unbound: three runs of one kind
are recorded each with resperf's own CPU time and wall time, summed up as median and spread,
and judged by the documented rules; whatever the host's load decides, what is recorded,
exported and printed agrees with those rules (the figures themselves are the host's, so
they are not asserted)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from dnsfleet.capacity.model import read_state
from dnsfleet.capacity.runs import MIN_CLIENT_CPU_SHARE, summarise
from dnsfleet.cli import main as dnsfleet_main
from dnsfleet.config import Endpoint
from tests.harness.metrics import matching as matching_or_none
from tests.harness.servers import Unbound
from tests.test_resolver_real import exporter, scrape

pytestmark = pytest.mark.integration


def test_capacity_repeats_on_a_busy_host(
    unbound: Unbound, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "capacity.json"
    rc = dnsfleet_main(
        [
            "capacity-test",
            *("--target", unbound.address, "--query", "a.local.test/A"),
            *("--max-qps", "2000", "--ramp", "2", "--max-loss", "5"),
            *("--state-file", str(state), "--yes"),
        ]
    )
    out = capsys.readouterr()
    (m,) = read_state(str(state))[Endpoint(unbound.host, unbound.port).key()].values()
    assert len(m.runs) == 3  # the default
    for r in m.runs:
        # resperf is one process; its CPU time cannot exceed the wall time of its run by
        # more than its threads (it runs one sending and one receiving loop).
        assert 0 < r.client_cpu_seconds <= 2 * r.wall_seconds
        assert r.limit in ("loss", "ramp", "client")
        if r.client_cpu_share < MIN_CLIENT_CPU_SHARE:
            assert r.limit == "client"
    # The summary recomputed from the recorded runs is the recorded one.
    s = summarise(m.runs, max_qps=2000, ramp=2)
    assert (m.capacity_qps, m.spread, m.contradictions) == (
        s.capacity_qps,
        s.spread,
        s.contradictions,
    )
    valid = [r.capacity_qps for r in m.runs if r.limit != "client"]
    if len(valid) >= 2:
        assert m.capacity_qps == statistics.median(valid)
    # Recorded, exported and printed alike.
    exp = exporter(
        tmp_path,
        {
            "modules": {"m": {"query_name": "a.local.test"}},
            "targets": [{"address": unbound.address, "module": "m"}],
            "resolver": {"capacity_file": str(state)},
        },
    )
    got = scrape(exp)
    qps = matching_or_none(got, "dnsfleet_resolver_capacity_qps", target=unbound.address)
    if m.contradictions:
        assert qps is None
        for reason in m.contradictions:
            assert (
                matching_or_none(
                    got,
                    "dnsfleet_resolver_capacity_contradiction",
                    target=unbound.address,
                    kind="hit",
                    reason=reason,
                )
                == 1
            )
            assert f"warning: {unbound.address} hit: {reason}" in out.err
        assert "NO capacity" in out.out
        assert rc == (3 if "client_bound" in m.contradictions else 0)
    else:
        assert qps == pytest.approx(m.capacity_qps) and rc == 0
        assert "warning" not in out.err
