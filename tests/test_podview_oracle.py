"""The pod view against the real libcs: glibc's ``getent ahosts`` and a getaddrinfo
program built with musl-gcc run in a pod namespace (tests/harness/podlab.py: ndots:5 and
the three search domains Kubernetes writes, CoreDNS behind a service VIP), and so does
dnsfleet's walk (dnsfleet.podview.driver). The CoreDNS backends log every query they get
and the node counts every datagram to the silent one: dnsfleet must send exactly as many
as the libc it models. Latency is compared (within 10 %) only where timeouts make it, the
silent VIP: elsewhere a lookup takes milliseconds and a busy machine decides them, so
counts only.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.metrics import samples
from tests.harness.podlab import CLUSTER_DNS, DEAD, SEARCH, SILENT_VIP, PodLab, podlab
from tests.harness.podoracle import (
    LATENCY_TOLERANCE,
    build_gai,
    dnsfleet,
    gai,
    getent,
    least,
    walk_wait,
)

pytestmark = [pytest.mark.integration, pytest.mark.netns]

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


@pytest.fixture(scope="module")
def lab(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[PodLab, dict[str, str], dict[str, Path]]]:
    work = tmp_path_factory.mktemp("podlab")
    programs = {libc: build_gai(work, libc) for libc in ("glibc", "musl")}
    with podlab(work) as lab:
        pods = {"cluster": lab.add_pod(CLUSTER), "silent": lab.add_pod(SILENT)}
        yield lab, pods, programs


def _pinned(lab: PodLab) -> list[int]:
    """Datagrams per flow to the silent VIP, as conntrack counted them; each flow pinned to
    the silent backend and never answered."""
    flows = lab.flows(SILENT_VIP)
    assert all(f.backend == DEAD and not f.replied for f in flows), flows
    return sorted(f.packets for f in flows)


@pytest.mark.parametrize("case", SCENARIOS, ids=[c[0] for c in SCENARIOS])
def test_pod_view_sends_what_the_libc_sends(
    lab: tuple[PodLab, dict[str, str], dict[str, Path]],
    case: tuple[str, str, str, int, int, str, str, str | None],
) -> None:
    scenario, pod, name, glibc_n, musl_n, glibc_out, musl_out, suffix = case
    podlab_, pods, programs = lab
    ns = pods[pod]
    # The oracles first: what real glibc and musl sent, and how long they took.
    podlab_.forget_flows()
    g = getent(podlab_, ns, name)
    # The premise of the VIP model (stubmodel.vip_pinned): every retry of a name leaves
    # from one source port (conntrack pins them to one backend), the next name from another.
    glibc_flows = _pinned(podlab_)
    assert glibc_flows == ([4, 4] if pod == "silent" else []), glibc_flows
    assert g.queries == glibc_n, f"{scenario}: glibc sent {g.queries}\n{g.text}"
    assert ("192.0.2" in g.text or "10.96.0.20" in g.text) == (glibc_out == "answer"), g.text
    glibc_wall = g.wall
    if (scenario, "glibc") in TIMED:
        # The same getaddrinfo call as getent's, timed inside the process.
        t = gai(podlab_, ns, programs["glibc"], name)
        assert t.queries == glibc_n, t
        glibc_wall = least(
            t.gai()[1],
            lambda: gai(podlab_, ns, programs["glibc"], name).gai()[1],
            near=TIMED[(scenario, "glibc")],
        )
    m = gai(podlab_, ns, programs["musl"], name)
    rc, musl_wall = m.gai()
    if (scenario, "musl") in TIMED:
        musl_wall = least(
            musl_wall,
            lambda: gai(podlab_, ns, programs["musl"], name).gai()[1],
            near=TIMED[(scenario, "musl")],
        )
    assert m.queries == musl_n, f"{scenario}: musl sent {m.queries}\n{m.text}"
    assert (rc == 0) == (musl_out == "answer"), m.text
    oracle = {
        "glibc": (g.queries, glibc_wall, glibc_out),
        "musl": (m.queries, musl_wall, musl_out),
    }
    for libc, (n, wall, outcome) in oracle.items():
        podlab_.forget_flows()
        d = dnsfleet(podlab_, ns, name, libc)
        if libc == "glibc":
            assert _pinned(podlab_) == glibc_flows
        got = d.driver()
        assert (d.queries, got["queries"]) == (n, n), (
            f"{scenario} {libc}: {got}, observed {d.queries}"
        )
        assert got["outcome"] == outcome, got
        assert got["suffix"] == suffix, got
        assert got["nameserver"] == (CLUSTER_DNS if outcome == "answer" else ""), got
        expected = TIMED.get((scenario, libc))
        if expected is not None:
            assert wall == pytest.approx(expected, rel=LATENCY_TOLERANCE), (libc, wall)
            took = least(
                got["duration"],
                functools.partial(walk_wait, podlab_, ns, name, libc),
                near=wall,
            )
            assert took == pytest.approx(wall, rel=LATENCY_TOLERANCE), (libc, got, wall)


def test_exporter_in_the_pod(
    lab: tuple[PodLab, dict[str, str], dict[str, Path]], tmp_path: Path
) -> None:
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
