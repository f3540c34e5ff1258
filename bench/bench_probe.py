"""Probe cost against blackbox_exporter, side by side in one run against the same unbound on
loopback, measured as the peers are measured:

* ``/probe``: ``wrk -t1 -c8`` (keep-alive, 8 connections) for ``--seconds`` against each
  exporter in turn, alternating which goes first, ``--rounds`` times; CPU is utime + stime
  from ``/proc/<pid>/stat`` of each exporter over its wrk window, divided by the requests
  wrk completed. The ratio is taken round by round (the two windows of a round are
  adjacent), so a neighbour's load on this shared machine weighs on both.
* one ``/metrics`` scrape of 1,000 configured targets (1,000 loopback addresses on that
  unbound): ``wrk -t1 -c1`` with Prometheus' headers (``Accept-Encoding: gzip``, the
  scrape timeout) on one keep-alive connection, CPU per probe-and-collect cycle (cycles
  counted by ``dnsfleet_scrapes_total``; concurrent scrapes would share cycles), against
  blackbox_exporter's CPU for 1,000 ``/probe`` requests from the same round.
* dns_exporter (PyPI) once, the same way as /probe, when installed; dnsfleet's RSS with
  1,000 targets.

Run with ``make bench`` (installs the peers and wrk); ``make bench ARGS="--rounds 5"``.
Absolute times on a shared 2-core machine are noisy: the ratios, and their spread over the
rounds, are the result.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.harness.servers import Unbound
from tests.harness.tools import free_port

from bench.common import cpu_seconds, rss_bytes, stop, wait_http

QNAME = "a.local.test"
N_TARGETS = 1000
PROBE_TARGET = 0.30  # dnsfleet / blackbox CPU per /probe
SCRAPE_TARGET = 0.15  # one 1,000-target cycle / blackbox's CPU for 1,000 /probe requests
PROMETHEUS_HEADERS = (
    "-H",
    "Accept: text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "-H",
    "Accept-Encoding: gzip",
    "-H",
    "X-Prometheus-Scrape-Timeout-Seconds: 10",
)


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


@dataclass
class Window:
    requests: int
    cpu: float  # seconds of the measured process
    seconds: float

    @property
    def cpu_per_request(self) -> float:
        return self.cpu / max(self.requests, 1)


def wrk(
    url: str, pid: int, *, seconds: int, connections: int, extra: tuple[str, ...] = ()
) -> Window:
    """``wrk -t1 -c<connections>`` for ``seconds``; the CPU ``pid`` spent meanwhile."""
    cpu0 = cpu_seconds(pid)
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--timeout", "15s", *extra, url],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    ).stdout
    cpu = cpu_seconds(pid) - cpu0
    m = re.search(r"(\d+) requests in ([\d.]+)(m?s)", out)
    if not m:
        raise RuntimeError(f"wrk said:\n{out}")
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    errors = re.search(r"Socket errors: (.*)", out)
    if bad or errors:
        raise RuntimeError(f"errors under load against {url}:\n{out}")
    return Window(int(m.group(1)), cpu, seconds)


def check(url: str, needle: str) -> None:
    with urllib.request.urlopen(url, timeout=30) as r:
        body = r.read().decode()
    if needle not in body:
        raise RuntimeError(f"{url} did not say {needle!r}:\n{body[:2000]}")


def scrapes_total(url: str) -> int:
    with urllib.request.urlopen(url, timeout=30) as r:
        m = re.search(r"^dnsfleet_scrapes_total (\d+)$", r.read().decode(), re.M)
    assert m is not None
    return int(m.group(1))


def spread(values: list[float]) -> str:
    return (
        f"median {statistics.median(values):.2f}, "
        f"min {min(values):.2f}, max {max(values):.2f} over {len(values)}"
    )


def main() -> int:  # noqa: PLR0915 (a benchmark's main: its rounds in order)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--seconds", type=int, default=10, help="wrk duration per window")
    ap.add_argument(
        "--dns-exporter",
        default=str(Path(".venv-bench/bin/dns_exporter")),
        help="dns_exporter binary (make bench installs it in .venv-bench)",
    )
    args = ap.parse_args()
    if not shutil.which("wrk"):
        print("wrk is not installed (make bench installs it)", file=sys.stderr)
        return 1

    work = Path(tempfile.mkdtemp(prefix="dnsfleet-bench-"))
    addresses = target_addresses(N_TARGETS)
    unbound = start_unbound(work, ["127.0.0.1", *addresses])
    port = unbound.port
    procs: list[subprocess.Popen[bytes]] = []
    try:
        one = work / "one.yml"
        write_dnsfleet_config(one, ["127.0.0.1"], port)
        many = work / "many.yml"
        write_dnsfleet_config(many, addresses, port)
        dp, mp, bp = free_port(), free_port(), free_port()
        python = [sys.executable, "-m", "dnsfleet", "--log.level=warn"]
        dnsfleet = spawn(
            [*python, f"--config.file={one}", f"--web.listen-address=127.0.0.1:{dp}"],
            f"http://127.0.0.1:{dp}/-/healthy",
            work / "dnsfleet.log",
        )
        procs.append(dnsfleet)
        fleet = spawn(
            [*python, f"--config.file={many}", f"--web.listen-address=127.0.0.1:{mp}"],
            f"http://127.0.0.1:{mp}/-/healthy",
            work / "dnsfleet-many.log",
        )
        procs.append(fleet)
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
        probe_urls = {
            "dnsfleet": f"http://127.0.0.1:{dp}/probe?target=127.0.0.1:{port}&module=bench",
            "blackbox_exporter": f"http://127.0.0.1:{bp}/probe?target=127.0.0.1:{port}"
            "&module=dns_a",
        }
        pids = {"dnsfleet": dnsfleet.pid, "blackbox_exporter": blackbox.pid}
        check(probe_urls["dnsfleet"], "dnsfleet_probe_success 1")
        check(probe_urls["blackbox_exporter"], "probe_success 1")
        metrics = f"http://127.0.0.1:{mp}/metrics"
        check(metrics, 'dnsfleet_probe_success{target="127.0.4.250')
        for name, url in probe_urls.items():  # warm-up: caches, Go's runtime, sockets
            wrk(url, pids[name], seconds=2, connections=8)
        wrk(metrics, fleet.pid, seconds=3, connections=1, extra=PROMETHEUS_HEADERS)

        print(
            f"/probe: wrk -t1 -c8 for {args.seconds} s per exporter and round; /metrics: "
            f"wrk -t1 -c1 with Prometheus' headers, {N_TARGETS} targets; unbound on "
            f"127.0.0.1:{port}"
        )
        print(
            f"{'round':<6}{'dnsfleet µs':>12}{'blackbox µs':>13}{'probe ratio':>12}"
            f"{'cycle ms':>10}{'cycles':>8}{'scrape ratio':>14}"
        )
        probe_ratios: list[float] = []
        scrape_ratios: list[float] = []
        cycle_cpu: list[float] = []
        per_probe: dict[str, list[float]] = {n: [] for n in probe_urls}
        for r in range(args.rounds):
            order = list(probe_urls) if r % 2 == 0 else list(reversed(probe_urls))
            got = {
                n: wrk(probe_urls[n], pids[n], seconds=args.seconds, connections=8) for n in order
            }
            s0 = scrapes_total(metrics)
            w = wrk(
                metrics, fleet.pid, seconds=args.seconds, connections=1, extra=PROMETHEUS_HEADERS
            )
            cycles = scrapes_total(metrics) - 1 - s0  # the reading scrape is not counted
            cycle = w.cpu / max(cycles, 1)
            d, b = got["dnsfleet"].cpu_per_request, got["blackbox_exporter"].cpu_per_request
            for n in probe_urls:
                per_probe[n].append(got[n].cpu_per_request)
            probe_ratios.append(d / b)
            scrape_ratios.append(cycle / (b * N_TARGETS))
            cycle_cpu.append(cycle)
            print(
                f"{r + 1:<6}{d * 1e6:>12.0f}{b * 1e6:>13.0f}{d / b:>12.2f}"
                f"{cycle * 1000:>10.1f}{cycles:>8}{cycle / (b * N_TARGETS):>14.2f}"
            )
        rss = rss_bytes(fleet.pid)

        dnsx_line = ""
        if Path(args.dns_exporter).exists():
            xp = free_port()
            dnsx = spawn(
                [args.dns_exporter, "-L", "127.0.0.1", "-p", str(xp), "-q"],
                f"http://127.0.0.1:{xp}/",
                work / "dns_exporter.log",
            )
            procs.append(dnsx)
            url = (
                f"http://127.0.0.1:{xp}/query?server=udp://127.0.0.1:{port}"
                f"&query_name={QNAME}&query_type=A"
            )
            check(url, "dnsexp_dns_query_success 1")
            x = wrk(url, dnsx.pid, seconds=args.seconds, connections=8).cpu_per_request
            ours = wrk(
                probe_urls["dnsfleet"], dnsfleet.pid, seconds=args.seconds, connections=8
            ).cpu_per_request
            dnsx_line = (
                f"  dnsfleet / dns_exporter CPU per probe: {ours / x:.2f} "
                f"({ours * 1e6:.0f} µs vs {x * 1e6:.0f} µs, one round)"
            )
        else:
            print(f"dns_exporter not found at {args.dns_exporter}: skipped", file=sys.stderr)
    finally:
        for p in procs:
            stop(p)
        unbound.stop()

    print("\nratios (target), over the rounds")
    print(f"  /probe CPU, dnsfleet / blackbox: {spread(probe_ratios)}  (<= {PROBE_TARGET})")
    print(
        "  1,000-target /metrics cycle / blackbox's 1,000 /probe: "
        f"{spread(scrape_ratios)}  (<= {SCRAPE_TARGET})"
    )
    if dnsx_line:
        print(dnsx_line)
    print(
        f"  CPU per /probe, µs: dnsfleet {spread([v * 1e6 for v in per_probe['dnsfleet']])}; "
        f"blackbox {spread([v * 1e6 for v in per_probe['blackbox_exporter']])}"
    )
    print(
        f"  1,000-target cycle CPU, ms: {spread([c * 1000 for c in cycle_cpu])}; "
        f"RSS after the scrapes {rss / 2**20:.1f} MB (< 40 MB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
