"""What a /metrics body costs after the probes, for the per-target families of N targets
(bench_expoproto's synthetic fleet: a last result, counters, latency in classic and native
buckets): the text (families and lines), its gzip by each deflater that imports here (zlib
at level 1, as /metrics used; python-isal's igzip, what it uses now; zlib-ng if
installed), and the protobuf body (which writes no text).

    PYTHONPATH=. .venv/bin/python bench/bench_render.py [--targets 1000,10000] [--rounds 7]

CPU milliseconds per body, min-median-max over the rounds, the candidates alternating
within each round; every gzip body is checked to decompress to the text. "gzip alone" is
the deflater on the text already written (what exposition.gzip_parts adds to a scrape).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import time
import zlib
from collections.abc import Callable

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--targets", default="1000,10000")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    for n in (int(x) for x in args.targets.split(",")):
        one(n, args.rounds)


if __name__ == "__main__":
    main()
