"""CPU of one fleet's probing alone (``Prober.probe_all``, in-process) at each fleet size,
for one or more checkouts side by side against the same loopback unbound (every target a
distinct 127.0.x.y, as ``make bench`` numbers them). Each checkout runs in its own child
process with its ``exporter/`` first on the path; rounds alternate between the checkouts,
so a neighbour's load weighs on each alike. Prints min, median and max over the rounds of
the median cycle of each round.

    PYTHONPATH=. .venv/bin/python bench/bench_udpbatch.py --checkout /work/main --checkout .
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.wildcard import WildcardUnbound

from bench.common import target_addresses
from bench.fleet import QNAME, write_dnsfleet_config

CHILD = """
import asyncio, json, resource, sys
from dnsfleet.config import load
from dnsfleet.prober import Prober
from dnsfleet.probes import udp

async def main(path, cycles):
    cfg = load(path)
    prober = Prober()
    prober.configure(cfg)
    loop = asyncio.get_running_loop()
    await prober.probe_all(cfg, loop.time() + 30)  # warm: the loop's first sockets, caches
    cpu = []
    failed = 0
    for _ in range(cycles):
        t = resource.getrusage(resource.RUSAGE_SELF)
        results = await prober.probe_all(cfg, loop.time() + 30)
        u = resource.getrusage(resource.RUSAGE_SELF)
        cpu.append((u.ru_utime - t.ru_utime + u.ru_stime - t.ru_stime) * 1000)
        failed += sum(1 for r in results.values() if not r.success)
    print(json.dumps({"cpu_ms": cpu, "failed": failed, "udp": udp.__file__}))

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def run_child(checkout: Path, config: Path, cycles: int) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(checkout / "exporter"))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(config), str(cycles)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    result: dict[str, object] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkout", action="append", type=Path, required=True)
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cycles", type=int, default=5, help="probe_all cycles per round")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        unbound = WildcardUnbound(
            Path(tmp) / "unbound", local_data=[f"{QNAME}. 300 IN A 192.0.2.1"]
        )
        unbound.start()
        try:
            figures: dict[tuple[int, str], list[float]] = {}
            for n in sizes:
                config = write_dnsfleet_config(
                    Path(tmp) / f"fleet{n}.yml", target_addresses(n), unbound.port
                )
                for _ in range(args.rounds):
                    for checkout in args.checkout:
                        got = run_child(checkout.resolve(), config, args.cycles)
                        cpu = got["cpu_ms"]
                        assert isinstance(cpu, list)
                        if got["failed"]:
                            print(f"  {checkout} {n}: {got['failed']} failed probes", flush=True)
                        key = (
                            n,
                            f"{checkout} ({Path(str(got['udp'])).parent.parent.parent.parent})",
                        )
                        figures.setdefault(key, []).append(statistics.median(cpu))
                        time.sleep(0.5)
            print(f"{'targets':>8} {'checkout':<30} probe_all CPU ms, min / median / max")
            for (n, checkout), meds in figures.items():
                print(
                    f"{n:>8} {checkout:<30} "
                    f"{min(meds):7.1f} / {statistics.median(meds):7.1f} / {max(meds):7.1f}"
                )
        finally:
            unbound.stop()


if __name__ == "__main__":
    main()
