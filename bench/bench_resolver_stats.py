"""Cost of reading a resolver's own statistics: unbound remote control (stats_noreset +
status over the unix socket) and BIND /json/v1/server, against real loopback servers.

Run by hand: .venv/bin/python bench/bench_resolver_stats.py [--reads 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.harness.servers import Named, Unbound

from dnsfleet.config import StatsSource
from dnsfleet.resolverstats import read_stats

RECORDS = "www IN A 192.0.2.10\ncanary 3600 IN A 192.0.2.11\n"


async def measure(sources: list[StatsSource], reads: int) -> None:
    async with aiohttp.ClientSession() as session:
        for src in sources:
            await read_stats(src, session)  # warm up
            times = []
            for _ in range(reads):
                t = time.perf_counter()
                await read_stats(src, session)
                times.append(time.perf_counter() - t)
            times.sort()
            print(
                f"{src.type:8s} read+parse: median {statistics.median(times) * 1e3:.2f} ms, "
                f"p95 {times[int(len(times) * 0.95)] * 1e3:.2f} ms ({reads} reads)"
            )


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--reads", type=int, default=200)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        named = Named(Path(d) / "named", zones={"example.test": RECORDS}).start()
        unbound = Unbound(Path(d) / "unbound", stubs={"example.test.": f"127.0.0.1@{named.port}"})
        try:
            unbound.start()
            asyncio.run(
                measure(
                    [
                        StatsSource(type="unbound", control=f"unix://{unbound.control_socket}"),
                        StatsSource(type="bind", url=named.stats_url),
                    ],
                    min(args.reads, 10000),
                )
            )
        finally:
            unbound.stop()
            named.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
