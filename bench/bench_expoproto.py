"""The protobuf exposition at fleet scale: dnsfleet's hand-written encoder against the
same messages built with the protobuf package, and a protobuf /metrics body against the
text one, for the per-target families of N targets (each with a last result, counters,
and latency in classic and native buckets).

    PYTHONPATH=. .venv/bin/python bench/bench_expoproto.py [--targets 1000] [--rounds 7]

Prints CPU milliseconds per body from a cycle's record (the per-target families are
rendered from it on every scrape; the least of the rounds: load only ever adds), with
and without gzip level 1 (what /metrics uses), and the ratios. The typed rows give both
encoders the same typed families (the pre-rendered ones parsed beforehand, untimed).
"""

from __future__ import annotations

import argparse
import gzip
import random
import time
from collections.abc import Callable

from tests.harness.metricsproto import build, messages

from dnsfleet.config import parse
from dnsfleet.expoproto import encode, label_pairs
from dnsfleet.exposition import Family, Labels, TextFamily, render_bytes
from dnsfleet.prober import Prober
from dnsfleet.probes import REASONS, ProbeResult


def fleet(n: int) -> Prober:
    rng = random.Random(7)
    targets = [
        {"address": f"10.{i // 65536}.{i // 256 % 256}.{i % 256}", "module": "m",
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


def cpu_ms(fn: Callable[[], bytes], rounds: int) -> tuple[float, int]:
    best = float("inf")
    size = 0
    for _ in range(rounds):
        t = time.process_time()
        size = len(fn())
        best = min(best, time.process_time() - t)
    return best * 1000, size


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    record = fleet(args.targets).record()  # what a scrape renders, as app.py keeps it
    twins = typed(record.families())
    msgs = messages()
    assert encode(twins) == build(twins, msgs), "the two encoders disagree"
    rows = [
        ("text (families, render_bytes)", lambda: render_bytes(record.families())),
        ("protobuf (families, encode)", lambda: encode(record.families())),
        ("protobuf, dnsfleet (typed families)", lambda: encode(twins)),
        ("protobuf, protobuf package (typed families)", lambda: build(twins, msgs)),
        ("text + gzip", lambda: gzip.compress(render_bytes(record.families()), 1)),
        ("protobuf + gzip", lambda: gzip.compress(encode(record.families()), 1)),
    ]
    got = {name: cpu_ms(fn, args.rounds) for name, fn in rows}
    print(f"{args.targets} targets, CPU ms per /metrics body (least of {args.rounds})")
    for name, (ms, size) in got.items():
        print(f"  {name:45} {ms:8.1f} ms  {size / 1e6:6.2f} MB")
    ours = got["protobuf, dnsfleet (typed families)"][0]
    lib = got["protobuf, protobuf package (typed families)"][0]
    text = got["text (families, render_bytes)"][0]
    pb = got["protobuf (families, encode)"][0]
    print(f"  protobuf package / dnsfleet encoder: {lib / ours:.2f}x")
    print(f"  protobuf / text body: {pb / text:.2f}x; with gzip: "
          f"{got['protobuf + gzip'][0] / got['text + gzip'][0]:.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
