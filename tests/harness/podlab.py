"""A node and its pods as network namespaces, for the pod-view oracle
(tests/test_podview_*.py in namespaces).

    node namespace                                   pod namespaces (veth to the node)
    CoreDNS backends, as a cluster's DNS pods:       10.244.N.5/24, fd00:244:N::5/64,
      10.96.1.1  serves cluster.local from the       default routes via the node,
                 file plugin, forwards the rest      /etc/netns/<pod>/resolv.conf and
                 to the "outside"                    nsswitch.conf (``ip netns exec``
      10.96.1.2  the same, made silent once up     bind-mounts them over /etc)
                 (SIGSTOP: a hung pod still listed
                 as an endpoint, whose socket takes
                 datagrams and never answers)
      10.96.1.3  answers SERVFAIL to everything
    127.0.0.2    the "outside": unbound serving example.test., NXDOMAIN for every other name

Service VIPs are DNATed in the node's prerouting hook (nftables), as kube-proxy does:
10.96.0.10 to the live backend, 10.96.0.11 to the silent one, 10.96.0.12 to both
(``numgen random mod 2``, kube-proxy's nftables mode, or ``numgen inc`` when a test needs
the same choices for two clients), 10.96.0.13 to the SERVFAIL server. Conntrack in the
node namespace counts each flow's datagrams (``nf_conntrack_acct``): ``conntrack -L``
shows which backend a source port was pinned to and how many datagrams it sent there.

Every query a CoreDNS backend receives is a line of its log (the ``log`` plugin), the
silent backend's a count of the node's ``silent`` counter, the SERVFAIL server's a line of its
own: a test counts what a client sent exactly. Nothing here reaches the host's network.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.harness import gotools
from tests.harness.netlab import netns_available
from tests.harness.process import terminate
from tests.harness.tools import binary

CLUSTER_DNS = "10.96.0.10"  # -> LIVE
SILENT_VIP = "10.96.0.11"  # -> DEAD: its only backend is silent
SPLIT_VIP = "10.96.0.12"  # -> DEAD or LIVE, per flow
SERVFAIL_DNS = "10.96.0.13"  # -> SERVFAILING
LIVE, DEAD, SERVFAILING = "10.96.1.1", "10.96.1.2", "10.96.1.3"
OUTSIDE = "127.0.0.2"
SEARCH = "demo.svc.cluster.local svc.cluster.local cluster.local"

CLUSTER_ZONE = """$ORIGIN cluster.local.
@ 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30
@ 30 IN NS ns.dns.cluster.local.
ns.dns 30 IN A 10.96.0.10
api.demo.svc 30 IN A 10.96.0.20
txtonly.demo.svc 30 IN TXT "note"
"""
# An answer too large for 512 octets: a UDP answer without EDNS comes back truncated. A
# chain of long CNAMEs, not a large RRset: glibc's getaddrinfo keeps each address of an
# answer in a buffer of 1024 octets and, when they do not fit, asks the whole lookup again.
BIG = "big.demo.svc"
_LONG = [".".join(c * 63 for _ in range(3)) + ".demo.svc" for c in "xyz"]
BIG_ZONE = (
    f"{BIG} 30 IN CNAME {_LONG[0]}\n"
    f"{_LONG[0]} 30 IN CNAME {_LONG[1]}\n"
    f"{_LONG[1]} 30 IN CNAME {_LONG[2]}\n"
    f"{_LONG[2]} 30 IN A 10.96.3.1\n"
)
OUTSIDE_ZONE = [
    "www.example.test. 300 IN A 192.0.2.80",
    "www.example.test. 300 IN AAAA 2001:db8::80",
    "v4only.example.test. 300 IN A 192.0.2.81",
]

SERVFAIL_SERVER = """
import socket, sys
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind((sys.argv[1], 53))
out = open(sys.argv[2], "a", buffering=1)
print("ready", flush=True)
while True:
    data, addr = u.recvfrom(65535)
    out.write(f"{addr[0]} {addr[1]} {len(data)}\\n")
    if len(data) >= 12:  # the query echoed: QR, its RD, RA, rcode 2
        u.sendto(data[:2] + bytes([0x80 | data[2] & 0x01, 0x82]) + data[4:], addr)
"""

COREFILE = """
cluster.local:53 {{
    bind {addr}
    errors
    log
    file {zone} cluster.local
}}
.:53 {{
    bind {addr}
    errors
    log
    forward . {outside}
}}
"""

NFT = f"""
table ip podlab {{
    counter silent {{ }}
    chain split {{ }}
    chain prerouting {{
        type nat hook prerouting priority dstnat; policy accept;
        ip daddr {CLUSTER_DNS} meta l4proto {{ udp, tcp }} th dport 53 dnat to {LIVE}
        ip daddr {SILENT_VIP} meta l4proto {{ udp, tcp }} th dport 53 dnat to {DEAD}
        ip daddr {SERVFAIL_DNS} udp dport 53 dnat to {SERVFAILING}
        ip daddr {SPLIT_VIP} meta l4proto {{ udp, tcp }} th dport 53 goto split
    }}
    chain input {{
        type filter hook input priority filter; policy accept;
        iifname != "lo" ip daddr {DEAD} udp dport 53 counter name silent
    }}
}}
"""

_QUERY = re.compile(r'"(\S+) IN (\S+) (udp|tcp) ')


@dataclass(frozen=True)
class Flow:
    """One conntrack entry: a client's source port and the backend it was DNATed to."""

    sport: int
    backend: str
    packets: int  # datagrams the client sent in this flow
    replied: bool


def _unbound_conf(workdir: Path) -> Path:
    data = "\n".join(f'  local-data: "{d}"' for d in OUTSIDE_ZONE)
    conf = workdir / "unbound.conf"
    conf.write_text(f"""
server:
  interface: {OUTSIDE}
  port: 53
  do-daemonize: no
  username: ""
  chroot: ""
  directory: "{workdir}"
  pidfile: ""
  use-syslog: no
  logfile: "{workdir}/unbound.log"
  verbosity: 0
  num-threads: 1
  module-config: "iterator"
  access-control: 127.0.0.0/8 allow
  local-zone: "test." nodefault
  local-zone: "." static
  local-zone: "example.test." static
{data}
""")
    return conf


@dataclass
class PodLab:
    name: str
    workdir: Path
    pods: list[str] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _silent: int | None = None  # procs' index of the backend made silent

    @property
    def node(self) -> str:
        return f"{self.name}-node"

    def node_exec(self, *args: str) -> list[str]:
        return ["ip", "netns", "exec", self.node, *args]

    def pod_exec(self, pod: str, *args: str) -> list[str]:
        return ["ip", "netns", "exec", pod, *args]

    def _log(self, backend: str) -> Path:
        return self.workdir / f"coredns-{backend}" / "coredns.log"

    def cluster_queries(self) -> list[str]:
        """Every query the CoreDNS backends got: ``<type> <name> <proto>``."""
        out = []
        for backend in (LIVE, DEAD):
            log = self._log(backend)
            text = log.read_text(errors="replace") if log.exists() else ""
            out += [" ".join(m.groups()) for m in _QUERY.finditer(text)]
        return out

    def silent_datagrams(self) -> int:
        """Datagrams that reached the silent backend from the pods."""
        out = self._nft("-j", "list", "counter", "ip", "podlab", "silent")
        for item in json.loads(out)["nftables"]:
            if "counter" in item:
                return int(item["counter"]["packets"])
        raise AssertionError(out)

    def servfail_datagrams(self) -> int:
        log = self.workdir / "servfail.log"
        return len(log.read_text().splitlines()) if log.exists() else 0

    def queries(self) -> int:
        """Every query any backend got, answered or not."""
        return len(self.cluster_queries()) + self.silent_datagrams() + self.servfail_datagrams()

    def flows(self, vip: str) -> list[Flow]:
        """The node's conntrack entries for UDP to ``vip`` (``conntrack -L``)."""
        out = subprocess.run(
            self.node_exec(binary("conntrack"), "-L", "-p", "udp", "--orig-dst", vip),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        flows = []
        for line in out.splitlines():
            # The original direction's fields, then the reply's from its own src= on.
            words = line.split()
            at = [i for i, w in enumerate(words) if w.startswith("src=")]
            if len(at) < 2:
                continue
            orig = dict(w.split("=", 1) for w in words[at[0] : at[1]] if "=" in w)
            reply = dict(w.split("=", 1) for w in words[at[1] :] if "=" in w)
            flows.append(
                Flow(
                    sport=int(orig["sport"]),
                    backend=reply["src"],
                    packets=int(orig["packets"]),
                    replied="[UNREPLIED]" not in line,
                )
            )
        return flows

    def forget_flows(self) -> None:
        """Empty the node's conntrack table, as when a test starts afresh."""
        subprocess.run(
            self.node_exec(binary("conntrack"), "-F"), capture_output=True, timeout=30, check=True
        )

    def split(self, mode: str) -> None:
        """The split VIP's choice of backend: ``random`` or ``inc`` (round robin, the silent
        backend first; the rule is made anew, so its count starts again)."""
        assert mode in ("random", "inc"), mode
        self._nft("flush", "chain", "ip", "podlab", "split")
        self._nft(
            "add", "rule", "ip", "podlab", "split",
            "dnat", "to", "numgen", mode, "mod", "2", "map", f"{{ 0 : {DEAD}, 1 : {LIVE} }}",
        )  # fmt: skip

    def _nft(self, *args: str) -> str:
        return subprocess.run(
            self.node_exec(binary("nft"), *args),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout

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

    def _spawn(self, cmd: list[str], log: Path) -> subprocess.Popen[bytes]:
        with log.open("ab") as fh:
            p = subprocess.Popen(self.node_exec(*cmd), stdout=fh, stderr=fh)
        self.procs.append(p)
        return p

    def start(self) -> PodLab:
        self._ip("netns", "add", self.node)
        self._ip("link", "set", "lo", "up", ns=self.node)
        for addr in (LIVE, DEAD, SERVFAILING, OUTSIDE):
            self._ip("addr", "add", f"{addr}/32", "dev", "lo", ns=self.node)
        # Per-flow packet counts in conntrack -L: a per-namespace setting.
        acct = "open('/proc/sys/net/netfilter/nf_conntrack_acct', 'w').write('1')"
        subprocess.run(self.node_exec(sys.executable, "-c", acct), check=True, timeout=30)
        (self.workdir / "podlab.nft").write_text(NFT)
        self._nft("-f", str(self.workdir / "podlab.nft"))
        self.split("random")
        outside = self.workdir / "outside"
        outside.mkdir(parents=True, exist_ok=True)
        conf = _unbound_conf(outside)
        self._spawn([binary("unbound"), "-d", "-c", str(conf)], outside / "unbound.stderr")
        coredns = gotools.coredns()
        for backend in (LIVE, DEAD):
            d = self._log(backend).parent
            d.mkdir(parents=True, exist_ok=True)
            (d / "cluster.local.zone").write_text(CLUSTER_ZONE + BIG_ZONE)
            corefile = COREFILE.format(addr=backend, zone=d / "cluster.local.zone", outside=OUTSIDE)
            (d / "Corefile").write_text(corefile)
            if backend == DEAD:
                self._silent = len(self.procs)
            self._spawn([coredns, "-conf", str(d / "Corefile")], self._log(backend))
        sf = subprocess.Popen(
            self.node_exec(
                sys.executable,
                "-c",
                SERVFAIL_SERVER,
                SERVFAILING,
                str(self.workdir / "servfail.log"),
            ),
            stdout=subprocess.PIPE,
        )
        self.procs.append(sf)
        assert sf.stdout is not None
        if sf.stdout.readline().strip() != b"ready":
            raise RuntimeError("the SERVFAIL server did not start")
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        """Both CoreDNS backends answer a name from the outside and one from their zone; then
        the second is stopped (a test counts its clients' queries from there on)."""
        want = (("www.example.test", "192.0.2.80"), ("api.demo.svc.cluster.local", "10.96.0.20"))
        deadline = time.monotonic() + 60
        pending = [(b, n, a) for b in (LIVE, DEAD) for n, a in want]
        while pending and time.monotonic() < deadline:
            backend, qname, addr = pending[0]
            r = subprocess.run(
                self.node_exec(
                    binary("dig"), "+short", "+time=1", "+tries=1", f"@{backend}", qname
                ),
                capture_output=True,
                text=True,
                timeout=30,
            )
            if addr in r.stdout:
                pending.pop(0)
            else:
                time.sleep(0.2)
        if pending:
            logs = "".join(
                p.read_text(errors="replace")[-1500:]
                for p in self.workdir.glob("*/*")
                if p.suffix in (".log", ".stderr")
            )
            raise RuntimeError(f"the cluster DNS never answered {pending[0]}:\n{logs}")
        # Not a drop rule: a datagram dropped in the input hook never confirms its conntrack
        # entry, so each retry would be DNATed afresh, which is not how a dead pod behaves.
        assert self._silent is not None
        self.procs[self._silent].send_signal(signal.SIGSTOP)

    def stop(self) -> None:
        if self._silent is not None:
            self.procs[self._silent].send_signal(signal.SIGCONT)
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
