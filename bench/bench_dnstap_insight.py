"""CPU per event of dnstap's per-answer analysis (``Insight.observe``: top clients, top
NXDOMAIN/SERVFAIL domains, the random-subdomain detector) on a flood mix: 150,000 answers,
two thirds NXDOMAIN (random names under one parent, and names under 50,000 parents), one
third NOERROR. Best of five passes, process CPU time.

    PYTHONPATH=exporter .venv/bin/python bench/bench_dnstap_insight.py

To compare two trees, run it once with each tree's ``exporter`` directory on PYTHONPATH.
"""

from __future__ import annotations

import random
import time

from dnsfleet.dnstap.insight import Insight

EVENTS = 150_000
PASSES = 5


def wire(name: str) -> bytes:
    return b"".join(bytes([len(label)]) + label.encode() for label in name.split(".")) + b"\0"


def events() -> list[tuple[bytes, int, bytes]]:
    rnd = random.Random(26)
    out: list[tuple[bytes, int, bytes]] = []
    for i in range(EVENTS // 3):
        out.append((bytes([127, 0, 0, 1]), 3, wire(f"{rnd.getrandbits(40):x}.victim.test")))
        out.append((bytes([10, 0, i % 250, 1]), 3, wire(f"w.p{i}.test")))
        out.append((bytes([127, 0, 0, 1]), 0, wire(f"www{i % 20}.popular.test")))
    return out


def main() -> None:
    evs = events()
    best = float("inf")
    for _ in range(PASSES):
        ins = Insight(top_n=10)
        t = time.process_time()
        for client, rcode, qname in evs:
            ins.observe("t", client, rcode, qname, 1.0)
        best = min(best, time.process_time() - t)
    print(f"{len(evs)} answers, best of {PASSES}: {best:.3f} CPU-s, {len(evs) / best:,.0f}/CPU-s")


if __name__ == "__main__":
    main()
