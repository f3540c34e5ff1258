"""What a /metrics body costs after the probes, for the per-target families of N targets
(bench_expoproto's synthetic fleet: a last result, counters, latency in classic and native
buckets): the text (families and lines), its gzip by each deflater that imports here (zlib
at level 1, as /metrics used; python-isal's igzip, what it uses now; zlib-ng if
installed), and the protobuf body (which writes no text).

    PYTHONPATH=. .venv/bin/python bench/bench_render.py [--targets 1000,10000] [--rounds 7]
    PYTHONPATH=. .venv/bin/python bench/bench_render.py --checkout OLD --checkout . [--rounds 5]

CPU milliseconds per body, min-median-max over the rounds, the candidates alternating
within each round; every gzip body is checked to decompress to the text. "gzip alone" is
the deflater on the text already written (what exposition.gzip_parts adds to a scrape).

``--checkout``: the per-target part alone, A/B: each checkout's Prober.record(), the
text of the record's per-target families (proberecord.py) as a scrape takes it
(exposition.text_parts), and gzip_parts on that text, in a child process with that
checkout's ``exporter/`` first on the path, the checkouts alternating round by round. The
fleet's durations vary per target (a finite non-integer float each, as real ones are);
glibc and the collector are tuned as the exporter tunes them (malloc.py), the heap
trimmed before each repetition as before each scrape.
Prints microseconds per target, min-median-max over the rounds of each round's median.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from bench.bench_expoproto import fleet
from bench.common import mmm
from dnsfleet import exposition
from dnsfleet.expoproto import encode
from dnsfleet.exposition import Deflater, gzip_parts, render_bytes, text_parts


def deflaters() -> dict[str, Callable[[int], Deflater]]:
    found: dict[str, Callable[[int], Deflater]] = {"zlib": exposition._zlib_gzip}
    for name, module in (("isal", "isal.isal_zlib"), ("zlib-ng", "zlib_ng.zlib_ng")):
        try:
            mod = importlib.import_module(module)
        except ImportError:
            continue
        found[name] = lambda level, mod=mod: mod.compressobj(level, mod.DEFLATED, 31)  # type: ignore[misc]
    return found


def one(n: int, rounds: int) -> None:
    record = fleet(n).record()
    body = render_bytes(record.families())

    def gz(deflater: Callable[[int], Deflater]) -> Callable[[], bytes]:
        def run() -> bytes:
            exposition.gzip_compressor = deflater
            return gzip_parts(text_parts(record.families()))

        return run

    def gz_only(deflater: Callable[[int], Deflater]) -> Callable[[], bytes]:
        parts = list(text_parts(record.families()))

        def run() -> bytes:
            exposition.gzip_compressor = deflater
            return gzip_parts(parts)

        return run

    found = deflaters()
    rows: dict[str, Callable[[], bytes]] = {
        "text (families, render_bytes)": lambda: render_bytes(record.families()),
        **{f"text + gzip, {name}": gz(d) for name, d in found.items()},
        **{f"gzip alone, {name}": gz_only(d) for name, d in found.items()},
        "protobuf (families, encode)": lambda: encode(record.families()),
    }
    took: dict[str, list[float]] = {name: [] for name in rows}
    size: dict[str, int] = {}
    chosen = exposition.gzip_compressor
    try:
        for _ in range(rounds):
            for name, fn in rows.items():
                t = time.process_time()
                out = fn()
                took[name].append((time.process_time() - t) * 1000)
                size[name] = len(out)
                if "gzip" in name:
                    assert zlib.decompress(out, 31) == body, name
    finally:
        exposition.gzip_compressor = chosen
    print(f"{n} targets, CPU ms per /metrics body, min-median-max of {rounds}")
    for name, ms in took.items():
        print(f"  {name:32} {mmm(ms, '.2f'):>20} ms  {size[name] / 1e3:9.1f} kB")
    med = {name: statistics.median(ms) for name, ms in took.items()}
    for name in found:
        if name != "zlib":
            zlib_ms, its = med["gzip alone, zlib"], med[f"gzip alone, {name}"]
            print(f"  gzip alone, {name} / zlib: {its / zlib_ms:.2f}")


# One checkout's round (--checkout): us per target for record() and the text, median of
# a few repetitions, and a digest of the text (the checkouts must write the same bytes).
CHILD = """
import gc, hashlib, json, random, statistics, sys, time
from dataclasses import replace
from bench.bench_expoproto import fleet
from dnsfleet import malloc
from dnsfleet.exposition import TextFamily, gzip_parts, text_parts
malloc.tune()
malloc.tune_gc()
n, reps = int(sys.argv[1]), int(sys.argv[2])
prober = fleet(n)
rng = random.Random(3)
for st in prober.states.values():
    st.last = replace(st.last, duration=rng.lognormvariate(-6, 1))
rec, txt, gz = [], [], []
digest = ""
for _ in range(reps):
    gc.collect()
    malloc.trim()
    t = time.process_time()
    with malloc.collector_paused():  # as app.py takes it, in the cycle
        record = prober.record()
    t1 = time.process_time()
    text = list(text_parts([f for f in record.families() if isinstance(f, TextFamily)]))
    t2 = time.process_time()
    gzip_parts(text)
    t3 = time.process_time()
    rec.append((t1 - t) * 1e6 / n)
    txt.append((t2 - t1) * 1e6 / n)
    gz.append((t3 - t2) * 1e6 / n)
    digest = hashlib.sha256("".join(text).encode()).hexdigest()
    del text
print(json.dumps({"record": statistics.median(rec), "text": statistics.median(txt),
                  "gzip": statistics.median(gz),
                  "digest": digest, "exporter": sys.modules["dnsfleet"].__file__}))
"""


def checkouts(paths: list[Path], sizes: list[int], rounds: int) -> None:
    figures: dict[tuple[int, Path, str], list[float]] = {}
    bench_root = Path(__file__).resolve().parent.parent
    for n in sizes:
        for _ in range(rounds):
            digests = set()
            for path in paths:
                env = dict(os.environ, PYTHONPATH=f"{path.resolve() / 'exporter'}:{bench_root}")
                out = subprocess.run(
                    [sys.executable, "-c", CHILD, str(n), "7" if n <= 2000 else "3"],
                    env=env, capture_output=True, text=True, check=True,
                )  # fmt: skip
                got = json.loads(out.stdout)
                assert str(path.resolve()) in got["exporter"], got["exporter"]
                digests.add(got["digest"])
                for part in ("record", "text", "gzip"):
                    figures.setdefault((n, path, part), []).append(got[part])
            assert len(digests) == 1, "the checkouts wrote different text"
    print(f"{'targets':>8} {'checkout':<28} {'part':<7} us per target, min-median-max of {rounds}")
    for (n, path, part), us in figures.items():
        print(f"{n:>8} {path!s:<28} {part:<7} {mmm(us, '.3f'):>24}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--targets", default="1000,10000")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--checkout", action="append", type=Path, default=[])
    args = ap.parse_args()
    sizes = [int(x) for x in args.targets.split(",")]
    if args.checkout:
        checkouts(args.checkout, sizes, args.rounds)
        return
    for n in sizes:
        one(n, args.rounds)


if __name__ == "__main__":
    main()
