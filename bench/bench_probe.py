"""Probe cost, side by side in one run against the same unbound on loopback:

* ``/probe`` CPU seconds per probe: dnsfleet, blackbox_exporter (Debian) and dns_exporter
  (PyPI), each driven by the same bounded HTTP load loop;
* one ``/metrics`` scrape of 1,000 configured targets: wall time and CPU, against the CPU
  blackbox_exporter spends on 1,000 ``/probe`` requests;
* dnsfleet's RSS with 1,000 targets.

Run by hand: ``make bench`` (installs the peers). Prints figures and ratios; absolute times on
a shared 2-core machine are noisy, the ratios are the result.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.harness.servers import Unbound
from tests.harness.tools import free_port

from bench.common import cpu_seconds, load, rss_bytes, stop, wait_http

QNAME = "a.local.test"
N_TARGETS = 1000


def target_addresses(n: int) -> list[str]:
    """n distinct loopback addresses (127.0.1.1 ...), one resolver each."""
    return [f"127.0.{1 + i // 250}.{1 + i % 250}" for i in range(n)]


def start_unbound(workdir: Path, addresses: list[str]) -> Unbound:
    port = free_port()
    extra = "\n".join(f"  interface: {a}" for a in addresses)
    u = Unbound(
        workdir / "unbound",
        port=port,
        extra_server=extra + "\n  do-tcp: no\n  so-rcvbuf: 4m\n  so-sndbuf: 4m\n",
    )
    u.local_data = [f"{QNAME}. 3600 IN A 192.0.2.1"]
    return u.start()


def write_dnsfleet_config(path: Path, targets: list[str], port: int) -> None:
    lines = [
        "resolv_conf: []",
        "modules:",
        "  bench:",
        f"    query_name: {QNAME}",
        "    query_type: A",
        "    min_answers: 1",
        "targets:",
    ]
    lines += [f'  - {{address: "{a}:{port}", module: bench}}' for a in targets]
    lines += ["probe_allowlist: [127.0.0.0/8]"]
    path.write_text("\n".join(lines) + "\n")


def spawn(cmd: list[str], url: str, log: Path) -> subprocess.Popen[bytes]:
    f = open(log, "wb")  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
    wait_http(url)
    return proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probes", type=int, default=3000, help="/probe requests per exporter")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--scrapes", type=int, default=5, help="/metrics scrapes of 1,000 targets")
    ap.add_argument(
        "--dns-exporter",
        default=str(Path(".venv-bench/bin/dns_exporter")),
        help="dns_exporter binary (make bench installs it in .venv-bench)",
    )
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="dnsfleet-bench-"))
    addresses = target_addresses(N_TARGETS)
    unbound = start_unbound(work, ["127.0.0.1", *addresses])
    port = unbound.port
    procs: list[subprocess.Popen[bytes]] = []
    results: dict[str, float] = {}
    try:
        # --- /probe, one exporter at a time against the same unbound
        one = work / "one.yml"
        write_dnsfleet_config(one, ["127.0.0.1"], port)
        dp = free_port()
        dnsfleet = spawn(
            [
                sys.executable,
                "-m",
                "dnsfleet",
                f"--config.file={one}",
                f"--web.listen-address=127.0.0.1:{dp}",
                "--log.level=warn",
            ],
            f"http://127.0.0.1:{dp}/-/healthy",
            work / "dnsfleet.log",
        )
        procs.append(dnsfleet)
        bb_conf = work / "blackbox.yml"
        bb_conf.write_text(f"""modules:
  dns_a:
    prober: dns
    timeout: 2s
    dns:
      query_name: {QNAME}
      query_type: A
      transport_protocol: udp
      preferred_ip_protocol: ip4
      valid_rcodes: [NOERROR]
""")
        bp = free_port()
        bb_bin = shutil.which("prometheus-blackbox-exporter") or "blackbox_exporter"
        blackbox = spawn(
            [
                bb_bin,
                f"--config.file={bb_conf}",
                f"--web.listen-address=127.0.0.1:{bp}",
                "--log.level=warn",
            ],
            f"http://127.0.0.1:{bp}/-/healthy",
            work / "blackbox.log",
        )
        procs.append(blackbox)
        peers = {
            "dnsfleet": (
                dnsfleet.pid,
                f"http://127.0.0.1:{dp}/probe?target=127.0.0.1:{port}&module=bench",
                "dnsfleet_probe_success 1",
            ),
            "blackbox_exporter": (
                blackbox.pid,
                f"http://127.0.0.1:{bp}/probe?target=127.0.0.1:{port}&module=dns_a",
                "probe_success 1",
            ),
        }
        if Path(args.dns_exporter).exists():
            xp = free_port()
            dnsx = spawn(
                [args.dns_exporter, "-L", "127.0.0.1", "-p", str(xp), "-q"],
                f"http://127.0.0.1:{xp}/",
                work / "dns_exporter.log",
            )
            procs.append(dnsx)
            peers["dns_exporter"] = (
                dnsx.pid,
                f"http://127.0.0.1:{xp}/query?server=udp://127.0.0.1:{port}"
                f"&query_name={QNAME}&query_type=A",
                "dnsexp_dns_query_success 1",
            )
        else:
            print(f"dns_exporter not found at {args.dns_exporter}: skipped", file=sys.stderr)

        print(
            f"/probe: {args.probes} requests each, {args.concurrency} concurrent, "
            f"unbound on 127.0.0.1:{port}"
        )
        print(f"{'exporter':<20}{'probes/s':>10}{'CPU us/probe':>14}{'RSS MB':>9}{'errors':>8}")
        for name, (pid, url, check) in peers.items():
            load(url, pid, requests=200, concurrency=args.concurrency, check=check)  # warm-up
            r = load(url, pid, requests=args.probes, concurrency=args.concurrency, check=check)
            results[f"{name}_cpu_per_probe"] = r.cpu_per_request
            print(
                f"{name:<20}{r.rate:>10.0f}{r.cpu_per_request * 1e6:>14.0f}"
                f"{rss_bytes(pid) / 2**20:>9.1f}{r.errors:>8}"
            )
        for p in procs:
            stop(p)
        procs.clear()

        # --- /metrics with 1,000 configured targets
        many = work / "many.yml"
        write_dnsfleet_config(many, addresses, port)
        mp = free_port()
        fleet = spawn(
            [
                sys.executable,
                "-m",
                "dnsfleet",
                f"--config.file={many}",
                f"--web.listen-address=127.0.0.1:{mp}",
                "--log.level=warn",
            ],
            f"http://127.0.0.1:{mp}/-/healthy",
            work / "dnsfleet-many.log",
        )
        procs.append(fleet)
        url = f"http://127.0.0.1:{mp}/metrics"
        load(url, fleet.pid, requests=2, concurrency=1)  # warm-up: sockets, caches
        walls, cpus = [], []
        for _ in range(args.scrapes):
            c0, t0 = cpu_seconds(fleet.pid), time.monotonic()
            r = load(url, fleet.pid, requests=1, concurrency=1, check="dnsfleet_probe_success")
            walls.append(time.monotonic() - t0)
            cpus.append(cpu_seconds(fleet.pid) - c0)
            if r.errors:
                print("scrape error", file=sys.stderr)
        with __import__("urllib.request").request.urlopen(url, timeout=30) as resp:
            body = resp.read().decode()
        ok = body.count("dnsfleet_probe_success{") - body.count("dnsfleet_probe_success{", 0, 0)
        failed = sum(
            1
            for line in body.splitlines()
            if line.startswith("dnsfleet_probe_success{") and line.endswith(" 0")
        )
        rss = rss_bytes(fleet.pid)
        walls.sort()
        cpus.sort()
        wall_med, cpu_med = walls[len(walls) // 2], cpus[len(cpus) // 2]
        results.update(scrape_wall=wall_med, scrape_cpu=cpu_med, rss=rss)
        print(
            f"\n/metrics with {N_TARGETS} targets ({args.scrapes} scrapes, median): "
            f"wall {wall_med * 1000:.0f} ms, CPU {cpu_med * 1000:.0f} ms, "
            f"RSS {rss / 2**20:.1f} MB, series {body.count(chr(10))}, "
            f"targets {ok} ({failed} failing)"
        )
    finally:
        for p in procs:
            stop(p)
        unbound.stop()

    bb = results.get("blackbox_exporter_cpu_per_probe")
    print("\nratios (targets in parentheses)")
    if bb:
        print(
            f"  dnsfleet / blackbox CPU per /probe:          "
            f"{results['dnsfleet_cpu_per_probe'] / bb:.2f}  (<= 0.50)"
        )
        print(
            f"  1,000-target scrape CPU / blackbox 1,000 probes: "
            f"{results['scrape_cpu'] / (bb * N_TARGETS):.2f}  (<= 0.25)"
        )
    if "dns_exporter_cpu_per_probe" in results:
        print(
            f"  dnsfleet / dns_exporter CPU per probe:       "
            f"{results['dnsfleet_cpu_per_probe'] / results['dns_exporter_cpu_per_probe']:.2f}"
        )
    print(
        f"  1,000-target scrape wall: {results['scrape_wall']:.2f} s  (< 2 s); "
        f"RSS {results['rss'] / 2**20:.1f} MB  (< 40 MB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
