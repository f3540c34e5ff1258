"""A node and its pods as network namespaces, for the pod-view oracle
(tests/test_podview_oracle.py).

    node namespace                                 pod namespaces (veth to the node)
    10.96.0.10:53  cluster DNS: unbound, serving   10.244.N.5/24, fd00:244:N::5/64,
                   cluster.local itself and        default routes via the node,
                   forwarding the rest to          /etc/netns/<pod>/resolv.conf and
    127.0.0.2:53   the "outside": unbound serving  nsswitch.conf (``ip netns exec``
                   example.test., NXDOMAIN for     bind-mounts them over /etc)
                   every other name
    10.96.0.11:53  a service VIP whose only backend is silent: takes every datagram,
                   answers none, and writes a line per datagram

Every query the cluster DNS receives is a line of its log (``log-queries``), so a test
counts what a client sent exactly. Nothing here reaches the host's network: traffic stays
between namespaces the lab creates.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.harness.netlab import netns_available
from tests.harness.process import terminate
from tests.harness.tools import binary

CLUSTER_DNS = "10.96.0.10"
SILENT_VIP = "10.96.0.11"
OUTSIDE = "127.0.0.2"
SEARCH = "demo.svc.cluster.local svc.cluster.local cluster.local"

CLUSTER_ZONE = [
    "api.demo.svc.cluster.local. 30 IN A 10.96.0.20",
    "txtonly.demo.svc.cluster.local. 30 IN TXT note",
]
OUTSIDE_ZONE = [
    "www.example.test. 300 IN A 192.0.2.80",
    "www.example.test. 300 IN AAAA 2001:db8::80",
    "v4only.example.test. 300 IN A 192.0.2.81",
]

COUNTING_BLACKHOLE = """
import socket, sys
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind((sys.argv[1], 53))
out = open(sys.argv[2], "a", buffering=1)
print("ready", flush=True)
while True:
    data, addr = u.recvfrom(65535)
    out.write(f"{addr[0]} {addr[1]} {len(data)}\\n")
"""


def _unbound_conf(workdir: Path, *, host: str, local: list[str], forward: str | None) -> Path:
    data = "\n".join(f'  local-data: "{d}"' for d in local)
    zones = (
        '  local-zone: "cluster.local." static\n'
        if forward
        else '  local-zone: "." static\n  local-zone: "example.test." static\n'
    )
    fwd = f'forward-zone:\n  name: "."\n  forward-addr: {forward}\n' if forward else ""
    conf = workdir / "unbound.conf"
    conf.write_text(f"""
server:
  interface: {host}
  port: 53
  do-daemonize: no
  username: ""
  chroot: ""
  directory: "{workdir}"
  pidfile: ""
  use-syslog: no
  logfile: "{workdir}/unbound.log"
  verbosity: 0
  log-queries: yes
  num-threads: 1
  do-not-query-localhost: no
  module-config: "iterator"
  access-control: 10.244.0.0/16 allow
  access-control: 10.96.0.0/12 allow
  access-control: fd00::/8 allow
  local-zone: "test." nodefault
{zones}{data}
{fwd}""")
    return conf


@dataclass
class PodLab:
    name: str
    workdir: Path
    pods: list[str] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def node(self) -> str:
        return f"{self.name}-node"

    def node_exec(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.node, *args]

    def pod_exec(self, pod: str, *args: str) -> list[str]:
        return ["ip", "netns", "exec", pod, *args]

    @property
    def cluster_log(self) -> Path:
        return self.workdir / "cluster" / "unbound.log"

    @property
    def blackhole_log(self) -> Path:
        return self.workdir / "blackhole.log"

    def cluster_queries(self) -> list[str]:
        """Every query the cluster DNS got: ``<client> <name> <type> <class>``."""
        if not self.cluster_log.exists():
            return []
        lines = self.cluster_log.read_text().splitlines()
        return [ln.split("info: ", 1)[1] for ln in lines if "info: " in ln]

    def silent_ports(self, since: int) -> list[int]:
        """The source port of each datagram the silent backend got, from the ``since``-th."""
        lines = self.blackhole_log.read_text().splitlines() if self.blackhole_log.exists() else []
        return [int(ln.split()[1]) for ln in lines[since:]]

    def silent_datagrams(self) -> int:
        return (
            len(self.blackhole_log.read_text().splitlines()) if self.blackhole_log.exists() else 0
        )

    def _ip(self, *args: str, ns: str | None = None) -> None:
        cmd = ["ip", *args] if ns is None else ["ip", "netns", "exec", ns, "ip", *args]
        subprocess.run(cmd, check=True, capture_output=True)

    def add_pod(self, resolv_conf: str) -> str:
        """A pod namespace (veth to the node) whose /etc/resolv.conf is ``resolv_conf``."""
        n = len(self.pods)
        pod = f"{self.name}-pod{n}"
        self._ip("netns", "add", pod)
        self.pods.append(pod)
        etc = Path("/etc/netns") / pod
        etc.mkdir(parents=True, exist_ok=True)
        (etc / "resolv.conf").write_text(resolv_conf)
        (etc / "nsswitch.conf").write_text("hosts: dns\n")
        (etc / "hosts").write_text("127.0.0.1 localhost\n")
        host_if, pod_if = f"pv{os.getpid() % 10000}n{n}", f"pv{os.getpid() % 10000}p{n}"
        self._ip("link", "add", host_if, "type", "veth", "peer", "name", pod_if)
        self._ip("link", "set", host_if, "netns", self.node)
        self._ip("link", "set", pod_if, "netns", pod)
        self._ip("link", "set", "lo", "up", ns=pod)
        self._ip("addr", "add", f"10.244.{n}.1/24", "dev", host_if, ns=self.node)
        self._ip("addr", "add", f"fd00:244:{n}::1/64", "dev", host_if, "nodad", ns=self.node)
        self._ip("link", "set", host_if, "up", ns=self.node)
        self._ip("addr", "add", f"10.244.{n}.5/24", "dev", pod_if, ns=pod)
        self._ip("addr", "add", f"fd00:244:{n}::5/64", "dev", pod_if, "nodad", ns=pod)
        self._ip("link", "set", pod_if, "up", ns=pod)
        self._ip("route", "add", "default", "via", f"10.244.{n}.1", ns=pod)
        self._ip("-6", "route", "add", "default", "via", f"fd00:244:{n}::1", ns=pod)
        return pod

    def start(self) -> PodLab:
        self._ip("netns", "add", self.node)
        self._ip("link", "set", "lo", "up", ns=self.node)
        for vip in (CLUSTER_DNS, SILENT_VIP, OUTSIDE):
            self._ip("addr", "add", f"{vip}/32", "dev", "lo", ns=self.node)
        for sub, host, local, fwd in (
            ("outside", OUTSIDE, OUTSIDE_ZONE, None),
            ("cluster", CLUSTER_DNS, CLUSTER_ZONE, OUTSIDE),
        ):
            d = self.workdir / sub
            d.mkdir(parents=True, exist_ok=True)
            conf = _unbound_conf(d, host=host, local=local, forward=fwd)
            log = open(d / "unbound.stderr", "ab")  # noqa: SIM115
            self.procs.append(
                subprocess.Popen(
                    self.node_exec(binary("unbound"), "-d", "-c", str(conf)),
                    stdout=log,
                    stderr=log,
                )
            )
        bh = subprocess.Popen(
            self.node_exec(
                sys.executable, "-c", COUNTING_BLACKHOLE, SILENT_VIP, str(self.blackhole_log)
            ),
            stdout=subprocess.PIPE,
        )
        self.procs.append(bh)
        assert bh.stdout is not None
        if bh.stdout.readline().strip() != b"ready":
            raise RuntimeError("the silent backend did not start")
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            r = subprocess.run(
                self.node_exec(
                    binary("dig"),
                    "+short",
                    "+time=1",
                    "+tries=1",
                    f"@{CLUSTER_DNS}",
                    "www.example.test",
                    "A",
                ),
                capture_output=True,
                text=True,
                timeout=30,
            )
            if "192.0.2.80" in r.stdout:
                return
            time.sleep(0.2)
        logs = "".join(
            p.read_text()[-1500:] for p in self.workdir.glob("*/unbound*") if p.is_file()
        )
        raise RuntimeError(f"the cluster DNS never answered:\n{logs}")

    def stop(self) -> None:
        for p in self.procs:
            terminate(p, timeout=10)
        self.procs.clear()
        for pod in self.pods:
            subprocess.run(["ip", "netns", "del", pod], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / pod, ignore_errors=True)
        subprocess.run(["ip", "netns", "del", self.node], capture_output=True)


@contextlib.contextmanager
def podlab(workdir: Path) -> Iterator[PodLab]:
    reason = netns_available()
    if reason:
        pytest.skip(reason)
    lab = PodLab(f"dnsfleet-pv-{os.getpid()}-{time.monotonic_ns() % 100000}", workdir)
    try:
        yield lab.start()
    finally:
        lab.stop()
