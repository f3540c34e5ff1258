"""The protobuf exposition at fleet scale: dnsfleet's hand-written encoder against the
same messages built with the protobuf package, and a protobuf /metrics body against the
text one, for the per-target families of N targets (each with a last result, counters,
and latency in classic and native buckets).

    PYTHONPATH=. .venv/bin/python bench/bench_expoproto.py [--targets 1000] [--rounds 7]
    PYTHONPATH=. .venv/bin/python bench/bench_expoproto.py --scrape 1000,10000 [--rounds 5]

Prints CPU milliseconds per body from a cycle's record (the per-target families are
rendered from it on every scrape), min-median-max over the rounds, with and without gzip
level 1 (what /metrics uses), and the ratios of the medians. The protobuf body is written
from the record's rows (recordproto.py); "protobuf, text read back" is the same families
encoded from their text lines, as every family was before. The typed rows give both
encoders the same typed families (the pre-rendered ones parsed beforehand, untimed).

``--scrape``: whole scrapes of a dnsfleet of each size against one loopback unbound that
answers every target (bench/fleet.py), the probe cycle included: sequential gzipped
scrapes on one keep-alive connection with Prometheus' headers, text and protobuf windows
alternating, the exporter's CPU per cycle.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import random
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tests.harness.metricsproto import build, messages
from tests.harness.tools import free_port
from tests.wildcard import WildcardUnbound

from bench.common import check, cpu_seconds, mmm, spawn, stop, target_addresses
from bench.fleet import QNAME, write_dnsfleet_config
from dnsfleet.config import parse
from dnsfleet.expoproto import CONTENT_TYPE as PROTOBUF
from dnsfleet.expoproto import encode, label_pairs
from dnsfleet.exposition import Family, Labels, TextFamily, render_bytes
from dnsfleet.prober import Prober
from dnsfleet.probes import REASONS, ProbeResult

TEXT = "text/plain; version=0.0.4; charset=utf-8"
TEXT_ACCEPT = "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
# What Prometheus 3 sends with scrape_native_histograms (PrometheusProto first).
PROTOBUF_ACCEPT = (
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
    "encoding=delimited;q=0.5,application/openmetrics-text;version=1.0.0;q=0.4,"
    "text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
)
PROM_HEADERS = {"Accept-Encoding": "gzip", "X-Prometheus-Scrape-Timeout-Seconds": "10"}


def fleet(n: int) -> Prober:
    rng = random.Random(7)
    targets = [
        {"address": f"127.{1 + i // 65536}.{i // 256 % 256}.{i % 256}", "module": "m",
         "labels": {"site": f"site{i % 7}"}}
        for i in range(n)
    ]  # fmt: skip
    cfg = parse({"modules": {"m": {}}, "targets": targets, "resolv_conf": []}, source="b.yml")
    prober = Prober()
    prober.configure(cfg)
    for st in prober.states.values():
        # A failure or two in the past for some targets (a series per reason failed with)
        for reason in rng.sample(REASONS, rng.choice((0, 0, 1, 2))):
            for _ in range(rng.randint(1, 3)):
                st.failures.add(reason)
        st.failures.row()  # past the newborns' zero
        for _ in range(200):
            d = rng.lognormvariate(-6, 1)
            st.buckets[min(int(d * 100), len(st.buckets) - 1)] += 1
            st.latency_sum += d
            st.native.observe(d)
        st.probes = 210
        st.last = ProbeResult(
            success=True, reason=None, duration=0.0012, rcode=0, answer_rrs=1, detail=""
        )
    return prober


def typed(fams: list[Family | TextFamily]) -> list[Family]:
    """The same families with typed samples (what the protobuf package is given)."""
    out = []
    for fam in fams:
        if isinstance(fam, Family):
            out.append(fam)
            continue
        typed_fam = Family(fam.name, fam.help, fam.type, native=fam.native)
        for line in fam.lines.split("\n")[:-1]:
            key, _, value = line.rpartition(" ")
            name, _, text = key.partition("{")
            labels = Labels(list(label_pairs(text[:-1])))
            typed_fam.add_raw(labels, float(value), name[len(fam.name) :])
        out.append(typed_fam)
    return out


def cpu_ms(fn: Callable[[], bytes], rounds: int) -> tuple[list[float], int]:
    took = []
    size = 0
    for _ in range(rounds):
        t = time.process_time()
        size = len(fn())
        took.append((time.process_time() - t) * 1000)
    return took, size


def read_back(fams: list[Family | TextFamily]) -> list[Family | TextFamily]:
    """The families without their protobuf writers: encoded from their text lines."""
    return [replace(f, proto=None) if isinstance(f, TextFamily) else f for f in fams]


def bodies(args: argparse.Namespace) -> None:
    record = fleet(args.targets).record()  # what a scrape renders, as app.py keeps it
    twins = typed(record.families())
    msgs = messages()
    assert encode(twins) == build(twins, msgs), "the two encoders disagree"
    assert encode(record.families()) == encode(read_back(record.families()))
    rows = [
        ("text (families, render_bytes)", lambda: render_bytes(record.families())),
        ("protobuf (families, encode)", lambda: encode(record.families())),
        ("protobuf, text read back", lambda: encode(read_back(record.families()))),
        ("protobuf, dnsfleet (typed families)", lambda: encode(twins)),
        ("protobuf, protobuf package (typed families)", lambda: build(twins, msgs)),
        ("text + gzip", lambda: gzip.compress(render_bytes(record.families()), 1)),
        ("protobuf + gzip", lambda: gzip.compress(encode(record.families()), 1)),
    ]
    got = {name: cpu_ms(fn, args.rounds) for name, fn in rows}
    print(f"{args.targets} targets, CPU ms per /metrics body, min-median-max of {args.rounds}")
    for name, (ms, size) in got.items():
        print(f"  {name:45} {mmm(ms, '.1f'):>18} ms  {size / 1e6:6.2f} MB")
    med = {name: statistics.median(ms) for name, (ms, _) in got.items()}
    lib = med["protobuf, protobuf package (typed families)"]
    ours = med["protobuf, dnsfleet (typed families)"]
    pb, text = med["protobuf (families, encode)"], med["text (families, render_bytes)"]
    zipped = med["protobuf + gzip"] / med["text + gzip"]
    print(f"  protobuf package / dnsfleet encoder: {lib / ours:.2f}x")
    print(f"  protobuf / text body: {pb / text:.2f}x; with gzip: {zipped:.2f}x")


def scrape_cpu(base: str, pid: int, accept: str, *, seconds: float) -> float:
    """CPU seconds per cycle over sequential scrapes for about ``seconds`` (2 to 1,000)."""
    headers = {**PROM_HEADERS, "Accept": accept}
    conn = http.client.HTTPConnection(base.removeprefix("http://"), timeout=120)
    s0 = scrapes(base)
    cpu0 = cpu_seconds(pid)
    t0 = time.monotonic()
    n = 0
    while n < 2 or (time.monotonic() - t0 < seconds and n < 1000):
        conn.request("GET", "/metrics", headers=headers)
        resp = conn.getresponse()
        body = resp.read()
        if resp.status != 200 or resp.getheader("Content-Type") != (
            PROTOBUF if accept == PROTOBUF_ACCEPT else TEXT
        ):
            raise RuntimeError(f"/metrics answered {resp.status} {resp.getheader('Content-Type')}")
        n += 1
    cpu = cpu_seconds(pid) - cpu0
    conn.close()
    assert body
    return cpu / max(scrapes(base) - 1 - s0, 1)


def scrapes(base: str) -> int:
    conn = http.client.HTTPConnection(base.removeprefix("http://"), timeout=120)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    m = re.search(r"^dnsfleet_scrapes_total (\d+)", text, re.M)
    assert m is not None
    return int(m.group(1))


def whole_scrapes(args: argparse.Namespace) -> None:
    sizes = [int(n) for n in args.scrape.split(",")]
    with tempfile.TemporaryDirectory(prefix="bench-expoproto-") as tmp:
        work = Path(tmp)
        unbound = WildcardUnbound(work / "unbound", port=free_port())
        unbound.local_data = [f"{QNAME}. 3600 IN A 192.0.2.1"]
        unbound.start()
        procs = []
        try:
            for n in sizes:
                conf = write_dnsfleet_config(work / f"{n}.yml", target_addresses(n), unbound.port)
                port = free_port()
                base = f"http://127.0.0.1:{port}"
                cmd = [sys.executable, "-m", "dnsfleet", "--log.level=warn",
                       f"--config.file={conf}", f"--web.listen-address={base[7:]}"]  # fmt: skip
                procs.append(proc := spawn(cmd, base + "/-/healthy", work / f"{n}.log"))
                last = f"{target_addresses(n)[-1]}:{unbound.port}"
                check(base + "/metrics", f'dnsfleet_probe_success{{target="{last}"')
                took: dict[str, list[float]] = {"text": [], "protobuf": []}
                for r in range(args.rounds):
                    order = [("text", TEXT_ACCEPT), ("protobuf", PROTOBUF_ACCEPT)]
                    for kind, accept in order if r % 2 == 0 else order[::-1]:
                        cpu = scrape_cpu(base, proc.pid, accept, seconds=args.seconds)
                        took[kind].append(cpu * 1000)
                t, p = (statistics.median(took[k]) for k in ("text", "protobuf"))
                print(f"{n} targets, whole gzipped scrape, CPU ms per cycle, "
                      f"min-median-max of {args.rounds} windows of {args.seconds:g} s")  # fmt: skip
                for kind, ms in took.items():
                    print(f"  {kind:10} {mmm(ms, '.1f'):>20} ms")
                print(f"  protobuf / text: {p / t:.2f}x")
        finally:
            for proc in procs:
                stop(proc)
            unbound.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--scrape", help="fleet sizes to scrape whole, e.g. 1000,10000")
    ap.add_argument("--seconds", type=float, default=5.0, help="per --scrape window")
    args = ap.parse_args()
    if args.scrape:
        whole_scrapes(args)
    else:
        bodies(args)


if __name__ == "__main__":
    main()
