"""dnsfleet_probe_failures_total is born at zero: a reason's series appears only once the
target fails with it, at 0 in the record of the cycle of that first failure, and with its
count from the next record on; so a Prometheus server that saw the 0 counts every failure
in rate() and increase(). Held here over a prober's records (one per cycle, as app.py takes
them), for the kept-cycle fallback and for two scrapers, and through real promtool: the
increase() Prometheus computes over the scraped values is the exact count."""

from __future__ import annotations

import subprocess
from itertools import pairwise
from pathlib import Path

import pytest
import yaml

from dnsfleet.config import parse
from dnsfleet.exposition import render
from dnsfleet.prober import Prober
from dnsfleet.proberecord import ProbeRecord
from dnsfleet.probes import ProbeResult, Reason
from dnsfleet.probes.result import failed
from tests.harness.metrics import samples
from tests.harness.tools import binary

LABELS = {"target": "127.0.0.1", "module": "m"}
OK = ProbeResult(success=True, reason=None, duration=0.001, rcode=0, answer_rrs=1, detail="")


def prober() -> Prober:
    p = Prober()
    p.configure(
        parse(
            {"modules": {"m": {}}, "targets": [{"address": "127.0.0.1", "module": "m"}]},
            source="x.yml",
        )
    )
    return p


def cycle(p: Prober, result: ProbeResult) -> ProbeRecord:
    """One cycle: the target probed once, then the cycle's record taken."""
    (st,) = p.states.values()
    st.observe(result, 0.0)
    return p.record()


def series(record: ProbeRecord, name: str) -> dict[str, float]:
    """The values of family ``name`` in ``record`` by reason (this module's one target)."""
    got = samples(render(record.families()))
    return {
        labels["reason"]: v
        for (n, frozen), v in got.items()
        for labels in [dict(frozen)]
        if n == name and LABELS.items() <= labels.items()
    }


def counts(record: ProbeRecord) -> dict[str, float]:
    return series(record, "dnsfleet_probe_failures_total")


def increase(values: list[float | None]) -> float:
    """What Prometheus' increase() counts over a scraper's samples of one series, without
    extrapolation: the rises from the series' first sample on (a fall is a reset)."""
    seen = [v for v in values if v is not None]
    return sum(b - a if b >= a else b for a, b in pairwise(seen))


def timeout() -> ProbeResult:
    return failed(Reason.TIMEOUT, 2.0, "no answer")


@pytest.mark.unit
def test_a_reason_is_born_at_zero_then_counts_and_is_kept() -> None:
    p = prober()
    assert counts(cycle(p, OK)) == {}
    assert series(p.record(), "dnsfleet_probe_failure") == {}
    first = cycle(p, timeout())
    assert counts(first) == {"timeout": 0}
    assert series(first, "dnsfleet_probe_failure") == {"timeout": 1}
    assert counts(cycle(p, timeout())) == {"timeout": 2}
    back = cycle(p, OK)
    assert counts(back) == {"timeout": 2}  # kept from then on
    assert series(back, "dnsfleet_probe_failure") == {}  # the gauge goes: stale in Prometheus
    # A second reason is born at zero beside the first's count.
    assert counts(cycle(p, failed(Reason.REFUSED, 0.01, "refused"))) == {
        "timeout": 2,
        "refused": 0,
    }
    assert counts(cycle(p, OK)) == {"timeout": 2, "refused": 1}


@pytest.mark.unit
def test_every_failure_is_in_the_increase_a_scraper_sees() -> None:
    p = prober()
    script = [OK, OK, timeout(), timeout(), OK, timeout(), OK, OK, timeout(), timeout(), OK]
    seen = [counts(cycle(p, r)).get("timeout") for r in script]
    assert seen[:2] == [None, None] and seen[2] == 0
    assert increase(seen) == sum(r.reason is Reason.TIMEOUT for r in script)


@pytest.mark.unit
def test_a_kept_cycle_serves_its_zero_again_never_a_count_then_a_zero() -> None:
    """app.py answers a request that cannot wait for a cycle in flight with the freshest
    complete cycle kept for its budget: the record, frozen, renders its born 0 again; the
    next cycle's record counts. A requester sees 0, 0, then the count: nothing lost, no
    reset."""
    p = prober()
    cycle(p, OK)
    kept = cycle(p, timeout())
    again = [counts(kept)["timeout"] for _ in range(2)]
    later = cycle(p, timeout())
    assert again == [0, 0] and increase([*again, counts(later)["timeout"]]) == 2


@pytest.mark.unit
def test_two_scrapers() -> None:
    """Two Prometheus servers: sharing one cycle (their requests met while it ran), both
    see the born 0 and count every failure. Running separate cycles (alternate scrapes),
    the one whose cycle recorded first sees the 0; the other sees the series first at the
    count so far, which its increase() leaves out: a once-per-reason-per-target loss for
    that server, documented in docs/metrics.md."""
    p = prober()
    shared = cycle(p, timeout())
    a, b = [counts(shared)], [counts(shared)]
    a.append(counts(cycle(p, timeout())))
    b.append(counts(cycle(p, OK)))
    assert [x["timeout"] for x in a] == [0, 2] and [x["timeout"] for x in b] == [0, 2]

    p = prober()
    a = [counts(cycle(p, timeout()))]
    b = [counts(cycle(p, OK))]
    a.append(counts(cycle(p, OK)))
    assert a == [{"timeout": 0}, {"timeout": 1}] and b == [{"timeout": 1}]


@pytest.mark.integration
def test_promtool_increase_over_the_scraped_values_is_the_exact_count(tmp_path: Path) -> None:
    """The values a 15 s scraper got from the prober's records, read by real promtool:
    increase() over a window that holds the whole series gives the
    exact number of failures (a series born at 0 leaves no room to extrapolate below it),
    and a target that never failed has no series."""
    p = prober()
    script = [OK, OK, OK, timeout(), OK, timeout(), timeout(), OK, OK, OK, timeout(), OK]
    seen: list[str] = []
    for r in script:
        v = counts(cycle(p, r)).get("timeout")
        seen.append("_" if v is None else format(v, "g"))
    failures = sum(r.reason is Reason.TIMEOUT for r in script)
    last = f"{15 * (len(script) - 1)}s"
    sel = 'target="127.0.0.1",module="m"'
    test = {
        "rule_files": [],
        "evaluation_interval": "15s",
        "tests": [
            {
                "interval": "15s",
                "input_series": [
                    {
                        "series": f'dnsfleet_probe_failures_total{{{sel},reason="timeout"}}',
                        "values": " ".join(seen),
                    },
                    {
                        "series": f"dnsfleet_probe_attempts_total{{{sel}}}",
                        "values": " ".join(str(i + 1) for i in range(len(script))),
                    },
                ],
                "promql_expr_test": [
                    {
                        "expr": "increase(dnsfleet_probe_failures_total[10m])",
                        "eval_time": last,
                        "exp_samples": [
                            {"labels": f'{{{sel},reason="timeout"}}', "value": failures}
                        ],
                    },
                    {
                        "expr": 'dnsfleet_probe_failures_total{reason!="timeout"}',
                        "eval_time": last,
                        "exp_samples": [],
                    },
                ],
            }
        ],
    }
    path = tmp_path / "born.test.yml"
    path.write_text(yaml.safe_dump(test))
    out = subprocess.run(
        [binary("promtool"), "test", "rules", path.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
