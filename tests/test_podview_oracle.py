"""The pod view against the real libcs: glibc's ``getent ahosts`` and a getaddrinfo
program built with musl-gcc run in a pod namespace (tests/harness/podlab.py: ndots:5 and
the three search domains Kubernetes writes, a cluster DNS on a service address), and so
does dnsfleet's walk (dnsfleet.podview.driver). The cluster DNS logs every query it gets
and the silent backend every datagram: dnsfleet must send exactly as many as the libc it
models. Latency is compared (within 10 %) only where timeouts make it, the silent VIP:
elsewhere a lookup takes milliseconds and a busy machine decides them, so counts only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.metrics import samples
from tests.harness.podlab import CLUSTER_DNS, SEARCH, SILENT_VIP, PodLab, podlab
from tests.harness.tools import binary

pytestmark = [pytest.mark.integration, pytest.mark.netns]

GAI_C = r"""
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/socket.h>
int main(int argc, char **argv) {
    struct addrinfo hints, *res = 0;
    struct timespec a, b;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_ADDRCONFIG;  /* as getent ahosts asks */
    clock_gettime(CLOCK_MONOTONIC, &a);
    int rc = getaddrinfo(argv[1], 0, &hints, &res);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%d %.6f\n", rc, (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
    return 0;
}
"""

DRIVE = """
import asyncio, json, socket, sys
from dnsfleet.parsers.resolvconf import parse_resolv_conf
from dnsfleet.podview.driver import Server, lookup
from dnsfleet.podview.walk import Libc
conf = parse_resolv_conf(open("/etc/resolv.conf").read())
servers = tuple(Server(s.text, (s.address, 53), socket.AF_INET) for s in conf.servers)
r = asyncio.run(lookup(conf, sys.argv[1], Libc(sys.argv[2]), servers, budget=30))
print(json.dumps({"outcome": r.outcome.value, "duration": r.duration, "queries": r.queries,
                  "suffix": r.suffix, "nameserver": r.nameserver}))
"""

CLUSTER = f"nameserver {CLUSTER_DNS}\nsearch {SEARCH}\noptions ndots:5\n"
SILENT = f"nameserver {SILENT_VIP}\nsearch {SEARCH}\noptions ndots:5 timeout:1 attempts:2\n"

# (scenario, pod, name, queries glibc sends, queries musl sends, outcome glibc, musl,
#  the suffix that answers)
SCENARIOS = [
    ("ndots:5 external name", "cluster", "www.example.test", 8, 8, "answer", "answer", ""),
    ("cluster-local name", "cluster", "api.demo", 4, 4, "answer", "answer", "svc.cluster.local"),
    ("NODATA AAAA", "cluster", "v4only.example.test", 8, 8, "answer", "answer", ""),
    ("NODATA on a search domain", "cluster", "txtonly", 8, 2, "nodata", "nodata", None),
    ("the VIP's backend silent", "silent", "www.example.test", 8, 4, "timeout", "timeout", None),
]
# The silent VIP with timeout:1 attempts:2: glibc waits 2 s on the first search domain,
# leaves the list and waits 2 s more on the name as is; musl gives up after 1 s.
TIMED = {("the VIP's backend silent", "glibc"): 4.0, ("the VIP's backend silent", "musl"): 1.0}
LATENCY_TOLERANCE = 0.10


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PodLab, dict[str, str], Path]]:
    work = tmp_path_factory.mktemp("podlab")
    gai = work / "gai"
    (work / "gai.c").write_text(GAI_C)
    subprocess.run(
        [binary("musl-gcc"), "-static", "-O2", "-o", str(gai), str(work / "gai.c")],
        check=True,
        capture_output=True,
        timeout=120,
    )
    with podlab(work) as lab:
        pods = {"cluster": lab.add_pod(CLUSTER), "silent": lab.add_pod(SILENT)}
        yield lab, pods, gai


def _counted(lab: PodLab, pod: str, before: tuple[int, int]) -> int:
    """Queries that arrived since ``before``, once the logs have stopped growing."""
    last = -1
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        now = len(lab.cluster_queries()) - before[0] + lab.silent_datagrams() - before[1]
        if now == last:
            return now
        last = now
        time.sleep(0.3)
    return last


def _per_port(ports: list[int]) -> list[int]:
    """Datagrams from each source port, in the order the ports were first seen."""
    return [ports.count(p) for p in dict.fromkeys(ports)]


def _run(lab: PodLab, pod: str, cmd: list[str]) -> tuple[str, float, int]:
    before = (len(lab.cluster_queries()), lab.silent_datagrams())
    t0 = time.monotonic()
    out = subprocess.run(lab.pod_exec(pod, *cmd), capture_output=True, text=True, timeout=60)
    wall = time.monotonic() - t0
    return out.stdout + out.stderr, wall, _counted(lab, pod, before)


@pytest.mark.parametrize("case", SCENARIOS, ids=[c[0] for c in SCENARIOS])
def test_pod_view_sends_what_the_libc_sends(
    lab: tuple[PodLab, dict[str, str], Path],
    case: tuple[str, str, str, int, int, str, str, str | None],
) -> None:
    scenario, pod, name, glibc_n, musl_n, glibc_out, musl_out, suffix = case
    podlab_, pods, gai = lab
    ns = pods[pod]
    # The oracles first: what real glibc and musl sent, and how long they took.
    since = podlab_.silent_datagrams()
    text, getent_wall, getent_n = _run(podlab_, ns, [binary("getent"), "ahosts", name])
    # The premise of the VIP model (stubmodel.vip_pinned): every retry of a name leaves
    # from one source port (conntrack pins them to one backend), the next name from another.
    glibc_ports = _per_port(podlab_.silent_ports(since))
    assert glibc_ports == ([4, 4] if pod == "silent" else []), glibc_ports
    assert getent_n == glibc_n, f"{scenario}: glibc sent {getent_n}\n{text}"
    assert ("192.0.2" in text or "10.96.0.20" in text) == (glibc_out == "answer"), text
    text, _, musl_seen = _run(podlab_, ns, [str(gai), name])
    rc, musl_wall = text.split()[:2]
    assert musl_seen == musl_n, f"{scenario}: musl sent {musl_seen}\n{text}"
    assert (rc == "0") == (musl_out == "answer"), text
    oracle = {
        "glibc": (getent_n, getent_wall, glibc_out),
        "musl": (musl_seen, float(musl_wall), musl_out),
    }
    for libc, (n, wall, outcome) in oracle.items():
        since = podlab_.silent_datagrams()
        text, _, seen = _run(podlab_, ns, [sys.executable, "-c", DRIVE, name, libc])
        if libc == "glibc":
            assert _per_port(podlab_.silent_ports(since)) == glibc_ports
        got = json.loads(text.strip().splitlines()[-1])
        assert (seen, got["queries"]) == (n, n), f"{scenario} {libc}: {got}, observed {seen}"
        assert got["outcome"] == outcome, got
        assert got["suffix"] == suffix, got
        assert got["nameserver"] == (CLUSTER_DNS if outcome == "answer" else ""), got
        expected = TIMED.get((scenario, libc))
        if expected is not None:
            assert wall == pytest.approx(expected, rel=LATENCY_TOLERANCE), (libc, wall)
            assert got["duration"] == pytest.approx(wall, rel=LATENCY_TOLERANCE), (libc, got, wall)


def test_exporter_in_the_pod(lab: tuple[PodLab, dict[str, str], Path], tmp_path: Path) -> None:
    """The real exporter (--once) in the pod namespace, reading the pod's /etc/resolv.conf:
    the same figures as the oracles above, as families."""
    podlab_, pods, _ = lab
    cfg = tmp_path / "dnsfleet.yml"
    cfg.write_text(
        "pod_view:\n  - resolv_conf: /etc/resolv.conf\n"
        "    names: [www.example.test, api.demo, txtonly]\n"
        "  - resolv_conf: /etc/resolv.conf\n    names: [txtonly]\n    libc: musl\n"
    )
    exe = str(Path(sys.executable).parent / "dnsfleet-exporter")
    out = subprocess.run(
        podlab_.pod_exec(pods["cluster"], exe, "--config.file", str(cfg), "--once"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    got = samples(out.stdout)

    def v(fam: str, libc: str = "glibc", **labels: str) -> float | None:
        key = {("resolv_conf", "/etc/resolv.conf"), ("libc", libc), *labels.items()}
        return got.get((fam, frozenset(key)))

    assert got[("dnsfleet_collector_success", frozenset({("collector", "podview")}))] == 1
    assert v("dnsfleet_podview_queries_per_lookup", name="www.example.test") == 8
    assert v("dnsfleet_podview_queries_per_lookup", name="api.demo") == 4
    assert v("dnsfleet_podview_queries_per_lookup", name="txtonly") == 8
    assert v("dnsfleet_podview_queries_per_lookup", "musl", name="txtonly") == 2
    assert v("dnsfleet_podview_lookup_failure", "musl", name="txtonly", reason="nodata") == 1
    answer = {"name": "api.demo", "suffix": "svc.cluster.local", "nameserver": CLUSTER_DNS}
    assert v("dnsfleet_podview_answer_info", **answer) == 1
    assert v("dnsfleet_podview_lookup_success", name="www.example.test") == 1
    assert v("dnsfleet_podview_lookup_cut_short", name="www.example.test") == 0
