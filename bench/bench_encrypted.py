"""DNS over TLS /probe cost against blackbox_exporter (``dns_over_tls: true``), side by side
in one run against the same unbound tls-port on loopback; dnsfleet's DoH (POST
and GET, HTTP/2) and plain UDP /probe alongside for scale (blackbox_exporter has no DoH).

Each /probe opens a fresh connection and does a full TLS handshake, in both exporters.
``wrk -t1 -c8`` for ``--seconds`` per exporter, alternating which goes first, ``--rounds``
times; CPU is utime + stime of each exporter over its window, divided by the requests wrk
completed (as bench_probe.py). unbound 1.17 stalls ~40 ms on each fresh DoT connection
(Nagle, its side): it limits the rate, not the CPU per probe, and both exporters pay it.

    PYTHONPATH=. .venv/bin/python bench/bench_encrypted.py [--rounds 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.harness.pki import SERVER_NAME, make_pki
from tests.harness.servers import Unbound
from tests.harness.tools import free_port

from bench.common import check, spawn, spread, stop, wrk

QNAME = "a.local.test"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    args = ap.parse_args()
    if not shutil.which("wrk"):
        print("wrk is not installed (make bench installs it)", file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="dnsfleet-bench-tls-"))
    pki = make_pki(work / "pki")
    dot, doh = free_port(), free_port()
    unbound = Unbound(
        work / "unbound",
        local_data=[f"{QNAME}. 3600 IN A 192.0.2.1"],
        extra_server=(
            f"  interface: 127.0.0.1@{dot}\n  interface: 127.0.0.1@{doh}\n"
            f"  tls-port: {dot}\n  https-port: {doh}\n"
            f'  tls-service-pem: "{pki.chain("good")}"\n'
            f'  tls-service-key: "{pki.key("good")}"\n'
            '  http-endpoint: "/dns-query"\n  incoming-num-tcp: 100\n'
        ),
    ).start()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        tls = f"tls_server_name: {SERVER_NAME}, tls_ca_file: {pki.ca}"
        conf = work / "dnsfleet.yml"
        conf.write_text(
            "resolv_conf: []\ntargets: []\nprobe_allowlist: [127.0.0.0/8]\nmodules:\n"
            f"  udp: {{query_name: {QNAME}, query_type: A}}\n"
            f"  dot: {{query_name: {QNAME}, query_type: A, transport: tls, {tls}}}\n"
            f"  doh_post: {{query_name: {QNAME}, query_type: A, transport: https, {tls}}}\n"
            f"  doh_get: {{query_name: {QNAME}, query_type: A, transport: https, {tls}, "
            "https_method: GET}\n"
        )
        bb_conf = work / "blackbox.yml"
        bb_conf.write_text(f"""modules:
  dot:
    prober: dns
    timeout: 5s
    dns:
      query_name: {QNAME}
      query_type: A
      transport_protocol: tcp
      dns_over_tls: true
      preferred_ip_protocol: ip4
      tls_config:
        ca_file: {pki.ca}
        server_name: {SERVER_NAME}
""")
        dp, bp = free_port(), free_port()
        dnsfleet = spawn(
            [
                sys.executable, "-m", "dnsfleet", "--log.level=warn",
                f"--config.file={conf}", f"--web.listen-address=127.0.0.1:{dp}",
            ],
            f"http://127.0.0.1:{dp}/-/healthy",
            work / "dnsfleet.log",
        )  # fmt: skip
        procs.append(dnsfleet)
        bb_bin = shutil.which("prometheus-blackbox-exporter") or "blackbox_exporter"
        blackbox = spawn(
            [bb_bin, f"--config.file={bb_conf}", f"--web.listen-address=127.0.0.1:{bp}"],
            f"http://127.0.0.1:{bp}/-/healthy",
            work / "blackbox.log",
        )
        procs.append(blackbox)
        ours = f"http://127.0.0.1:{dp}/probe?module="
        urls = {
            "dnsfleet DoT": f"{ours}dot&target=127.0.0.1:{dot}",
            "blackbox DoT": f"http://127.0.0.1:{bp}/probe?module=dot&target=127.0.0.1:{dot}",
            "dnsfleet DoH POST": f"{ours}doh_post&target=127.0.0.1:{doh}",
            "dnsfleet DoH GET": f"{ours}doh_get&target=127.0.0.1:{doh}",
            "dnsfleet UDP": f"{ours}udp&target={unbound.address}",
        }
        pids = {n: (blackbox if n.startswith("blackbox") else dnsfleet).pid for n in urls}
        for name, url in urls.items():
            check(url, "probe_success 1")
            wrk(url, pids[name], seconds=2, connections=8)  # warm-up
        print(f"wrk -t1 -c8, {args.seconds} s per case and round; unbound tls-port {dot}")
        per: dict[str, list[float]] = {n: [] for n in urls}
        ratios: list[float] = []
        for r in range(args.rounds):
            order = list(urls) if r % 2 == 0 else list(reversed(urls))
            got = {n: wrk(urls[n], pids[n], seconds=args.seconds, connections=8) for n in order}
            for n, w in got.items():
                per[n].append(w.cpu_per_request * 1e6)
            ratio = got["dnsfleet DoT"].cpu_per_request / got["blackbox DoT"].cpu_per_request
            ratios.append(ratio)
            print(
                f"round {r + 1}: "
                + ", ".join(f"{n} {got[n].cpu_per_request * 1e6:.0f} µs" for n in urls)
                + f"; DoT dnsfleet/blackbox {ratio:.2f}"
            )
    finally:
        for p in procs:
            stop(p)
        unbound.stop()
    print("\nCPU per /probe, µs, over the rounds")
    for n, vals in per.items():
        print(f"  {n:<18} {spread(vals)}")
    print(f"  DoT CPU per /probe, dnsfleet / blackbox_exporter: {spread(ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
