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
import yaml

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
from tests.harness.tools import binary

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


def _exporter_once(lab: PodLab, pod: str, cfg: Path, pod_view: str) -> str:
    """The real exporter (--once) in the pod namespace, reading the pod's /etc/resolv.conf."""
    cfg.write_text(pod_view)
    exe = str(Path(sys.executable).parent / "dnsfleet-exporter")
    out = subprocess.run(
        lab.pod_exec(pod, exe, "--config.file", str(cfg), "--once"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_exporter_in_the_pod(
    lab: tuple[PodLab, dict[str, str], dict[str, Path]], tmp_path: Path
) -> None:
    """The exporter in the pod namespace: the same figures as the oracles above, as
    families."""
    podlab_, pods, _ = lab
    text = _exporter_once(
        podlab_,
        pods["cluster"],
        tmp_path / "dnsfleet.yml",
        "pod_view:\n  - resolv_conf: /etc/resolv.conf\n"
        "    names: [www.example.test, api.demo, txtonly]\n"
        "  - resolv_conf: /etc/resolv.conf\n    names: [txtonly]\n    libc: musl\n",
    )
    got = samples(text)

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


ALERT_RULES = Path(__file__).resolve().parent.parent / "alerts" / "rules" / "podview.rules.yml"


def test_alerts_fire_only_where_pods_fail(
    lab: tuple[PodLab, dict[str, str], dict[str, Path]], tmp_path: Path
) -> None:
    """What the exporter reported in each pod, held for 70 minutes, through the pod-view
    rules (promtool): the pod whose VIP's backend is silent pages, for glibc and musl; the
    pod whose lookups are answered with 8 queries opens the amplification ticket, and
    nothing else fires."""
    podlab_, pods, _ = lab
    names = "[www.example.test, api.demo]"
    view = "".join(
        f"  - resolv_conf: /etc/resolv.conf\n    names: {names}\n    libc: {libc}\n"
        for libc in ("glibc", "musl")
    )
    series = []
    for pod in ("cluster", "silent"):
        text = _exporter_once(podlab_, pods[pod], tmp_path / f"{pod}.yml", f"pod_view:\n{view}")
        for (name, labels), value in samples(text).items():
            if name.startswith("dnsfleet_podview_"):
                target = {"instance": f"{pod}:9853", "job": "dnsfleet", "site": "lab"}
                sel = ",".join(f'{k}="{v}"' for k, v in sorted({**dict(labels), **target}.items()))
                series.append({"series": f"{name}{{{sel}}}", "values": f"{value}x70"})

    def firing(alert: str, pod: str, libc: str, severity: str) -> dict[str, object]:
        labels = {"alertname": alert, "alertstate": "firing", "severity": severity}
        labels |= {"instance": f"{pod}:9853", "site": "lab", "resolv_conf": "/etc/resolv.conf"}
        sel = ",".join(f'{k}="{v}"' for k, v in sorted({**labels, "libc": libc}.items()))
        return {"labels": f"ALERTS{{{sel}}}", "value": 1}

    expected = [
        *(firing("DNSPodLookupsFailing", "silent", libc, "critical") for libc in ("glibc", "musl")),
        *(
            firing("DNSPodQueryAmplificationHigh", "cluster", libc, "warning")
            for libc in ("glibc", "musl")
        ),
    ]
    test = {
        "rule_files": [str(ALERT_RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {"expr": 'ALERTS{alertstate="firing"}', "eval_time": "3m", "exp_samples": []},
                    {
                        "expr": 'ALERTS{alertstate="firing"}',
                        "eval_time": "70m",
                        "exp_samples": expected,
                    },
                ],
            }
        ],
    }
    f = tmp_path / "podview-lab.test.yml"
    f.write_text(yaml.safe_dump(test))
    out = subprocess.run(
        [binary("promtool"), "test", "rules", str(f)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
