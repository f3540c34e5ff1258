"""Soak: many /metrics scrapes of a real exporter process probing many loopback targets, a
fraction of them silent; prints the exporter's open file descriptors and RSS before and
after, and scrape wall times against the scrape timeout. Then one scrape of a large fleet
(default 10,000 targets, a fifth silent) against the same timeout.

    make bench-soak                         # 1,000 scrapes x 1,000 targets, then 10,000
    .venv/bin/python bench/bench_soak.py --scrapes 200 --targets 500

One unbound (interface-automatic on 0.0.0.0) answers for every 127.0.x.y target; one
socket that never reads stands behind every silent 127.1.x.y. Only loopback traffic. No
peer: no other exporter probes a fleet from one /metrics, so there is nothing doing the
same work to compare with; the figures are growth (should be ~0) and headroom.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml
from tests.harness.tools import free_port
from tests.wildcard import WildcardUnbound, answering_and_silent

from bench.common import fd_count, rss_bytes, stop, wait_http

QNAME = "a.local.test."


def write_config(path: Path, addresses: list[str], probe_timeout: str) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "resolv_conf": [],  # never probe this machine's own resolver
                "modules": {
                    "a": {"query_name": QNAME, "query_type": "A", "timeout": probe_timeout}
                },
                "targets": [{"address": a, "module": "a"} for a in addresses],
            }
        )
    )


def scrape(url: str, timeout: float) -> tuple[float, int]:
    req = urllib.request.Request(
        url, headers={"X-Prometheus-Scrape-Timeout-Seconds": f"{timeout:g}"}
    )
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=timeout + 30) as r:
        body = r.read()
    return time.monotonic() - t0, len(body)


def run_exporter(config: Path, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    log = open(workdir / f"exporter-{port}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "dnsfleet",
            f"--config.file={config}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=log,
    )
    base = f"http://127.0.0.1:{port}"
    wait_http(base + "/-/healthy")
    return proc, base


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def soak(
    args: argparse.Namespace, unbound: WildcardUnbound, silent_port: int, workdir: Path
) -> None:
    targets = answering_and_silent(
        args.targets, silent_every=args.silent_every, port=unbound.port, silent_port=silent_port
    )
    conf = workdir / "soak.yml"
    write_config(conf, [a for a, _ in targets], args.probe_timeout)
    proc, base = run_exporter(conf, workdir)
    try:
        for _ in range(args.warmup):
            scrape(base + "/metrics", args.scrape_timeout)
        fd0, rss0 = fd_count(proc.pid), rss_bytes(proc.pid)
        times: list[float] = []
        # RSS at each quarter: allocator high-water settles after the first few hundred
        # scrapes (a leak keeps climbing).
        checkpoints: list[str] = []
        t_end = time.monotonic() + args.max_seconds
        for i in range(1, args.scrapes + 1):
            if time.monotonic() > t_end:
                break
            times.append(scrape(base + "/metrics", args.scrape_timeout)[0])
            if i % max(args.scrapes // 4, 1) == 0:
                checkpoints.append(f"{i}: {mib(rss_bytes(proc.pid))}")
        fd1, rss1 = fd_count(proc.pid), rss_bytes(proc.pid)
    finally:
        stop(proc)
    n_silent = sum(1 for _, s in targets if s)
    times.sort()
    print(
        f"soak: {len(times)} scrapes (after {args.warmup} warm-up) of {len(targets)} targets "
        f"({n_silent} silent, probe timeout {args.probe_timeout}), "
        f"scrape timeout {args.scrape_timeout:g}s"
    )
    print(f"  file descriptors  before {fd0:6d}   after {fd1:6d}   growth {fd1 - fd0:+d}")
    print(
        f"  RSS               before {mib(rss0):>10}   after {mib(rss1):>10}   "
        f"growth {mib(rss1 - rss0)} ({(rss1 - rss0) / max(len(times), 1) / 1024:.2f} "
        "KiB/scrape)"
    )
    print(f"  RSS after scrape  {'   '.join(checkpoints)}")
    print(
        f"  scrape wall time  p50 {statistics.median(times):.3f}s   "
        f"p99 {times[int(len(times) * 0.99) - 1]:.3f}s   max {times[-1]:.3f}s   "
        f"max/timeout {times[-1] / args.scrape_timeout:.2f}"
    )


def big_fleet(
    args: argparse.Namespace, unbound: WildcardUnbound, silent_port: int, workdir: Path
) -> None:
    targets = answering_and_silent(
        args.big_targets, silent_every=5, port=unbound.port, silent_port=silent_port
    )
    conf = workdir / "big.yml"
    write_config(conf, [a for a, _ in targets], "1s")
    proc, base = run_exporter(conf, workdir)
    try:
        results = [scrape(base + "/metrics", args.scrape_timeout) for _ in range(3)]
        fds, rss = fd_count(proc.pid), rss_bytes(proc.pid)
    finally:
        stop(proc)
    walls = [w for w, _ in results]
    print(
        f"big fleet: {len(targets)} targets, a fifth silent (probe timeout 1s), "
        f"scrape timeout {args.scrape_timeout:g}s, 3 scrapes"
    )
    print(
        f"  wall {', '.join(f'{w:.2f}s' for w in walls)}   "
        f"worst/timeout {max(walls) / args.scrape_timeout:.2f}   "
        f"exposition {results[-1][1] / 2**20:.1f} MiB   RSS {mib(rss)}   fds {fds}"
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scrapes", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--targets", type=int, default=1000)
    p.add_argument("--silent-every", type=int, default=5, help="every Nth target is silent")
    p.add_argument("--probe-timeout", default="100ms")
    p.add_argument("--scrape-timeout", type=float, default=10.0)
    p.add_argument("--big-targets", type=int, default=10_000, help="0 to skip")
    p.add_argument("--max-seconds", type=float, default=900.0, help="bound on the soak loop")
    args = p.parse_args()
    from dnsfleet.cli import raise_fd_limit

    raise_fd_limit()
    with tempfile.TemporaryDirectory(prefix="dnsfleet-soak-") as d:
        workdir = Path(d)
        unbound = WildcardUnbound(workdir / "unbound", local_data=[f"{QNAME} 300 IN A 192.0.2.1"])
        unbound.start()
        silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        silent.bind(("0.0.0.0", 0))  # every 127.x.y.z on this port: read by nobody
        try:
            soak(args, unbound, silent.getsockname()[1], workdir)
            if args.big_targets:
                big_fleet(args, unbound, silent.getsockname()[1], workdir)
        finally:
            silent.close()
            unbound.stop()


if __name__ == "__main__":
    main()
