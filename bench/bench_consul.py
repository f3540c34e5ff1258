"""Time the consul collector's scrape against the documented double (by hand, no peers:
consul_exporter never queries DNS, so there is nothing doing the same work to compare with).

    .venv/bin/python bench/bench_consul.py
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.harness.consul_double import consul_double

from dnsfleet import config as config_mod
from dnsfleet.collectors import COLLECTORS, CollectContext, run_collectors
from dnsfleet.hostfs import HostFS

SERVICES, INSTANCES, QUERIES, SCRAPES = 10, 10, 5, 30


def main() -> None:
    with consul_double() as c:
        for i in range(INSTANCES):
            c.add_node(f"n{i}", f"10.0.0.{i + 1}")
            for s in range(SERVICES):
                c.register(f"svc{s}", f"n{i}", 80)
        for s in range(QUERIES):
            c.create_query(f"q{s}", f"svc{s}")
        cfg = config_mod.parse(
            {
                "consul": {
                    "agents": [
                        {"name": "l", "dns_address": c.dns_address, "http_address": c.http_url}
                    ],
                    "services": [f"svc{s}" for s in range(SERVICES)],
                    "prepared_queries": [f"q{s}" for s in range(QUERIES)],
                }
            },
            source="bench",
        )

        async def run() -> list[float]:
            loop = asyncio.get_running_loop()
            out = []
            for _ in range(SCRAPES):
                t = time.perf_counter()
                await run_collectors(
                    CollectContext(HostFS(), cfg, loop.time() + 5, {}),
                    {"consul": COLLECTORS["consul"]},
                )
                out.append(time.perf_counter() - t)
            return out

        ds = asyncio.run(run())
    print(
        f"{SERVICES} services x {INSTANCES} instances + {QUERIES} prepared queries "
        f"({2 * SERVICES + QUERIES} DNS lookups, {SERVICES + 4} HTTP calls per scrape): "
        f"median {statistics.median(ds) * 1000:.1f} ms, max {max(ds) * 1000:.1f} ms "
        f"over {SCRAPES} scrapes"
    )


if __name__ == "__main__":
    main()
