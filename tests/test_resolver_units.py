"""Restart and cache-reset detection, pure parts: parsers on recorded text, the cache-reset
rule, config keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dnsfleet.capacity.model import (
    Measurement,
    QueryFile,
    effective_capacity,
    format_state,
    parse_state,
)
from dnsfleet.capacity.queries import miss_name_count, miss_names
from dnsfleet.collectors.resolver import stats_families
from dnsfleet.collectors.resolver_capacity import capacity_families
from dnsfleet.config import ConfigError, Endpoint, parse
from dnsfleet.exposition import Labels, render
from dnsfleet.parsers.bind import parse_bind_server
from dnsfleet.parsers.promtext import parse_resolver_metrics
from dnsfleet.parsers.resperf import (
    PlotCapacity,
    PlotPoint,
    capacity_from_plot,
    parse_plot,
    parse_resperf,
)
from dnsfleet.parsers.unbound import parse_unbound_stats, parse_version
from dnsfleet.probes import ProbeResult
from dnsfleet.restarts import (
    CanaryTracker,
    ResolverWatch,
    StartJudgement,
    StartReading,
    Unusable,
    WatchState,
    is_cache_reset,
    judge_start,
)

pytestmark = pytest.mark.unit

FIX = Path(__file__).parent / "fixtures" / "resolver"


# ------------------------------------------------------------------ unbound


def test_unbound_stats_recorded() -> None:
    st = parse_unbound_stats((FIX / "unbound_stats_noreset.txt").read_text(), version="1.17.1")
    assert st.software == "unbound" and st.version == "1.17.1"
    # time.now=1795320106.837598 time.up=0.548075, subtracted exactly in decimal
    assert st.start_time == 1795320106.289523
    assert (st.queries, st.cache_hits, st.cache_misses) == (2, 1, 1)
    rc = dict(st.responses or ())
    assert rc["NOERROR"] == 1 and rc["NXDOMAIN"] == 1 and rc["SERVFAIL"] == 0
    assert "NOTIMP" in rc and "NOTIMPL" not in rc


def test_unbound_start_time_has_no_jitter() -> None:
    """Two scrapes of one process a while apart give the very same start time."""
    a = "time.now=1700000000.100001\ntime.up=10.000001\n"
    b = "time.now=1700000123.456789\ntime.up=133.356789\n"
    tail = "total.num.queries=1\ntotal.num.cachehits=0\ntotal.num.cachemiss=1\n"
    assert (
        parse_unbound_stats(a + tail).start_time
        == parse_unbound_stats(b + tail).start_time
        == 1699999990.1
    )


@pytest.mark.parametrize(
    "text,problem",
    [
        ("", "empty"),
        ("error unknown command 'stats_noreset'\n", "not key=value"),
        ("time.now=1\ntime.up=1\n", "missing total.num.queries"),
        ("time.now=abc\ntime.up=1\n", "time.now: not a number"),
        ("total.num.queries=1\n", "missing time.now"),
    ],
)
def test_unbound_stats_garbled(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_unbound_stats(text)


def test_unbound_version() -> None:
    assert parse_version("version: 1.17.1\nverbosity: 1\n") == "1.17.1"
    assert parse_version("nothing here") == ""


# ------------------------------------------------------------------ BIND


def test_bind_recorded() -> None:
    st = parse_bind_server((FIX / "bind_json_v1_server.json").read_text())
    assert st.software == "bind" and st.version.startswith("9.18")
    assert st.start_time == pytest.approx(1795320105.733)  # 2026-11-22T04:01:45.733Z
    assert st.queries == 2
    rc = dict(st.responses or ())
    assert rc["NOERROR"] == 2 and "RESERVED11" not in rc and "17" not in rc


def test_bind_cache_counts_skip_chaos_view() -> None:
    doc = json.loads((FIX / "bind_json_v1_server.json").read_text())
    doc["views"]["_default"]["resolver"]["cachestats"].update(QueryHits=7, QueryMisses=3)
    doc["views"]["_bind"]["resolver"]["cachestats"].update(QueryHits=100, QueryMisses=100)
    st = parse_bind_server(json.dumps(doc))
    assert (st.cache_hits, st.cache_misses) == (7, 3)


@pytest.mark.parametrize(
    "text,problem",
    [
        ("<html>", "not JSON"),
        ("[]", "expected a JSON object"),
        ("{}", "no boot-time"),
        ('{"boot-time": "yesterday"}', "invalid ISO 8601"),
        ('{"boot-time": "2026-01-01T00:00:00Z", "opcodes": {"QUERY": -1}}', "opcodes.QUERY"),
        ('{"boot-time": "2026-01-01T00:00:00Z", "views": []}', "views: expected an object"),
    ],
)
def test_bind_garbled(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_bind_server(text)


# ------------------------------------------------------------------ resperf and state


def test_resperf_output() -> None:
    """Recorded from resperf 2.10.0 against a loopback unbound (-m 5000 -r 3)."""
    r = parse_resperf((FIX / "resperf_output.txt").read_text())
    assert (r.max_qps, r.lost_percent, r.queries_sent, r.queries_completed, r.fell_behind) == (
        3750.0,
        0.0,
        7500,
        7500,
        False,
    )
    with pytest.raises(ValueError, match="maximum throughput"):
        parse_resperf("Error: ran out of query data\n")
    behind = (
        (FIX / "resperf_output.txt")
        .read_text()
        .replace(
            "[Status] Sending\n",
            "[Status] Sending\n[Status] Fell behind by 1000 queries, ending test at 41260 qps\n",
        )
    )
    assert parse_resperf(behind).fell_behind


def test_resperf_plot_tells_a_lower_bound() -> None:
    """Recorded from resperf 2.10.0 against a loopback unbound (-m 3000 -r 2 -L 1, a
    cached name): the loss never passed 1 %, the "Maximum throughput" of 1876 qps is the
    ramp's limit (62 % of -m), and only the plot shows it."""
    out = parse_resperf((FIX / "resperf-ramp-limited.stdout").read_text())
    assert out.max_qps == 1876.0
    points = parse_plot((FIX / "resperf-ramp-limited.plot").read_text())
    assert [p.target_qps for p in points] == [375.0, 1125.0, 1875.0]
    got = capacity_from_plot(points, 1.0)
    assert got == PlotCapacity(capacity_qps=out.max_qps, unserved_percent=0.0, limit_reached=False)
    # A bucket that lost 2 % of its queries: past a 1 % limit (the figure stays the best
    # bucket before it), within a 5 % one (the lossy bucket's 2548 qps is the best).
    lossy = (
        *points,
        PlotPoint(time=1.75, target_qps=2625, sent_qps=2600, responses_qps=2548, failures_qps=0),
    )
    assert capacity_from_plot(lossy, 1.0) == PlotCapacity(1876.0, 0.0, True)
    assert capacity_from_plot(lossy, 5.0) == PlotCapacity(2548.0, 2.0, False)
    # SERVFAIL answers are not service: BIND out of recursive-clients answers every query,
    # most of them SERVFAIL; resperf would call all of them throughput.
    failing = (
        *points,
        PlotPoint(time=1.75, target_qps=2625, sent_qps=2600, responses_qps=2600, failures_qps=1300),
    )
    assert capacity_from_plot(failing, 1.0) == PlotCapacity(1876.0, 0.0, True)
    assert capacity_from_plot((PlotPoint(0.25, 0, 0, 0, 0),), 0.0).capacity_qps == 0
    for bad, problem in (
        ("1 2 3 4\n", "line 1: want at least 5"),
        ("# h\n1 2 x 4 5\n", "line 2: not numbers"),
    ):
        with pytest.raises(ValueError, match=problem):
            parse_plot(bad)


def _m(kind: str, qps: float, *, lower: bool = False) -> Measurement:
    return Measurement(
        kind=kind,
        capacity_qps=qps,
        lower_bound=lower,
        limit="ramp" if lower else "loss",
        measured_at=1.7e9,
        lost_percent=0.1,
        max_loss_percent=1.0,
        max_qps_offered=2000,
        ramp_seconds=2,
        queries_sent=3000,
        queries_completed=2990,
        resperf_max_qps=qps + 1,
        resperf=("resperf", "-s", "::1"),
        queries=QueryFile(path="/q.txt", count=1, sha256="ab", zone=""),
    )


def test_capacity_state_round_trip() -> None:
    key = Endpoint.parse("[::1]:53").key()
    assert key == "[::1]:53"
    state = {
        key: {"hit": _m("hit", 1974.0, lower=True), "miss": _m("miss", 310.0)},
        "10.0.0.1:53": {"miss": _m("miss", 5.0)},
    }
    assert parse_state(format_state(state)) == state
    for bad, problem in (
        ("{", "not JSON"),
        ('{"version": 9}', "not a dnsfleet"),
        ('{"version": 2, "targets": {"a": {}}}', None),
        ('{"version": 2, "targets": {"a": {"warm": {}}}}', "unknown kind"),
        ('{"version": 2, "targets": {"a": {"hit": {}}}}', "targets.a"),
        ('{"version": 2, "targets": {"a": []}}', "targets.a"),
        ('{"version": 1, "targets": {"a": {}}}', "targets.a"),
    ):
        if problem is None:
            assert parse_state(bad) == {"a": {}}
            continue
        with pytest.raises(ValueError, match=problem):
            parse_state(bad)
    text = format_state(state).replace('"limit": "loss"', '"limit": "guess"', 1)
    with pytest.raises(ValueError, match="limit 'guess'"):
        parse_state(text)


def test_capacity_state_version_1_reads_as_a_hit_figure() -> None:
    """Files written before cache-miss runs: one figure per resolver, from cached names,
    whose lower-bound status was never recorded."""
    v1 = (
        '{"version": 1, "targets": {"127.0.0.1:53": {"capacity_qps": 3000, '
        '"measured_at": 1.7e9, "lost_percent": 0.5, "max_qps_offered": 5000, '
        '"ramp_seconds": 60}}}'
    )
    (m,) = parse_state(v1)["127.0.0.1:53"].values()
    assert (m.kind, m.capacity_qps, m.limit, m.lower_bound) == ("hit", 3000.0, "unknown", False)


def test_effective_capacity_is_the_harmonic_mix() -> None:
    """Each query costs 1/C_hit or 1/C_miss seconds of resolver: 80 % hits at 5000/500 qps
    -> 1/(0.8/5000 + 0.2/500) = 1785.7 qps, far below the 5000 of a hit-only view."""
    assert effective_capacity(0.8, 5000, 500) == pytest.approx(1785.714285714)
    assert effective_capacity(1.0, 5000, 500) == 5000
    assert effective_capacity(0.0, 5000, 500) == 500
    for bad in ((1.1, 1, 1), (-0.1, 1, 1), (0.5, 0, 1), (0.5, 1, 0)):
        with pytest.raises(ValueError):
            effective_capacity(*bad)


def test_miss_names_never_repeat_within_or_across_runs() -> None:
    # A ramp to 2000 qps over 3 s sends 3000 queries: the file holds them all and spare.
    n = miss_name_count(2000, 3)
    assert 3000 < n <= 3300
    a = list(miss_names("miss.test.", n, "run1"))
    b = list(miss_names("miss.test.", n, "run2"))
    assert len(set(a)) == n and not set(a) & set(b)
    assert all(x.endswith(".miss.test.") for x in a)


def test_capacity_families_by_kind() -> None:
    cfg = parse(
        {
            "modules": {"m": {"query_name": "a.test"}},
            "targets": [
                {"address": "10.0.0.1", "module": "m", "labels": {"site": "s1"}},
                {"address": "10.0.0.2", "module": "m", "capacity_qps": 400},
                {"address": "10.0.0.3", "module": "m"},
            ],
        },
        source="t.yml",
    )
    measured = {
        "10.0.0.1:53": {"hit": _m("hit", 2000, lower=True), "miss": _m("miss", 300)},
        "10.0.0.2:53": {"hit": _m("hit", 900)},
    }
    fams = {f.name: f for f in capacity_families(cfg, measured)}
    cap = fams["dnsfleet_resolver_capacity_qps"]
    lower = fams["dnsfleet_resolver_capacity_lower_bound"]
    assert cap.value({"target": "10.0.0.1", "kind": "hit", "site": "s1"}) == 2000
    assert cap.value({"target": "10.0.0.1", "kind": "miss", "site": "s1"}) == 300
    assert lower.value({"target": "10.0.0.1", "kind": "hit", "site": "s1"}) == 1
    assert lower.value({"target": "10.0.0.1", "kind": "miss", "site": "s1"}) == 0
    # Declared and measured are both exported; the recording rule prefers declared.
    assert cap.value({"target": "10.0.0.2", "kind": "declared"}) == 400
    assert cap.value({"target": "10.0.0.2", "kind": "hit"}) == 900
    assert lower.value({"target": "10.0.0.2", "kind": "declared"}) is None
    assert all('"10.0.0.3"' not in labels.text for _, labels, _ in cap.samples)


# ------------------------------------------------------------------ the cache-reset rule


@pytest.mark.parametrize(
    "prev,elapsed,ttl,expect,why",
    [
        (3600, 10, 3590, False, "counting down as it should"),
        (3600, 10, 3592, False, "within the tolerance (integer TTLs, probe latency)"),
        (3600, 10, 3600, True, "flushed: back to full TTL long before expiry"),
        (3000, 600, 3600, True, "restarted half-way through"),
        (60, 61, 60, False, "expired naturally and fetched afresh"),
        (60, 57, 60, False, "less than the prefetch window (2 s + tolerance) left"),
        (3600, 3300, 3600, False, "in unbound's prefetch window (< 10% left)"),
        (3600, 3000, 3600, True, "well before the prefetch window"),
        (100, 10, 3600, False, "first seen late in life (prefetch window sized by the new TTL)"),
    ],
)
def test_is_cache_reset(prev: int, elapsed: float, ttl: int, expect: bool, why: str) -> None:
    assert (
        is_cache_reset(
            prev_ttl=prev, elapsed=elapsed, ttl=ttl, tolerance=2.0, longest_ttl=max(prev, 60)
        )
        is expect
    ), why


def _watch_state() -> WatchState:
    cfg = parse(
        {
            "modules": {"m": {"canary": "canary.example.test"}},
            "targets": [{"address": "127.0.0.1", "module": "m"}],
        },
        source="t.yml",
    )
    w = ResolverWatch()
    w.configure(cfg)
    return w.states[("127.0.0.1", "m")]


def run_canary(
    answers: list[tuple[float, int | None, str | None]],
    *,
    pool: bool = False,
    tolerance: float = 2.0,
) -> CanaryTracker:
    """Feed (monotonic time, TTL or None, backend) answers; wall time = 1000 + time."""
    c = CanaryTracker(tolerance=tolerance, pool=pool)
    for now, ttl, backend in answers:
        c.observe(ttl, now=now, wall=1000 + now, backend=backend)
    return c


def countdown(
    start: float, ttl: int, until: float, step: float = 15, backend: str | None = "a"
) -> list[tuple[float, int | None, str | None]]:
    """A record cached at ``start`` with ``ttl``, looked at every ``step`` s."""
    out: list[tuple[float, int | None, str | None]] = []
    t = start
    while t < until:
        out.append((t, int(ttl - (t - start)), backend))
        t += step
    return out


def test_canary_flush_is_a_reset_and_failures_are_a_visible_gap() -> None:
    c = run_canary([(0, 3600, "a"), (10, 3590, "a"), (20, None, None)])
    assert c.unusable is Unusable.QUERY_FAILING and c.resets == 0  # the gap is visible
    assert not c.observe(3600, now=30, wall=1030, backend="a")  # flushed meanwhile
    assert c.resets == 0  # until confirmed:
    assert c.observe(3590, now=40, wall=1040, backend="a")  # it counts down
    # (mypy keeps `unusable` narrowed to QUERY_FAILING across the observe() calls)
    assert (c.resets, c.last_reset, c.unusable) == (1, 1030, None)  # type: ignore[comparison-overlap]


def test_canary_expiry_and_prefetch_are_not_resets() -> None:
    # 60 s record, scraped every 15 s: expires and is refetched 4 times in 5 minutes.
    answers = [a for k in range(5) for a in countdown(60 * k, 60, 60 * (k + 1))]
    assert run_canary(answers).resets == 0


def test_serve_expired_healthy_upstream_is_not_a_reset() -> None:
    """unbound serve-expired: at expiry one stale answer with TTL 30 (serve-expired-reply-
    ttl), then the refetched record. Counted as a reset once per canary lifetime before."""
    answers: list[tuple[float, int | None, str | None]] = []
    t = 0.0
    for _ in range(5):
        answers += countdown(t, 60, t + 60)  # 60, 45, 30, 15
        answers.append((t + 60, 30, "a"))  # stale while refetching
        t += 75
    c = run_canary(answers)
    assert c.resets == 0
    c.observe(60, now=t, wall=1000 + t, backend="a")  # fresh after the stale one
    c.observe(45, now=t + 15, wall=1000 + t + 15, backend="a")
    c.observe(60, now=t + 30, wall=1000 + t + 30, backend="a")  # then flushed: a reset
    c.observe(45, now=t + 45, wall=1000 + t + 45, backend="a")
    assert c.resets == 1


def test_serve_stale_with_upstream_down_is_unusable_not_a_loop() -> None:
    """Upstream down: every answer is stale with TTL 30. Before: a reset per scrape."""
    answers = countdown(0, 60, 60) + [(60 + 15 * k, 30, "a") for k in range(20)]
    c = run_canary(answers)
    assert c.resets == 0 and c.unusable is Unusable.TTL_STATIC


def test_static_ttl_stub_forwarder_is_unusable() -> None:
    """Knot Resolver policy.STUB: the authoritative TTL passed through, never counting."""
    c = run_canary([(15 * k, 300, None) for k in range(20)])
    assert c.resets == 0 and c.unusable is Unusable.TTL_STATIC


def test_ttl_shorter_than_the_scrape_interval_is_unusable() -> None:
    c = run_canary([(30 * k, 10, "a") for k in range(10)])
    assert c.resets == 0 and c.unusable is Unusable.TTL_BELOW_INTERVAL


def test_two_caches_behind_one_address_with_nsid() -> None:
    """dnsdist round-robin over two unbound: state per backend; a flush of one is seen
    and attributed to it."""
    a = countdown(0, 300, 200, step=20, backend="a")
    b = countdown(10, 300, 200, step=20, backend="b")
    answers = sorted(a + b)
    c = run_canary(answers, pool=True)
    assert c.resets == 0 and c.unusable is None
    c.observe(300, now=210, wall=1210, backend="b")  # b flushed
    c.observe(80, now=220, wall=1220, backend="a")  # a still counting down
    c.observe(280, now=230, wall=1230, backend="b")  # b counts down from its refetch
    assert c.resets == 1 and c.last_reset == 1210


def test_two_caches_without_identity() -> None:
    """SO_REUSEPORT pair, no NSID: TTLs of two caches interleave. Declared as a pool the
    canary is unusable from the start; undeclared, the TTL that counts down faster than time
    gives it away and the canary turns unusable (before: a false reset every few scrapes)."""
    a = countdown(0, 300, 280, step=40, backend=None)
    b = countdown(100, 300, 380, step=40, backend=None)
    answers = sorted(a + b)
    pool = run_canary(answers, pool=True)
    assert pool.resets == 0 and pool.unusable is Unusable.SEVERAL_CACHES
    single = run_canary(answers)
    assert single.resets <= 1 and single.unusable is Unusable.SEVERAL_CACHES


def test_record_kept_seconds_jumps_every_scrape_and_is_unusable() -> None:
    """Knot Resolver policy.STUB keeps a record ~6 s: every 15 s scrape sees it fresh
    again. Before: a reset per scrape."""
    answers: list[tuple[float, int | None, str | None]] = [
        (15.0 * k, 3600 - (15 * k) % 6, None) for k in range(20)
    ]
    c = run_canary(answers)
    assert c.resets == 0 and c.unusable is Unusable.TTL_STATIC


def test_restart_loop_is_still_counted() -> None:
    answers: list[tuple[float, int | None, str | None]] = []
    for k in range(4):  # restarted every 60 s, scraped every 15 s
        answers += countdown(60.0 * k, 300, 60.0 * (k + 1), backend="a")
    assert run_canary(answers).resets == 3


def test_authoritative_canary_counts_nothing() -> None:
    c = CanaryTracker()
    for k in range(5):
        assert not c.observe(60, now=15 * k, wall=15 * k, backend=None, authoritative=True)
    assert c.unusable is Unusable.AUTHORITATIVE


def test_observe_backend() -> None:
    st = _watch_state()
    for b in ("a", None, "a", "b", "b", "a"):
        ResolverWatch.observe_backend(st, b)
    assert (st.backend, st.backend_changes) == ("a", 2)


def test_probe_result_without_response_is_harmless() -> None:
    from dnsfleet.restarts import chaos_txt, nsid_of

    r = ProbeResult(success=False, reason=None, duration=0, rcode=-1, answer_rrs=0, detail="")
    assert nsid_of(r) is None and chaos_txt(r) is None


# ------------------------------------------------------------------ config


def _cfg(
    target_extra: dict[str, object],
    module_extra: dict[str, object] | None = None,
    top: dict[str, object] | None = None,
) -> object:
    return parse(
        {
            "modules": {"m": module_extra or {}},
            "targets": [{"address": "127.0.0.1:53", "module": "m", **target_extra}],
            **(top or {}),
        },
        source="t.yml",
    )


def test_config_valid() -> None:
    cfg = _cfg(
        {"stats": {"type": "unbound", "control": "unix:///run/unbound.ctl"}, "capacity_qps": 50000},
        {"canary": "canary.example.test", "canary_tolerance": "1s", "identity_query": "id.server."},
        {"resolver": {"capacity_file": "/tmp/cap.json"}},
    )
    t = cfg.targets[0]  # type: ignore[attr-defined]
    assert t.stats.control == "unix:///run/unbound.ctl" and t.capacity_qps == 50000
    m = cfg.modules["m"]  # type: ignore[attr-defined]
    assert (m.canary, m.canary_type, m.canary_tolerance, m.identity_query) == (
        "canary.example.test",
        "A",
        1.0,
        "id.server.",
    )
    assert cfg.resolver.capacity_file == "/tmp/cap.json"  # type: ignore[attr-defined]
    bind = _cfg({"stats": {"type": "bind", "url": "http://127.0.0.1:8053/"}})
    assert bind.targets[0].stats.url == "http://127.0.0.1:8053"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "target,module,message",
    [
        (
            {"stats": {"type": "knot"}},
            {},
            't.yml: targets[0].stats.type: "knot" is not one of: unbound, bind',
        ),
        (
            {"stats": {"type": "unbound"}},
            {},
            't.yml: targets[0].stats: missing required key "control"',
        ),
        (
            {"stats": {"type": "unbound", "control": "/run/unbound.ctl"}},
            {},
            't.yml: targets[0].stats.control: "/run/unbound.ctl": use unix:///path, '
            "tcp://host:port or tls://host:port",
        ),
        (
            {"stats": {"type": "unbound", "control": "tls://127.0.0.1:8953"}},
            {},
            "t.yml: targets[0].stats: tls:// control needs server_cert, client_cert and client_key "
            "(missing: server_cert, client_cert, client_key)",
        ),
        (
            {"stats": {"type": "unbound", "control": "unix:///x", "client_key": "/k"}},
            {},
            "t.yml: targets[0].stats.client_key: only meaningful with a tls:// control",
        ),
        (
            {"stats": {"type": "bind", "url": "127.0.0.1:8053"}},
            {},
            't.yml: targets[0].stats.url: "127.0.0.1:8053" is not an http:// or https:// URL',
        ),
        (
            {"stats": {"type": "bind", "url": "http://x", "control": "unix:///x"}},
            {},
            "t.yml: targets[0].stats.control: unknown key "
            "(valid keys: api_key, timeout, type, url)",
        ),
        ({"capacity_qps": 0}, {}, "t.yml: targets[0].capacity_qps: must be at least 1, got 0"),
        ({}, {"canary": "bad..name"}, 't.yml: modules.m.canary: invalid name "bad..name"'),
        (
            {},
            {"canary_tolerance": "1s"},
            "t.yml: modules.m.canary_tolerance: only meaningful with canary",
        ),
        (
            {},
            {"canary": "c.test", "canary_type": "NOPE"},
            't.yml: modules.m.canary_type: unknown query type "NOPE"',
        ),
    ],
)
def test_config_invalid(target: dict[str, object], module: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as e:
        _cfg(target, module)
    assert str(e.value).startswith(message), str(e.value)


def test_config_stats_once_per_address() -> None:
    with pytest.raises(ConfigError) as e:
        parse(
            {
                "modules": {"a": {}, "b": {}},
                "targets": [
                    {"address": "127.0.0.1", "module": "a", "capacity_qps": 10},
                    {"address": "127.0.0.1:53", "module": "b", "capacity_qps": 20},
                ],
            },
            source="t.yml",
        )
    assert str(e.value) == (
        't.yml: targets[1].capacity_qps: already set for "127.0.0.1:53" '
        "at targets[0] (set capacity_qps on one entry per address)"
    )


def test_unbound_without_extended_statistics_has_no_rcode_counts() -> None:
    text = (
        "time.now=1700000100.5\ntime.up=100.5\ntotal.num.queries=7\n"
        "total.num.cachehits=5\ntotal.num.cachemiss=2\ntotal.num.expired=3\n"
    )
    st = parse_unbound_stats(text)
    assert st.responses is None and st.stale_answers == 3 and st.start_time == 1700000000
    with_rcodes = parse_unbound_stats(text + "num.answer.rcode.SERVFAIL=4\n")
    assert dict(with_rcodes.responses or ())["SERVFAIL"] == 4


def test_stale_answer_seen_twice_within_a_second_stays_untrusted() -> None:
    """unbound serving stale (TTL 5) twice, 0.6 s apart, then the refetched record: the
    repeated stale TTL 'continues' no countdown and must not become a baseline."""
    answers = [
        *countdown(0, 10, 11, step=2),
        (12.0, 5, "a"),
        (12.6, 5, "a"),
        (14.6, 10, "a"),
        (16.6, 8, "a"),
        (18.6, 6, "a"),
    ]
    assert run_canary(answers).resets == 0


def test_a_run_failing_from_its_first_bucket_records_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A capacity of 0 would say the resolver can serve nothing: it says instead that the
    run started above what the resolver could answer (or that it stopped answering)."""
    from dnsfleet.capacity import command as capacity

    out = parse_resperf((FIX / "resperf_output.txt").read_text())

    def plot(*rows: tuple[float, float]) -> tuple[PlotPoint, ...]:
        """(sent, served) per bucket, on schedule."""
        return tuple(PlotPoint(0.5 * i, s, s, r, 0.0) for i, (s, r) in enumerate(rows, 1))

    def result(points: tuple[PlotPoint, ...], cap: PlotCapacity) -> capacity.RunResult:
        # resperf had the whole core while it sent (its CPU time equals the sending time).
        sending = 0.5 * len(points) + 0.5
        return capacity.RunResult(
            result=out,
            plot=cap,
            command=("resperf",),
            points=points,
            client_cpu_seconds=sending,
            wall_seconds=sending,
        )

    monkeypatch.setattr(
        capacity,
        "run_resperf",
        lambda **_: result(plot((100, 50), (200, 90), (300, 100)), PlotCapacity(0.0, 0.0, True)),
    )
    qf = QueryFile(path="/q", count=1, sha256="")
    with pytest.raises(RuntimeError, match="from the first bucket on"):
        capacity.measure(
            kind="miss",
            host="127.0.0.1",
            port=53,
            datafile="/q",
            queries=qf,
            max_qps=1000,
            ramp=2,
            max_loss=1.0,
        )
    monkeypatch.setattr(
        capacity,
        "run_resperf",
        lambda **_: result(
            plot((500, 500), (904.5, 900), (1500, 1000), (2000, 1000)),
            PlotCapacity(900.0, 0.5, True),
        ),
    )
    m = capacity.measure(
        kind="miss",
        host="127.0.0.1",
        port=53,
        datafile="/q",
        queries=qf,
        max_qps=1000,
        ramp=2,
        max_loss=1.0,
    )
    assert (m.capacity_qps, m.lower_bound, m.limit, m.resperf_max_qps) == (
        900.0,
        False,
        "loss",
        3750.0,
    )


# ------------------------------------------------------- restarts from the resolver's statistics


def reading(
    *,
    at: float,
    uptime: float | None = None,
    start: float | None = None,
    queries: int = 0,
    window: float = 0.01,
    clock: float = 1_800_000_000.0,
) -> StartReading:
    """A read taking ``window`` seconds that ended at monotonic time ``at``; this host's
    wall clock is ``clock`` + ``at`` unless stepped."""
    return StartReading(
        start_time=start,
        uptime=uptime,
        queries=queries,
        sent=at - window,
        received=at,
        wall=clock + at,
    )


def judge_all(readings: list[StartReading]) -> list[StartJudgement]:
    out: list[StartJudgement] = []
    prev: StartJudgement | None = None
    for r in readings:
        prev = judge_start(prev, r)
        out.append(prev)
    return out


def pdns_uptime(t: float, started: float) -> float:
    """PowerDNS Recursor and dnsdist: time(2) minus the start, both whole seconds."""
    return float(int(1_800_000_000 + t) - int(1_800_000_000 + started))


def test_first_reading_exports_its_estimate() -> None:
    (j,) = judge_all([reading(at=100.4, uptime=40)])
    assert (j.start_time, j.restarts) == (1_800_000_060.0, 0)
    (j,) = judge_all([reading(at=100.4, start=1_700_000_000.25)])
    assert (j.start_time, j.restarts) == (1_700_000_000.25, 0)
    (j,) = judge_all([reading(at=100.4, queries=7)])
    assert (j.start_time, j.restarts) == (None, 0)


def test_whole_second_uptime_does_not_move_the_start_time() -> None:
    """30 reads 0.77 s apart of a daemon started at t=3.5: now - uptime jitters by a second
    (what was exported before), the judged start time does not move."""
    times = [10 + 0.77 * k for k in range(30)]
    readings = [reading(at=t, uptime=pdns_uptime(t, 3.5)) for t in times]
    naive = [round(r.wall - (r.uptime or 0)) for r in readings]
    assert len(set(naive)) == 2  # the old jitter
    judged = judge_all(readings)
    assert {j.start_time for j in judged} == {judged[0].start_time}
    assert judged[-1].restarts == 0


def test_uptime_going_backwards_is_a_restart() -> None:
    started = 3.5
    readings = [reading(at=t, uptime=pdns_uptime(t, started)) for t in (20, 35, 50)]
    # restarted at 57: the next read at 65 sees an uptime of 8
    readings += [reading(at=t, uptime=pdns_uptime(t, 57)) for t in (65, 80, 95)]
    judged = judge_all(readings)
    assert [j.restarts for j in judged] == [0, 0, 0, 1, 1, 1]
    assert len({j.start_time for j in judged[:3]}) == 1
    assert judged[3].start_time == pytest.approx(1_800_000_057, abs=1)
    assert judged[3].start_time == judged[5].start_time


def test_a_step_of_this_hosts_clock_changes_nothing() -> None:
    """Elapsed time is monotonic; the wall clock only places a new start time."""
    first = reading(at=20, uptime=16.0)
    stepped = reading(at=35, uptime=31.0, clock=1_800_000_000 - 3600)
    j = judge_all([first, stepped])
    assert j[1].restarts == 0 and j[1].start_time == j[0].start_time


def test_a_step_of_the_resolvers_clock() -> None:
    """PowerDNS and dnsdist count uptime on their wall clock. Forward: ignored. Backward by
    more than the tolerance: reads as a restart (a documented blind spot)."""
    j = judge_all([reading(at=20, uptime=1000.0), reading(at=35, uptime=1000.0 + 15 + 3600)])
    assert j[1].restarts == 0 and j[1].start_time == j[0].start_time
    j = judge_all([reading(at=20, uptime=1000.0), reading(at=35, uptime=1000.0 + 15 - 30)])
    assert j[1].restarts == 1


def test_a_slow_read_is_no_restart() -> None:
    """The daemon read its clock somewhere within the request: a 3 s request ending 15 s
    after the last may show an uptime only 12 s higher."""
    j = judge_all([reading(at=20, uptime=100.0), reading(at=35, uptime=112.0, window=3.0)])
    assert j[1].restarts == 0
    j = judge_all([reading(at=20, uptime=100.0), reading(at=35, uptime=109.0, window=3.0)])
    assert j[1].restarts == 1


def test_two_restarts_between_scrapes_count_once() -> None:
    # restarted at 22 and again at 30; read at 20 and 35
    j = judge_all([reading(at=20, uptime=500.0), reading(at=35, uptime=pdns_uptime(35, 30))])
    assert j[1].restarts == 1


def test_process_replaced_in_its_first_seconds_is_a_blind_spot() -> None:
    """The read at 20 caught a process 1 s old; it was replaced at 21, and the read at 35
    sees 14 s of uptime, 1 s short of the 15 that passed: within granularity and tolerance,
    indistinguishable from the same process."""
    j = judge_all([reading(at=20, uptime=1.0), reading(at=35, uptime=14.0)])
    assert j[1].restarts == 0


def test_stated_start_time_jitter_and_restart() -> None:
    """CoreDNS's process_start_time_seconds adds btime, which moves by a second now and
    then: no restart. Forward by more than the tolerance: a restart. Backward: kept."""
    j = judge_all(
        [
            reading(at=20, start=1_700_000_000.5),
            reading(at=35, start=1_700_000_001.5),
            reading(at=50, start=1_700_000_000.5),
            reading(at=65, start=1_700_000_060.0),
            reading(at=80, start=1_700_000_030.0),
        ]
    )
    assert [x.restarts for x in j] == [0, 0, 0, 1, 1]
    assert [x.start_time for x in j] == [1_700_000_000.5] * 3 + [1_700_000_060.0] * 2


def test_without_start_or_uptime_a_counter_going_backwards_is_a_restart() -> None:
    j = judge_all(
        [reading(at=20, queries=500), reading(at=35, queries=520), reading(at=50, queries=3)]
    )
    assert [x.restarts for x in j] == [0, 0, 1]
    assert all(x.start_time is None for x in j)


def test_stats_families_export_the_judged_start_and_restarts() -> None:
    st = parse_resolver_metrics(
        "pdns-recursor", (FIX / "pdns-recursor-4.8.metrics.txt").read_text()
    )
    j = judge_start(None, reading(at=20, uptime=st.uptime))
    text = render(
        stats_families([(Labels({"target": "t"}), st, j), (Labels({"target": "u"}), None, None)])
    )
    assert f'dnsfleet_resolver_start_time_seconds{{target="t"}} {j.start_time:.0f}' in text
    assert 'dnsfleet_resolver_restarts_total{target="t"} 0' in text
    assert 'target="u"' in text and 'restarts_total{target="u"}' not in text


def test_process_joining_a_single_backend_target_is_no_reset() -> None:
    """A second SO_REUSEPORT process joins a `backends: single` target with no NSID: its
    cold cache answers the canary with the full TTL, and each fresh socket lands on either
    process. Before: a jump answered by the newcomer and a countdown from it at the next
    scrape counted a reset before the old cache ever answered again (half the joins, in
    tests/test_canary_real.py). Now the jump is checked at once with a burst of queries,
    one of which the old cache answers: no reset, the canary says `several_caches`."""
    old_cache = countdown(0, 3600, 60, step=15)  # 3600, 3585, 3570, 3555
    joined: list[tuple[float, int | None, str | None]] = [(60.0, 3600, "a"), (75.0, 3585, "a")]
    before = run_canary(old_cache + joined)
    assert before.resets == 1  # the mechanism: counted without a verification

    c = run_canary(old_cache)
    c.observe(3600, now=60, wall=1060, backend="a")
    assert c.candidate == "a"
    for ttl in (3600, 3600, 3540, 3600):  # the burst: the old cache answers one (3600-60)
        c.verify(ttl, now=60.01, backend="a")
    assert c.unusable is Unusable.SEVERAL_CACHES
    c.observe(3585, now=75, wall=1075, backend="a")
    assert c.resets == 0 and c.unusable is Unusable.SEVERAL_CACHES


def test_a_flush_survives_the_verification_burst() -> None:
    c = run_canary(countdown(0, 3600, 60, step=15))
    c.observe(3600, now=60, wall=1060, backend="a")  # flushed: refetched at full TTL
    for ttl in (3600, 3600, 3599, 3600, 3600, 3600, 3600, 3599):
        c.verify(ttl, now=60.6, backend="a")
    assert c.unusable is None
    assert c.observe(3585, now=75, wall=1075, backend="a")
    assert (c.resets, c.last_reset) == (1, 1060)


def test_verification_answers_of_another_backend_are_its_own() -> None:
    """On a pool with NSID each backend is its own cache: b's countdown in a's burst is
    not a second cache of a."""
    c = run_canary(countdown(0, 3600, 60, step=15), pool=True)
    c.observe(3600, now=60, wall=1060, backend="a")
    c.verify(1200, now=60.01, backend="b")
    assert c.unusable is None
    assert c.observe(3585, now=75, wall=1075, backend="a") and c.resets == 1
