"""The processes `make bench` measures, side by side on one loopback resolver: one unbound on
0.0.0.0 with interface-automatic (it answers every 127.x.y.z from the address asked, so
10,000 targets are 10,000 loopback addresses that really answer, on one socket), a
dnsfleet for ``/probe``, a dnsfleet per fleet size for ``/metrics`` (1,000 and 10,000
configured targets), blackbox_exporter and, when installed, dns_exporter."""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tests.harness.tools import free_port
from tests.wildcard import WildcardUnbound

from bench.common import Window, check, cycling_script, spawn, stop, target_addresses, wrk

QNAME = "a.local.test"
BLACKBOX_CONFIG = f"""modules:
  dns_a:
    prober: dns
    timeout: 2s
    dns:
      query_name: {QNAME}
      query_type: A
      transport_protocol: udp
      preferred_ip_protocol: ip4
      valid_rcodes: [NOERROR]
"""


def write_dnsfleet_config(path: Path, targets: list[str], port: int) -> Path:
    """A module with nothing but its query (every other setting at its default), the given
    targets, and ``/probe`` allowed on loopback only."""
    lines = [
        "resolv_conf: []",  # never probe this machine's own resolver
        "modules:",
        "  bench:",
        f"    query_name: {QNAME}",
        "    query_type: A",
        "targets:",
    ]
    lines += [f'  - {{address: "{a}:{port}", module: bench}}' for a in targets]
    lines += ["probe_allowlist: [127.0.0.0/8]"]
    path.write_text("\n".join(lines) + "\n")
    return path


@dataclass
class Peer:
    """One exporter process and how to ask it for one target's probe."""

    name: str
    proc: subprocess.Popen[bytes]
    base: str  # http://127.0.0.1:port
    probe_path: str  # with {target} where the resolver's host:port goes
    success: str  # what a successful probe's body says

    @property
    def pid(self) -> int:
        return self.proc.pid

    def probe_url(self, target: str) -> str:
        return self.base + self.probe_path.format(target=target)


@dataclass
class Lab:
    work: Path
    sizes: tuple[int, ...]  # fleet sizes scraped through /metrics
    distinct: int  # distinct targets /probe cycles through
    unbound: WildcardUnbound | None = None
    peers: dict[str, Peer] = field(default_factory=dict)  # the /probe exporters
    fleets: dict[int, Peer] = field(default_factory=dict)  # size -> its /metrics dnsfleet
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    event_loop: str = "auto"  # each dnsfleet's --event-loop

    @property
    def port(self) -> int:
        assert self.unbound is not None
        return self.unbound.port

    def target(self, address: str) -> str:
        return f"{address}:{self.port}"

    def start(self, dns_exporter: Path) -> Lab:
        unbound = WildcardUnbound(self.work / "unbound", port=free_port())
        unbound.local_data = [f"{QNAME}. 3600 IN A 192.0.2.1"]
        unbound.start()
        self.unbound = unbound
        one = write_dnsfleet_config(self.work / "one.yml", ["127.0.0.1"], self.port)
        self.peers["dnsfleet"] = self._dnsfleet("dnsfleet", one)
        self.peers["blackbox_exporter"] = self._blackbox()
        if dns_exporter.exists():
            self.peers["dns_exporter"] = self._dns_exporter(dns_exporter)
        else:
            print(f"dns_exporter not found at {dns_exporter}: skipped", file=sys.stderr)
        for n in self.sizes:
            conf = self.work / f"fleet-{n}.yml"
            write_dnsfleet_config(conf, target_addresses(n), self.port)
            self.fleets[n] = self._dnsfleet(f"dnsfleet-{n}", conf)
        for peer in self.peers.values():
            check(peer.probe_url(self.target("127.0.0.1")), peer.success)
            check(peer.probe_url(self.target(target_addresses(self.distinct)[-1])), peer.success)
        for n, fleet in self.fleets.items():
            last = self.target(target_addresses(n)[-1])
            check(fleet.base + "/metrics", f'dnsfleet_probe_success{{target="{last}"')
        return self

    def probe_window(self, peer: Peer, *, distinct: bool, seconds: int) -> Window:
        """``wrk -t1 -c8`` on ``peer``'s /probe: at the one target 127.0.0.1, or cycling
        through ``distinct`` loopback targets (a wrk Lua script, one per peer)."""
        if not distinct:
            url = peer.probe_url(self.target("127.0.0.1"))
            return wrk(url, peer.pid, seconds=seconds, connections=8)
        script = self.work / f"{peer.name}-distinct.lua"
        if not script.exists():
            paths = [
                peer.probe_path.format(target=self.target(a))
                for a in target_addresses(self.distinct)
            ]
            cycling_script(script, paths)
        return wrk(peer.base + "/", peer.pid, seconds=seconds, connections=8, script=script)

    def stop(self) -> None:
        for p in self.procs:
            stop(p)
        if self.unbound is not None:
            self.unbound.stop()

    def _spawn(self, name: str, cmd: list[str], ready: str) -> subprocess.Popen[bytes]:
        proc = spawn(cmd, ready, self.work / f"{name}.log")
        self.procs.append(proc)
        return proc

    def _dnsfleet(self, name: str, config: Path) -> Peer:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "dnsfleet", "--log.level=warn", f"--config.file={config}"]
        cmd.append(f"--event-loop={self.event_loop}")
        proc = self._spawn(
            name, [*cmd, f"--web.listen-address=127.0.0.1:{port}"], base + "/-/healthy"
        )
        return Peer(
            name, proc, base, "/probe?target={target}&module=bench", "dnsfleet_probe_success 1"
        )

    def _blackbox(self) -> Peer:
        conf = self.work / "blackbox.yml"
        conf.write_text(BLACKBOX_CONFIG)
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        binary = shutil.which("prometheus-blackbox-exporter") or "blackbox_exporter"
        cmd = [binary, f"--config.file={conf}", f"--web.listen-address=127.0.0.1:{port}"]
        proc = self._spawn("blackbox", [*cmd, "--log.level=warn"], base + "/-/healthy")
        return Peer(
            "blackbox_exporter",
            proc,
            base,
            "/probe?target={target}&module=dns_a",
            "probe_success 1",
        )

    def _dns_exporter(self, binary: Path) -> Peer:
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        proc = self._spawn(
            "dns_exporter", [str(binary), "-L", "127.0.0.1", "-p", str(port), "-q"], base + "/"
        )
        path = f"/query?server=udp://{{target}}&query_name={QNAME}&query_type=A"
        return Peer("dns_exporter", proc, base, path, "dnsexp_dns_query_success 1")
