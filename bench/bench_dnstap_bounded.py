"""Cost per add and memory of dnstap's bounded structures: Space-Saving top-N,
the registered-domain lookup and the random-subdomain detector, on the hostile mix of
tests/test_dnstap_subdomains.py. CPU time (process_time) without tracemalloc, memory with it,
in separate passes.

    PYTHONPATH=exporter .venv/bin/python bench/bench_dnstap_bounded.py
"""

from __future__ import annotations

import random
import string
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from dnsfleet.dnstap import psl
from dnsfleet.dnstap.subdomains import Detector
from dnsfleet.dnstap.topn import SpaceSaving


def label(rnd: random.Random, n: int = 12) -> str:
    return "".join(rnd.choice(string.ascii_lowercase + string.digits) for _ in range(n))


def measure(name: str, n: int, run: Callable[[], object]) -> None:
    t = time.process_time()
    run()
    cpu = time.process_time() - t
    tracemalloc.start()
    run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    print(f"{name:58s} {cpu / n * 1e6:6.2f} us/op  peak {peak / 1024:7.0f} KiB  ({n:,} ops)")


def main() -> None:
    rnd = random.Random(26)
    heavy = [f"heavy{i}.example" for i in range(5)]
    keys = [heavy[i % 5] if i % 4 == 0 else label(rnd) + ".example" for i in range(200_000)]
    for capacity in (80, 1000):

        def topn(capacity: int = capacity) -> SpaceSaving:
            table = SpaceSaving(capacity)
            for key in keys:
                table.add(key)
            return table

        measure(f"SpaceSaving({capacity}).add, 150k unique of 200k", len(keys), topn)

    names = [f"{label(rnd)}.{label(rnd, 8)}.org" for _ in range(50_000)]
    names += [f"{label(rnd)}.www.victim.co.uk" for _ in range(50_000)]
    text = Path(psl.DEFAULT_PATH).read_text(encoding="utf-8")
    measure("PublicSuffixList(Debian's list): load", 1, lambda: psl.PublicSuffixList(text))
    full = psl.default_list()
    print("list:", psl.status())

    def lookups() -> None:
        for name in names:
            full.registered_domain(name)

    measure("registered_domain, random 3-4 label names", len(names), lookups)

    events = [(f"{label(rnd)}.{label(rnd, 8)}.org", True) for _ in range(50_000)]
    events += [(f"{label(rnd)}.victim.co.uk", True) for _ in range(20_000)]
    events += [(f"{('www', 'mail', 'api')[i % 3]}.popular.com", False) for i in range(60_000)]
    events += [(f"host{i % 300}.typo.net", True) for i in range(30_000)]
    events += [(f"img{i % 5000}.cdn.example.net", False) for i in range(40_000)]
    rnd.shuffle(events)
    quiet = [(f"{('www', 'mail', 'api')[i % 3]}.popular.com", False) for i in range(200_000)]

    def detect(stream: list[tuple[str, bool]]) -> Detector:
        detector = Detector()
        for i, (qname, nx) in enumerate(stream):
            detector.observe(qname, nx, i / 4000)
        return detector

    measure(
        "Detector.observe, hostile mix (50k random parents, NX)",
        len(events),
        lambda: detect(events),
    )
    measure("Detector.observe, NOERROR only, nothing tracked", len(quiet), lambda: detect(quiet))
    # Worst case for memory and eviction: 300 parents with 200 NXDOMAIN each, all distinct
    # names: each qualifies for tracking, more than the 256 that may be tracked.
    crowd = [(f"{label(rnd, 6)}.p{i % 300}.net", True) for i in range(60_000)]
    measure(
        "Detector.observe, 300 parents x 200 NX (tracking full)", len(crowd), lambda: detect(crowd)
    )
    detector = detect(events)
    t = time.process_time()
    suspects = detector.suspects(len(events) / 4000)
    spent = (time.process_time() - t) * 1e3
    print(f"Detector.suspects: {spent:.1f} ms, sizes {detector.sizes()}, {suspects}")


if __name__ == "__main__":
    main()
