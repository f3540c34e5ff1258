"""Capacity on a busy host, pure parts: each resperf run judged (the resolver or
the sending client set the limit?), repeats summed up as median and spread, contradictions
recorded in the state file and exported instead of a capacity. Figures from 28 resperf
runs against one unbound on this shared 2-core host, three per batch and kind."""

from __future__ import annotations

import math

import pytest

from dnsfleet.capacity.model import Measurement, RunRecord, format_state, parse_state
from dnsfleet.capacity.runs import (
    cross_check,
    judge_plot,
    judge_run,
    spread_limit,
    summarise,
)
from dnsfleet.collectors.resolver_capacity import capacity_families
from dnsfleet.config import parse
from dnsfleet.parsers.resperf import PlotPoint
from tests.harness.metrics import of

pytestmark = pytest.mark.unit


def ramp(losses: list[float], step: float = 1000.0) -> list[PlotPoint]:
    """A ramp whose bucket i targets (i+1) x step qps, sends it, and loses losses[i] %."""
    out = []
    for i, loss in enumerate(losses):
        target = (i + 1) * step
        out.append(
            PlotPoint(
                time=0.5 * (i + 1),
                target_qps=target,
                sent_qps=target,
                responses_qps=target * (1 - loss / 100),
                failures_qps=0.0,
            )
        )
    return out


def test_one_lossy_bucket_is_not_the_limit() -> None:
    v = judge_plot(ramp([0, 0, 5, 0, 0, 3, 4, 0]), 1.0)
    # Bucket 2 alone is a spike; 5 and 6 in a row are the limit: the best before is 5,000.
    assert (v.limit_index, v.spikes, v.capacity_qps) == (5, 1, 5000.0)
    single = judge_plot(ramp([0, 0, 5, 0, 0]), 1.0, sustain=1)
    assert (single.limit_index, single.capacity_qps) == (2, 2000.0)  # resperf's own rule
    never = judge_plot(ramp([0, 0, 0, 9]), 1.0)
    assert never.limit_index is None and never.spikes == 1 and never.capacity_qps == 3000


def test_who_set_the_limit() -> None:
    def run(
        losses: list[float], *, share: float = 0.99, fell_behind: bool = False, min_cpu: float = 0.9
    ) -> RunRecord:
        sending = 0.5 * len(losses) + 0.5
        return judge_run(
            ramp(losses),
            max_loss_percent=1.0,
            fell_behind=fell_behind,
            client_cpu_seconds=share * sending,
            # resperf's -t wait for late answers after the last bucket costs no CPU: the
            # share is over the sending, not the whole run.
            wall_seconds=sending + 2.0,
            min_client_cpu_share=min_cpu,
        )

    assert run([0, 0, 0, 0]).limit == "ramp"
    assert run([0, 0, 5, 5, 5, 5]).limit == "loss"
    # resperf stopped early: the loss in its last buckets is its own stopping.
    assert run([0, 0, 0, 5, 5], fell_behind=True).limit == "client"
    assert run([0, 0, 0, 0], fell_behind=True).limit == "client"
    # ... but a loss well before it fell behind is the resolver's.
    assert run([0, 5, 5, 5, 5, 5], fell_behind=True).limit == "loss"
    # resperf spins: 40 % of a core means the host denied it the rest.
    r = run([0, 0, 5, 5, 5], share=0.4)
    assert r.limit == "client" and r.client_cpu_share == pytest.approx(0.4)
    assert r.send_seconds == pytest.approx(3.0) and r.wall_seconds == pytest.approx(5.0)
    assert run([0, 0, 5, 5, 5], share=0.4, min_cpu=0.0).limit == "loss"
    slipped = ramp([0, 0, 0, 5, 5])
    slipped[1] = PlotPoint(1.0, 2000.0, 1500.0, 1500.0, 0.0)
    assert (
        judge_run(
            slipped,
            max_loss_percent=1.0,
            fell_behind=False,
            client_cpu_seconds=10.0,
            wall_seconds=10.0,
        ).limit
        == "client"
    )


def rec(qps: float, limit: str = "loss") -> RunRecord:
    return RunRecord(
        capacity_qps=qps,
        limit=limit,
        lost_percent=0.0,
        loss_spikes=0,
        fell_behind=False,
        client_cpu_seconds=9.5,
        wall_seconds=10.0,
    )


def test_median_and_spread() -> None:
    s = summarise([rec(9000), rec(10000), rec(11000)], max_qps=100_000, ramp=60)
    assert s.capacity_qps == 10000 and s.spread == pytest.approx(0.2)
    assert s.contradictions == () and (s.limit, s.lower_bound) == ("loss", False)
    # Batch A of the busy host, cache hits: 3,438 / 9,656 / 6,784 qps with a 60,000 qps
    # ramp over 20 s (1,500 qps steps): 92 % apart, above max(25 %, 2 steps / median).
    a = summarise([rec(3438), rec(9656), rec(6784)], max_qps=60_000, ramp=20)
    assert a.capacity_qps == 6784 and a.spread == pytest.approx(0.9166, abs=1e-3)
    assert a.spread_limit == pytest.approx(2 * 1500 / 6784)
    assert a.contradictions == ("spread",)
    # The ramp's own resolution is no spread: two steps apart at a small median.
    assert spread_limit(3000, max_qps=60_000, ramp=20) == 1.0
    assert summarise([rec(2250), rec(3750)], max_qps=60_000, ramp=20).contradictions == ()


def test_client_bound_runs_are_no_capacity() -> None:
    # Two of three runs client-bound: one figure is not a median of anything.
    s = summarise([rec(3750, "client"), rec(6770), rec(9752, "client")], max_qps=60_000, ramp=20)
    assert s.contradictions == ("client_bound",)
    allc = summarise([rec(3750, "client")] * 3, max_qps=60_000, ramp=20)
    assert allc.contradictions == ("client_bound",) and allc.limit == "client"
    # One run asked for, one run the resolver limited: a figure, without a spread.
    one = summarise([rec(5000, "ramp")], max_qps=60_000, ramp=20)
    assert one.contradictions == () and one.spread is None and one.lower_bound
    assert summarise([rec(5000, "client")], max_qps=60_000, ramp=20).contradictions == (
        "client_bound",
    )


def measurement(kind: str, qps: float, **kw: object) -> Measurement:
    return Measurement(
        kind=kind,
        capacity_qps=qps,
        lower_bound=False,
        limit="loss",
        measured_at=1.0,
        lost_percent=0.0,
        max_loss_percent=1.0,
        max_qps_offered=60_000,
        ramp_seconds=20,
        **kw,  # type: ignore[arg-type]
    )


def test_miss_above_hit_contradicts_both() -> None:
    got = cross_check({"hit": measurement("hit", 2452), "miss": measurement("miss", 3306)})
    assert got["hit"].contradictions == got["miss"].contradictions == ("miss_above_hit",)
    fine = cross_check({"hit": measurement("hit", 6580), "miss": measurement("miss", 2452)})
    assert fine["hit"].contradictions == fine["miss"].contradictions == ()


def test_miss_above_hit_is_recorded_beside_another_contradiction() -> None:
    """Three miss runs at 8,500-15,500 qps (a spread contradiction) above a hit capacity of
    2,500 (a rate-limited name): miss_above_hit is recorded on both, so the 2,500 is no
    longer a capacity; a miss run below the hit figure does not contradict it."""
    runs = (rec(8500), rec(12000), rec(15500))
    miss = measurement("miss", 12000, runs=runs, spread=0.58, contradictions=("spread",))
    got = cross_check({"hit": measurement("hit", 2500), "miss": miss})
    assert got["hit"].contradictions == ("miss_above_hit",)
    assert got["miss"].contradictions == ("spread", "miss_above_hit")
    low = measurement("miss", 3000, runs=(rec(2000), rec(3000), rec(4000)), spread=0.6)
    fine = cross_check({"hit": measurement("hit", 2500), "miss": low})
    assert fine["hit"].contradictions == ()


def test_contradiction_recorded_and_exported_instead_of_capacity() -> None:
    runs = (rec(3750, "client"), rec(6770), rec(9752, "client"))
    m = measurement("hit", 6770, runs=runs, spread=None, contradictions=("client_bound",))
    ok = measurement("miss", 2000, runs=(rec(1900), rec(2000), rec(2100)), spread=0.1)
    text = format_state({"127.0.0.1:53": {"hit": m, "miss": ok}})
    assert '"client_cpu_share": 0.95' in text
    back = parse_state(text)["127.0.0.1:53"]
    assert back["hit"] == m and back["miss"] == ok
    cfg = parse(
        {
            "resolv_conf": [],
            "targets": [{"address": "127.0.0.1:53", "module": "m"}],
            "modules": {"m": {"query_name": "x.test"}},
        },
        source="t.yml",
    )
    got = of(capacity_families(cfg, {"127.0.0.1:53": back}))
    cap = {dict(lab)["kind"] for (n, lab) in got if n == "dnsfleet_resolver_capacity_qps"}
    assert cap == {"miss"}
    key = frozenset({("target", "127.0.0.1:53"), ("kind", "hit"), ("reason", "client_bound")})
    assert got[("dnsfleet_resolver_capacity_contradiction", key)] == 1
    key = frozenset({("target", "127.0.0.1:53"), ("kind", "miss")})
    assert got[("dnsfleet_resolver_capacity_spread_ratio", key)] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="contradiction 'nope'"):
        parse_state(text.replace('"client_bound"', '"nope"'))
    assert not math.isnan(back["miss"].capacity_qps)
