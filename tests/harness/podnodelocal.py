"""The pod lab (tests/harness/podlab.py) with NodeLocal DNSCache: the suite's CoreDNS as
node-cache on 169.254.20.10 in the node namespace, on a port-less bridge (node-cache's
dummy interface; this kernel has no dummy driver, and such a bridge holds a local address
alike), forwarding to the cluster DNS VIP. The node's own traffic to the VIP is DNATed in
the output hook, as kube-proxy does for host-network clients.

What the pods send to the cache is counted by the node's ``nodelocal`` counter (every
datagram from a pod's veth, whether node-cache answers, is stopped or is gone), so a
lookup's count holds in every state; the backends' log lines count only the pods' own
queries, not the ones node-cache forwards for them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.harness import gotools
from tests.harness.netlab import netns_available
from tests.harness.podlab import CLUSTER_DNS, DEAD, LIVE, PodLab
from tests.harness.tools import binary

CACHE = "169.254.20.10"
INTERFACE = "nodelocaldns"

NODE_CACHE = f"""
.:53 {{
    bind {CACHE}
    errors
    cache 30
    forward . {CLUSTER_DNS}
}}
"""

_DNAT = f"ip daddr {CLUSTER_DNS} meta l4proto {{ udp, tcp }} th dport 53 dnat to {LIVE}"
NFT = f"""
add counter ip podlab nodelocal
add chain ip podlab output {{ type nat hook output priority -100; policy accept; }}
add rule ip podlab output {_DNAT}
add rule ip podlab input iifname != "lo" ip daddr {CACHE} udp dport 53 counter name nodelocal
"""

# A backend's log line for a query from a pod (10.244.N.5), not one node-cache forwarded.
_POD_QUERY = re.compile(r'\] 10\.244\.\d+\.\d+:\d+ - \d+ "(\S+) IN (\S+) (udp|tcp) ')


@dataclass
class NodeLocalLab(PodLab):
    cache: subprocess.Popen[bytes] | None = None
    cache_stopped: bool = False

    def start(self) -> NodeLocalLab:
        super().start()
        ip = binary("ip")
        for cmd in (
            ("link", "add", INTERFACE, "type", "bridge"),
            ("addr", "add", f"{CACHE}/32", "dev", INTERFACE),
            ("link", "set", INTERFACE, "up"),
            # The node has no default route: one to the VIP, which the output hook DNATs.
            ("route", "add", f"{CLUSTER_DNS}/32", "dev", "lo"),
        ):
            subprocess.run(self.node_exec(ip, *cmd), check=True, capture_output=True, timeout=30)
        # The node answers a datagram to the killed cache's port with ICMP port unreachable,
        # but by default at most 6 at once and then one a second per pod address
        # (icmp_ratelimit): a test's lookups would meet refusal or silence by the run's luck.
        # Unlimited here, per namespace, so that a killed cache always refuses.
        limit = "open('/proc/sys/net/ipv4/icmp_ratelimit', 'w').write('0')"
        subprocess.run(self.node_exec(sys.executable, "-c", limit), check=True, timeout=30)
        (self.workdir / "nodelocal.nft").write_text(NFT)
        self._nft("-f", str(self.workdir / "nodelocal.nft"))
        (self.workdir / "node-cache.Corefile").write_text(NODE_CACHE)
        self.node_cache("up")
        return self

    def node_cache(self, state: str) -> None:
        """node-cache ``up`` (started again if killed), ``hung`` (SIGSTOP: its socket takes
        datagrams and never answers) or ``killed`` (SIGKILL, its interface left: the node
        answers ICMP port unreachable)."""
        assert state in ("up", "hung", "killed"), state
        if self.cache is not None and self.cache_stopped:
            self.cache.send_signal(signal.SIGCONT)
            self.cache_stopped = False
        if self.cache is None or self.cache.poll() is not None:
            conf = str(self.workdir / "node-cache.Corefile")
            self.cache = self._spawn(
                [gotools.coredns(), "-conf", conf], self.workdir / "node-cache.log"
            )
            self._wait_cache()
        if state == "hung":
            self.cache.send_signal(signal.SIGSTOP)
            self.cache_stopped = True
        elif state == "killed":
            self.cache.kill()
            self.cache.wait(timeout=30)

    def _wait_cache(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            r = subprocess.run(
                self.node_exec(
                    binary("dig"), "+short", "+time=1", "+tries=1", f"@{CACHE}",
                    "api.demo.svc.cluster.local",
                ),
                capture_output=True, text=True, timeout=30,
            )  # fmt: skip
            if "10.96.0.20" in r.stdout:
                return
            time.sleep(0.2)
        log = (self.workdir / "node-cache.log").read_text(errors="replace")[-1500:]
        raise RuntimeError(f"node-cache never answered:\n{log}")

    def cluster_queries(self) -> list[str]:
        out = []
        for backend in (LIVE, DEAD):
            log = self._log(backend)
            text = log.read_text(errors="replace") if log.exists() else ""
            out += [" ".join(m.groups()) for m in _POD_QUERY.finditer(text)]
        return out

    def cache_datagrams(self) -> int:
        out = self._nft("-j", "list", "counter", "ip", "podlab", "nodelocal")
        for item in json.loads(out)["nftables"]:
            if "counter" in item:
                return int(item["counter"]["packets"])
        raise AssertionError(out)

    def queries(self) -> int:
        return super().queries() + self.cache_datagrams()

    def stop(self) -> None:
        if self.cache is not None and self.cache_stopped:
            self.cache.send_signal(signal.SIGCONT)
        super().stop()


@contextlib.contextmanager
def nodelocal_podlab(workdir: Path) -> Iterator[NodeLocalLab]:
    reason = netns_available()
    if reason:
        pytest.skip(reason)
    lab = NodeLocalLab(f"dnsfleet-pvnl-{os.getpid()}-{time.monotonic_ns() % 100000}", workdir)
    try:
        yield lab.start()
    finally:
        lab.stop()
