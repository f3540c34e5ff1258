"""`make stack`: the compose stack without Docker, on this machine's loopback, with the
native Debian binaries. Prometheus runs compose/prometheus/prometheus.yml and Alertmanager
alerts/alertmanager.yml unchanged (same ports as in compose: 9090, 9093, exporter 9853);
unbound runs compose/unbound/unbound.conf and the exporter compose/dnsfleet/dnsfleet.yml
unchanged (remote control on 127.0.0.1:8954), and the exporter compose/dnsfleet/dnsfleet.yml
with only host paths changed (the capacity file lives in the run directory, and the host's
resolv.conf is not watched: this stack never queries the machine's own resolver).
Consul is the test double (tests/harness/consul_double.py) on 8600/8500 with the demo service and
prepared query; there is no Debian Grafana, so dashboards are not served (import
dashboards/json/*.json into any Grafana pointed at http://127.0.0.1:9090).
Notifications arrive at a relay on 127.0.0.1:9095 that prints them.

    .venv/bin/python -m tests.stack [--duration SECONDS] [--dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from tests.harness.consul_double import ConsulDouble
from tests.harness.monitoring import ALERTMANAGER_YML, PROMETHEUS_YML
from tests.harness.process import HttpOk, ManagedProcess
from tests.harness.servers import wait_dns
from tests.harness.tools import binary

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "compose"


class Relay(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        for a in body.get("alerts", []):
            lab = a["labels"]
            print(
                f"[{time.strftime('%H:%M:%S')}] -> {self.path.strip('/'):9} "
                f"{a['status']:8} {lab.get('alertname')} severity={lab.get('severity')} "
                f"site={lab.get('site', '')} {a['annotations'].get('summary', '')}",
                flush=True,
            )
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def start(cmd: list[str], log: Path, *, cwd: Path | None = None) -> ManagedProcess:
    return ManagedProcess(cmd, log, cwd=cwd)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="dnsfleet demo stack, native binaries")
    p.add_argument("--duration", type=float, default=0, help="stop after N seconds")
    p.add_argument("--dir", default=None, help="run directory (default: a temp dir)")
    args = p.parse_args(argv)
    run = Path(args.dir or tempfile.mkdtemp(prefix="dnsfleet-stack-"))
    run.mkdir(parents=True, exist_ok=True)
    procs: list[ManagedProcess] = []
    consul = ConsulDouble()
    consul.dns_port, consul.http_port = 8600, 8500
    relay = ThreadingHTTPServer(("127.0.0.1", 9095), Relay)
    threading.Thread(target=relay.serve_forever, daemon=True).start()
    try:
        consul.start()
        consul.add_node("demo", "127.0.0.10")
        consul.register("web", "demo", 8080)
        spec = json.loads((COMPOSE / "consul" / "web-nearest.json").read_text())
        consul.create_query(spec["Name"], spec["Service"]["Service"])

        procs.append(
            start(
                [binary("unbound"), "-d", "-c", str(COMPOSE / "unbound" / "unbound.conf")],
                run / "unbound.log",
            )
        )
        wait_dns("127.0.0.1", 5353, "www.dnsfleet.test.", "A")

        cfg: dict[str, Any] = yaml.safe_load((COMPOSE / "dnsfleet" / "dnsfleet.yml").read_text())
        cfg["resolv_conf"] = []
        cfg["resolver"]["capacity_file"] = str(run / "capacity.json")
        (run / "dnsfleet.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        procs.append(
            start(
                [
                    sys.executable,
                    "-m",
                    "dnsfleet",
                    f"--config.file={run / 'dnsfleet.yml'}",
                    "--web.listen-address=127.0.0.1:9853",
                ],
                run / "exporter.log",
            )
        )
        procs[-1].wait_until(HttpOk("http://127.0.0.1:9853/-/healthy"), timeout=30)

        procs.append(
            start(
                [
                    binary("prometheus-alertmanager"),
                    f"--config.file={ALERTMANAGER_YML}",
                    f"--storage.path={run / 'alertmanager'}",
                    "--web.listen-address=127.0.0.1:9093",
                    "--cluster.listen-address=",
                ],
                run / "alertmanager.log",
            )
        )
        procs[-1].wait_until(HttpOk("http://127.0.0.1:9093/-/ready"), timeout=30)
        # Started in compose/prometheus so the relative rules/ and targets/ resolve as in
        # the container.
        procs.append(
            start(
                [
                    binary("prometheus"),
                    f"--config.file={PROMETHEUS_YML}",
                    f"--storage.tsdb.path={run / 'prometheus'}",
                    "--web.listen-address=127.0.0.1:9090",
                ],
                run / "prometheus.log",
                cwd=PROMETHEUS_YML.parent,
            )
        )
        procs[-1].wait_until(HttpOk("http://127.0.0.1:9090/-/ready"), timeout=30)
        print(
            f"dnsfleet stack up (logs in {run}):\n"
            "  exporter     http://127.0.0.1:9853/\n"
            "  prometheus   http://127.0.0.1:9090/alerts\n"
            "  alertmanager http://127.0.0.1:9093/\n"
            "  notifications are printed below; Ctrl-C stops everything",
            flush=True,
        )
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        with contextlib.suppress(KeyboardInterrupt):
            stop.wait(args.duration or None)
        return 0
    finally:
        for proc in reversed(procs):
            proc.stop()
        consul.stop()
        relay.shutdown()
        relay.server_close()


if __name__ == "__main__":
    sys.exit(main())
