"""The fleet-scale figures in one run, side by side with blackbox_exporter (Debian), dns_exporter
(PyPI, when installed) and two floors, all against one loopback unbound:

1. series per target, counted in a real ``/metrics`` scrape of the 1,000-target dnsfleet
   (bench/series.py): per-target families' series over the targets, and one default UDP
   target's series by family (classic histograms, and as native histograms would count);
2. CPU per ``/metrics`` scrape (one probe-and-collect cycle) of a dnsfleet configured with
   1,000 and one with 10,000 targets (``--sizes``): sequential scrapes on one keep-alive
   connection with Prometheus' headers (gzip, the timeout header) for ``--seconds``, the
   exporter's utime + stime over complete scrapes divided by the cycles
   ``dnsfleet_scrapes_total`` counted; against blackbox_exporter's CPU for as many
   ``/probe`` requests to distinct targets, from the same round; RSS of each after;
3. ``/probe`` CPU per request, ``wrk -t1 -c8`` (keep-alive) for ``--seconds`` per exporter,
   alternating which goes first: at 1 target, and at ``--distinct`` targets (a wrk Lua
   script cycles ``target=`` through as many loopback addresses); dns_exporter once, each
   of its windows next to one of dnsfleet's;
4. the floors, CPU per answered query: dnsperf and a bare Python socket loop
   (bench/floors.py);
5. a summary: min-median-max over ``--rounds``, the targets, met or missed on the median.
   Noise never fails the run; only a broken measurement does (a non-2xx answer, a failed
   probe, a peer that does not start).

The targets are 10,000 loopback addresses (127.0.1.1 ...) that one unbound answers on one
socket (bench/fleet.py). Absolute times on a shared 2-core machine move with its load: the
ratios within one round are the result.

    make bench                                  # installs the peers, wrk and dnsperf
    make bench ARGS="--rounds 5 --seconds 10"
    PYTHONPATH=. .venv/bin/python bench/bench_probe.py --rounds 1 --seconds 3 --sizes 1000
"""

from __future__ import annotations

import argparse
import http.client
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from bench import floors
from bench.common import PROMETHEUS_HEADERS, cpu_seconds, mmm, rss_bytes, target_addresses
from bench.fleet import Lab, Peer
from bench.series import count_series, series_table

SERIES_TARGET = 20  # series per default UDP target
SCRAPE_TARGET = 0.10  # an N-target cycle / blackbox's CPU for N /probe requests
PROBE_TARGET = 0.15  # dnsfleet / blackbox CPU per /probe
BB = "blackbox_exporter"
MAX_TARGETS = 255 * 250  # the addresses target_addresses has in 127.0.0.0/16


def scrape_window(fleet: Peer, *, seconds: float) -> tuple[float, int]:
    """Sequential scrapes for about ``seconds`` (at least two, at most 1,000); the exporter's
    CPU per cycle. Only whole scrapes are inside the CPU window: a wrk window's end would cut
    one 10,000-target cycle in half."""
    headers = dict(h.split(": ", 1) for h in PROMETHEUS_HEADERS[1::2])
    conn = http.client.HTTPConnection(fleet.base.removeprefix("http://"), timeout=60)
    s0 = scrapes_total(fleet)
    cpu0 = cpu_seconds(fleet.pid)
    t0 = time.monotonic()
    n = 0
    while n < 2 or (time.monotonic() - t0 < seconds and n < 1000):
        conn.request("GET", "/metrics", headers=headers)
        resp = conn.getresponse()
        resp.read()
        if resp.status != 200:
            raise RuntimeError(f"{fleet.name} /metrics answered {resp.status}")
        n += 1
    cpu = cpu_seconds(fleet.pid) - cpu0
    conn.close()
    cycles = scrapes_total(fleet) - 1 - s0  # the reading scrape is not counted
    return cpu / max(cycles, 1), cycles


def scrapes_total(fleet: Peer) -> int:
    """The cycles ``fleet`` counted, read from a scrape of its own; a probe that failed in
    that scrape is said (the cycles measured just before did the same work)."""
    conn = http.client.HTTPConnection(fleet.base.removeprefix("http://"), timeout=60)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read().decode()
    conn.close()
    m = re.search(r"^dnsfleet_scrapes_total (\d+)", body, re.M)
    if m is None:
        raise RuntimeError(f"{fleet.name} has no dnsfleet_scrapes_total")
    failed = len(re.findall(r"^dnsfleet_probe_success\{[^}]*\} 0$", body, re.M))
    if failed:
        print(f"  ({fleet.name}: {failed} probes failed in a scrape after the window)")
    return int(m.group(1))


class Rounds:
    """Every figure of every round, by name; the lists are what the summary spreads."""

    def __init__(self) -> None:
        self.v: defaultdict[str, list[float]] = defaultdict(list)

    def add(self, key: str, value: float) -> float:
        self.v[key].append(value)
        return value


def probe_round(lab: Lab, rounds: Rounds, r: int, *, seconds: int) -> None:
    """dnsfleet and blackbox_exporter, adjacent windows, the first of the pair alternating."""
    pair = [lab.peers["dnsfleet"], lab.peers[BB]]
    order = pair if r % 2 == 0 else pair[::-1]
    for kind, distinct in (("1", False), ("distinct", True)):
        got = {p.name: lab.probe_window(p, distinct=distinct, seconds=seconds) for p in order}
        d = rounds.add(f"probe {kind} dnsfleet", got["dnsfleet"].cpu_per_request)
        b = rounds.add(f"probe {kind} {BB}", got[BB].cpu_per_request)
        rounds.add(f"probe {kind} ratio", d / b)


def run_round(lab: Lab, rounds: Rounds, r: int, args: argparse.Namespace) -> str:
    probe_round(lab, rounds, r, seconds=args.seconds)
    row = f"{r + 1:<6}"
    for kind in ("1", "distinct"):
        row += f"{rounds.v[f'probe {kind} dnsfleet'][-1] * 1e6:>10.0f}"
        row += f"{rounds.v[f'probe {kind} {BB}'][-1] * 1e6:>10.0f}"
        row += f"{rounds.v[f'probe {kind} ratio'][-1]:>7.2f}"
    bb = rounds.v[f"probe distinct {BB}"][-1]
    for n, fleet in lab.fleets.items():
        cycle, cycles = scrape_window(fleet, seconds=args.seconds)
        rounds.add(f"cycle {n}", cycle)
        rounds.add(f"cycle {n} per target", cycle / n)
        rounds.add(f"scrape {n} ratio", cycle / (bb * n))
        rounds.add(f"rss {n}", rss_bytes(fleet.pid) / 2**20)
        row += f"{cycle * 1000:>10.1f}{cycles:>5}{cycle / (bb * n):>7.2f}"
    perf = floors.dnsperf(lab.work, lab.port, seconds=args.floor_seconds)
    loop = floors.socket_loop(
        target_addresses(lab.distinct),
        lab.port,
        queries=args.floor_queries,
        seconds=args.floor_seconds * 5,
    )
    rounds.add("dnsperf", perf.cpu_per_query)
    rounds.add("loop", loop.cpu_per_query)
    return row + f"{perf.cpu_per_query * 1e6:>10.1f}{loop.cpu_per_query * 1e6:>10.1f}"


def dns_exporter_once(lab: Lab, rounds: Rounds, *, seconds: int) -> None:
    """dns_exporter at 1 and at ``distinct`` targets, each window next to dnsfleet's."""
    for kind, distinct in (("1", False), ("distinct", True)):
        for p in (lab.peers["dns_exporter"], lab.peers["dnsfleet"]):
            w = lab.probe_window(p, distinct=distinct, seconds=seconds)
            rounds.add(f"dnsx {kind} {p.name}", w.cpu_per_request)


def header(lab: Lab) -> str:
    """Two lines: what each group of columns measured, then the columns."""
    groups = f"{'':<6}{'/probe, 1 target':<27}{f'/probe, {lab.distinct:,} distinct':<27}"
    cols = f"{'round':<6}" + f"{'dnsfleet':>10}{'blackbox':>10}{'ratio':>7}" * 2
    for n in lab.fleets:
        groups += f"{f'/metrics, {n:,}':<22}"
        cols += f"{'cycle ms':>10}{'cyc':>5}{'ratio':>7}"
    groups += "floors, µs per query"
    return groups + "\n" + cols + f"{'dnsperf':>10}{'py loop':>10}"


def verdict(value: float, target: float) -> str:
    return "met" if value <= target else "missed"


def summary(lab: Lab, rounds: Rounds, series: tuple[int, int]) -> list[str]:
    """One row per target of the issue: the figure, the target, met or missed. The series
    are one scrape's count (they do not move between rounds); the ratios are spread."""
    v = rounds.v
    rows: list[tuple[str, list[float], float]] = [
        ("series of one default UDP target, text exposition", [series[0]], SERIES_TARGET),
        ("series of one default UDP target, native histograms", [series[1]], SERIES_TARGET),
    ]
    rows += [
        (
            f"/metrics cycle, {n:,} targets / {n:,} blackbox /probe",
            v[f"scrape {n} ratio"],
            SCRAPE_TARGET,
        )
        for n in lab.fleets
    ]
    rows.append(("/probe CPU, dnsfleet / blackbox, 1 target", v["probe 1 ratio"], PROBE_TARGET))
    rows.append(
        (
            f"/probe CPU, dnsfleet / blackbox, {lab.distinct:,} distinct",
            v["probe distinct ratio"],
            PROBE_TARGET,
        )
    )
    n = len(v["probe 1 ratio"])
    out = [f"\nsummary: min-median-max over {n} rounds; met or missed on the median"]
    out.append(f"  {'':<56}{'figure':>18}{'target':>9}  verdict")
    for name, values, target in rows:
        figure = f"{values[0]:g}" if len(values) == 1 and name.startswith("series") else mmm(values)
        med = statistics.median(values)
        out.append(f"  {name:<56}{figure:>18}{f'<= {target:g}':>9}  {verdict(med, target)}")
    return out


def floor_table(lab: Lab, rounds: Rounds) -> list[str]:
    """Every exporter's CPU per probe beside the floors' CPU per query."""
    v = rounds.v
    k = f"{lab.distinct:,}"
    rows = [
        ("dnsfleet /probe, 1 target", v["probe 1 dnsfleet"]),
        (f"dnsfleet /probe, {k} distinct", v["probe distinct dnsfleet"]),
        ("blackbox_exporter /probe, 1 target", v[f"probe 1 {BB}"]),
        (f"blackbox_exporter /probe, {k} distinct", v[f"probe distinct {BB}"]),
    ]
    if "dnsx 1 dns_exporter" in v:
        rows.append(("dns_exporter /probe, 1 target (one round)", v["dnsx 1 dns_exporter"]))
        rows.append(
            (f"dns_exporter /probe, {k} distinct (one round)", v["dnsx distinct dns_exporter"])
        )
    rows += [
        (f"dnsfleet /metrics, per target of {n:,}", v[f"cycle {n} per target"]) for n in lab.fleets
    ]
    rows += [("floor: dnsperf, per answered query", v["dnsperf"])]
    rows += [("floor: bare Python socket loop, per query", v["loop"])]
    perf, loop = statistics.median(v["dnsperf"]), statistics.median(v["loop"])
    out = ["\nCPU per probe or query, µs (min-median-max), and the median over each floor"]
    out.append(f"  {'':<50}{'µs':>20}{'x dnsperf':>11}{'x py loop':>11}")
    for name, values in rows:
        us = [x * 1e6 for x in values]
        med = statistics.median(values)
        out.append(f"  {name:<50}{mmm(us, '.1f'):>20}{med / perf:>11.1f}{med / loop:>11.2f}")
    if "dnsx 1 dns_exporter" in v:
        for kind, what in (("1", "1 target"), ("distinct", f"{k} distinct")):
            ours, theirs = v[f"dnsx {kind} dnsfleet"][0], v[f"dnsx {kind} dns_exporter"][0]
            out.append(f"  dnsfleet / dns_exporter, {what}, adjacent windows: {ours / theirs:.3f}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--seconds", type=int, default=6, help="seconds per window (default 6)")
    ap.add_argument(
        "--sizes", default="1000,10000", help="fleet sizes scraped (default 1000,10000)"
    )
    ap.add_argument("--distinct", type=int, default=10000, help="distinct /probe targets")
    ap.add_argument("--floor-seconds", type=int, default=2, help="dnsperf seconds per round")
    ap.add_argument(
        "--floor-queries", type=int, default=10000, help="Python loop queries per round"
    )
    ap.add_argument(
        "--dns-exporter",
        default=str(Path(".venv-bench/bin/dns_exporter")),
        help="dns_exporter binary (make bench installs it in .venv-bench)",
    )
    ap.add_argument(
        "--event-loop", default="auto", help="dnsfleet's --event-loop (default auto: uvloop)"
    )
    args = ap.parse_args()
    for tool in ("wrk", "dnsperf"):
        if not shutil.which(tool):
            print(f"{tool} is not installed (make bench installs it)", file=sys.stderr)
            return 1
    sizes = tuple(int(n) for n in args.sizes.split(","))
    if not 0 < min(*sizes, args.distinct) <= max(*sizes, args.distinct) <= MAX_TARGETS:
        ap.error(f"targets from 1 to {MAX_TARGETS:,} (127.0.1.1 to 127.0.255.250)")
    work = Path(tempfile.mkdtemp(prefix="dnsfleet-bench-"))
    lab = Lab(work, sizes, args.distinct, event_loop=args.event_loop)
    rounds = Rounds()
    started = time.monotonic()
    try:
        lab.start(Path(args.dns_exporter))
        sample = lab.target(target_addresses(1)[0])
        text = http_get(lab.fleets[sizes[0]].base + "/metrics")
        count = count_series(text, sample)
        print("\n".join(series_table(count, sample)))
        warm_up(lab)
        print(
            f"\n/probe: wrk -t1 -c8, {args.seconds} s per exporter and window, at 1 target and "
            f"cycling through {args.distinct:,}; /metrics: sequential scrapes with Prometheus' "
            f"headers for {args.seconds} s per fleet; unbound on 127.0.0.1:{lab.port} "
            "answering every 127.0.x.y\n"
            "CPU in µs per /probe, ms per cycle (cyc: cycles measured); ratios against "
            f"blackbox (the scrape's: its CPU per /probe to {args.distinct:,} distinct targets, "
            "times the fleet size); floors in µs per query"
        )
        print(header(lab))
        for r in range(args.rounds):
            print(run_round(lab, rounds, r, args), flush=True)
        if "dns_exporter" in lab.peers:
            dns_exporter_once(lab, rounds, seconds=args.seconds)
    finally:
        lab.stop()
    for n in sizes:
        print(f"RSS after the scrapes, {n:,} targets: {mmm(rounds.v[f'rss {n}'], '.1f')} MB")
    print("\n".join(floor_table(lab, rounds)))
    series = (sum(count.one.values()), sum(count.one_native.values()))
    print("\n".join(summary(lab, rounds, series)))
    print(f"\n(whole run {time.monotonic() - started:.0f} s)")
    return 0


def http_get(url: str) -> str:
    host, _, path = url.removeprefix("http://").partition("/")
    conn = http.client.HTTPConnection(host, timeout=60)
    conn.request("GET", "/" + path)
    body = conn.getresponse().read().decode()
    conn.close()
    return body


def warm_up(lab: Lab) -> None:
    """Caches, Go's runtime, sockets: two seconds of each /probe kind per exporter, one
    scrape of each fleet."""
    for p in lab.peers.values():
        for distinct in (False, True):
            lab.probe_window(p, distinct=distinct, seconds=2)
    for fleet in lab.fleets.values():
        scrape_window(fleet, seconds=0)


if __name__ == "__main__":
    sys.exit(main())
