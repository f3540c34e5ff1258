"""The restart judgement (restarts.judge_start) against the real daemons, all on loopback at
once: PowerDNS Recursor, dnsdist, unbound, BIND, and Knot Resolver with and without the
`process_start_time_seconds` line of docs/configuration.md. Thirty scrapes of the untouched
daemons must move no exported start time; one restart of each must move it exactly once and
count one restart.

The same reads are replayed through the previous model (now minus uptime, rounded: what the
exporter exported before) to show the false restarts it gave: PowerDNS Recursor and dnsdist
count uptime in whole seconds, so that start time moved every half second. Run with `-s` for
the figures."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, cast

import pytest
import yaml

from dnsfleet.app import Exporter
from dnsfleet.collectors.resolver import STATE_KEY
from dnsfleet.hostfs import HostFS
from dnsfleet.restarts import StartJudgement
from tests.harness.metrics import matching, samples
from tests.harness.resolverfamilies import Dnsdist, Kresd, PdnsRecursor
from tests.harness.servers import Named, Unbound

pytestmark = pytest.mark.integration

SCRAPES = 30
GAP = 0.25  # seconds between scrapes: the old start time flipped every half second


@dataclass
class Watched:
    """A daemon under test (any harness daemon), its name and its statistics config."""

    name: str
    thing: Any  # a harness daemon with start() and stop()
    stats: dict[str, str]

    @property
    def address(self) -> str:
        return str(self.thing.address)


def in_parallel(calls: list[Callable[[], object]]) -> None:
    errors: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as e:  # re-raised below, in the test's thread
            errors.append(e)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


@pytest.fixture
def daemons(tmp_path: Path, named: Named) -> Iterator[list[Watched]]:
    upstream = {"example.test.": f"127.0.0.1@{named.port}"}
    bind = Named(tmp_path / "bind", zones={"own.test": "www IN A 192.0.2.1\n"})
    unbound = Unbound(tmp_path / "unbound", stubs=upstream)
    pdns = PdnsRecursor(tmp_path / "pdns", forwards={"example.test": named.address})
    kresd = Kresd(tmp_path / "kresd", upstream=f"127.0.0.1@{named.port}", start_time_metric=True)
    bare = Kresd(tmp_path / "kresd-bare", upstream=f"127.0.0.1@{named.port}")
    backend = Unbound(tmp_path / "backend", stubs=upstream)
    first: list[Any] = [bind, unbound, pdns, kresd, bare, backend]
    dnsdist = Dnsdist(tmp_path / "dnsdist", backends={"b1": backend.address})
    started: list[Any] = []
    try:
        in_parallel([t.start for t in first])
        started += first
        dnsdist.start()
        started.append(dnsdist)
        yield [
            Watched(
                "pdns-recursor",
                pdns,
                {"type": "pdns-recursor", "url": pdns.metrics_url, "api_key": pdns.api_key},
            ),
            Watched("dnsdist", dnsdist, {"type": "dnsdist", "url": dnsdist.metrics_url}),
            Watched(
                "unbound",
                unbound,
                {"type": "unbound", "control": f"unix://{unbound.control_socket}"},
            ),
            Watched("bind", bind, {"type": "bind", "url": bind.stats_url}),
            Watched("kresd", kresd, {"type": "knot-resolver", "url": kresd.metrics_url}),
            Watched("kresd-bare", bare, {"type": "knot-resolver", "url": bare.metrics_url}),
        ]
    finally:
        for thing in reversed(started):
            thing.stop()


def exporter(tmp_path: Path, fleet: list[Watched]) -> Exporter:
    path = tmp_path / "dnsfleet.yml"
    path.write_text(
        yaml.safe_dump(
            {
                "resolv_conf": [],
                "modules": {
                    "m": {"query_name": "www.example.test", "query_type": "A", "timeout": "1s"}
                },
                "targets": [
                    {
                        "address": d.address,
                        "module": "m",
                        "labels": {"site": "lab"},
                        "stats": d.stats,
                    }
                    for d in fleet
                ],
            }
        )
    )
    return Exporter(fs=HostFS(), config_file=str(path))


@dataclass
class Seen:
    exported: list[float | None]  # dnsfleet_resolver_start_time_seconds per scrape
    previous: list[float | None]  # what the previous model would have exported
    read: list[bool]  # the statistics were read in this scrape
    restarts: float | None = None  # dnsfleet_resolver_restarts_total at the end


def moves(values: list[float | None]) -> int:
    known = [v for v in values if v is not None]
    return sum(1 for a, b in pairwise(known) if a != b)


def scrape_into(exp: Exporter, fleet: list[Watched], seen: dict[str, Seen]) -> None:
    s = samples(asyncio.run(exp.scrape(8.0)).decode())
    state = cast(dict[Any, StartJudgement], exp.collector_state[STATE_KEY])
    last = {addr: j.last for (addr, _), j in state.items()}
    for d in fleet:
        got = matching(s, "dnsfleet_resolver_start_time_seconds", target=d.address)
        entry = seen.setdefault(d.name, Seen([], [], []))
        entry.read.append(matching(s, "dnsfleet_resolver_stats_up", target=d.address) == 1)
        entry.exported.append(None if got is None else float(got))
        r = last.get(d.address)
        if r is None:
            entry.previous.append(None)
        elif r.uptime is not None:  # before: round(now - uptime) at every scrape
            entry.previous.append(float(round(r.wall - r.uptime)))
        else:
            entry.previous.append(r.start_time)
        restarts = matching(s, "dnsfleet_resolver_restarts_total", target=d.address)
        entry.restarts = None if restarts is None else float(restarts)


def test_start_time_moves_only_on_a_restart(tmp_path: Path, daemons: list[Watched]) -> None:
    exp = exporter(tmp_path, daemons)
    untouched: dict[str, Seen] = {}
    for i in range(SCRAPES):
        scrape_into(exp, daemons, untouched)
        if i < SCRAPES - 1:
            time.sleep(GAP)
    for d in daemons:
        seen = untouched[d.name]
        assert all(seen.read), (d.name, seen)
        assert moves(seen.exported) == 0, (d.name, seen.exported)
        assert seen.restarts == 0, d.name
    assert untouched["kresd-bare"].exported == [None] * SCRAPES  # nothing made up
    # The reads that moved the previous model's start time (the false restarts it paged on).
    before = {name: moves(seen.previous) for name, seen in untouched.items()}
    assert before["pdns-recursor"] > 0 and before["dnsdist"] > 0, before

    def restart(d: Watched) -> Callable[[], object]:
        return lambda: (d.thing.stop(), d.thing.start())

    in_parallel([restart(d) for d in daemons])
    after: dict[str, Seen] = {}
    for _ in range(5):
        time.sleep(GAP)
        scrape_into(exp, daemons, after)
    for d in daemons:
        exported = untouched[d.name].exported + after[d.name].exported
        assert after[d.name].restarts == 1, (d.name, after[d.name])
        if d.name == "kresd-bare":
            assert all(v is None for v in exported)  # seen by its query counter only
            continue
        assert moves(exported) == 1, (d.name, exported)
    print(f"\nstart-time moves in {SCRAPES} scrapes of untouched daemons, {GAP}s apart:")
    for name, seen in untouched.items():
        print(
            f"  {name:14s} previous model {moves(seen.previous):2d}, now "
            f"{moves(seen.exported)}; after one restart: now "
            f"{moves(seen.exported + after[name].exported)} move(s), "
            f"restarts_total {after[name].restarts:.0f}"
        )
