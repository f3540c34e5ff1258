"""The cheaper ways of a /metrics cycle give what the plain ways gave: what is worked out
once per configuration rather than every scrape, the status page's canary readings, the
gzip body compressed piece by piece, the host lane's thread kept between scrapes; and the
exporter's garbage-collector setting."""

from __future__ import annotations

import asyncio
import functools
import gc
import gzip
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dnsfleet import malloc
from dnsfleet.capacity.model import Measurement, QueryFile, State, format_state
from dnsfleet.collectors.base import CollectContext, Findings, HostLane
from dnsfleet.collectors.resolver_capacity import (
    COLLECTOR,
    CapacityFigure,
    capacity_families,
    capacity_figures,
)
from dnsfleet.config import Config, parse
from dnsfleet.dnswire import Response
from dnsfleet.exposition import (
    GZIP_SLICE,
    Family,
    TextFamily,
    gzip_parts,
    openmetrics_parts,
    render,
    render_bytes,
    render_openmetrics_bytes,
    text_parts,
)
from dnsfleet.hostfs import HostFS
from dnsfleet.probes import ProbeResult
from dnsfleet.restarts import ResolverWatch, canary_readings
from dnsfleet.status.facts import PageFacts

pytestmark = pytest.mark.unit


def _m(kind: str, qps: float) -> Measurement:
    return Measurement(
        kind=kind,
        capacity_qps=qps,
        lower_bound=False,
        limit="loss",
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


def _config(capacity_file: Path, *, declared: dict[str, float]) -> Config:
    targets: list[dict[str, object]] = []
    for i in range(1, 7):
        address = f"10.0.0.{i}"
        t: dict[str, object] = {"address": address, "module": "m", "labels": {"n": str(i)}}
        if address in declared:
            t["capacity_qps"] = declared[address]
        targets.append(t)
    # A second entry for one resolver: the first entry names it.
    targets.append({"address": "10.0.0.5", "module": "n"})
    return parse(
        {
            "modules": {"m": {"query_name": "a.test"}, "n": {"query_name": "b.test"}},
            "targets": targets,
            "resolver": {"capacity_file": str(capacity_file)},
        },
        source="t.yml",
    )


def _collect(ctx: CollectContext) -> tuple[str, list[CapacityFigure]]:
    async def run() -> list[Family]:
        return await COLLECTOR.run(ctx)

    fams = asyncio.run(run())
    return render(fams), ctx.findings.of(CapacityFigure)


@pytest.mark.parametrize(
    "measured",
    [
        {},
        {"10.0.0.4:53": {"hit": _m("hit", 900)}, "10.0.0.1:53": {"miss": _m("miss", 300)}},
    ],
)
def test_capacity_collector_as_computed_every_scrape(tmp_path: Path, measured: State) -> None:
    state_file = tmp_path / "capacity.json"
    if measured:
        state_file.write_text(format_state(measured))
    configs = [
        _config(state_file, declared={"10.0.0.2": 400, "10.0.0.6": 50}),
        _config(state_file, declared={"10.0.0.3": 70}),  # a reload: the figures follow it
    ]
    state: dict[str, object] = {}
    for cfg in [*configs, configs[0]]:
        for _ in range(2):  # the second scrape of a configuration uses what the first kept
            ctx = CollectContext(fs=HostFS(), config=cfg, deadline=1e12, state=state)
            text, figures = _collect(ctx)
            assert text == render(capacity_families(cfg, measured))
            assert figures == capacity_figures(cfg, measured)
            assert text  # something to compare: declared figures in every config


@pytest.fixture
def gc_threshold() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.set_threshold(*before)


def test_tune_gc_raises_the_young_threshold_only(gc_threshold: None) -> None:
    gc.set_threshold(700, 10, 10)
    malloc.tune_gc()
    assert gc.get_threshold() == (malloc.GC_YOUNG_THRESHOLD, 10, 10)


def test_canary_readings_only_of_targets_with_something_to_say() -> None:
    cfg = parse(
        {
            "modules": {
                "plain": {"query_name": "a.test"},
                "watched": {"query_name": "a.test", "canary": "canary.test"},
            },
            "targets": [
                {"address": "10.0.0.1", "module": "plain"},
                {"address": "10.0.0.2", "module": "plain"},
                {"address": "10.0.0.3", "module": "watched"},
            ],
        },
        source="t.yml",
    )
    watch = ResolverWatch()
    watch.configure(cfg)
    watch.states[("10.0.0.2", "plain")].backend = "ns2"
    readings = canary_readings(watch)
    assert [(r.address, r.module, r.backend) for r in readings] == [
        ("10.0.0.2", "plain", "ns2"),
        ("10.0.0.3", "watched", None),
    ]
    # What the status page keeps of them: the silent target's reading was Nones only.
    facts = PageFacts.of(Findings(), readings, wall=1.0, duration=0.1)
    assert set(facts.canaries) == {("10.0.0.2", "plain")}
    assert set(facts.cache_resets) == {("10.0.0.3", "watched")}


def _families() -> list[Family | TextFamily]:
    big = "".join(
        f'dnsfleet_x{{target="10.0.{i // 250}.{i % 250}",site="zürich"}} {i}\n' for i in range(9000)
    )
    return [
        Family("dnsfleet_a", "A gauge.").add(1.5, {"target": 'é\\\n"'}),
        Family("dnsfleet_empty", "Nothing."),
        TextFamily("dnsfleet_x", "Pre-rendered, several slices long.", "gauge", big),
        Family("dnsfleet_b_total", "A counter.", "counter").add(3),
    ]


def test_gzip_parts_is_the_rendered_body_compressed() -> None:
    fams = _families()
    assert len(fams[2].samples) > 2 * GZIP_SLICE
    text = gzip_parts(text_parts(fams))
    assert text[:2] == b"\x1f\x8b"  # a gzip member, as Content-Encoding: gzip says
    assert gzip.decompress(text) == render_bytes(fams) == render(fams).encode()
    om = gzip.decompress(gzip_parts(openmetrics_parts(fams)))
    assert om == render_openmetrics_bytes(fams)
    assert om.endswith(b"# EOF\n") and b"# TYPE dnsfleet_b counter\n" in om


def _answer(nsid: bytes | None) -> ProbeResult:
    resp = Response(
        id=1,
        flags=0x8180,
        rcode=0,
        answer_rrs=1,
        matching_answers=1,
        min_ttl=60,
        nsid=nsid,
        wire=b"",
    )
    return ProbeResult(True, None, 0.001, 0, 1, "ok", response=resp)


def test_after_plain_probe_is_after_probe_without_queries() -> None:
    """The batch's bookkeeping of a module without canary or identity query: the backend
    identity from the probe's own NSID, its changes counted, as after_probe does."""
    cfg = parse(
        {
            "modules": {"m": {"query_name": "a.test"}},
            "targets": [{"address": "127.0.0.1", "module": "m"}],
        },
        source="t.yml",
    )
    target, module = cfg.targets[0], cfg.modules["m"]
    awaited, plain = ResolverWatch(), ResolverWatch()
    awaited.configure(cfg)
    plain.configure(cfg)
    for nsid in (b"ns-a", None, b"ns-a", b"", b"ns-b", None):
        result = _answer(nsid)
        asyncio.run(awaited.after_probe(target, module, result, deadline=0.0))
        plain.after_plain_probe(target, result)
        key = (target.address, target.module)
        got, want = plain.states[key], awaited.states[key]
        assert (got.backend, got.backend_changes) == (want.backend, want.backend_changes)
    assert (got.backend, got.backend_changes) == ("ns-b", 1)


def test_host_lane_keeps_its_thread_between_scrapes() -> None:
    """One thread serves scrape after scrape; an idle one ends, and the next job gets one."""
    lane = HostLane(idle=60.0)
    for i in range(5):  # one scrape's jobs, then the next scrape's
        assert lane.submit(functools.partial(abs, i)).result(timeout=30) == i
    assert lane.threads_started == 1
    short = HostLane(idle=0.01)
    assert short.submit(lambda: 1).result(timeout=30) == 1
    for _ in range(3000):  # up to 30 s on a loaded machine
        if short._worker is None:
            break
        time.sleep(0.01)
    assert short._worker is None
    assert short.submit(lambda: 2).result(timeout=30) == 2
    assert short.threads_started == 2
