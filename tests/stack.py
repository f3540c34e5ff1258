"""`make stack`: the compose stack without Docker, on this machine's loopback, with the
native Debian binaries. Prometheus runs compose/prometheus/prometheus.yml and Alertmanager
alerts/alertmanager.yml unchanged, on the ports and addresses compose gives them (read from
compose/docker-compose.yml: 127.0.0.1:19090 and 19093, exporter 9853); unbound runs
compose/unbound/unbound.conf unchanged (127.0.0.1:19053, remote control on 19054), and the
exporter compose/dnsfleet/dnsfleet.yml with only host paths changed (the capacity file lives
in the run directory, and the host's resolv.conf is not watched: this stack never queries
the machine's own resolver). Consul is the test double (tests/harness/consul_double.py) on
compose/consul/agent.hcl's DNS and HTTP ports with the demo service and prepared query;
there is no Debian Grafana, so dashboards are not served (import dashboards/json/*.json into
any Grafana pointed at the Prometheus).
Notifications arrive at a relay on 127.0.0.1:9095 that prints them.

    .venv/bin/python -m tests.stack [--duration SECONDS] [--dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
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


def listen_address(service: str) -> str:
    """The --web.listen-address compose gives a service."""
    compose = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    args = compose["services"][service]["command"]
    (addr,) = [a.split("=", 1)[1] for a in args if a.startswith("--web.listen-address=")]
    return str(addr)


def consul_port(name: str) -> int:
    m = re.search(rf"^\s*{name}\s*=\s*(\d+)", (COMPOSE / "consul" / "agent.hcl").read_text(), re.M)
    assert m, name
    return int(m.group(1))


def unbound_port() -> int:
    m = re.search(r"^\s*port:\s*(\d+)", (COMPOSE / "unbound" / "unbound.conf").read_text(), re.M)
    assert m
    return int(m.group(1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="dnsfleet demo stack, native binaries")
    p.add_argument("--duration", type=float, default=0, help="stop after N seconds")
    p.add_argument("--dir", default=None, help="run directory (default: a temp dir)")
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 0 once Prometheus has scraped the exporter's probes of the demo unbound "
        "and Consul (1 after 120 s); tests/test_compose.py runs it in a network namespace",
    )
    args = p.parse_args(argv)
    run = Path(args.dir or tempfile.mkdtemp(prefix="dnsfleet-stack-"))
    run.mkdir(parents=True, exist_ok=True)
    procs: list[ManagedProcess] = []
    consul = ConsulDouble()
    consul.dns_port, consul.http_port = consul_port("dns"), consul_port("http")
    prometheus, alertmanager = listen_address("prometheus"), listen_address("alertmanager")
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
        wait_dns("127.0.0.1", unbound_port(), "www.dnsfleet.test.", "A")

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
                    f"--web.listen-address={alertmanager}",
                    "--cluster.listen-address=",
                ],
                run / "alertmanager.log",
            )
        )
        procs[-1].wait_until(HttpOk(f"http://{alertmanager}/-/ready"), timeout=30)
        # Started in compose/prometheus so the relative rules/ and targets/ resolve as in
        # the container.
        procs.append(
            start(
                [
                    binary("prometheus"),
                    f"--config.file={PROMETHEUS_YML}",
                    f"--storage.tsdb.path={run / 'prometheus'}",
                    f"--web.listen-address={prometheus}",
                ],
                run / "prometheus.log",
                cwd=PROMETHEUS_YML.parent,
            )
        )
        procs[-1].wait_until(HttpOk(f"http://{prometheus}/-/ready"), timeout=30)
        print(
            f"dnsfleet stack up (logs in {run}):\n"
            "  exporter     http://127.0.0.1:9853/\n"
            f"  prometheus   http://{prometheus}/alerts\n"
            f"  alertmanager http://{alertmanager}/\n"
            "  notifications are printed below; Ctrl-C stops everything",
            flush=True,
        )
        if args.check:
            return check(prometheus)
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


CHECKS = (
    'up{{job="dnsfleet"}}',
    'dnsfleet_probe_success{{target="127.0.0.1:{port}"}}',
    "dnsfleet_resolver_stats_up",
    "dnsfleet_consul_dns_probe_success",
)


def check(prometheus: str) -> int:
    """Every CHECKS query has a series of value 1 in Prometheus, within 120 s."""
    queries = [q.format(port=unbound_port()) for q in CHECKS]
    deadline = time.monotonic() + 120
    missing = queries
    while time.monotonic() < deadline:
        missing = []
        for q in queries:
            url = f"http://{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": q})
            with urllib.request.urlopen(url, timeout=10) as resp:
                result = json.loads(resp.read())["data"]["result"]
            if not result or any(r["value"][1] != "1" for r in result):
                missing.append(q)
        if not missing:
            print("stack check: " + ", ".join(queries) + ": 1", flush=True)
            return 0
        time.sleep(1)
    print(f"stack check failed: {missing} not 1 in Prometheus", flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
