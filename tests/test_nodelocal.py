"""NodeLocal DNSCache: the pods' view model as a table, the config section, and the real
thing: CoreDNS (tests/coredns) as node-cache on 169.254.20.10 on a dummy interface of a
node network namespace, forwarding to a "cluster DNS" (unbound) on a Service-like address
in the same namespace; killed, its interface removed, the Service stopped, the collector's
model at each step (and the CoreDNS statistics read while it runs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dnsfleet.collectors.nodelocal import NodeView, PodPath, pod_path
from dnsfleet.config import ConfigError, parse
from tests.harness import gotools
from tests.harness.hosttree import FIXTURES
from tests.harness.netlab import netns_available
from tests.harness.process import terminate
from tests.harness.servers import Unbound
from tests.harness.tools import binary

CACHE, SERVICE = "169.254.20.10", "10.96.0.10"
NAME = "kubernetes.default.svc.cluster.local."
METRICS = f"http://{CACHE}:9253/metrics"

# ------------------------------------------------------------------ the model

P = PodPath
LINK_LOCAL = (CACHE,)  # kubelet clusterDNS: the cache alone (IPVS mode)
BOTH = (CACHE, SERVICE)  # the cache, then the Service: a resolv.conf fallback
IPTABLES = (SERVICE,)  # pods name the Service; node-cache intercepts it on the node
ROWS = [
    # (cache_up, service_up, interface_present, nameservers, path)
    (True, True, True, LINK_LOCAL, P.NODELOCAL),
    (False, True, True, LINK_LOCAL, P.NONE),
    (False, True, False, LINK_LOCAL, P.NONE),
    (True, False, True, BOTH, P.NODELOCAL),
    (False, True, True, BOTH, P.RESOLV_CONF_FALLBACK),
    (False, True, False, BOTH, P.RESOLV_CONF_FALLBACK),
    (False, False, True, BOTH, P.NONE),
    ((False, True, True, (SERVICE, CACHE), P.NONE)),  # the Service is before: iptables mode
    (True, True, True, IPTABLES, P.NODELOCAL),
    # A crashed node-cache left its interface: the node owns the Service address.
    (False, True, True, IPTABLES, P.NONE),
    # node-cache removed its interface and rules on exit: kube-proxy's path again.
    (False, True, False, IPTABLES, P.IPTABLES_FALLBACK),
    (False, False, False, IPTABLES, P.NONE),
    (True, True, True, ("10.0.0.2",), P.NONE),  # pods name neither: not this cache's pods
]


@pytest.mark.unit
@pytest.mark.parametrize(("cache_up", "service_up", "present", "nameservers", "want"), ROWS)
def test_pod_path(
    cache_up: bool, service_up: bool, present: bool, nameservers: tuple[str, ...], want: PodPath
) -> None:
    view = NodeView(cache_up=cache_up, service_up=service_up, interface_present=present)
    assert pod_path(view, cache=CACHE, service=SERVICE, nameservers=nameservers) is want


@pytest.mark.unit
@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"address": CACHE}, "nodelocal: cluster_dns is required with address"),
        ({"cluster_dns": SERVICE}, "nodelocal.cluster_dns: only meaningful with address"),
        ({"address": "fe80::1", "cluster_dns": SERVICE}, '"fe80::1" is not an IPv4 address'),
        ({"address": CACHE, "cluster_dns": CACHE}, "cluster_dns is the cache's own address"),
        (
            {"address": CACHE, "cluster_dns": SERVICE, "interface": "x" * 16},
            "is not a Linux interface name",
        ),
        ({"address": CACHE, "cluster_dns": SERVICE, "mode": "ipvs"}, "nodelocal.mode: unknown"),
    ],
)
def test_config_refuses(section: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse({"targets": [], "nodelocal": section}, source="t")


@pytest.mark.unit
def test_config_defaults() -> None:
    cfg = parse(
        {"targets": [], "nodelocal": {"address": CACHE, "cluster_dns": SERVICE}}, source="t"
    )
    assert cfg.nodelocal.nameservers == (CACHE,)
    assert (cfg.nodelocal.interface, cfg.nodelocal.query_type) == ("nodelocaldns", "A")
    assert parse({"targets": []}, source="t").nodelocal.address is None


# ------------------------------------------------------------------ the real thing

# Run in the node namespace: the collector once per pods' configuration, and the CoreDNS
# statistics the resolver collector reads (its own reader, type coredns).
OBSERVE = (
    """
import asyncio, json, sys
from dnsfleet.collectors import COLLECTORS, CollectContext, run_collectors
from dnsfleet.config import StatsSource, parse
from dnsfleet.hostfs import HostFS
from dnsfleet.resolverstats import read_stats

async def one(nameservers):
    cfg = parse({"targets": [], "nodelocal": {"address": "%(cache)s", "cluster_dns":
        "%(service)s", "pod_nameservers": nameservers, "probe_timeout": "1s"}}, source="t")
    loop = asyncio.get_running_loop()
    ctx = CollectContext(fs=HostFS(), config=cfg, deadline=loop.time() + 20, state={})
    fams = await run_collectors(ctx, {"nodelocal": COLLECTORS["nodelocal"]})
    return {f.name + "{" + lab.text + "}": v for f in fams for _, lab, v in f.samples
            if f.name.startswith("dnsfleet_nodelocal")}

async def main():
    out = {"views": {}}
    for name, ns in json.loads(sys.argv[1]).items():
        out["views"][name] = await one(ns)
    try:
        import aiohttp
        async with aiohttp.ClientSession() as s:
            st = await read_stats(StatsSource(type="coredns", url="%(metrics)s"), s)
        out["queries"] = st.queries
    except Exception as e:
        out["stats_error"] = str(e)
    print(json.dumps(out))

asyncio.run(main())
""".replace("%(cache)s", CACHE)
    .replace("%(service)s", SERVICE)
    .replace("%(metrics)s", METRICS)
)

CONFIGS = {"link_local": list(LINK_LOCAL), "both": list(BOTH), "iptables": list(IPTABLES)}


class Node:
    """A node network namespace: node-cache's dummy interface, a Service-like address."""

    def __init__(self, workdir: Path) -> None:
        self.name = f"dnsfleet-nl-{os.getpid()}-{time.monotonic_ns() % 100000}"
        self.workdir = workdir
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def exec_args(self, *args: str) -> list[str]:
        return [binary("ip"), "netns", "exec", self.name, *args]

    def run(self, *args: str) -> None:
        subprocess.run(self.exec_args(*args), check=True, timeout=30)

    def spawn(self, key: str, *args: str) -> None:
        log = open(self.workdir / f"{key}.log", "ab")  # noqa: SIM115
        self.procs[key] = subprocess.Popen(self.exec_args(*args), stdout=log, stderr=log)

    def start(self) -> Node:
        subprocess.run([binary("ip"), "netns", "add", self.name], check=True, timeout=30)
        ip = binary("ip")
        self.run(ip, "link", "set", "lo", "up")
        # node-cache's interface is a dummy; this kernel has no dummy driver, and a bridge
        # without ports holds local addresses alike (`ip netns exec` shows the namespace's
        # own /sys/class/net, where the collector looks for it).
        for dev, addr in (("nodelocaldns", CACHE), ("kubesvc", SERVICE)):
            self.run(ip, "link", "add", dev, "type", "bridge")
            self.run(ip, "addr", "add", f"{addr}/32", "dev", dev)
            self.run(ip, "link", "set", dev, "up")
        u = Unbound(
            self.workdir / "cluster-dns",
            host=SERVICE,
            port=53,
            local_data=[f"{NAME} 5 IN A 10.96.0.1"],
            extra_server="  access-control: 0.0.0.0/0 allow",
        )
        self.spawn("cluster-dns", binary("unbound"), "-d", "-c", str(u.write_config()))
        corefile = self.workdir / "Corefile"
        corefile.write_text(
            f".:53 {{\n    bind {CACHE}\n    prometheus {CACHE}:9253\n    errors\n"
            f"    cache 30\n    forward . {SERVICE}\n}}\n"
        )
        self.spawn("node-cache", gotools.coredns(), "-conf", str(corefile))
        return self

    def observe(self) -> dict[str, Any]:
        out = subprocess.run(
            [*self.exec_args(sys.executable, "-c", OBSERVE), json.dumps(CONFIGS)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert out.returncode == 0, out.stderr[-3000:]
        result: dict[str, Any] = json.loads(out.stdout.splitlines()[-1])
        return result

    def stop(self) -> None:
        for p in self.procs.values():
            terminate(p, timeout=10)
        subprocess.run([binary("ip"), "netns", "del", self.name], capture_output=True, timeout=30)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    reason = netns_available()
    if reason:
        pytest.skip(reason)
    n = Node(tmp_path)
    try:
        yield n.start()
    finally:
        n.stop()


RULES = FIXTURES.parent.parent / "alerts" / "rules" / "nodelocal.rules.yml"
STAGE_MINUTES = 10


def promtool_case(stages: list[dict[str, Any]]) -> dict[str, Any]:
    """A promtool test of the alert rules on what the collector reported: one node per pods'
    configuration, each stage held for STAGE_MINUTES; at the end of each stage the page
    fires exactly for the nodes whose pods had no path, the ticket for those falling back."""
    n = len(stages) * STAGE_MINUTES
    series, tests = [], []
    for name in CONFIGS:
        labels = f'instance="{name}:9853",site="lab",job="dnsfleet-node"'
        views = [st["views"][name] for st in stages]
        up = " ".join(f"{v['dnsfleet_nodelocal_up{}']:g}x{STAGE_MINUTES - 1}" for v in views)
        series.append({"series": f"dnsfleet_nodelocal_up{{{labels}}}", "values": up})
        for p in PodPath:
            key = f'dnsfleet_nodelocal_pod_path{{path="{p.value}"}}'
            vals = " ".join(f"{v[key]:g}x{STAGE_MINUTES - 1}" for v in views)
            series.append(
                {
                    "series": f'dnsfleet_nodelocal_pod_path{{{labels},path="{p.value}"}}',
                    "values": vals,
                }
            )
    rules = {r["alert"]: r for r in yaml.safe_load(RULES.read_text())["groups"][0]["rules"]}
    for i, stage in enumerate(stages):
        t = f"{(i + 1) * STAGE_MINUTES - 1}m"
        paths = {name: path_of(stage["views"][name]) for name in CONFIGS}
        for alert, fires_on in (
            ("DNSNodeLocalPodsFailing", {"none"}),
            ("DNSNodeLocalDNSCacheDown", {"resolv_conf_fallback", "iptables_fallback"}),
        ):
            rule = rules[alert]
            extra = {"path": "none"} if alert == "DNSNodeLocalPodsFailing" else {}
            exp = [
                {
                    "exp_labels": {
                        "instance": f"{name}:9853",
                        "site": "lab",
                        "job": "dnsfleet-node",
                        **rule["labels"],
                        **extra,
                    },
                    "exp_annotations": {
                        k: v.replace("{{ $labels.instance }}", f"{name}:9853")
                        for k, v in rule["annotations"].items()
                    },
                }
                for name, p in paths.items()
                if p in fires_on
            ]
            tests.append({"eval_time": t, "alertname": alert, "exp_alerts": exp})
    assert n > 0
    return {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": tests}],
    }


def path_of(view: dict[str, float]) -> str:
    (current,) = [k for k, v in view.items() if k.startswith("dnsfleet_nodelocal_pod_path") and v]
    return current.split('path="')[1].rstrip('"}')


def settle(node: Node, want: dict[str, str], *, seconds: float = 60) -> dict[str, Any]:
    """Observe until every configuration's path is the wanted one (daemons start and stop
    at their own pace on a busy machine); the last observation either way."""
    deadline = time.monotonic() + seconds
    got: dict[str, Any] = {}
    while time.monotonic() < deadline:
        got = node.observe()
        if {k: path_of(v) for k, v in got["views"].items()} == want:
            break
        time.sleep(0.5)
    return got


@pytest.mark.integration
@pytest.mark.netns
def test_node_cache_killed(node: Node) -> None:
    stages = []
    # Serving: every configuration's pods are answered by the cache; its statistics read.
    got = settle(node, dict.fromkeys(CONFIGS, "nodelocal"))
    stages.append(got)
    assert {k: path_of(v) for k, v in got["views"].items()} == dict.fromkeys(CONFIGS, "nodelocal")
    view = got["views"]["both"]
    assert view["dnsfleet_nodelocal_up{}"] == 1
    assert view["dnsfleet_nodelocal_interface_present{}"] == 1
    assert got.get("queries", 0) > 0, got.get("stats_error")

    # SIGKILL: no clean-up, the interface stays.
    node.procs["node-cache"].send_signal(signal.SIGKILL)
    node.procs["node-cache"].wait(timeout=30)
    want = {"link_local": "none", "both": "resolv_conf_fallback", "iptables": "none"}
    got = settle(node, want)
    stages.append(got)
    assert {k: path_of(v) for k, v in got["views"].items()} == want
    assert got["views"]["both"]["dnsfleet_nodelocal_up{}"] == 0
    assert got["views"]["both"]["dnsfleet_nodelocal_cluster_dns_up{}"] == 1

    # What node-cache does on a clean exit: its interface (and rules) gone.
    node.run(binary("ip"), "link", "del", "nodelocaldns")
    want = {"link_local": "none", "both": "resolv_conf_fallback", "iptables": "iptables_fallback"}
    got = settle(node, want)
    stages.append(got)
    assert {k: path_of(v) for k, v in got["views"].items()} == want
    assert got["views"]["iptables"]["dnsfleet_nodelocal_interface_present{}"] == 0

    # The cluster DNS gone too: no configuration has a way out.
    terminate(node.procs["cluster-dns"], timeout=10)
    got = settle(node, dict.fromkeys(CONFIGS, "none"))
    stages.append(got)
    assert {k: path_of(v) for k, v in got["views"].items()} == dict.fromkeys(CONFIGS, "none")

    # The alerts on what was observed: the page where pods had no path, else the ticket.
    case = node.workdir / "nodelocal.test.yml"
    case.write_text(yaml.safe_dump(promtool_case(stages), sort_keys=False))
    out = subprocess.run(
        [binary("promtool"), "test", "rules", str(case)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
